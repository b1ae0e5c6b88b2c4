"""The core imports where TensorFlow is not installed, and imports nothing heavy it does not use.

Runs `import sphere_tf.layers, sphere_tf.losses, sphere_tf.regularizers, sphere_tf.models, sphere_tf.ops`
under the JAX and PyTorch backends in `.venv-torch` (no TensorFlow installed there), and under every backend
checks that the layers pull in none of cleverhans, matplotlib, scipy, tensorflow-datasets beyond what
`import keras` itself loads (Keras imports matplotlib and, on JAX, scipy when they are installed).
"""

import json
import subprocess

import pytest

from tests.backends import interpreters

HEAVY = ("cleverhans", "matplotlib", "scipy", "tensorflow_datasets", "foolbox", "tensorflow")

PROBE = """
import json, sys, time
import keras
after_keras = set(sys.modules)
start = time.perf_counter()
import sphere_tf.layers, sphere_tf.losses, sphere_tf.regularizers, sphere_tf.models, sphere_tf.ops
seconds = time.perf_counter() - start
import importlib.util
print(json.dumps({
    "backend": keras.backend.backend(),
    "tensorflow_installed": importlib.util.find_spec("tensorflow") is not None,
    "new_heavy": sorted(m for m in set(sys.modules) - after_keras if m.split(".")[0] in %r),
    "seconds": seconds,
}))
""" % (HEAVY,)


def _probe(backend):
    result = subprocess.run([interpreters.python_for(backend), "-c", PROBE], env=interpreters.environment(backend),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.tensorflow_only  # drives the other venv from the main suite
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_core_imports_without_tensorflow_installed(backend):
    report = _probe(backend)
    assert report["backend"] == backend
    assert not report["tensorflow_installed"]
    assert report["new_heavy"] == [], report


@pytest.mark.tensorflow_only
def test_layers_import_nothing_heavy_on_tensorflow():
    report = _probe("tensorflow")
    # TensorFlow itself is the backend here; nothing else heavy comes with the core.
    assert [m for m in report["new_heavy"] if m.split(".")[0] != "tensorflow"] == [], report
