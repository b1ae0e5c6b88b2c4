"""`.keras` files move between backends: saved on any of TensorFlow, JAX and PyTorch, loaded on each other.

Each direction runs two processes (a process has one Keras backend): `portable_model.py save` under the
source backend, `portable_model.py load` under the target, comparing inference outputs with the source's
own to float32 tolerance. TensorFlow runs in the main venv; JAX and PyTorch in `.venv-torch`, which has no
TensorFlow (`scripts/setup.sh`), so the loads there also show that the core needs none. A file saved by
sphere_tf 0.1.0 (TensorFlow only, before the backend-neutral core; `data/release_0_1_0`) loads on all three.
"""

import functools
import itertools
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


def _check_load(backend, directory, reference):
    report = json.loads(_run(backend, "load", directory, reference).strip().splitlines()[-1])
    assert report["backend"] == backend
    assert report["finite"]
    assert report["max_abs_diff"] <= 1e-5 * max(1.0, report["scale"]), report


@pytest.mark.tensorflow_only  # drives all three backends from the main venv's test run
@pytest.mark.parametrize("source,target", [p for p in itertools.product(BACKENDS, BACKENDS) if p[0] != p[1]])
def test_keras_file_saved_on_one_backend_loads_on_another(saved_root, source, target):
    directory = _saved(source, saved_root)
    _check_load(target, directory, f"outputs_{source}.npy")


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("backend", BACKENDS)
def test_file_saved_by_release_0_1_0_loads_on_every_backend(backend):
    _check_load(backend, RELEASE_DIR, "outputs_tensorflow.npy")
    assert np.load(os.path.join(RELEASE_DIR, "inputs.npy")).shape == (4, 8, 8, 3)
