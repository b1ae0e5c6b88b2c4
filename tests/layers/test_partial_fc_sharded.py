"""PartialFCHead with class centres sharded by `keras.distribution` (JAX, GSPMD) on 1, 2 and 4 CPU devices.

The multi-device checks need `XLA_FLAGS=--xla_force_host_platform_device_count=4` before JAX is imported,
so they run in one fresh process, `partial_fc_sharded_check.py` (next to this file), which writes each
check's outcome to a JSON file; `test_sharded_head_on_1_2_4_cpu_devices` fails with every failing check:

* sample_rate=1: loss, d/d features, d/d kernel (and bias), logits of the sharded head equal the
  single-device dense `MarginHead` (A-Softmax with annealing, CosFace with a bias, ArcFace), N = 1, 2, 4;
* sample_rate < 1, fixed seed: the sharded head equals the unsharded one with the same `num_shards`
  (sampled classes bit-identical; loss, gradients and logits to float32 tolerance), one and two blocks
  per device;
* `model.fit` (functional features -> Dense -> PartialFCHead with a labels input, PartialFCOptimizer over
  SGD with momentum) under ModelParallel equals the same steps on one device; every device holds a
  `(C_padded / N, d)` kernel shard (momentum and sampled mask split alike), one device's parameter bytes
  are <= 0.55 of the model's at N = 2;
* the same on a 2-D mesh (batch 2 x model 2): batch split over "batch", classes over "model";
* the compiled (per-device) HLO of the train step `fit` ran: no tensor with a full class dimension
  (no device holds the (B, K) logits, the (d, K) kernel or its gradient), per-device (B, K/N) logits,
  the features all-gathered, the softmax max and sum all-reduced;
* a mesh axis whose size does not divide `num_shards` raises a ValueError naming `num_shards` when the
  layout is made or the head is built.

The layout helper's argument checks run in-process on every backend.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "partial_fc_sharded_check.py")


CHECKS = ("full_rate", "sampled", "fit", "fit_2d", "hlo", "bad_mesh")


def run_checks(out):
    env = dict(os.environ)
    env["KERAS_BACKEND"] = "jax"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run(
        [sys.executable, SCRIPT, str(out)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT
    )
    assert result.returncode == 0 and out.exists(), result.stdout[-3000:] + result.stderr[-6000:]
    with open(out) as f:
        return json.load(f)["results"]


# One test for the whole subprocess (one JAX start-up; under pytest-xdist a module fixture would run it
# once per worker); every failing check is reported with its traceback.
@pytest.mark.backend_only("jax")
def test_sharded_head_on_1_2_4_cpu_devices(tmp_path):
    results = run_checks(tmp_path / "results.json")
    failed = {name: results.get(name, "did not run") for name in CHECKS if results.get(name) != "ok"}
    assert not failed, "\n\n".join(f"check {name}:\n{outcome}" for name, outcome in failed.items())
    # What the checks measured, restated here: bytes per device, the HLO, the error message.
    assert results["bytes_ratio_N2"] <= 0.55 and results["bytes_ratio_N4"] < results["bytes_ratio_N2"]
    for key in ("hlo_N2_rate0.375", "hlo_N4_rate0.375", "hlo_N4_rate1.0", "hlo_2d"):
        assert results[key]["offending"] == [] and results[key]["local_logits"], (key, results[key])
    assert "num_shards" in results["bad_mesh_message"]


# ---------------------------------------------------------------------------------------------------
# The layout helper itself: pure Python, every backend.


def test_class_sharding_layout_entries_and_argument_errors():
    from keras import distribution as kd

    from sphere_tf.layers import PartialFCHead
    from sphere_tf.layers import class_sharding_layout

    mesh = kd.DeviceMesh((2,), ("devices",), ["cpu:0", "cpu:1"])
    layout_map = class_sharding_layout(kd.LayoutMap(mesh), PartialFCHead(10, num_shards=4, name="head"))
    assert layout_map["head/kernel"].axes == ("devices", None)
    assert layout_map["outer_model/head/kernel"].axes == ("devices", None)
    assert layout_map["head/bias"].axes == ("devices",) and layout_map["head/sampled"].axes == ("devices",)
    assert layout_map["my_head/kernel"] is None and layout_map["head/iteration"] is None

    mesh_2d = kd.DeviceMesh((1, 2), ("batch", "model"), ["cpu:0", "cpu:1"])
    assert class_sharding_layout(kd.LayoutMap(mesh_2d), "head", "model")["head/kernel"].axes == ("model", None)
    with pytest.raises(ValueError, match="num_shards=3"):
        class_sharding_layout(kd.LayoutMap(mesh), PartialFCHead(10, num_shards=3))
    with pytest.raises(ValueError, match="axis_name"):
        class_sharding_layout(kd.LayoutMap(mesh_2d), "head")
    with pytest.raises(ValueError, match="axis_name"):
        class_sharding_layout(kd.LayoutMap(mesh), "head", "model")
    with pytest.raises(ValueError, match="head"):
        class_sharding_layout(kd.LayoutMap(mesh), 3)
    built = PartialFCHead(10, num_shards=2)
    built.build((None, 4))
    with pytest.raises(ValueError, match="built"):
        class_sharding_layout(kd.LayoutMap(mesh), built)
