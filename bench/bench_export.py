"""Served forward time of exported SavedModels: operator-layer CNN-9 vs the same net with Conv2D.

Every case is `bench.common.cnn9` (3 stages × 3 conv 3×3 with 64/96/128
filters, BN, ReLU, max-pool, dense 256, 10 classes) with a different
convolution: `conv2d` (`keras.layers.Conv2D`, no bias, the baseline),
`tanh_cosine` (`DecoupledConv2D` tanh + cosine, the DCNet default) and
`sphere_linear` (`SphereConv2D` linear). Each model is exported twice:

* `keras`: a plain `model.export(path)` (what a user calls directly), timed
  through the reloaded `serve` endpoint on float inputs;
* `sphere_tf`: `sphere_tf.export.export_model` (the TF Serving layout with
  preprocessing in the graph), timed through the reloaded `serving_default`
  signature on uint8 pixels, returning logits, probabilities and classes.

Two more rows per case give the *floor* of a graph of stock TensorFlow ops
(`--floor`): `floor` is the same trained net written by hand as the fewest ops
this module knows for it (weights and the moving averages as constants, BN's
scale folded into the normalised kernel wherever the operator is linear in it,
the patch energy as one channel reduction and one ones-kernel conv, every
per-position factor on one channel), and `floor_xla` is that function compiled
whole by XLA (the box sum as shifted slices there, which XLA fuses). Both are checked against the Keras model's own inference output
before they are timed, so they compute the same function.

The SavedModels are reloaded with `tf.saved_model.load` and timed round-robin
(one call of every case per round, each batch size), so load from other
processes hits every case alike; the median wall and process CPU time per call
are reported with the ratio to the `conv2d` model of the same exporter. Each
row also lists the op types of the reloaded graph that are not TensorFlow's
own (custom ops would have to be loaded to serve it: the list must be empty).

    python -m bench.bench_export --results_file bench/results/cpu/export.jsonl
"""

import os
import statistics
import tempfile
import time

from absl import app
from absl import flags

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry  # pylint: disable=g-direct-tensorflow-import

from bench import common
from sphere_tf import export as export_lib
from sphere_tf import layers as sphere_layers
from sphere_tf.ops import angles

FLAGS = flags.FLAGS
flags.DEFINE_list("cases", ["tanh_cosine", "sphere_linear"], "Cases to compare with conv2d (always included).")
flags.DEFINE_list("exporters", ["keras", "sphere_tf"], "Exporters: 'keras' (model.export), 'sphere_tf'.")
flags.DEFINE_list("batch_sizes", ["1", "64"], "Batch sizes to time.")
flags.DEFINE_integer("image_size", 32, "Square input size (3 channels).")
flags.DEFINE_integer("num_warmup", 5, "Untimed calls per case and batch size.")
flags.DEFINE_integer("num_iters", 30, "Timed rounds (one call of every case per round).")
flags.DEFINE_integer("train_steps", 2, "Training-mode forward calls before export (moving averages non-trivial).")
flags.DEFINE_string("results_file", None, "Write the JSON lines here as well.")
flags.DEFINE_bool("floor", True, "Also time the hand-written floor graphs ('floor', 'floor_xla').")

BASELINE = "conv2d"
# Cases without a hand-written floor graph (`floor_forward` raises for them).
_NO_FLOOR = ("sphere_sigmoid",)

_CASES = {
    "conv2d": lambda f: keras.layers.Conv2D(f, 3, padding="same", use_bias=False),
    "tanh_cosine": lambda f: sphere_layers.DecoupledConv2D(f, 3, padding="same", magnitude="tanh",
                                                           angular="cosine"),
    "sphere_linear": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="linear"),
    "sphere_cosine": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="cosine"),
    "sphere_sigmoid": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="sigmoid"),
}


def build(case, image_size, train_steps, seed=0):
    """The case's CNN-9, its BN and E{‖x‖} statistics moved by `train_steps` training-mode calls."""
    if case not in _CASES:
        raise ValueError(f"Unknown case {case!r}; expected one of {sorted(_CASES)}.")
    keras.utils.set_random_seed(seed)
    model = common.cnn9(_CASES[case], input_shape=(image_size, image_size, 3))
    x = np.random.default_rng(seed).uniform(-1, 1, (8, image_size, image_size, 3)).astype(np.float32)
    for _ in range(train_steps):
        model(x, training=True)
    return model


def _constant(value):
    return tf.constant(np.asarray(value, np.float32))


