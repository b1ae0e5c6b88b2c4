"""`sphere_tf.json_files`: every JSON file the package writes is strict JSON (no bare NaN / Infinity)."""

import json
import math
import os

import numpy as np
import pytest

from sphere_tf import json_files


def _refuse_constant(name):
    raise ValueError(f"not strict JSON: bare {name}")


def test_non_finite_numbers_become_null_and_are_listed(tmp_path):
    value = {"loss": float("nan"), "history": {"loss": [1.0, math.inf, np.float32(-np.inf)]},
             "median": np.float64("nan"), "weights": np.array([0.5, np.nan]), "ok": np.int64(3)}
    path = str(tmp_path / "results.json")
    json_files.write_json(path, value)
    with open(path) as f:
        written = json.loads(f.read(), parse_constant=_refuse_constant)
    assert written["loss"] is None and written["median"] is None
    assert written["history"]["loss"] == [1.0, None, None] and written["weights"] == [0.5, None]
    assert written["ok"] == 3
    assert written["non_finite_values"] == {"loss": "nan", "history.loss[1]": "inf", "history.loss[2]": "-inf",
                                            "median": "nan", "weights[1]": "nan"}
    assert os.listdir(tmp_path) == ["results.json"]  # the temporary file was renamed, none left behind
    assert math.isnan(value["loss"])  # the caller's value is not modified


def test_finite_values_are_written_unchanged(tmp_path):
    value = {"a": [1, 2.5, None, True, "x"], "b": {"c": -0.0}}
    path = str(tmp_path / "config.json")
    json_files.write_json(path, value, indent=1)
    with open(path) as f:
        assert json.load(f) == value


def test_non_finite_outside_a_dict_is_refused():
    with pytest.raises(ValueError, match=r"non-finite number\(s\) at \['\[1\]'\]"):
        json_files.dumps([1.0, float("nan")])
