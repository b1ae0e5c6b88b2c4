"""`bench/gpu/reproduce.py`, the full-data reproductions' driver for hosts without TensorFlow.

Its `quick` mode runs in `.venv-torch` (JAX, no TensorFlow installed) as the last step of `bench/gpu/run.sh`
(tests/bench/test_gpu_script.py), so the driver, the configs and the runner it drives cannot come to need
TensorFlow between GPU runs. Here: the interval arithmetic
of the early training curve is checked against a hand computation.
"""

import pytest

from bench.gpu import full_data


def test_early_curve_turns_running_means_into_interval_means():
    curve = full_data.EarlyTrainingCurve("accuracy")
    curve.set_params({"epochs": 1})
    # Keras's running mean of the pass so far: 0.5 after 25 steps, 0.6 after 50, 0.65 after 75.
    for step, mean in ((25, 0.5), (50, 0.6), (75, 0.65)):
        curve.on_train_batch_end(step - 1, {"accuracy": mean})
    curve.on_train_batch_end(9, {"accuracy": 0.99})  # not an interval's end: ignored
    curve.on_epoch_end(0)
    curve.on_train_batch_end(24, {"accuracy": 0.0})  # a later pass: ignored
    # Steps 26-50: (0.6·50 − 0.5·25) / 25 = 0.7; steps 51-75: (0.65·75 − 0.6·50) / 25 = 0.75.
    assert [i["steps"] for i in curve.intervals()] == [[1, 25], [26, 50], [51, 75]]
    assert [i["accuracy"] for i in curve.intervals()] == pytest.approx([50.0, 70.0, 75.0])


def test_summary_leaves_out_and_counts_a_diverged_seed():
    def record(seed, accuracy, fisher):
        return {"claim": "c", "variant": "v", "seed": seed, "device": "cpu", "steps": 2, "history_last": {},
                "test_accuracy": accuracy, "angular_fisher_score": fisher}

    summary = full_data.summarize([record("0", 80.0, 0.1), record("1", 10.0, float("nan")), record("2", 82.0, 0.3)])
    entry = summary["c"]["v"]
    assert entry["test_accuracy"]["n"] == 3 and entry["test_accuracy"]["mean"] == pytest.approx(172.0 / 3)
    assert entry["angular_fisher_score"]["n"] == 2 and entry["angular_fisher_score"]["mean"] == pytest.approx(0.2)
    assert entry["angular_fisher_score_nonfinite"] == 1 and "test_accuracy_nonfinite" not in entry


def test_a_seed_the_runner_stopped_as_diverged_counts_as_non_finite():
    plan = {"train_images": 60, "total_steps": 12}
    error = FloatingPointError("training loss is nan at global step 7")
    diverged = full_data._diverged_record("dcnet/x.py", "v", 1, "quick", "/tmp/w", plan, error, 0.0, 0.0)
    assert diverged["diverged"] == "training loss is nan at global step 7" and diverged["steps"] == 12
    finite = [{"claim": diverged["claim"], "variant": "v", "seed": s, "device": "cpu", "steps": 12,
               "history_last": {"energy_fc": e}, "test_accuracy": a} for s, a, e in ((0, 80.0, 1.0), (2, 84.0, 3.0))]
    entry = full_data.summarize(finite + [diverged])[diverged["claim"]]["v"]
    assert entry["test_accuracy"]["n"] == 2 and entry["test_accuracy"]["mean"] == pytest.approx(82.0)
    assert entry["test_accuracy_nonfinite"] == 1 and entry["best_pass_test_accuracy_nonfinite"] == 1
    # The diverged seed has no energy logged: counted as non-finite, not a KeyError.
    assert entry["energy_fc"]["mean"] == pytest.approx(2.0) and entry["energy_fc_nonfinite"] == 1
