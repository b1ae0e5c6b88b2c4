"""Tests for sphere_tf.backends.tensorflow.kernels.build: the compiled kernels build here, for AVX-512 FP16 CPUs, and fall back.

These run the real compiler (no stub): each full build takes several seconds.
"""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from sphere_tf.backends.tensorflow.kernels import build

needs_compiler = pytest.mark.skipif(
    shutil.which(build.compiler()) is None, reason="no C++ compiler on this machine"
)


@needs_compiler
def test_kernels_build_with_the_project_flags_on_this_machine():
    # The first flag set (this CPU's own) must build: a fallback or a failure here means the
    # training path silently lost its kernels, which CI must not let through.
    path = build.build(retry=True)
    assert path == build.library_path(build.flag_sets()[0]), (path, build.flag_sets())
    module = tf.load_op_library(path)
    rng = np.random.default_rng(0)
    dot = rng.standard_normal((7, 5)).astype(np.float32)
    factor = rng.standard_normal(7).astype(np.float32)
    got = module.sphere_tf_rescale(tf.constant(dot), tf.constant(factor))
    np.testing.assert_allclose(got.numpy(), dot * factor[:, None], rtol=1e-6)
    assert build.compiled_kernels() is not None, build.status()


@needs_compiler
def test_flag_policy_builds_for_an_avx512_fp16_cpu():
    # Sapphire Rapids has AVX-512 FP16; -march=sapphirerapids needs no such CPU to compile for it.
    flags = build.check_target("sapphirerapids")
    assert flags == build.flag_sets("sapphirerapids")[0]
    assert "-march=sapphirerapids" in flags
    try:
        build.compile_source(("-march=sapphirerapids",), os.devnull, extra=("-fsyntax-only",))
    except build.BuildError as e:
        # Without the policy (GCC 12 with TensorFlow 2.21's Eigen): the message names the
        # compiler's first error right after the command, not the headers' warnings.
        lines = str(e).splitlines()
        assert lines[1].startswith("exit status") and ": error:" in lines[2], lines[:3]
        assert not any(": warning:" in line for line in lines)
        assert "-mno-avx512fp16" in flags


def test_first_errors_skips_warnings_and_keeps_context():
    warnings = [f"h{i}.h:{i}:1: warning: 'x' is deprecated [-Wdeprecated-declarations]\n  {i} | old();\n"
                for i in range(500)]
    errors = "".join(f"k.cc:{i}:2: error: bad thing {i}\n  {i} | code{i}\n    | ^\n" for i in range(8))
    shown = build.first_errors("".join(warnings) + errors + "In file included from z.h:1,\n", count=5)
    lines = shown.splitlines()
    assert lines[0] == "k.cc:0:2: error: bad thing 0"
    assert lines[1:3] == ["  0 | code0", "    | ^"]
    assert [line for line in lines if "error:" in line] == [f"k.cc:{i}:2: error: bad thing {i}" for i in range(5)]
    assert lines[-1] == "... and 3 more error(s)"
    assert "warning" not in shown


@needs_compiler
def test_fallback_flags_are_used_when_the_first_set_fails(tmp_path):
    fallback = build.flag_sets()[1]
    sets = [("-msphere-tf-no-such-option",), fallback]
    path = build.build(sets, directory=str(tmp_path))
    assert path == build.library_path(fallback, str(tmp_path))
    # The cache key holds the flags actually used.
    assert path != build.library_path(sets[0], str(tmp_path))
    assert os.path.getsize(path) > 0
    assert not os.path.exists(build.failure_path(sets, str(tmp_path)))
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(path), os.path.basename(build.failure_path(sets, str(tmp_path))) + ".lock"])


@needs_compiler
def test_failed_build_is_recorded_once_and_retried_on_demand(tmp_path):
    sets = [("-msphere-tf-no-such-option",), ("-msphere-tf-other-option",)]
    record = build.failure_path(sets, str(tmp_path))
    with pytest.raises(build.BuildError, match="sphere-tf-no-such-option") as first:
        build.build(sets, directory=str(tmp_path))
    message = str(first.value)
    assert "sphere-tf-other-option" in message  # both sets were tried
    assert os.path.exists(record)
    os.utime(record, ns=(1, 1))
    # Later calls (other processes) read the record instead of compiling.
    with pytest.raises(build.BuildError, match="failure recorded in") as again:
        build.build(sets, directory=str(tmp_path))
    assert str(again.value).startswith(message)
    assert os.stat(record).st_mtime_ns == 1
    # retry=True compiles again and rewrites the record.
    with pytest.raises(build.BuildError, match="sphere-tf-no-such-option") as retried:
        build.build(sets, directory=str(tmp_path), retry=True)
    assert "failure recorded in" not in str(retried.value)
    assert os.stat(record).st_mtime_ns != 1
    assert not [name for name in os.listdir(tmp_path) if name.endswith((".so", ".tmp"))]


def test_flag_policy():
    sets = build.flag_sets("native", cpu_flags={"sse4_2", "ssse3", "sse4_1", "popcnt", "cx16", "lahf_lm"})
    assert sets[0][0] == "-march=native"
    if build._accepts(build.compiler(), "-mno-avx512fp16"):
        assert sets[0] == ("-march=native", "-mno-avx512fp16")
    if build._accepts(build.compiler(), "-march=x86-64-v2"):
        assert sets[1] == ("-march=x86-64-v2",)
        full = set().union(*(needed for _, needed in build._X86_LEVELS)) | {"avx512f", "avx512bw"}
        assert build.flag_sets(cpu_flags=full)[1] == ("-march=x86-64-v3",)  # capped below AVX-512
    assert build.flag_sets(cpu_flags=set())[1] == ()
