"""PartialFCHead with its class centres sharded by `keras.distribution` on JAX: the checks, in one process.

Run by tests/layers/test_partial_fc_sharded.py in a fresh Python process, because the 4 logical CPU devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=4`) must be set before JAX is imported:

    KERAS_BACKEND=jax python tests/layers/partial_fc_sharded_check.py RESULT.json

Meshes of N = 1, 2 and 4 of those devices, one axis "devices" for both the batch (data parallel) and the
head's classes (`class_sharding_layout`). Each check writes "ok" or its traceback under its name in
RESULT.json (with a few measurements: bytes per device, HLO facts), and the pytest side reports every
failing check.
"""

import json
import os
import re
import sys
import time
import traceback

os.environ["KERAS_BACKEND"] = "jax"
# Before JAX starts: 4 logical CPU devices; LLVM's optimisation of the CPU code off (compiles ~2x faster; the
# HLO passes, SPMD partitioning included, are unchanged).
_FLAGS = {
    "--xla_force_host_platform_device_count": "4",
    "--xla_backend_optimization_level": "0",
    "--xla_llvm_disable_expensive_passes": "true",
}
_given = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join([_given] + [f"{k}={v}" for k, v in _FLAGS.items() if k not in _given]).strip()

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import distribution as kd  # noqa: E402

from sphere_tf.layers import MarginHead  # noqa: E402
from sphere_tf.layers import PartialFCHead  # noqa: E402
from sphere_tf.layers import class_sharding_layout  # noqa: E402
from sphere_tf.optimizers import PartialFCOptimizer  # noqa: E402

DEVICES = kd.list_devices("cpu")
DEVICE_0 = jax.devices("cpu")[0]
AXIS = "devices"
B, D_IN, D = 8, 6, 5  # batch, backbone input, feature dim: sizes chosen so no two of them coincide
MESH_SIZES = (1, 2, 4)
TYPES = {
    "asoftmax": dict(loss_type="asoftmax", annealing="sphereface"),
    "cosface": dict(loss_type="cosface", scale=16.0, use_bias=True),
    "arcface": dict(loss_type="arcface", scale=16.0),
}
RTOL, ATOL = 1e-5, 1e-5
RESULTS = {}
SECONDS = {}


CHECKS = []


def check(name):
    """Registers a check; `run_checks` runs them in order (the HLO check reads what the fit checks recorded)."""

    def register(fn):
        CHECKS.append((name, fn))
        return fn

    return register


def run_checks():
    for name, fn in CHECKS:
        start = time.perf_counter()
        try:
            fn()
            RESULTS[name] = "ok"
        except Exception:  # noqa: BLE001 (reported to the pytest side, which fails on it)
            RESULTS[name] = traceback.format_exc()
        keras.distribution.set_distribution(None)
        SECONDS[name] = round(time.perf_counter() - start, 2)


def model_parallel(n, head_names=("head",)):
    """ModelParallel on the first n devices: one axis for the batch and the heads' classes."""
    mesh = kd.DeviceMesh((n,), (AXIS,), DEVICES[:n])
    layout_map = kd.LayoutMap(mesh)
    for name in head_names:
        class_sharding_layout(layout_map, name, AXIS)
    return kd.ModelParallel(layout_map=layout_map, batch_dim_name=AXIS)


def put_batch(distribution, array):
    """`array` split by rows over the mesh, as `fit` distributes a batch."""
    return jax.device_put(array, distribution.get_data_layout(array.shape).backend_layout)


def to_numpy(x):
    return np.asarray(jax.device_get(x))


def assert_close(actual, expected, what, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), rtol=rtol, atol=atol, err_msg=what)


def shard_shapes(variable):
    return sorted({tuple(shard.data.shape) for shard in variable.value.addressable_shards})


def build_head(num_classes, name, distribution=None, **kwargs):
    """A built head (under `distribution` when given: its layout map names `name`)."""
    if distribution is None:
        head = PartialFCHead(num_classes, name=name, **kwargs)
        head.build((None, D))
        return head
    with distribution.scope():
        head = PartialFCHead(num_classes, name=name, **kwargs)
        head.build((None, D))
    return head


