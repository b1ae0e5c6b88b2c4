"""Build, cache and load the compiled training-path kernels (`fused_kernels.cc`).

The source is compiled with the system C++ compiler (`$CXX`, default `g++`)
against the installed TensorFlow's headers (`tf.sysconfig`) and loaded with
`tf.load_op_library`. `scripts/setup.sh` builds it (`main()`); otherwise the
first training step that needs it does. Where it cannot be built (no compiler,
every flag set fails) or used (a visible GPU, `set_enabled(False)`,
`SPHERE_TF_CUSTOM_OPS=0` in the environment), `sphere_tf.backends.tensorflow.fused` runs XLA
clusters with the same values; inference and export never use the kernels.

Flag policy (`flag_sets`), tried in order:

1. ``-march=native``, minus AVX-512 FP16 (``-mno-avx512fp16``, where the compiler
   knows the option). The kernels are Eigen loops over float32 rows (`tanh`,
   `asin`, multiplies and row sums), so what they gain is the vector width:
   AVX2 + FMA roughly halves the tanh and θ passes against SSE4.2, AVX-512 adds
   little on top (docs/performance.md). FP16 brings nothing to float32 code,
   and with it enabled (Sapphire Rapids and newer) GCC 12 rejects Eigen's
   `arch/AVX512/PacketMathFP16.h` as bundled with TensorFlow 2.21
   ("expected initializer before '<' token").
2. The fallback, when the first fails: the host's x86-64 micro-architecture
   level capped at ``x86-64-v3`` (AVX2 + FMA, the level where the kernels' gain
   lies, and no AVX-512 header of Eigen involved), or the compiler's default
   target where that level is unknown (other architectures, old compilers).

Every library is cached per source, TensorFlow version, compiler (and its
version), CPU and the flags actually used, in `kernels/_build/` (or `~/.cache/sphere_tf/` when the
package directory is not writable). When every flag set fails, the failure is
recorded next to the libraries (keyed by the whole policy) and later processes
read it instead of compiling again; `main()` (`scripts/setup.sh`,
``python -m sphere_tf.backends.tensorflow.kernels``) and ``build(retry=True)`` try again. A
file lock lets one process (e.g. one pytest-xdist worker) compile while the
others wait.
"""

import fcntl
import functools
import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

import tensorflow as tf

_KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(_KERNEL_DIR, "fused_kernels.cc")
_ENV = "SPHERE_TF_CUSTOM_OPS"
_BASE_FLAGS = ("-std=c++17", "-shared", "-fPIC", "-O3")
# How many compiler errors (with their context lines) a failure message shows.
_ERRORS_SHOWN = 5
# A compiler error line, and the start of any diagnostic (where an error's context ends).
_ERROR = re.compile(r"\b(fatal )?error:")
_DIAGNOSTIC = re.compile(r"^(In file included from |\s+from |\S+:\d+(:\d+)?: |\S+: (error|warning|note):)")
_STATE = {"enabled": os.environ.get(_ENV, "1") != "0", "module": None, "error": None, "tried": False,
          "path": None}


class BuildError(RuntimeError):
    """The kernels could not be compiled (or a recorded failure says so)."""


def set_enabled(enabled):
    """Use the compiled kernels on the training path where available (default) or never."""
    _STATE["enabled"] = bool(enabled)


def enabled():
    return _STATE["enabled"]


def compiler():
    """The C++ compiler command: `$CXX`, else `g++`."""
    return os.environ.get("CXX", "g++")


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.partition(":")[2].split())


def _cpu_signature():
    # -march=native: a library is only valid for the CPU features it was built on.
    return platform.machine() + " " + " ".join(sorted(_cpu_flags()) or [platform.processor()])


@functools.lru_cache(maxsize=None)
def _accepts(cxx, flag):
    """Whether the compiler accepts `flag` (an empty translation unit compiles with it)."""
    try:
        proc = subprocess.run(
            [cxx, flag, "-x", "c++", "-fsyntax-only", os.devnull], capture_output=True, text=True
        )
    except OSError:
        return False
    return proc.returncode == 0


@functools.lru_cache(maxsize=None)
def _compiler_version(cxx):
    """The first line of ``cxx --version`` (part of the cache key: a new compiler may build what an old one did not)."""
    try:
        proc = subprocess.run([cxx, "--version"], capture_output=True, text=True)
    except OSError:
        return "missing"
    return (proc.stdout.splitlines() or [""])[0]


# x86-64 micro-architecture levels (the psABI's), with the /proc/cpuinfo flags each adds.
_X86_LEVELS = (
    ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}),
    ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
)