def _floor_blocks(model):
    """Per conv block, the constants of the floor graph: `(kind, constants)`, from the trained layers."""
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    blocks = []
    i = 0
    while not isinstance(layers[i], keras.layers.Flatten):
        layer = layers[i]
        if isinstance(layer, keras.layers.MaxPooling2D):
            blocks.append(("pool", None))
            i += 1
            continue
        bn = layers[i + 1]
        scale = bn.gamma.numpy() / np.sqrt(bn.moving_variance.numpy() + bn.epsilon)
        shift = bn.beta.numpy() - bn.moving_mean.numpy() * scale
        kernel = layer.kernel.numpy()
        if isinstance(layer, keras.layers.Conv2D):
            blocks.append(("conv2d", {"kernel": _constant(kernel * scale), "shift": _constant(shift)}))
        else:
            eps = layer._sqrt_epsilon  # pylint: disable=protected-access
            w_hat = angles.normalize_kernel(layer.kernel, eps)[0].numpy()
            consts = {"eps": eps, "shift": _constant(shift)}
            if layer.magnitude == "tanh" and layer.angular == "cosine":
                kind = "tanh_cosine"
                radius = layer.effective_rho().numpy() * float(layer.norm_mean().numpy())
                consts.update(kernel=_constant(w_hat * scale * layer.alpha), inv_radius=_constant(1.0 / radius))
            elif layer.magnitude == "sphere" and layer.angular == "cosine":
                kind = "sphere_cosine"
                consts.update(kernel=_constant(w_hat * scale * layer.alpha))
            elif layer.magnitude == "sphere" and layer.angular == "linear":
                kind = "sphere_linear"
                consts.update(kernel=_constant(w_hat), scale=_constant(scale * layer.alpha * 2.0 / np.pi))
            else:
                raise ValueError(f"No floor graph for {layer.magnitude} + {layer.angular}.")
            blocks.append((kind, consts))
        i += 3  # operator, BN, ReLU
    dense = [layer for layer in layers[i:] if isinstance(layer, keras.layers.Dense)]
    return blocks, [(_constant(d.kernel.numpy()), _constant(d.bias.numpy())) for d in dense]


def _floor_block(x, kind, c, xla):
    """One operator + BN + ReLU in the fewest stock ops: f·γ' + β' with per-position factors on one channel."""
    if kind == "conv2d":  # what grappler fuses into one _FusedConv2D (conv, bias, ReLU)
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, c["kernel"], 1, "SAME"), c["shift"]))
    dot = tf.nn.conv2d(x, c["kernel"], 1, "SAME")
    if xla:
        # XLA has no EuclideanNorm kernel, and fuses the box sum's shifted slices into one loop
        # (its one-channel convolution is slower).
        energy = tf.pad(tf.reduce_sum(tf.square(x), axis=-1, keepdims=True), [[0, 0], [1, 1], [1, 1], [0, 0]])
        energy = energy[:, :-2] + energy[:, 1:-1] + energy[:, 2:]
        energy = energy[:, :, :-2] + energy[:, :, 1:-1] + energy[:, :, 2:] + c["eps"]
    else:  # one reduction kernel (no full-size square) and one ones-kernel conv
        pixel_energy = tf.square(tf.math.reduce_euclidean_norm(x, axis=-1, keepdims=True))
        energy = tf.nn.conv2d(pixel_energy, tf.ones((3, 3, 1, 1)), 1, "SAME") + c["eps"]
    inv_norm = tf.math.rsqrt(energy)
    if kind == "sphere_cosine":
        out = dot * inv_norm
    elif kind == "tanh_cosine":
        out = dot * inv_norm * tf.tanh(energy * inv_norm * c["inv_radius"])
    else:
        c_theta = tf.clip_by_value(dot * inv_norm, -_CLIP, _CLIP)
        out = tf.asin(c_theta) * c["scale"]
    return tf.nn.relu(out + c["shift"])


_CLIP = 1.0 - angles.ACOS_DELTA  # the operators' clip of cos θ


def floor_forward(model, xla=False):
    """The floor graph of a `cnn9` case: `fn(images) -> logits`, weights as constants (see module doc)."""
    blocks, dense = _floor_blocks(model)

    def forward(images):
        x = tf.cast(images, tf.float32)
        for kind, consts in blocks:
            x = tf.nn.max_pool2d(x, 2, 2, "VALID") if kind == "pool" else _floor_block(x, kind, consts, xla)
        x = tf.reshape(x, (tf.shape(x)[0], -1))
        (k1, b1), (k2, b2) = dense
        return tf.matmul(tf.nn.relu(tf.matmul(x, k1) + b1), k2) + b2

    fn = tf.function(forward, jit_compile=xla, autograph=False)
    return fn.get_concrete_function(tf.TensorSpec((None,) + tuple(model.input_shape[1:]), tf.float32))


def check_floor(model, fn, images, atol=1e-3):
    """Raises unless the floor graph `fn` gives the model's inference logits on `images` (float pixels)."""
    want = model(images, training=False).numpy()
    got = fn(tf.constant(images, tf.float32)).numpy()
    err = float(np.max(np.abs(want - got)))
    scale = float(np.max(np.abs(want)))
    if not err <= atol * max(1.0, scale):
        raise AssertionError(f"floor graph differs from the model by {err:.3g} (|logits| <= {scale:.3g})")
    return err


