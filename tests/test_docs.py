"""Every ```python block of README.md and docs/*.md runs as written, on every Keras backend.

A block that is a fragment of a larger program says what it takes from outside in a leading comment,
`# assumes: name, name2 (what they are)`; this harness supplies each name with a tiny object (a file
name such as `model.keras` is created in the block's working folder instead) and runs the block in a
fresh namespace in an empty temporary working folder. A name whose meaning depends on the page (the
`model` of docs/opt.md is an OPT model) has a page-specific supplier. An undefined name, a missing
import or a stale API makes the block's test fail with the block's file and line.

The same comment names what a block needs beyond the backend-neutral core, as tokens among the names
(`REQUIREMENTS`):

* `tensorflow`: TensorFlow installed (tf.data, `sphere_tf.export`, `fit_resumable`, `make_strategy`, ...), on
  any Keras backend;
* `tensorflow_backend`, `jax_backend`, `torch_backend`: that Keras backend only.

Where a block's needs are not met (the JAX and PyTorch suites run in `.venv-torch`, which has no TensorFlow),
its test is skipped with the reason. `test_enough_blocks_run_here` counts the blocks that run in this
environment, prints the count (`-rP` shows it) and fails if it falls below `MIN_RUNNING`, so a block that stops
running fails a test. The data suppliers (`train_ds`, `ds`) give a `tf.data.Dataset` on the TensorFlow backend or
to a block that needs TensorFlow, and a `keras.utils.PyDataset` of NumPy batches otherwise.
"""

# bazel-size: large

import collections
import glob
import gzip
import importlib.util
import math
import os
import re
import struct
import tempfile
from concurrent import futures

import keras
import numpy as np
import pytest

import sphere_tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_NAME = re.compile(r"^[A-Za-z_][\w.]*$")
BACKEND = keras.backend.backend()
HAS_TENSORFLOW = importlib.util.find_spec("tensorflow") is not None


def _installed(*modules):
    return all(importlib.util.find_spec(m) is not None for m in modules)


# token -> (met here, what the block needs); a block lists its tokens among its assumed names.
REQUIREMENTS = {
    "tensorflow": (HAS_TENSORFLOW, "TensorFlow installed"),
    "tensorflow_backend": (BACKEND == "tensorflow", "the TensorFlow backend"),
    "jax_backend": (BACKEND == "jax", "the JAX backend"),
    "torch_backend": (BACKEND == "torch", "the PyTorch backend"),
}
# Assumed names whose supplier needs more than the core (their blocks list `tensorflow` too).
NAME_REQUIREMENTS = {
    "server": (_installed("grpc", "tensorflow_serving"), "grpcio and tensorflow-serving-api installed"),
}
# The fewest blocks that must run, per (Keras backend, TensorFlow installed): the CI environments are
# ("tensorflow", True) (.venv) and ("jax", False), ("torch", False) (.venv-torch); .venv also runs JAX.
MIN_RUNNING = {
    ("tensorflow", True): 33,
    ("jax", True): 32,
    ("jax", False): 23,
    ("torch", False): 23,
    ("torch", True): 32,
}

Block = collections.namedtuple("Block", ["page", "line", "code"])


def _blocks():
    found = []
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        for index, match in enumerate(_BLOCK.finditer(text)):
            line = text.count("\n", 0, match.start()) + 2  # the block's first code line
            found.append((f"{page}#{index}", Block(page, line, match.group(1))))
    return found


def assumed_names(code):
    """The names of a block's leading `# assumes: a, b (prose)` comment ([] without one)."""
    first = code.lstrip("\n").split("\n", 1)[0]
    if not first.startswith("# assumes:"):
        return []
    names = [n.strip() for n in first[len("# assumes:"):].split("(", 1)[0].split(",")]
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise ValueError(f"malformed `# assumes:` names {bad} in {first!r}")
    return names


def unmet_needs(code):
    """What a block needs that this environment lacks ([] where it runs here)."""
    names = assumed_names(code)
    needs = [REQUIREMENTS[n] for n in names if n in REQUIREMENTS] + [
        NAME_REQUIREMENTS[n] for n in names if n in NAME_REQUIREMENTS]
    return [what for met, what in needs if not met]


# Tiny stand-ins, sized so every block runs in seconds.
def _images(n, seed):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 28, 28, 1)).astype("float32")


def _labels(n, seed):
    return np.random.default_rng(seed).integers(0, 10, n).astype("int32")


def _classifier():
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        sphere_tf.layers.DecoupledConv2D(4, 3, magnitude="tanh", angular="cosine"),
        keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10),
    ])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


