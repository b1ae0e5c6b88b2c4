"""`.keras` files move between backends: saved on any of TensorFlow, JAX and PyTorch, loaded on each other.

Each backend saves once (`portable_model.py save`, a process has one Keras backend) and loads the files of the
other two in one process (`portable_model.py load`), comparing inference outputs with the source's
own to float32 tolerance. TensorFlow runs in the main venv; JAX and PyTorch in `.venv-torch`, which has no
TensorFlow (`scripts/setup.sh`), so the loads there also show that the core needs none. A file saved by
sphere_tf 0.1.0 (TensorFlow only, before the backend-neutral core; `data/release_0_1_0`) loads on all three.
"""

import functools
import json
import os
import subprocess

import numpy as np
import pytest

from tests.backends import interpreters

SCRIPT = os.path.join(os.path.dirname(__file__), "portable_model.py")
RELEASE_DIR = os.path.join(os.path.dirname(__file__), "data", "release_0_1_0")
BACKENDS = ("tensorflow", "jax", "torch")


def _run(backend, *args):
    result = subprocess.run(
        [interpreters.python_for(backend), SCRIPT, *args], env=interpreters.environment(backend),
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, f"{backend} {args[0]} failed:\n{result.stderr[-4000:]}"
    return result.stdout


@functools.lru_cache(maxsize=None)
def _saved(backend, root):
    directory = os.path.join(root, f"saved_on_{backend}")
    _run(backend, "save", directory)
    return directory


@pytest.fixture(scope="module")
def saved_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("portable"))


def _load_all(backend, files):
    """Loads each `(directory, reference outputs)` of `files` in one `backend` process; reports by directory."""
    lines = _run(backend, "load", *[part for pair in files for part in pair]).strip().splitlines()
    reports = [json.loads(line) for line in lines if line.startswith("{")]
    return {report["directory"]: report for report in reports}


def _check(report, backend, what):
    assert report["backend"] == backend, what
    assert report["finite"], what
    assert report["max_abs_diff"] <= 1e-5 * max(1.0, report["scale"]), (what, report)


@pytest.mark.tensorflow_only  # drives all three backends from the main venv's test run
@pytest.mark.parametrize("target", BACKENDS)
def test_keras_files_saved_on_the_other_backends_and_by_release_0_1_0_load_here(saved_root, target):
    """Two directions per target (six in all), and the file saved by release 0.1.0 (TensorFlow only)."""
    sources = [b for b in BACKENDS if b != target]
    files = [(_saved(source, saved_root), f"outputs_{source}.npy") for source in sources]
    files.append((RELEASE_DIR, "outputs_tensorflow.npy"))
    reports = _load_all(target, files)
    for source, (directory, _) in zip(sources, files):
        _check(reports[directory], target, f"saved on {source}, loaded on {target}")
    _check(reports[RELEASE_DIR], target, f"saved by release 0.1.0, loaded on {target}")
    assert np.load(os.path.join(RELEASE_DIR, "inputs.npy")).shape == (4, 8, 8, 3)