def foreign_ops(concrete):
    """Op types of a traced function (and its library) that are not stock TensorFlow ops.

    The project's compiled kernels register as `SphereTf*`; anything else not in
    TensorFlow's op registry would need a library loaded to serve the graph.
    """
    graph_def = concrete.graph.as_graph_def()
    functions = {f.signature.name for f in graph_def.library.function}
    op_types = {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}
    return sorted(op for op in op_types - functions
                  if op.startswith("SphereTf") or op_def_registry.get(op) is None)


def export_case(model, exporter, directory, case):
    """Exports `model`; returns `(callable(batch) -> outputs, input dtype, foreign op types)`."""
    if exporter == "keras":
        path = os.path.join(directory, "keras", case)
        model.export(path, format="tf_saved_model", verbose=False)
        loaded = tf.saved_model.load(path)
        fn = loaded.signatures["serving_default"]
        name = list(fn.structured_input_signature[1])[0]
        return loaded, (lambda x: fn(**{name: x})), tf.float32, foreign_ops(fn)
    result = export_lib.export_model(model, os.path.join(directory, "sphere_tf"), case, normalization="none",
                                     verify=False, warmup_batch_sizes=())
    loaded = tf.saved_model.load(result.path)
    fn = loaded.signatures["serving_default"]
    return loaded, (lambda x: fn(images=x)), tf.uint8, foreign_ops(fn)


def time_round_robin(fns, num_warmup, num_iters):
    """Median/p90 wall and median CPU seconds per key of `fns` (zero-argument callables)."""
    for fn in fns.values():
        for _ in range(num_warmup):
            common._block(fn())  # pylint: disable=protected-access
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(num_iters):
        for key, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            common._block(fn())  # pylint: disable=protected-access
            cpu[key].append(time.process_time() - c0)
            wall[key].append(time.perf_counter() - w0)
    out = {}
    for key in fns:
        w = sorted(wall[key])
        out[key] = {"median_s": statistics.median(w), "p90_s": w[min(len(w) - 1, int(0.9 * len(w)))],
                    "cpu_median_s": statistics.median(cpu[key])}
    return out


def main(argv):
    del argv
    cases = [BASELINE] + [c for c in FLAGS.cases if c != BASELINE]
    batch_sizes = [int(b) for b in FLAGS.batch_sizes]
    env = common.environment()
    rng = np.random.default_rng(0)
    size = FLAGS.image_size
    inputs = {b: rng.integers(0, 256, (b, size, size, 3)).astype(np.uint8) for b in batch_sizes}
    served, foreign, keep = {}, {}, []
    with tempfile.TemporaryDirectory() as directory:
        for case in cases:
            model = build(case, size, FLAGS.train_steps)
            if FLAGS.floor and case not in _NO_FLOOR:
                probe = inputs[batch_sizes[-1]].astype(np.float32)
                for exporter, xla in (("floor", False), ("floor_xla", True)):
                    fn = floor_forward(model, xla=xla)
                    check_floor(model, fn, probe)
                    foreign[(exporter, case)] = foreign_ops(fn)
                    for b in batch_sizes:
                        x = tf.constant(inputs[b], tf.float32)
                        served[(exporter, case, b)] = (lambda fn=fn, x=x: fn(x))
            for exporter in FLAGS.exporters:
                loaded, fn, dtype, ops_ = export_case(model, exporter, directory, case)
                keep.append(loaded)
                foreign[(exporter, case)] = ops_
                for b in batch_sizes:
                    x = tf.constant(inputs[b], dtype) if dtype == tf.uint8 else tf.constant(inputs[b], tf.float32)
                    served[(exporter, case, b)] = (lambda fn=fn, x=x: fn(x))
        results = time_round_robin(served, FLAGS.num_warmup, FLAGS.num_iters)
    rows = []
    end_load = common.load_average()
    for (exporter, case, b), stats in results.items():
        # The XLA floor is compared with the stock-op Conv2D net (what `export_model` serves), not with XLA's.
        base = results[("floor" if exporter == "floor_xla" else exporter, BASELINE, b)]
        rows.append({
            "bench": "export", "exporter": exporter, "layer": case, "batch_size": b, **stats,
            "median_s_ratio": stats["median_s"] / base["median_s"],
            "cpu_median_s_ratio": stats["cpu_median_s"] / base["cpu_median_s"],
            "foreign_ops": foreign[(exporter, case)], "num_iters": FLAGS.num_iters,
            "image_size": size, **env, "load_average_end": end_load,
        })
    common.write_results(rows, FLAGS.results_file)
    print("\n| exporter | layer | batch | median ms | ratio (wall) | ratio (CPU) | foreign ops |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['exporter']} | {r['layer']} | {r['batch_size']} | {1e3 * r['median_s']:.2f} | "
              f"{r['median_s_ratio']:.3f} | {r['cpu_median_s_ratio']:.3f} | {','.join(r['foreign_ops']) or '-'} |")


if __name__ == "__main__":
    app.run(main)