def set_weights(head, w, b, iteration):
    padded = head.num_padded_classes - w.shape[1]
    head.kernel.assign(np.concatenate([w, np.zeros((w.shape[0], padded), np.float32)], axis=1).T)
    if b is not None:
        head.bias.assign(np.concatenate([b, np.zeros(padded, np.float32)]))
    head.iteration.assign(iteration)  # the λ of step iteration + 1 (annealed types)


def own_loss(layer, y, outputs, losses):
    return losses[-1]


def loss_grads(layers, x, y, distribution=None, loss_of=own_loss):
    """For each layer, (loss, d loss/d features, d loss/d trainable weights, outputs, new non-trainable
    values) of one training call; all layers in one jitted function (one compilation), traced under
    `distribution` so the heads' sharding constraints apply."""

    def one(layer, non_trainable, features, trainable):
        outputs, new_non_trainable, losses = layer.stateless_call(
            trainable, non_trainable, features, labels=y, training=True, return_losses=True
        )
        return loss_of(layer, y, outputs, losses), (outputs, new_non_trainable)

    def step(features, trainables, non_trainables):
        results = []
        for layer, trainable, non_trainable in zip(layers, trainables, non_trainables):
            fn = jax.value_and_grad(lambda f, t: one(layer, non_trainable, f, t), argnums=(0, 1), has_aux=True)
            (loss, (outputs, new_nt)), (gx, gw) = fn(features, trainable)
            results.append((loss, gx, gw, outputs, new_nt))
        return results

    args = (x, [[v.value for v in l.trainable_variables] for l in layers],
            [[v.value for v in l.non_trainable_variables] for l in layers])
    if distribution is None:
        return jax.jit(step)(*args)
    with distribution.scope():
        return jax.jit(step)(*args)


def problem(seed, num_classes, with_bias):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(D, num_classes)).astype(np.float32)
    b = (0.5 * rng.normal(size=num_classes)).astype(np.float32) if with_bias else None
    x = rng.normal(size=(B, D)).astype(np.float32)
    y = rng.integers(0, num_classes, size=B).astype(np.int32)
    return w, b, x, y


# ---------------------------------------------------------------------------------------------------
# sample_rate = 1: the sharded head equals the single-device dense MarginHead.


def dense_loss(layer, y, outputs, losses):
    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, outputs, from_logits=True))


