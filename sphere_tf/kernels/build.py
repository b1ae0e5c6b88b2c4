"""Compiled CPU kernels of the layers' training path (private): build, cache, load.

`kernels/fused_kernels.cc` holds the TanhConv + cosine tail and its gradient in
one multi-threaded pass each (`fused._tanh_cosine`) and the conv layers' input
gradient conv_grad + 2x·spread (`fused.conv_and_patch_energy`). It is compiled with the
system C++ compiler against the installed TensorFlow's headers
(`tf.sysconfig`), once per source / TensorFlow / CPU combination, into
`kernels/_build/` (or `~/.cache/sphere_tf/` when the package directory is not
writable), and loaded with `tf.load_op_library`. `scripts/setup.sh` builds it
(`build.main()`); otherwise the first training step that
needs it does. Where it cannot be built (no compiler) or used (a visible GPU,
or `SPHERE_TF_CUSTOM_OPS=0` in the environment), the XLA clusters take over with
the same values; inference and export never use it.
"""

import fcntl
import hashlib
import logging
import os
import platform
import subprocess
import sys

import tensorflow as tf

_KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_KERNEL_DIR, "fused_kernels.cc")
_ENV = "SPHERE_TF_CUSTOM_OPS"
_STATE = {"enabled": os.environ.get(_ENV, "1") != "0", "module": None, "error": None, "tried": False}


def set_enabled(enabled):
    """Use the compiled kernels on the training path where available (default) or never."""
    _STATE["enabled"] = bool(enabled)


def enabled():
    return _STATE["enabled"]


def _cpu_signature():
    # -march=native: a library is only valid for the CPU features it was built on.
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = platform.processor()
    return platform.machine() + flags


def _compile_flags():
    return ["-std=c++17", "-shared", "-fPIC", "-O3", "-march=native"] + tf.sysconfig.get_compile_flags()


def library_path():
    """Where the library for this source, TensorFlow and CPU lives (built or not)."""
    digest = hashlib.sha256()
    with open(_SOURCE, "rb") as f:
        digest.update(f.read())
    for part in [tf.__version__, _cpu_signature()] + _compile_flags() + tf.sysconfig.get_link_flags():
        digest.update(part.encode())
    name = f"fused_kernels_{digest.hexdigest()[:16]}.so"
    for directory in (os.path.join(_KERNEL_DIR, "_build"), os.path.join(os.path.expanduser("~"), ".cache", "sphere_tf")):
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return os.path.join(directory, name)
    raise OSError(f"no writable directory for the compiled kernel (tried {_KERNEL_DIR}/_build and ~/.cache/sphere_tf)")


def build():
    """Compiles the kernel library if it is not built yet; returns its path.

    Raises:
        RuntimeError: the compiler is missing or failed (its output is in the message).
    """
    path = library_path()
    # One process compiles, the others (pytest-xdist workers) wait for it.
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):
            return path
        compiler = os.environ.get("CXX", "g++")
        tmp = f"{path}.{os.getpid()}.tmp"
        cmd = [compiler, _SOURCE, "-o", tmp] + _compile_flags() + tf.sysconfig.get_link_flags()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError as e:
            raise RuntimeError(f"C++ compiler {compiler!r} not found (set CXX or install g++): {e}") from e
        if proc.returncode != 0:
            raise RuntimeError(f"building {_SOURCE} failed:\n{' '.join(cmd)}\n{proc.stderr[-4000:]}")
        os.replace(tmp, path)
    return path


def load():
    """The loaded op module, building it first if needed; None (and a logged warning once) if impossible."""
    if not _STATE["tried"]:
        _STATE["tried"] = True
        try:
            _STATE["module"] = tf.load_op_library(build())
        except (RuntimeError, OSError, tf.errors.NotFoundError) as e:
            _STATE["error"] = str(e)
            logging.warning("sphere_tf: compiled kernels unavailable, using XLA clusters instead: %s", e)
    return _STATE["module"]


def status():
    """A one-line description of the kernel's state (for messages and tests)."""
    if not _STATE["enabled"]:
        return f"disabled (set_enabled(False) or {_ENV}=0)"
    if not _STATE["tried"]:
        return "not loaded yet"
    return "loaded" if _STATE["module"] is not None else f"unavailable: {_STATE['error']}"


def compiled_kernels():
    """The op module when the training path should use it, else None.

    Only on CPU-only hosts: the kernels have no GPU implementation, and on a GPU
    the XLA clusters are the better fusion anyway.
    """
    if not _STATE["enabled"]:
        return None
    if "gpu" not in _STATE:  # asked once: layer calls look this up while tracing
        _STATE["gpu"] = bool(tf.config.list_logical_devices("GPU"))
    return None if _STATE["gpu"] else load()


def main():
    """Builds the kernel now (scripts/setup.sh); never fails, says what happened."""
    try:
        print(f"sphere_tf: built {build()}")
    except (RuntimeError, OSError) as e:
        print(f"sphere_tf: could not build the compiled kernels (training falls back to XLA clusters): {e}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