def _x86_level(cpu_flags):
    level = None
    for name, needed in _X86_LEVELS:
        if not needed <= cpu_flags:
            break
        level = name
    return level


def flag_sets(march="native", cxx=None, cpu_flags=None):
    """The target flag sets tried in order: the host's own, then the fallback.

    Args:
        march: str, the first set's ``-march`` target (``native``: this CPU; a named
            CPU such as ``sapphirerapids`` cross-compiles for it).
        cxx: the compiler command (default `compiler()`), probed for the options it knows.
        cpu_flags: set of /proc/cpuinfo flags choosing the fallback level (default: this CPU's).

    Returns:
        list of tuples of str (the base flags and TensorFlow's are added by `build`).
    """
    cxx = cxx or compiler()
    cpu_flags = _cpu_flags() if cpu_flags is None else frozenset(cpu_flags)
    first = [f"-march={march}"]
    if _accepts(cxx, "-mno-avx512fp16"):  # GCC >= 12, Clang >= 14; x86 only
        first.append("-mno-avx512fp16")
    level = _x86_level(cpu_flags) if platform.machine() in ("x86_64", "AMD64") else None
    fallback = [f"-march={level}"] if level and _accepts(cxx, f"-march={level}") else []
    return [tuple(first), tuple(fallback)]


def _command(cxx, flags, output):
    return ([cxx, SOURCE, "-o", output, *_BASE_FLAGS, *flags]
            + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())


def _digest(*parts):
    digest = hashlib.sha256()
    with open(SOURCE, "rb") as f:
        digest.update(f.read())
    for part in (tf.__version__, _cpu_signature(), *_BASE_FLAGS, *tf.sysconfig.get_compile_flags(),
                 *tf.sysconfig.get_link_flags(), *parts):
        digest.update(str(part).encode() + b"\0")
    return digest.hexdigest()[:16]


def cache_directory():
    """The first writable of `kernels/_build/` and `~/.cache/sphere_tf/`."""
    for directory in (os.path.join(_KERNEL_DIR, "_build"), os.path.join(os.path.expanduser("~"), ".cache", "sphere_tf")):
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return directory
    raise OSError(f"no writable directory for the compiled kernels (tried {_KERNEL_DIR}/_build and ~/.cache/sphere_tf)")


def library_path(flags=None, directory=None, cxx=None):
    """Where the library built with `flags` (default: the first of `flag_sets()`) lives, built or not."""
    cxx = cxx or compiler()
    flags = tuple(flag_sets(cxx=cxx)[0] if flags is None else flags)
    name = f"fused_kernels_{_digest(cxx, _compiler_version(cxx), 'flags', *flags)}.so"
    return os.path.join(directory or cache_directory(), name)


def failure_path(sets=None, directory=None, cxx=None):
    """Where a failed build with the flag sets `sets` (default `flag_sets()`) is recorded."""
    cxx = cxx or compiler()
    sets = flag_sets(cxx=cxx) if sets is None else sets
    key = _digest(cxx, _compiler_version(cxx), "policy", *(" ".join(flags) + ";" for flags in sets))
    return os.path.join(directory or cache_directory(), f"fused_kernels_{key}.failed")


def first_errors(output, count=_ERRORS_SHOWN, context=3):
    """The compiler's first `count` error lines, each with up to `context` lines of its context.

    GCC and Clang print ``file:line:col: error: message`` (or ``fatal error:``)
    followed by the source line and a caret; the warnings before them
    (TensorFlow's headers emit many deprecation warnings) are left out, and a
    context stops at the next diagnostic. Output without an error line is
    returned from its start.
    """
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if _ERROR.search(line)]
    if not starts:
        return "\n".join(lines[: count * (context + 1)])
    shown = []
    for i in starts[:count]:
        shown.append(lines[i])
        for line in lines[i + 1 : i + 1 + context]:
            if _DIAGNOSTIC.match(line):
                break
            shown.append(line)
    if len(starts) > count:
        shown.append(f"... and {len(starts) - count} more error(s)")
    return "\n".join(shown)


