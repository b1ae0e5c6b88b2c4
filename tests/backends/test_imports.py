"""The core imports where TensorFlow is not installed, and imports nothing heavy it does not use.

Runs `import sphere_tf.layers, sphere_tf.losses, sphere_tf.regularizers, sphere_tf.models, sphere_tf.ops`
under the JAX and PyTorch backends in `.venv-torch` (no TensorFlow installed there), and under every backend
checks that the layers pull in none of cleverhans, matplotlib, scipy, tensorflow-datasets beyond what
`import keras` itself loads (Keras imports matplotlib and, on JAX, scipy when they are installed).
"""

import importlib.util
import json
import subprocess
import sys

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


# What a user without TensorFlow imports first, and the name its one-line error must carry.
TENSORFLOW_NAMES = {
    # The module imports without TensorFlow (its names are there); its first TensorFlow operation says so.
    "from sphere_tf.data import preprocessing; preprocessing.random_flip([[[0.0]]], [1, 2])":
        "sphere_tf.data.preprocessing builds tf.data input pipelines",
    "from sphere_tf.data import get_datasets; get_datasets('cifar10', batch_size=8, pipeline='tf_data')":
        "sphere_tf.data.get_datasets(pipeline='tf_data') builds tf.data input pipelines",
    # cleverhans' attacks (the TensorFlow reference of sphere_tf.adversarial's own, which run everywhere).
    "from sphere_tf.adversarial import attacks; attacks.fgsm(None, [[[[0.0]]]], [0], None)":
        "sphere_tf.adversarial.attacks crafts FGSM/BIM/PGD examples",
    "from sphere_tf.data import fashion_mnist_datasets; fashion_mnist_datasets(8)":
        "sphere_tf.data.fashion_mnist_datasets builds tf.data input pipelines",
}
ONE_LINE_PROBE = """
import sys
for code in sys.argv[1:]:  # one process: a failed import leaves nothing in sys.modules for the next
    try:
        exec(code)
    except ImportError as error:
        print(type(error).__name__ + ": " + str(error).replace(chr(10), "<newline>"))
    else:
        print("imported")
"""


def _last_lines(backend, codes, env=None):
    result = subprocess.run([interpreters.python_for(backend), "-c", ONE_LINE_PROBE, *codes],
                            env=env or interpreters.environment(backend), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.strip().splitlines()[-len(codes):]


@pytest.mark.tensorflow_only  # drives the venv without TensorFlow from the main suite
def test_what_needs_tensorflow_says_so_in_one_line_naming_the_install_and_the_alternative():
    # What runs without TensorFlow: the array readers, the data sets through Grain, step checkpoints, the runner.
    neutral = ["from sphere_tf.data import load_fashion_mnist, cifar, mnist, get_datasets",
               "from sphere_tf.training import fit_resumable, make_strategy",
               "from sphere_tf.runners import classifier",
               "from sphere_tf.adversarial import gradient_attacks, pixels, make_attack, white_box, adversarial_wrap",
               "from sphere_tf.evaluation import verify, flip_embedding_fn; from sphere_tf.runners import face"]
    codes = [*TENSORFLOW_NAMES, *neutral]
    lines = _last_lines("torch", codes)
    for (code, name), line in zip(TENSORFLOW_NAMES.items(), lines[:len(TENSORFLOW_NAMES)]):
        assert line.startswith("TensorFlowMissingError: " + name), (code, line)
        assert "Keras backend 'torch'" in line and "pip install tensorflow-cpu" in line, line
        assert "; or, " in line and "<newline>" not in line, line  # the backend-neutral alternative, one line
    assert lines[len(TENSORFLOW_NAMES):] == ["imported"] * len(neutral)


@pytest.mark.tensorflow_only
def test_missing_keras_backend_gets_a_hint_naming_keras_backend(tmp_path):
    (tmp_path / "keras.json").write_text('{"backend": "tensorflow"}')
    env = interpreters.environment("torch")
    env.pop("KERAS_BACKEND")
    env["KERAS_HOME"] = str(tmp_path)
    [line] = _last_lines("torch", ["import sphere_tf"], env)
    assert line.startswith(f"ImportError: Keras's backend is 'tensorflow' (from {tmp_path / 'keras.json'}) but "
                           "tensorflow is not installed: set KERAS_BACKEND to one that is (jax, torch)"), line


@pytest.mark.tensorflow_only
def test_runner_backend_flag_names_a_backend_that_is_not_installed(tmp_path):
    if importlib.util.find_spec("torch") is not None:
        pytest.fail("this test needs the main venv without PyTorch (scripts/setup.sh keeps it there)")
    command = [sys.executable, "-m", "sphere_tf_cli.run", "--config", "sphere_tf/configs/dcnet/fashion_mnist_tanh_cosine.py",
               "--workdir", str(tmp_path), "--backend", "torch"]
    result = subprocess.run(command, cwd=interpreters.REPO,
                            env=interpreters.environment("tensorflow"), capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "--backend" in line]
    assert lines == [f"Error: --backend=torch: torch is not installed in this environment ({sys.executable}); "
                     "install it (pip install torch) or pick an installed backend."], result.stderr[-2000:]
