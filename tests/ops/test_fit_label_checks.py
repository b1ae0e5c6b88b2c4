"""`model.fit` on JAX with a head that checks its labels finishes: the label check's host callback cannot deadlock.

The check (`runtime_checks.assert_all`) runs as a `jax.debug.callback` on XLA's callback thread while the main
thread waits for the step. It once reduced the `jax.Array` it was handed (`np.all(ok)`), which starts a JAX
computation from that thread: a plain `keras.Model` with a `MarginHead` trained by `fit` at batch 64 hung at 0 %
CPU in most runs (`SphereModel.fit` and the runner did not, which is why no test saw it). The fits run in a child
process with a time limit, so a hang fails the test instead of stalling the suite.
"""

import os
import subprocess
import sys

import pytest

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_fit_label_checks_child.py")
# CASE:BATCH:N_SAMPLES. The first is the reported one (the old check hung on it in every try here, 2 of 2 and
# 5 of 5 in the report); the others cover every head or loss that checks labels, at batches 32 to 128.
RUNS = (
    "MarginHead-arcface:64:6400", "MarginHead-arcface:32:512", "MarginHead-arcface:128:640",
    "MarginHead-cosface:64:512", "MarginHead-asoftmax:64:512", "PartialFCHead:64:640",
    "CosFaceLoss:64:512", "ArcFaceLoss:64:512",
)
RANGE_MESSAGE = "every label must be a class id in [0, 10) (num_classes=10). Received: labels out of range [13]"
TIME_LIMIT_S = 300  # about 30 s when nothing hangs, on 2 busy cores


@pytest.mark.backend_only("jax")  # the callback is JAX's; the child runs on JAX whatever the suite
def test_fit_with_label_checking_heads_finishes_and_bad_labels_fail():
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONUNBUFFERED="1")
    # XLA's default code generation, as a user gets it (tests/conftest.py lowers it for the suite's own compiles).
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "").replace("--xla_backend_optimization_level=0", "").strip()
    try:
        result = subprocess.run([sys.executable, CHILD, *RUNS], env=env, capture_output=True, text=True,
                                timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired as expired:
        done = (expired.stdout or b"").decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
        pytest.fail(f"fit hung: no result within {TIME_LIMIT_S} s; finished before the hang:\n{done}")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = {line.split(" ", 2)[0] + " " + line.split(" ", 2)[1]: line.split(" ", 2)[2]
             for line in result.stdout.splitlines() if line.startswith(("ok ", "bad-label "))}
    for run in RUNS:
        assert float(lines[f"ok {run}"]) > 0, run  # a finite loss
        bad = lines[f"bad-label {run}"]
        if run.startswith(("MarginHead", "PartialFCHead")):
            # The step fails with the head's message: `fit` or the first read of its result raises.
            assert bad.startswith("raised") and RANGE_MESSAGE in bad, (run, bad)
        else:
            # The margin losses check by value: that sample's loss is NaN (docs/losses.md), nothing raises.
            assert bad == "loss nan", (run, bad)