def full_rate_case():
    num_classes = 30  # 4 shards pad it to 32
    problems = {name: problem(index, num_classes, TYPES[name].get("use_bias")) for index, name in enumerate(TYPES)}
    x, y = problems["asoftmax"][2:]
    denses = []
    for name, kwargs in TYPES.items():
        w, b = problems[name][:2]
        dense = MarginHead(num_classes, name=f"dense_{name}", **kwargs)
        dense.build((None, D))
        dense.kernel.assign(w)
        if b is not None:
            dense.bias.assign(b)
        dense.iteration.assign(4)
        denses.append(dense)
    expected = loss_grads(denses, x, y, loss_of=dense_loss)
    for n in MESH_SIZES:
        distribution = model_parallel(n, [f"head_{name}" for name in TYPES])
        heads = []
        for name, kwargs in TYPES.items():
            head = build_head(num_classes, f"head_{name}", distribution, sample_rate=1.0, num_shards=n, seed=0,
                              **kwargs)
            set_weights(head, *problems[name][:2], iteration=4)
            padded = head.num_padded_classes
            assert shard_shapes(head.kernel) == [(padded // n, D)], (n, shard_shapes(head.kernel))
            assert len(head.kernel.value.addressable_shards) == n
            heads.append(head)
        results = loss_grads(heads, put_batch(distribution, x), put_batch(distribution, y), distribution)
        for name, (loss, gx, gw, outputs, _), reference in zip(TYPES, results, expected):
            what = f"{name}, N={n}"
            assert_close(loss, reference[0], f"loss, {what}")
            assert_close(gx, reference[1], f"d/d features, {what}", rtol=1e-4)
            gw_kernel = to_numpy(gw[0]).T  # class-major: back to (d, C_padded)
            assert_close(gw_kernel[:, :num_classes], reference[2][0], f"d/d kernel, {what}", rtol=1e-4)
            np.testing.assert_array_equal(gw_kernel[:, num_classes:], 0.0)
            if len(gw) > 1:
                gw_bias = to_numpy(gw[1])
                assert_close(gw_bias[:num_classes], reference[2][1], f"d/d bias, {what}", rtol=1e-4)
                np.testing.assert_array_equal(gw_bias[num_classes:], 0.0)
            assert_close(to_numpy(outputs)[:, :num_classes], reference[3], f"logits, {what}")


check("full_rate")(full_rate_case)


# ---------------------------------------------------------------------------------------------------
# sample_rate < 1, fixed seed: the sharded head equals the unsharded one with the same num_shards.

SAMPLED_CLASSES, SAMPLED_RATE = 126, 0.375
# (devices, num_shards): one block per device, and two blocks per device.
SAMPLED_CONFIGS = [(1, 1), (2, 2), (4, 4), (2, 4)]


def sampled_case():
    kwargs = TYPES["cosface"]  # with a bias: its sampled entries are gathered too
    w, b, x, y = problem(10, SAMPLED_CLASSES, True)

    def head_kwargs(num_shards):
        return dict(sample_rate=SAMPLED_RATE, num_shards=num_shards, seed=3, **kwargs)

    shard_counts = sorted({num_shards for _, num_shards in SAMPLED_CONFIGS})
    plains = [build_head(SAMPLED_CLASSES, f"head_{s}", **head_kwargs(s)) for s in shard_counts]
    for plain in plains:
        set_weights(plain, w, b, iteration=2)
    expected = dict(zip(shard_counts, loss_grads(plains, x, y)))
    for n in MESH_SIZES:
        configs = [num_shards for devices, num_shards in SAMPLED_CONFIGS if devices == n]
        distribution = model_parallel(n, [f"head_{s}" for s in configs])
        heads = [build_head(SAMPLED_CLASSES, f"head_{s}", distribution, **head_kwargs(s)) for s in configs]
        for head in heads:
            set_weights(head, w, b, iteration=2)
            assert shard_shapes(head.kernel) == [(head.num_padded_classes // n, D)]
            assert shard_shapes(head.bias) == [(head.num_padded_classes // n,)]
        results = loss_grads(heads, put_batch(distribution, x), put_batch(distribution, y), distribution)
        for num_shards, head, got in zip(configs, heads, results):
            reference = expected[num_shards]
            what = f"N={n}, num_shards={num_shards}"
            mask_at = [v.path for v in head.non_trainable_variables].index(f"{head.name}/sampled")
            sampled, expected_sampled = to_numpy(got[4][mask_at]), to_numpy(reference[4][mask_at])
            k = head.sample_size(B)
            assert k < head.block_size and sampled.sum() == num_shards * k, (what, k, sampled.sum())
            np.testing.assert_array_equal(sampled, expected_sampled, err_msg=f"sampled classes, {what}")
            assert_close(got[0], reference[0], f"loss, {what}")
            assert_close(got[1], reference[1], f"d/d features, {what}", rtol=1e-4)
            for index, (actual, wanted) in enumerate(zip(got[2], reference[2])):
                assert_close(actual, wanted, f"d/d weight {index}, {what}", rtol=1e-4)
            assert_close(got[3], reference[3], f"sampled logits, {what}")


check("sampled")(sampled_case)


# ---------------------------------------------------------------------------------------------------
# model.fit under ModelParallel equals model.fit on one device; shard shapes, bytes, the train step's HLO.

FIT_CLASSES, FIT_RATE = 126, 0.375
HLO = {}


def fit_model(num_shards, sample_rate=FIT_RATE):
    features = keras.Input((D_IN,), name="features")
    labels = keras.Input((), dtype="int32", name="labels")
    embedding = keras.layers.Dense(D, name="embed")(features)
    head = PartialFCHead(FIT_CLASSES, loss_type="arcface", scale=16.0, sample_rate=sample_rate,
                         num_shards=num_shards, seed=0, name="head")
    model = keras.Model([features, labels], head(embedding, labels=labels))
    model.compile(optimizer=PartialFCOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), loss=None)
    model.inference = keras.Model(features, head(embedding))  # shares the layers: (B, C) plain logits
    return model, head


def fit_data():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3 * B, D_IN)).astype(np.float32)
    y = rng.integers(0, FIT_CLASSES, size=3 * B).astype(np.int32)
    return x, y


def _jitted(function, depth=0):
    """The `jax.jit` object inside Keras's `model.train_function` (a closure over the jitted `train_step`)."""
    if hasattr(function, "lower"):
        return function
    for cell in getattr(function, "__closure__", None) or ():
        inner = cell.cell_contents
        if callable(inner) and depth < 4:
            found = _jitted(inner, depth + 1)
            if found is not None:
                return found
    return None


def train_step_hlo(model, x, y):
    """The optimised, SPMD-partitioned (per-device) HLO text of the train step `fit` compiled for `model`.

    Lowers Keras's own jitted `train_step` (found in `model.train_function`) again with the state and a
    batch of the same layout; JAX answers that from its compilation cache (milliseconds), so this is the
    module `fit` ran, not a second compilation with other settings.
    """
    step = _jitted(model.train_function)
    assert step is not None, "no jitted train_step in model.train_function"
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )
    distribution = kd.distribution()
    data = ([put_batch(distribution, x[:B]), put_batch(distribution, y[:B])],)
    return step.lower(state, data).compile().as_text()


def fit_case():
    x, y = fit_data()
    for n in MESH_SIZES:
        keras.utils.set_random_seed(0)
        reference, _ = fit_model(n)
        initial = reference.get_weights()
        reference_history = reference.fit([x, y], None, batch_size=B, epochs=1, verbose=0, shuffle=False)
        distribution = model_parallel(n)
        with distribution.scope():
            model, head = fit_model(n)
            model.set_weights(initial)
            padded = head.num_padded_classes
            assert shard_shapes(head.kernel) == [(padded // n, D)], shard_shapes(head.kernel)
            (mask,) = [v for v in model.non_trainable_variables if v.path == "head/sampled"]
            assert shard_shapes(mask) == [(padded // n,)], shard_shapes(mask)
            history = model.fit([x, y], None, batch_size=B, epochs=1, verbose=0, shuffle=False)
            momentum = [v for v in model.optimizer.variables if tuple(v.shape) == (padded, D)]
            assert momentum and all(shard_shapes(v) == [(padded // n, D)] for v in momentum)
            # Parameter bytes held by one device vs the whole model.
            on_device = sum(
                next(s.data.nbytes for s in v.value.addressable_shards if s.device == DEVICE_0)
                for v in model.weights
            )
            total = sum(v.value.nbytes for v in model.weights)
            RESULTS[f"bytes_ratio_N{n}"] = on_device / total
            if n == 2:
                assert on_device <= 0.55 * total, (on_device, total)
            if n > 1:
                HLO[(n, FIT_RATE)] = (train_step_hlo(model, x, y), padded, head.num_shards * head.sample_size(B),
                                      (head.num_shards, head.block_size))
        np.testing.assert_allclose(history.history["loss"], reference_history.history["loss"], rtol=RTOL,
                                   err_msg=f"losses, N={n}")
        for got, expected, variable in zip(model.get_weights(), reference.get_weights(), model.weights):
            assert_close(got, expected, f"{variable.path} after fit, N={n}")
        if n == 4:  # the full plain logits under the layout (128 padded columns): evaluate and predict
            expected_loss = reference.evaluate([x, y], None, batch_size=B, verbose=0)
            expected_logits = reference.inference.predict(x, batch_size=B, verbose=0)
            with distribution.scope():
                assert_close(model.evaluate([x, y], None, batch_size=B, verbose=0), expected_loss, "evaluate")
                logits = model.inference.predict(x, batch_size=B, verbose=0)
            assert logits.shape == (3 * B, FIT_CLASSES)
            assert_close(logits, expected_logits, "predict")
    # The full-rate train step's HLO as well (one step).
    distribution = model_parallel(4)
    with distribution.scope():
        model, head = fit_model(4, sample_rate=1.0)
        model.fit([x[:B], y[:B]], None, batch_size=B, epochs=1, verbose=0)
        HLO[(4, 1.0)] = (train_step_hlo(model, x, y), head.num_padded_classes, head.num_padded_classes,
                         (head.num_shards, head.block_size))


check("fit")(fit_case)


def fit_2d_case():
    """A 2-D mesh (batch 2, model 2): the batch split over "batch", the classes over "model"."""
    x, y = fit_data()
    keras.utils.set_random_seed(0)
    reference, _ = fit_model(2)
    initial = reference.get_weights()
    reference_history = reference.fit([x, y], None, batch_size=B, epochs=1, verbose=0, shuffle=False)
    mesh = kd.DeviceMesh((2, 2), ("batch", "model"), DEVICES[:4])
    layout_map = class_sharding_layout(kd.LayoutMap(mesh), "head", "model")
    distribution = kd.ModelParallel(layout_map=layout_map, batch_dim_name="batch")
    with distribution.scope():
        model, head = fit_model(2)
        model.set_weights(initial)
        assert shard_shapes(head.kernel) == [(FIT_CLASSES // 2, D)]
        assert len(head.kernel.value.addressable_shards) == 4
        history = model.fit([x, y], None, batch_size=B, epochs=1, verbose=0, shuffle=False)
        text = train_step_hlo(model, x, y)
    np.testing.assert_allclose(history.history["loss"], reference_history.history["loss"], rtol=RTOL)
    for got, expected, variable in zip(model.get_weights(), reference.get_weights(), model.weights):
        assert_close(got, expected, f"{variable.path} after fit, 2-D mesh")
    columns = head.num_shards * head.sample_size(B)
    # Each device: B/2 rows (its "batch" half) by K/2 columns (its "model" half); the features need no
    # all-gather (the batch is not split over "model"); the softmax max and sum are all-reduced over "model".
    facts = hlo_facts(text, B // 2, head.num_padded_classes, columns, 2, (head.num_shards, head.block_size))
    RESULTS["hlo_2d"] = facts
    assert not facts["offending"] and facts["local_logits"], facts
    assert facts["reductions"] == ["add", "maximum"], facts


check("fit_2d")(fit_2d_case)


# ---------------------------------------------------------------------------------------------------
# The HLO of the train step: per-device logits, features all-gathered, the softmax max and sum all-reduced.

_SHAPE = re.compile(r"\b(pred|s32|u32|f32|f16|bf16)\[([0-9,]*)\]")


def _computations(text):
    """{name: body} of the computations in an HLO module's text."""
    bodies, name = {}, None
    for line in text.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if header:
            name, bodies[name] = header.group(1), []
        elif name is not None:
            bodies[name].append(line)
    return {key: "\n".join(value) for key, value in bodies.items()}


def hlo_facts(text, batch, num_padded, num_columns, devices, blocks):
    """What the partitioned train step holds.

    `offending`: the shapes no device should hold: a tensor with >= 2 non-unit dimensions one of which is a
    full class dimension (C_padded, or K = num_shards·k_block sampled columns: full logits, a full kernel or
    its gradient), a float vector of C_padded entries, or the scores of every block `(num_shards, C_block)`.
    `local_logits`: a per-device logits shape (B, K/N) exists. `feature_all_gather`: the features (B, d) are
    all-gathered. `reductions`: the reductions of the all-reduces of (B,) float vectors (softmax max, sum).
    """
    full = {num_padded, num_columns}
    offending = set()
    for dtype, dims in _SHAPE.findall(text):
        dims = tuple(int(v) for v in dims.split(",") if v)
        big = [v for v in dims if v > 1]
        if len(big) >= 2 and full & set(big):
            offending.add(f"{dtype}{list(dims)}")
        if dtype == "f32" and (dims == (num_padded,) or (blocks[0] > 1 and dims == tuple(blocks))):
            offending.add(f"{dtype}{list(dims)}")
    local = f"f32[{batch},{num_columns // devices}]"
    computations = _computations(text)
    reductions = set()
    for line in text.splitlines():
        match = re.search(r"= \(?(.*?)\)? all-reduce\(.*to_apply=%?([\w.\-]+)", line)
        if match and f"f32[{batch}]" in match.group(1):
            body = computations.get(match.group(2), "")
            reductions |= {op for op in ("maximum", "add") if f" {op}(" in body}
    gathers = [line for line in text.splitlines() if re.search(rf"= f32\[{batch},{D}\][^ ]* all-gather\(", line)]
    return {
        "offending": sorted(offending),
        "local_logits": local in text,
        "feature_all_gather": bool(gathers),
        "reductions": sorted(reductions),
        "all_gathers": len(re.findall(r" all-gather\(", text)),
        "all_reduces": len(re.findall(r" all-reduce\(", text)),
    }


def hlo_case():
    assert HLO, "the fit check did not record the train steps' HLO"
    for (n, rate), (text, padded, columns, blocks) in sorted(HLO.items()):
        facts = hlo_facts(text, B, padded, columns, n, blocks)
        RESULTS[f"hlo_N{n}_rate{rate}"] = facts
        what = f"N={n}, sample_rate={rate}"
        assert not facts["offending"], (what, facts)
        assert facts["local_logits"], (what, facts)
        assert facts["feature_all_gather"], (what, facts)
        assert facts["reductions"] == ["add", "maximum"], (what, facts)


check("hlo")(hlo_case)


# ---------------------------------------------------------------------------------------------------
# num_shards that the mesh cannot split: a ValueError naming num_shards, before any step.


def expect_num_shards_error(fn, what):
    try:
        fn()
    except ValueError as error:
        assert "num_shards" in str(error), (what, str(error))
        return str(error)
    raise AssertionError(f"no ValueError: {what}")


def bad_mesh_case():
    mesh = kd.DeviceMesh((4,), (AXIS,), DEVICES[:4])
    # The layout helper with the head itself checks at once.
    head = PartialFCHead(126, num_shards=2, name="head")
    message = expect_num_shards_error(lambda: class_sharding_layout(kd.LayoutMap(mesh), head, AXIS), "helper")
    RESULTS["bad_mesh_message"] = message
    # By name, the head checks when it is built (building the model), before fit.
    for n, num_shards in [(4, 6), (2, 3), (4, 1)]:
        distribution = model_parallel(n)

        def build(num_shards=num_shards, distribution=distribution):
            with distribution.scope():
                fit_model(num_shards)

        expect_num_shards_error(build, f"N={n}, num_shards={num_shards}")
    # A hand-written layout sharding the feature axis is refused too.
    layout_map = kd.LayoutMap(mesh)
    layout_map["head/kernel"] = (None, AXIS)
    distribution = kd.ModelParallel(layout_map=layout_map, batch_dim_name=AXIS)
    try:
        build_head(128, "head", distribution, num_shards=4)
    except ValueError as error:
        assert "feature axis" in str(error), str(error)
    else:
        raise AssertionError("feature-axis layout accepted")


check("bad_mesh")(bad_mesh_case)


if __name__ == "__main__":
    run_checks()
    with open(sys.argv[1], "w") as f:
        json.dump({"results": RESULTS, "seconds": SECONDS}, f, indent=1)
