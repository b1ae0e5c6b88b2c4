"""Every ```python block of README.md and docs/*.md runs as written.

A block that is a fragment of a larger program says what it takes from outside in a leading comment,
`# assumes: name, name2 (what they are)`; this harness supplies each name with a tiny object (a file
name such as `model.keras` is created in the block's working folder instead) and runs the block in a
fresh namespace in an empty temporary working folder. A name whose meaning depends on the page (the
`model` of docs/opt.md is an OPT model) has a page-specific supplier. An undefined name, a missing
import or a stale API makes the block's test fail with the block's file and line.
"""

# bazel-size: large

import glob
import os
import re
from concurrent import futures

import keras
import numpy as np
import pytest
import tensorflow as tf

import sphere_tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_NAME = re.compile(r"^[A-Za-z_][\w.]*$")


def _blocks():
    found = []
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        for index, match in enumerate(_BLOCK.finditer(text)):
            line = text.count("\n", 0, match.start()) + 2  # the block's first code line
            found.append(pytest.param(page, line, match.group(1), id=f"{page}#{index}"))
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


def _train_ds():
    return tf.data.Dataset.from_tensor_slices((_images(32, 0), _labels(32, 1))).batch(16)


def _saved_model_file():
    _classifier().save("model.keras")


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
    grpc = pytest.importorskip("grpc")
    services = pytest.importorskip("tensorflow_serving.apis.prediction_service_pb2_grpc")
    from tensorflow_serving.apis import predict_pb2  # noqa: PLC0415

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


SUPPLIERS = {
    "model": _classifier,
    "x_train": lambda: _images(32, 0),
    "y_train": lambda: _labels(32, 1),
    "x_test": lambda: _images(8, 2),
    "x_batch": lambda: _images(16, 3),
    "train_ds": _train_ds,
    "ds": _train_ds,
    "backbone": _backbone,
    "layer": _built_conv,
    "cifar_dir": _cifar_dir,
    "model.keras": _saved_model_file,
    "server": None,  # needs the test's finalizer: `_server(request)`
}
PAGE_SUPPLIERS = {
    ("docs/models.md", "model"): _margin_zoo_model,
    ("docs/opt.md", "model"): _opt_model,
}


def test_assumes_comments_are_read():
    assert assumed_names("# assumes: model, x_train (a model)\nprint(1)\n") == ["model", "x_train"]
    assert assumed_names("# assumes: model.keras\n") == ["model.keras"]
    assert assumed_names("import keras\n# assumes: model\n") == []
    with pytest.raises(ValueError, match="malformed"):
        assumed_names("# assumes: a model\n")


def test_every_page_has_its_blocks_found():
    blocks = _blocks()
    assert len(blocks) >= 21 and {b.values[0] for b in blocks} >= {"README.md", "docs/training.md"}


@pytest.mark.parametrize("page,line,code", _blocks())
def test_python_block_runs(page, line, code, tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__doc_block__"}
    for name in assumed_names(code):
        supplier = PAGE_SUPPLIERS.get((page, name), SUPPLIERS.get(name))
        if name == "server":
            namespace[name] = _server(request)
        elif supplier is None:
            pytest.fail(f"{page}:{line}: no supplier for assumed name {name!r}; add one to SUPPLIERS")
        elif "." in name:  # a file the block reads
            supplier()
        else:
            namespace[name] = supplier()
    exec(compile(code, f"{page}:{line}", "exec"), namespace)  # noqa: S102 (the documentation's own code)
