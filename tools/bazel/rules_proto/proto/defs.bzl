"""Offline stand-in for @rules_proto//proto:defs.bzl: forwards to Bazel's native proto rules."""

def proto_library(**kwargs):
    native.proto_library(**kwargs)

def proto_lang_toolchain(**kwargs):
    native.proto_lang_toolchain(**kwargs)
