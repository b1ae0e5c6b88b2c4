"""Offline stand-in for @rules_python//python:defs.bzl: forwards to Bazel's native Python rules.

py_runtime_pair is a Starlark rule shipped with Bazel itself (@bazel_tools), as in the
real rules_python of Bazel 4's era.
"""

load("@bazel_tools//tools/python:toolchain.bzl", _py_runtime_pair = "py_runtime_pair")

def py_library(**kwargs):
    native.py_library(**kwargs)

def py_binary(**kwargs):
    native.py_binary(**kwargs)

def py_test(**kwargs):
    native.py_test(**kwargs)

def py_runtime(**kwargs):
    native.py_runtime(**kwargs)

def py_runtime_pair(**kwargs):
    _py_runtime_pair(**kwargs)