def compile_source(flags, output, cxx=None, extra=()):
    """Runs the compiler on `fused_kernels.cc` with the base, target and TensorFlow flags.

    Args:
        flags: the target flags (one of `flag_sets()`).
        output: str, the file to write.
        cxx: the compiler command (default `compiler()`).
        extra: further arguments, e.g. ``("-fsyntax-only",)`` to check a target
            without building it.

    Raises:
        BuildError: the compiler is missing or failed; the message holds the
            command and the compiler's first errors.
    """
    cxx = cxx or compiler()
    cmd = _command(cxx, flags, output) + list(extra)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise BuildError(f"C++ compiler {cxx!r} not found (set CXX or install g++): {e}") from e
    if proc.returncode != 0:
        output = first_errors(proc.stderr + proc.stdout) or "(no output)"
        raise BuildError(f"{' '.join(cmd)}\nexit status {proc.returncode}:\n{output}")


def build(sets=None, directory=None, retry=False):
    """Compiles the kernel library unless it is built; returns its path.

    Tries each flag set in turn (`flag_sets()` by default) and keeps the first
    library that builds. When all fail, the failure is written to
    `failure_path(sets)`; until it is removed (or `retry=True`), later calls
    raise it again without running the compiler.

    Args:
        sets: list of flag tuples, tried in order (default `flag_sets()`).
        directory: where libraries and the failure record live (default `cache_directory()`).
        retry: compile again even if a failure is recorded.

    Raises:
        BuildError: no flag set builds (or the recorded failure, when not `retry`).
    """
    cxx = compiler()
    sets = flag_sets(cxx=cxx) if sets is None else [tuple(flags) for flags in sets]
    directory = directory or cache_directory()
    paths = [library_path(flags, directory, cxx) for flags in sets]
    record = failure_path(sets, directory, cxx)
    # One process compiles, the others (pytest-xdist workers) wait for it.
    with open(record + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for path in paths:
            if os.path.exists(path):
                return path
        if os.path.exists(record) and not retry:
            with open(record) as f:
                raise BuildError(
                    f"{f.read()}\n(failure recorded in {record}; retry with "
                    "`python -m sphere_tf.backends.tensorflow.kernels` or build(retry=True))"
                )
        failures = []
        for flags, path in zip(sets, paths):
            tmp = f"{path}.{os.getpid()}.tmp"
            try:
                compile_source(flags, tmp, cxx)
            except BuildError as e:
                failures.append(f"with flags {' '.join(flags) or '(none)'}:\n{e}")
                continue
            os.replace(tmp, path)
            if os.path.exists(record):
                os.remove(record)
            return path
        message = f"building {SOURCE} failed\n" + "\n\n".join(failures)
        with open(record, "w") as f:
            f.write(message)
        raise BuildError(message)


def load():
    """The loaded op module, building it first if needed; None (and one logged warning) if impossible."""
    if not _STATE["tried"]:
        _STATE["tried"] = True
        try:
            path = build()
            _STATE["module"] = tf.load_op_library(path)
            flags = next((f for f in flag_sets() if library_path(f) == path), ())
            _STATE["path"] = f"{path} (flags: {' '.join(flags) or 'compiler default'})"
        except (BuildError, OSError, tf.errors.NotFoundError) as e:
            _STATE["error"] = str(e)
            logging.warning("sphere_tf: compiled kernels unavailable, using XLA clusters instead: %s", e)
    return _STATE["module"]


def status():
    """A one-line description of the kernels' state (for messages, tests and benchmarks)."""
    if not _STATE["enabled"]:
        return f"disabled (set_enabled(False) or {_ENV}=0)"
    if not _STATE["tried"]:
        return "not loaded yet"
    if _STATE["module"] is None:
        return f"unavailable: {_STATE['error']}"
    return f"loaded: {_STATE['path']}"


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


def check_target(march, cxx=None):
    """Compiles (syntax only) the kernels for another CPU with this module's flag policy.

    Returns the first of `flag_sets(march)` that compiles; raises `BuildError` with
    every set's first errors if none does. The compiler needs no such CPU.
    """
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for flags in flag_sets(march, cxx=cxx):
            try:
                compile_source(flags, os.path.join(tmp, "check.o"), cxx, extra=("-fsyntax-only",))
            except BuildError as e:
                failures.append(str(e))
                continue
            return flags
    raise BuildError("\n\n".join(failures))


def main():
    """Builds the kernels now, retrying a recorded failure (`scripts/setup.sh`); says what happened.

    Returns 0 when built, 1 otherwise (training then uses XLA clusters).
    """
    if shutil.which(compiler()) is None:
        print(f"sphere_tf: no C++ compiler ({compiler()!r}); training uses XLA clusters", file=sys.stderr)
        return 1
    try:
        print(f"sphere_tf: built {build(retry=True)}")
        return 0
    except (BuildError, OSError) as e:
        print(f"sphere_tf: could not build the compiled kernels (training falls back to XLA clusters): {e}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
