"""Smoke test of an installed sphere_tf wheel, run by `scripts/check_release.sh` from outside the source tree.

    KERAS_BACKEND=jax python smoke_test.py WORKDIR

Checks, on the backend in KERAS_BACKEND, in the virtualenv of the interpreter that runs it:
1. `sphere_tf` is the installed distribution (its files are in this environment's site-packages, not a source
   tree), its `__version__` is the wheel's, and no TensorFlow is imported on JAX or PyTorch;
2. a few `fit` steps of a model with the operator layers (DecoupledConv2D, SphereConv2D, SphereDense) and an
   A-Softmax `MarginHead`, the loss finite and falling back to NumPy-checked logits;
3. a `.keras` round trip: the reloaded model's logits equal the original's;
4. the console command: `sphere-tf --version`, `sphere-tf configs` naming the packaged configs, and
   `sphere-tf run` on the README's config shrunk to two steps (Fashion-MNIST from Debian's package, no export),
   whose `results.json` has a test accuracy.
Prints one line per check; exits non-zero at the first failure.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig


def check(condition, message):
    if not condition:
        sys.exit(f"smoke test FAILED: {message}")
    print(f"ok: {message}")


def main(workdir):
    backend = os.environ["KERAS_BACKEND"]
    import numpy as np  # noqa: PLC0415

    import sphere_tf  # noqa: PLC0415

    site_packages = os.path.realpath(sysconfig.get_paths()["purelib"])
    location = os.path.realpath(os.path.dirname(sphere_tf.__file__))
    check(location.startswith(site_packages + os.sep), f"sphere_tf imported from site-packages ({location})")
    version = importlib.metadata.version("sphere_tf")
    check(sphere_tf.__version__ == version, f"sphere_tf.__version__ == the wheel's version ({version})")

    import keras  # noqa: PLC0415

    from sphere_tf import layers  # noqa: PLC0415

    check(keras.backend.backend() == backend, f"Keras backend {backend}")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 12, 12, 1)).astype("float32")
    y = rng.integers(0, 4, size=32).astype("int32")
    images = keras.Input((12, 12, 1), name="images")
    labels = keras.Input((), dtype="int32", name="labels")
    h = layers.DecoupledConv2D(8, 3, magnitude="tanh", angular="cosine", padding="same")(images)
    h = keras.layers.ReLU()(h)
    h = layers.SphereConv2D(8, 3, strides=2, angular="linear")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    features = layers.SphereDense(16, angular="cosine")(h)
    head = layers.MarginHead(4, loss_type="asoftmax", margin=4, annealing="sphereface")
    train_model = keras.Model([images, labels], head(features, labels=labels))
    inference_model = keras.Model(images, head(features))
    train_model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = train_model.fit([x, y], y, batch_size=8, epochs=2, verbose=0).history["loss"]
    check(all(np.isfinite(history)), f"fit: 8 steps, finite loss {history}")

    # The head's plain logits are ‖x‖·cos θ_j (A-Softmax, no bias): recompute them in NumPy from the features.
    feature_model = keras.Model(images, features)
    f = np.asarray(feature_model.predict(x, verbose=0), dtype="float64")
    w = np.asarray(keras.ops.convert_to_numpy(head.kernel), dtype="float64")
    expected = np.linalg.norm(f, axis=1, keepdims=True) * (f / np.linalg.norm(f, axis=1, keepdims=True)) @ (
        w / np.linalg.norm(w, axis=0, keepdims=True))
    logits = np.asarray(inference_model.predict(x, verbose=0))
    check(np.allclose(logits, expected, rtol=1e-4, atol=1e-4), "plain logits = ‖x‖·cos θ (NumPy)")

    path = os.path.join(workdir, "smoke.keras")
    inference_model.save(path)
    reloaded = keras.saving.load_model(path)
    check(np.allclose(reloaded.predict(x, verbose=0), logits, rtol=1e-6, atol=1e-6), ".keras round trip")

    command = os.path.join(os.path.dirname(sys.executable), "sphere-tf")
    out = subprocess.run([command, "--version"], capture_output=True, text=True, check=True).stdout
    check(out.strip() == f"sphere-tf {version}", f"sphere-tf --version: {out.strip()}")
    out = subprocess.run([command, "configs"], capture_output=True, text=True, check=True).stdout
    check("dcnet/fashion_mnist_tanh_cosine" in out and "spherenet/table1_cifar10_cnn9" in out,
          f"sphere-tf configs: {len(out.splitlines())} configs")
    run_dir = os.path.join(workdir, "run")
    result = subprocess.run(
        [command, "run", "--config=dcnet/fashion_mnist_tanh_cosine:quick", f"--workdir={run_dir}",
         f"--backend={backend}", "--config.export=False", "--config.model.widths=[4]",
         "--config.model.convs_per_stage=1", "--config.model.dense_units=8"],
        capture_output=True, text=True)
    check(result.returncode == 0, f"sphere-tf run exit 0 (stderr tail: {result.stderr[-2000:]!r})")
    with open(os.path.join(run_dir, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    check(0.0 <= results["test_accuracy"] <= 100.0, f"sphere-tf run: results.json test accuracy {results['test_accuracy']}")
    if backend != "tensorflow":
        check("tensorflow" not in sys.modules, "no TensorFlow imported")


if __name__ == "__main__":
    main(sys.argv[1])
