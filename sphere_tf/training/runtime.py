"""Process-level TensorFlow settings for CPU training.

TensorFlow's default CPU allocator hands every tensor to the C library's
``malloc``. Activations of a conv net are tens of MiB each, above glibc's mmap
threshold (at most 32 MiB), so every such tensor is a fresh ``mmap`` whose pages
fault in on first write and go back to the OS on free: a full-size elementwise op
then costs about twice its memory traffic (measured in docs/performance.md). The
BFC allocator that TensorFlow uses on GPUs keeps and reuses its memory; on the
CPU it is selected by the environment variable ``TF_CPU_ALLOCATOR_USE_BFC``,
which TensorFlow reads once, when the CPU allocator is first needed.

The hyperspherical operators add a few elementwise passes per layer, so they
gain the most, but a plain Conv2D network gets faster as well (both figures in
docs/performance.md). The trainers in `trainers/` switch it on by default
(`--cpu_allocator=bfc`).

Where TensorFlow runs with oneDNN (the default on x86 CPUs with AVX-512 VNNI/BF16
or AMX; `TF_ENABLE_ONEDNN_OPTS=0` turns it off), its CPU allocator is oneDNN's
pooling allocator, which also reuses memory and keeps statistics: there the
allocator pools from the start and `use_bfc_cpu_allocator` has nothing to change.
"""

import os

from sphere_tf import dependencies

tf = dependencies.lazy_tensorflow(__name__)  # imported on first use: this module imports without TensorFlow

_ENV_VAR = "TF_CPU_ALLOCATOR_USE_BFC"


def bfc_cpu_allocator_active():
    """True when this process's CPU tensors come from a pooling allocator.

    That is the BFC allocator (`use_bfc_cpu_allocator`) or, with oneDNN on,
    oneDNN's BFC-based CPU allocator. Only those keep statistics (the plain
    malloc allocator does not), so `get_memory_info('CPU:0')` succeeds exactly
    when one is active. Asking creates TensorFlow's CPU device (and so its
    allocator): call `use_bfc_cpu_allocator` first, not this.
    """
    try:
        tf.config.experimental.get_memory_info("CPU:0")
    except ValueError:
        return False
    return True


def request_bfc_cpu_allocator():
    """Asks for TensorFlow's BFC allocator for CPU tensors, creating nothing (the environment variable only).

    For a program that must create something else with TensorFlow first without creating its CPU device, e.g. a
    `MultiWorkerMirroredStrategy`, which configures collective ops at startup: call this before it, then
    `use_bfc_cpu_allocator` to check that the setting took effect.
    """
    os.environ.setdefault(_ENV_VAR, "true")


def use_bfc_cpu_allocator():
    """Selects TensorFlow's BFC allocator for CPU tensors in this process.

    Call it at the start of a program, before any tensor, model or dataset is
    created: TensorFlow picks its CPU allocator once. `trainers/` mains and the
    benchmarks do this first thing.

    Returns:
        True when the BFC allocator is active afterwards.

    Raises:
        RuntimeError: TensorFlow already created its CPU allocator with the
            plain (malloc) implementation, so the setting cannot take effect.
            (With oneDNN on, the allocator pools already and nothing is raised.)
    """
    previous = os.environ.get(_ENV_VAR)
    os.environ[_ENV_VAR] = "true"
    if not bfc_cpu_allocator_active():
        # Leave the environment as it was (child processes would inherit the setting).
        if previous is None:
            del os.environ[_ENV_VAR]
        else:
            os.environ[_ENV_VAR] = previous
        raise RuntimeError(
            "use_bfc_cpu_allocator() came too late: TensorFlow had already created its CPU "
            f"allocator. Call it before creating any tensor, or set {_ENV_VAR}=true in the "
            "environment before starting Python."
        )
    return True


def cpu_memory_info():
    """`{'current': bytes, 'peak': bytes}` of the CPU allocator (BFC only), else None."""
    if not bfc_cpu_allocator_active():
        return None
    return tf.config.experimental.get_memory_info("CPU:0")