class _Batches(keras.utils.PyDataset):
    """(images, labels) batches of NumPy arrays: the training data of every backend without TensorFlow."""

    def __init__(self, images, labels, batch_size):
        super().__init__()
        self.images, self.labels, self.batch_size = images, labels, batch_size

    def __len__(self):
        return math.ceil(len(self.images) / self.batch_size)

    def __getitem__(self, index):
        batch = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.images[batch], self.labels[batch]


def _train_ds(needs_tensorflow):
    images, labels = _images(16, 0), _labels(16, 1)  # one batch: docs/training.md fits 10 epochs of it
    if needs_tensorflow or BACKEND == "tensorflow":
        import tensorflow as tf  # noqa: PLC0415 (only where TensorFlow is installed)

        return tf.data.Dataset.from_tensor_slices((images, labels)).batch(16)
    return _Batches(images, labels, 16)


def _saved_model_file():
    _classifier().save("model.keras")


def _margin_model_file():
    """A small functional model ending in an ArcFace `MarginHead`, saved as arcface.keras."""
    images = keras.Input((8, 8, 1), name="images")
    labels = keras.Input((), dtype="int32", name="labels")
    x = sphere_tf.layers.DecoupledConv2D(4, 3, magnitude="tanh", angular="cosine")(images)
    features = keras.layers.Dense(8)(keras.layers.GlobalAveragePooling2D()(x))
    logits = sphere_tf.layers.MarginHead(3, loss_type="arcface")(features, labels=labels)
    keras.Model([images, labels], logits).save("arcface.keras")


def _write_idx(path, array):
    """A gzipped idx file of unsigned bytes (the MNIST format; `archive_writers` needs TensorFlow)."""
    header = struct.pack(">I", 0x800 + array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _idx_dir():
    """The four Fashion-MNIST / MNIST idx files: 32 training and 8 test images."""
    from sphere_tf.data import fashion_mnist  # noqa: PLC0415

    os.makedirs("idx")
    rng = np.random.default_rng(4)
    for split, n in (("train", 32), ("test", 8)):
        _write_idx(os.path.join("idx", fashion_mnist.FILES[f"{split}_images"]), rng.integers(0, 256, (n, 28, 28)))
        _write_idx(os.path.join("idx", fashion_mnist.FILES[f"{split}_labels"]), rng.integers(0, 10, n))
    return "idx"


def _backbone():
    return keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
                             keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(8)])


def _built_conv():
    layer = keras.layers.Conv2D(8, 3)
    layer.build((None, 8, 8, 3))
    return layer


def _cifar_dir():
    from sphere_tf.data import archive_writers  # noqa: PLC0415

    os.makedirs("cifar")
    archive_writers.write_cifar10("cifar", per_batch=26, n_test=8)  # 130 training images: one batch of 128
    return "cifar"


def _margin_zoo_model():
    model = sphere_tf.models.create_model("small_cnn", widths=(4, 8), convs_per_stage=1, dense_units=8,
                                          head={"layer": "margin", "loss_type": "cosface"})
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _opt_model():
    return keras.Sequential([
        keras.Input((8, 8, 3)),
        sphere_tf.layers.OPTConv2D(4, 3, orthogonalization="ogd", use_bias=False),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10),
    ])


def _server(request):
    """A stand-in for TensorFlow Serving on a free local port: its gRPC Predict checks the request, answers `classes`."""
    import grpc  # noqa: PLC0415 (NAME_REQUIREMENTS["server"])
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow_serving.apis import predict_pb2  # noqa: PLC0415
    from tensorflow_serving.apis import prediction_service_pb2_grpc as services  # noqa: PLC0415

    class PredictionService(services.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802 (the gRPC method name)
            images = tf.make_ndarray(request.inputs["images"])
            if request.model_spec.signature_name != "serving_default" or images.dtype != np.uint8:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unexpected request {request.model_spec}")
            response = predict_pb2.PredictResponse()
            response.model_spec.CopyFrom(request.model_spec)
            response.outputs["classes"].CopyFrom(tf.make_tensor_proto(np.zeros(len(images), np.int64)))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    services.add_PredictionServiceServicer_to_server(PredictionService(), server)
    port = server.add_insecure_port("localhost:0")
    server.start()
    request.addfinalizer(lambda: server.stop(None))
    return f"localhost:{port}"


# name -> supplier(context); context.needs_tensorflow says whether the block needs TensorFlow.
SUPPLIERS = {
    "model": lambda _: _classifier(),
    "x_train": lambda _: _images(32, 0),
    "y_train": lambda _: _labels(32, 1),
    "x_test": lambda _: _images(8, 2),
    "x_batch": lambda _: _images(16, 3),
    "train_ds": lambda context: _train_ds(context.needs_tensorflow),
    "ds": lambda context: _train_ds(context.needs_tensorflow),
    "backbone": lambda _: _backbone(),
    "layer": lambda _: _built_conv(),
    "cifar_dir": lambda _: _cifar_dir(),
    "idx_dir": lambda _: _idx_dir(),
    "model.keras": lambda _: _saved_model_file(),
    "arcface.keras": lambda _: _margin_model_file(),
    "server": lambda context: _server(context.request),
}
PAGE_SUPPLIERS = {
    ("docs/models.md", "model"): lambda _: _margin_zoo_model(),
    ("docs/opt.md", "model"): lambda _: _opt_model(),
}
Context = collections.namedtuple("Context", ["needs_tensorflow", "request"])


def _jax_children_compile_fast(monkeypatch):
    """A block's child process on the JAX backend (docs/backends.md loads a file there) compiles as the JAX suite does.

    tests/conftest.py gives the JAX test process no LLVM optimisation and JAX's persistent compilation cache; the
    children inherit those settings from the environment (loading a small model on JAX: 17 s -> 3 s, cold).
    XLA_FLAGS is left alone in a TensorFlow process, whose own XLA reads it.
    """
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", os.environ.get("JAX_COMPILATION_CACHE_DIR")
                       or os.path.join(tempfile.gettempdir(), "sphere_tf_jax_test_cache"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
                       os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
                       os.environ.get("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0"))
    flags = os.environ.get("XLA_FLAGS", "")
    if BACKEND == "torch" and "xla_backend_optimization_level" not in flags:
        monkeypatch.setenv("XLA_FLAGS", (flags + " --xla_backend_optimization_level=0").strip())


def test_assumes_comments_are_read():
    assert assumed_names("# assumes: model, x_train (a model)\nprint(1)\n") == ["model", "x_train"]
    assert assumed_names("# assumes: model.keras\n") == ["model.keras"]
    assert assumed_names("import keras\n# assumes: model\n") == []
    with pytest.raises(ValueError, match="malformed"):
        assumed_names("# assumes: a model\n")


def test_requirements_are_read():
    assert unmet_needs("import keras\n") == []
    other = next(b for b in ("jax", "torch") if b != BACKEND)
    assert unmet_needs(f"# assumes: {other}_backend, model (...)\n") == [REQUIREMENTS[f"{other}_backend"][1]]
    assert unmet_needs(f"# assumes: {BACKEND}_backend\n") == []
    assert unmet_needs("# assumes: tensorflow\n") == ([] if HAS_TENSORFLOW else ["TensorFlow installed"])


def test_every_page_has_its_blocks_found():
    blocks = _blocks()
    assert len(blocks) >= 33 and {b.page for _, b in blocks} >= {"README.md", "docs/training.md", "docs/backends.md"}


def test_enough_blocks_run_here():
    """Counts the blocks that run in this environment; fewer than MIN_RUNNING means a block stopped running."""
    blocks = _blocks()
    skipped = {block_id: unmet_needs(block.code) for block_id, block in blocks}
    skipped = {block_id: needs for block_id, needs in skipped.items() if needs}
    running = len(blocks) - len(skipped)
    environment = (BACKEND, HAS_TENSORFLOW)
    print(f"docs blocks: {running} of {len(blocks)} run on KERAS_BACKEND={BACKEND} "
          f"(TensorFlow {'installed' if HAS_TENSORFLOW else 'not installed'}); skipped: "
          + ("; ".join(f"{block_id} ({', '.join(needs)})" for block_id, needs in sorted(skipped.items())) or "none"))
    floor = MIN_RUNNING.get(environment, 0)
    assert running >= floor, (
        f"only {running} doc blocks run in {environment}, fewer than MIN_RUNNING's {floor}; skipped: {skipped}")


@pytest.mark.parametrize("block", [pytest.param(b, id=i) for i, b in _blocks()])
def test_python_block_runs(block, tmp_path, monkeypatch, request):
    page, line, code = block
    unmet = unmet_needs(code)
    if unmet:
        pytest.skip(f"{page}:{line} needs {' and '.join(unmet)}")
    monkeypatch.chdir(tmp_path)
    _jax_children_compile_fast(monkeypatch)
    names = assumed_names(code)
    context = Context(needs_tensorflow="tensorflow" in names, request=request)
    namespace = {"__name__": "__doc_block__"}
    for name in names:
        if name in REQUIREMENTS:
            continue
        supplier = PAGE_SUPPLIERS.get((page, name), SUPPLIERS.get(name))
        if supplier is None:
            pytest.fail(f"{page}:{line}: no supplier for assumed name {name!r}; add one to SUPPLIERS")
        elif "." in name:  # a file the block reads
            supplier(context)
        else:
            namespace[name] = supplier(context)
    exec(compile(code, f"{page}:{line}", "exec"), namespace)  # noqa: S102 (the documentation's own code)
