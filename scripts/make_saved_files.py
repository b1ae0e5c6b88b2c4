"""Writes tests/saved_files/: one small `.keras` file per family of sphere_tf's serializable objects, each with an
`.npz` of a fixed input and the saved model's predictions, and `manifest.json` naming the sphere_tf commit that
wrote them. `tests/test_saved_files.py` loads them on every backend, so a change that breaks reading files saved
by an earlier release fails there.

Run on TensorFlow from a clean checkout of the release whose files the test should keep reading (the commit is
recorded; a checkout whose `sphere_tf/` differs from it is refused):

    KERAS_BACKEND=tensorflow python scripts/make_saved_files.py

Regenerate only on purpose (a new public class; the old files stay readable but are replaced by the new
release's): the point of the files is that they were written by old code.
"""

import argparse
import hashlib
import inspect
import json
import os
import subprocess
import sys
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import keras  # noqa: E402
import numpy as np  # noqa: E402

import sphere_tf  # noqa: E402
from sphere_tf import initializers  # noqa: E402
from sphere_tf import layers  # noqa: E402
from sphere_tf import losses  # noqa: E402
from sphere_tf import metrics  # noqa: E402
from sphere_tf import models  # noqa: E402
from sphere_tf import optimizers  # noqa: E402
from sphere_tf import regularizers  # noqa: E402
from sphere_tf import testing  # noqa: E402
from sphere_tf import training  # noqa: E402

OUT = os.path.join(REPO, "tests", "saved_files")
SEED = 0
BATCH = 4

# Registered models built narrower than tests/models/_tiny.py's 1/16: the files are committed (1/16 made 14 MB).
MODEL_WIDTH_MULTIPLIER = 1 / 64
# None: every registered model builds at the sizes below (the test then fails for a new one without a file).
MODELS_NOT_SAVED = {}


# -- the cases: each returns (model, inputs, targets or None); targets get one training step before saving -----


def _rng(name):
    """A generator seeded by the case name, so adding a case changes no other case's data."""
    return np.random.default_rng(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))


def _images(rng, shape):
    return rng.uniform(-1.0, 1.0, (BATCH, *shape)).astype(np.float32)


def _labels(rng, num_classes):
    return rng.integers(0, num_classes, BATCH).astype(np.int32)


def _parallel(inputs, named_layers):
    """A functional model applying each layer to `inputs`, one named output per layer."""
    outputs = {name: layer(inputs) for name, layer in named_layers.items()}
    return keras.Model(inputs, outputs)


def _train_step(model, x, outputs_like):
    """One SGD step on zero targets, so moving statistics, counters and the optimizer state are not initial."""
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    targets = {name: np.zeros(o.shape[1:], np.float32)[None].repeat(BATCH, 0) for name, o in outputs_like.items()}
    model.fit(x, targets, batch_size=BATCH, epochs=1, verbose=0)


def case_decoupled_conv2d(rng):
    inputs = keras.Input((6, 6, 2))
    variants = {
        **{f"magnitude_{m}": layers.DecoupledConv2D(3, 3, magnitude=m, padding="same")
           for m in ("sphere", "ball", "tanh", "linear", "seg", "log", "mix")},
        **{f"angular_{a}": layers.DecoupledConv2D(3, 3, angular=a) for a in ("linear", "sigmoid", "sqcosine")},
        "weighted_linear": layers.DecoupledConv2D(3, 3, weighted="linear", magnitude="linear"),
        **{f"weighted_{w}": layers.DecoupledConv2D(3, 3, weighted=w, magnitude="tanh")
           for w in ("nonlinear", "nonlinear_separate")},
        "learnable": layers.DecoupledConv2D(4, 3, strides=2, angular="sigmoid", learnable_k=True,
                                            learnable_rho=True, use_bias=True, rescale=True, groups=2,
                                            activation="relu"),
    }
    model = _parallel(inputs, variants)
    x = _images(rng, (6, 6, 2))
    _train_step(model, x, model.output)
    return model, x


def case_decoupled_dense(rng):
    inputs = keras.Input((5,))
    variants = {
        **{f"magnitude_{m}": layers.DecoupledDense(3, magnitude=m)
           for m in ("sphere", "ball", "tanh", "linear", "seg", "log", "mix")},
        **{f"angular_{a}": layers.DecoupledDense(3, angular=a) for a in ("linear", "sigmoid", "sqcosine")},
        "weighted_linear": layers.DecoupledDense(3, weighted="linear", magnitude="linear"),
        **{f"weighted_{w}": layers.DecoupledDense(3, weighted=w, magnitude="tanh")
           for w in ("nonlinear", "nonlinear_separate")},
        "learnable": layers.DecoupledDense(3, angular="sigmoid", learnable_k=True, use_bias=True, rescale=True,
                                           alpha=2.0, rho=0.5, activation="tanh"),
    }
    model = _parallel(inputs, variants)
    x = rng.normal(size=(BATCH, 5)).astype(np.float32)
    _train_step(model, x, model.output)
    return model, x


def case_sphere_conv2d(rng):
    inputs = keras.Input((6, 6, 2))
    variants = {
        **{f"angular_{a}": layers.SphereConv2D(3, 3, angular=a) for a in ("linear", "cosine", "sigmoid", "sqcosine")},
        "learnable": layers.SphereConv2D(4, 3, strides=2, padding="same", angular="sigmoid", learnable_k=True,
                                         use_bias=True, rescale=True, groups=2, dilation_rate=1),
    }
    model = _parallel(inputs, variants)
    x = _images(rng, (6, 6, 2))
    _train_step(model, x, model.output)
    return model, x


def case_sphere_dense(rng):
    inputs = keras.Input((5,))
    variants = {
        **{f"angular_{a}": layers.SphereDense(3, angular=a) for a in ("linear", "cosine", "sigmoid", "sqcosine")},
        "learnable": layers.SphereDense(3, angular="sigmoid", learnable_k=True, use_bias=True, rescale=True),
    }
    model = _parallel(inputs, variants)
    x = rng.normal(size=(BATCH, 5)).astype(np.float32)
    _train_step(model, x, model.output)
    return model, x


def case_conv_norm2d(rng):
    inputs = keras.Input((6, 6, 2))
    variants = {
        "default": layers.ConvNorm2D(3, 3),
        "no_affine": layers.ConvNorm2D(3, 3, affine=False, padding="same"),
        "no_batch_norm": layers.ConvNorm2D(3, 1, batch_norm=False, strides=2),
        "momentum": layers.ConvNorm2D(3, 3, momentum=0.5, rampdown_steps=4),
    }
    model = _parallel(inputs, variants)
    x = _images(rng, (6, 6, 2))
    _train_step(model, x, model.output)
    return model, x


def _margin_model(heads, d=4):
    features = keras.Input((d,), name="features")
    labels = keras.Input((), dtype="int32", name="labels")
    outputs = {name: head(features, labels=labels) for name, head in heads.items()}
    return keras.Model({"features": features, "labels": labels}, outputs)


def case_margin_head(rng):
    heads = {
        "lsoftmax": layers.MarginHead(5, loss_type="lsoftmax", margin=2),
        "asoftmax": layers.MarginHead(5, loss_type="asoftmax", margin=4, annealing="sphereface",
                                      label_penalty=regularizers.DataDependentMHE(factor=0.5)),
        "wsoftmax": layers.MarginHead(5, loss_type="wsoftmax", angular="sigmoid", k=0.5, use_bias=True),
        "gasoftmax": layers.MarginHead(5, loss_type="gasoftmax", angular="cosine"),
        "ssoftmax": layers.MarginHead(5, loss_type="ssoftmax", scale=8.0),
        "cosface": layers.MarginHead(5, loss_type="cosface", margin=0.35, scale=16.0),
        "arcface": layers.MarginHead(5, loss_type="arcface", margin=0.5, scale=16.0),
        "combined": layers.MarginHead(5, loss_type="combined", margin=(1.0, 0.3, 0.2), scale=8.0),
    }
    model = _margin_model(heads)
    x = {"features": rng.normal(size=(BATCH, 4)).astype(np.float32), "labels": _labels(rng, 5)}
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss={name: loss for name in heads})
    model.fit(x, {name: x["labels"] for name in heads}, batch_size=BATCH, epochs=1, verbose=0)  # counters at 1
    return model, x


def case_partial_fc_head(rng):
    """Sampled and blocked classes, trained with PartialFCOptimizer (its slot table is saved with the file)."""
    head = layers.PartialFCHead(12, loss_type="arcface", scale=16.0, margin=0.5, sample_rate=0.5, num_shards=2,
                                seed=0)
    model = _margin_model({"logits": head})
    x = {"features": rng.normal(size=(8, 4)).astype(np.float32), "labels": rng.integers(0, 12, 8).astype(np.int32)}
    model.compile(optimizer=optimizers.PartialFCOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)), loss=None)
    model.fit(x, x["labels"], batch_size=BATCH, epochs=1, verbose=0)
    return model, x


def _opt_optimizer():
    return optimizers.OPTOptimizer(keras.optimizers.SGD(0.01, momentum=0.9),
                                   rotation_optimizer=optimizers.CayleySGD(0.05, momentum=0.8))


def case_opt_conv2d(rng):
    inputs = keras.Input((6, 6, 2))
    variants = {
        **{o: layers.OPTConv2D(3, 3, orthogonalization=o, seed=i)
           for i, o in enumerate(("gram_schmidt", "householder", "lowdin", "cayley", "exp", "ogd", "soft"))},
        "options": layers.OPTConv2D(4, 3, strides=2, padding="same", orthogonalization="lowdin", num_blocks=2,
                                    newton_schulz_iters=3, normalize_fixed_kernel=True, use_bias=False, seed=7,
                                    energy_init="mhe", energy_init_steps=2, activation="relu"),
        "learnable_fixed": layers.OPTConv2D(3, 3, learnable_fixed_kernel=True, soft_penalty=0.2, seed=8),
    }
    model = _parallel(inputs, variants)
    x = _images(rng, (6, 6, 2))
    model.compile(optimizer=_opt_optimizer(), loss="mse")
    model.fit(x, {name: np.zeros((BATCH, *o.shape[1:]), np.float32) for name, o in model.output.items()},
              batch_size=BATCH, epochs=1, verbose=0)
    return model, x


def case_opt_dense(rng):
    inputs = keras.Input((6,))
    variants = {
        **{o: layers.OPTDense(4, orthogonalization=o, seed=i)
           for i, o in enumerate(("gram_schmidt", "householder", "lowdin", "cayley", "exp", "ogd", "soft"))},
        "blocks": layers.OPTDense(4, num_blocks=2, share_blocks=True, orthogonalization="cayley", seed=7),
        "stochastic": layers.OPTDense(4, stochastic_dims=3, seed=8),
        "energy": layers.OPTDense(4, energy_init="half_space_mhe", energy_init_steps=2, soft_squared=True,
                                  orthogonalization="soft", seed=9),
    }
    model = _parallel(inputs, variants)
    x = rng.normal(size=(BATCH, 6)).astype(np.float32)
    model.compile(optimizer=_opt_optimizer(), loss="mse")
    model.fit(x, {name: np.zeros((BATCH, *o.shape[1:]), np.float32) for name, o in model.output.items()},
              batch_size=BATCH, epochs=1, verbose=0)
    return model, x


def case_regularizers(rng):
    """Every public weight regularizer on a kernel (keras Dense and sphere_tf layers); their values are stored."""
    inputs = keras.Input((6, 6, 2))
    flat = keras.layers.Flatten()(inputs)
    variants = {
        "mhe": keras.layers.Dense(4, kernel_regularizer=regularizers.MHE(factor=0.1)),
        "mhe_half_space": layers.SphereDense(4, kernel_regularizer=regularizers.MHE(
            factor=0.1, half_space=True, power=1, distance="angular")),
        "mhe_output": layers.DecoupledDense(4, kernel_regularizer=regularizers.MHE(factor=0.1, role="output")),
        "comhe": keras.layers.Dense(8, kernel_regularizer=regularizers.CoMHE(factor=0.1, projection_dim=3,
                                                                               num_projections=2)),
        "orthonormal": keras.layers.Dense(4, kernel_regularizer=regularizers.Orthogonality(1e-2)),
        "orthogonal": keras.layers.Dense(4, kernel_regularizer=regularizers.Orthogonality(
            1e-2, mode="orthogonal", normalized=True)),
        "srip": keras.layers.Dense(4, kernel_regularizer=regularizers.SRIP(0.01, power_iterations=2)),
    }
    outputs = {name: layer(flat) for name, layer in variants.items()}
    outputs["conv_mhe"] = keras.layers.Flatten()(layers.SphereConv2D(
        3, 3, kernel_regularizer=regularizers.MHE(factor=0.1), name="conv_mhe_conv")(inputs))
    model = keras.Model(inputs, outputs)
    x = _images(rng, (6, 6, 2))
    return model, x


def case_losses_metrics(rng):
    """Each public loss and metric class in a compiled model: its compile config and the evaluated values."""
    inputs = keras.Input((6,), name="features")
    cosines = {name: layers.SphereDense(5, name=name)(inputs)
               for name in ("cosface", "arcface", "combined", "sphereface", "ga_softmax")}
    logits = {name: keras.layers.Dense(5, name=name)(inputs) for name in ("hinge", "crossentropy")}
    model = keras.Model(inputs, {**cosines, **logits})
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss={
            "cosface": losses.CosFaceLoss(scale=8.0, margin=0.3),
            "arcface": losses.ArcFaceLoss(scale=8.0, margin=0.4),
            "combined": losses.CombinedMarginLoss(scale=8.0, margin=(1.0, 0.3, 0.1)),
            "sphereface": losses.SphereFaceLoss(margin=3, lam=1.0),
            "ga_softmax": losses.GASoftmaxLoss(margin=2, angular="sigmoid", k=0.5, scale=4.0),
            "hinge": losses.SparseHinge(norm="l2"),
            "crossentropy": losses.SparseCrossentropy(label_smoothing=0.1),
        },
        metrics={"cosface": [metrics.AngularFisherScore(5)], "hinge": [metrics.MinInterclassAngle(5)]},
    )
    x = rng.normal(size=(8, 6)).astype(np.float32)
    y = rng.integers(0, 5, 8).astype(np.int32)
    targets = {name: y for name in model.output}
    model.fit(x, targets, batch_size=8, epochs=1, verbose=0)  # builds the metrics and Adam's slots
    return model, x, targets


def case_initializers(rng):
    """The public initializers in layer configs (the weights come from the file; the configs must still load)."""
    inputs = keras.Input((5,))
    variants = {
        "mean_shifted": keras.layers.Dense(3, kernel_initializer=initializers.MeanShifted(
            0.1, base=keras.initializers.HeNormal(seed=1))),
        "unit_norm": layers.SphereDense(3, kernel_initializer=initializers.UnitNormNeurons(
            base=keras.initializers.GlorotUniform(seed=2))),
        "unit_norm_default": layers.DecoupledDense(3, kernel_initializer=initializers.UnitNormNeurons(seed=3)),
    }
    model = _parallel(inputs, variants)
    x = rng.normal(size=(BATCH, 5)).astype(np.float32)
    return model, x


def case_pixel_normalization(rng):
    """Every built-in normalisation as a model's first layer, and a runner-built model (its layers after it)."""
    inputs = keras.Input((4, 4, 3))
    variants = {
        "default": layers.PixelNormalization(),
        "mean": layers.PixelNormalization("mean_subtraction", channel_mean=[120.0, 110.0, 100.0]),
        "unit": layers.PixelNormalization("unit_interval"),
        "none": layers.PixelNormalization("none"),
    }
    model = _parallel(inputs, variants)
    return model, rng.uniform(0.0, 255.0, (BATCH, 4, 4, 3)).astype("float32")


def case_runner_model(rng):
    """A model as the runner builds it: `models.with_pixel_normalization` over a small CNN with a margin head."""
    base = models.create_model("small_cnn", input_shape=(8, 8, 1), num_classes=3, widths=(4,), convs_per_stage=1,
                               dense_units=4, head={"layer": "margin", "loss_type": "cosface"})
    model = models.with_pixel_normalization(base, "centered_128")
    x = {"images": rng.uniform(0.0, 255.0, (BATCH, 8, 8, 1)).astype("float32"), "labels": _labels(rng, 3)}
    return model, x


def case_sphere_model(rng):
    """SphereModel (functional), trained one step with weight projection on every step."""
    inputs = keras.Input((6, 6, 2))
    h = layers.SphereConv2D(3, 3, name="conv")(inputs)
    h = keras.layers.Flatten()(h)
    out = layers.DecoupledDense(3, name="dense")(h)
    model = training.SphereModel(inputs, out, weight_projection_every=1, projection_scale=2.0,
                                 weighted_gradients=True)
    x = _images(rng, (6, 6, 2))
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    model.fit(x, np.zeros((BATCH, 3), np.float32), batch_size=BATCH, epochs=1, verbose=0)
    return model, x


def case_sphere_sequential(rng):
    model = training.SphereSequential(
        [keras.Input((5,)), layers.SphereDense(4, name="sphere"), layers.DecoupledDense(3, name="decoupled")],
        weight_projection_every=2,
    )
    x = rng.normal(size=(BATCH, 5)).astype(np.float32)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    model.fit(x, np.zeros((BATCH, 3), np.float32), batch_size=BATCH, epochs=1, verbose=0)
    return model, x


def case_folded_batch_norm(rng):
    """`sphere_tf.export.fold_batch_norm` output: the folded operator (rescale) and FoldedBatchNormalization."""
    from sphere_tf import export  # noqa: PLC0415  (TensorFlow-only subpackage)

    inputs = keras.Input((6, 6, 2))
    h = layers.SphereConv2D(3, 3, name="conv")(inputs)
    h = keras.layers.BatchNormalization(name="bn")(h)
    model = keras.Model(inputs, keras.layers.Flatten()(h))
    x = _images(rng, (6, 6, 2))
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    model.fit(x, np.zeros((BATCH, 48), np.float32), batch_size=BATCH, epochs=1, verbose=0)
    return export.fold_batch_norm(model), x


def case_fgsm_adversarial_model(rng):
    """`sphere_tf.adversarial.adversarial_wrap` of a runner-style model (raw pixels in, ε = 8 pixels)."""
    from sphere_tf import adversarial  # noqa: PLC0415  (TensorFlow-only subpackage)

    base = models.create_model("small_cnn", input_shape=(8, 8, 1), num_classes=3, widths=(4,), convs_per_stage=1,
                               dense_units=4, normalization="centered_128")
    model = adversarial.adversarial_wrap(base, epsilon=8.0, mix=0.5)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy(True))
    x = rng.uniform(0.0, 255.0, (BATCH, 8, 8, 1)).astype("float32")
    model.fit(x, _labels(rng, 3), batch_size=BATCH, epochs=1, verbose=0)
    return model, x


# Cases only TensorFlow can load, with the reason (kept in the manifest).
TENSORFLOW_ONLY = {
    "folded_batch_norm": "FoldedBatchNormalization is registered by sphere_tf.export, which needs TensorFlow",
    "fgsm_adversarial_model": "FGSMAdversarialModel is registered by sphere_tf.adversarial (cleverhans, TensorFlow)",
}
# Modules a reader imports before loading, beyond `import sphere_tf` (which registers the rest).
IMPORTS = {"folded_batch_norm": ["sphere_tf.export"], "fgsm_adversarial_model": ["sphere_tf.adversarial"]}


def model_case(name):
    """The registered model `name`, built small: `MODEL_WIDTH_MULTIPLIER` and the smallest input side of 8, 16
    or the builder's default (capped at 32, like tests/models/_tiny.py) that its trunk accepts."""
    parameter = inspect.signature(models.get_model_fn(name)).parameters.get("input_shape")
    default = None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default
    channels = 3 if default is None else int(default[-1])
    largest = 32 if default is None else min(int(default[0]), 32)

    def case(rng):
        errors = []
        for side in sorted({8, 16, largest}):
            if side > largest:
                continue
            shape = (side, side, channels)
            keras.utils.set_random_seed(SEED)
            try:  # too small an input fails in the build (a stride or pooling leaves no pixels) or the call
                model = models.create_model(name, input_shape=shape, num_classes=3,
                                            width_multiplier=MODEL_WIDTH_MULTIPLIER)
                images = _images(rng, shape)
                x = models.pack_inputs(images, _labels(rng, 3)) if models.needs_labels(model) else images
                model.predict(x, verbose=0)
            except (ValueError, TypeError) as error:
                errors.append(f"{side}: {error}")
                continue
            return model, x
        raise RuntimeError(f"{name} builds at no side of 8, 16, {largest}: {errors}")

    return case


CASES = {
    "decoupled_conv2d": case_decoupled_conv2d,
    "decoupled_dense": case_decoupled_dense,
    "sphere_conv2d": case_sphere_conv2d,
    "sphere_dense": case_sphere_dense,
    "conv_norm2d": case_conv_norm2d,
    "margin_head": case_margin_head,
    "partial_fc_head": case_partial_fc_head,
    "opt_conv2d": case_opt_conv2d,
    "opt_dense": case_opt_dense,
    "regularizers": case_regularizers,
    "losses_metrics": case_losses_metrics,
    "initializers": case_initializers,
    "pixel_normalization": case_pixel_normalization,
    "runner_model": case_runner_model,
    "sphere_model": case_sphere_model,
    "sphere_sequential": case_sphere_sequential,
    "folded_batch_norm": case_folded_batch_norm,
    "fgsm_adversarial_model": case_fgsm_adversarial_model,
}


# -- writing ------------------------------------------------------------------------------------------------------


def _flat(prefix, value):
    """npz entries of an array, list or dict: `prefix`, `prefix.0`, `prefix.name`."""
    if isinstance(value, dict):
        return {f"{prefix}.{k}": np.asarray(v) for k, v in value.items()}, "dict"
    if isinstance(value, (list, tuple)):
        return {f"{prefix}.{i}": np.asarray(v) for i, v in enumerate(value)}, "list"
    return {prefix: np.asarray(value)}, "array"


def _deflate(path):
    """Recompresses the archive Keras wrote (stored, uncompressed) with deflate, members unchanged: HDF5 keeps a
    few KB of mostly empty header per weight, so a deep model's file shrinks about 3-7 times. `load_model`
    reads either kind of zip."""
    with zipfile.ZipFile(path) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for info, data in members:
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)


def _commit():
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "HEAD"), git("status", "--porcelain", "--", "sphere_tf")


def write_case(name, build, rng):
    keras.utils.set_random_seed(SEED)
    built = build(rng)
    model, x = built[:2]
    targets = built[2] if len(built) > 2 else None
    path = os.path.join(OUT, f"{name}.keras")
    model.save(path, include_optimizer=True)
    _deflate(path)
    prediction = model.predict(x, batch_size=BATCH, verbose=0)
    arrays, input_kind = _flat("x", x)
    outputs, output_kind = _flat("y", prediction)
    arrays.update({k: v.astype(np.float32) for k, v in outputs.items()})
    entry = {"file": f"{name}.keras", "data": f"{name}.npz", "inputs": input_kind, "outputs": output_kind,
             "model_class": keras.saving.get_registered_name(type(model))}
    if targets is not None:
        flat_targets, entry["targets"] = _flat("t", targets)
        arrays.update(flat_targets)
        values = model.evaluate(x, targets, batch_size=len(next(iter(flat_targets.values()))), verbose=0,
                                return_dict=True)
        entry["evaluate"] = sorted(values)
        arrays.update({f"evaluate.{k}": np.float32(v) for k, v in values.items()})
    # Weight penalties only (`model.losses` also holds the last training call's add_loss terms).
    regularization = [keras.ops.convert_to_numpy(v.regularizer(v)) for v in model.trainable_weights
                      if getattr(v, "regularizer", None) is not None]
    if regularization:
        arrays["regularization"] = np.asarray(regularization, np.float32)
    if getattr(model, "optimizer", None) is not None and model.optimizer.built:
        arrays["optimizer_iterations"] = np.int64(keras.ops.convert_to_numpy(model.optimizer.iterations))
    np.savez(os.path.join(OUT, f"{name}.npz"), **arrays)
    with zipfile.ZipFile(path) as archive:
        entry["classes"] = sorted(testing.registered_names(json.loads(archive.read("config.json"))))
    if name in TENSORFLOW_ONLY:
        entry["tensorflow_only"] = TENSORFLOW_ONLY[name]
    if name in IMPORTS:
        entry["imports"] = IMPORTS[name]
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allow-dirty", action="store_true",
                        help="write even when sphere_tf/ differs from HEAD (the manifest then says so)")
    parser.add_argument("--only", nargs="*", help="case names to rewrite (default: all)")
    args = parser.parse_args()
    if keras.backend.backend() != "tensorflow":
        sys.exit("make_saved_files: run with KERAS_BACKEND=tensorflow (the files are the TensorFlow release's)")
    __import__("tensorflow").get_logger().setLevel("ERROR")  # one tf.function per case: retracing is expected
    commit, dirty = _commit()
    if dirty and not args.allow_dirty:
        sys.exit(f"make_saved_files: sphere_tf/ differs from {commit}; commit first (or --allow-dirty):\n{dirty}")
    os.makedirs(OUT, exist_ok=True)
    cases = dict(CASES)
    cases.update({f"model_{name}": model_case(name) for name in models.list_models() if name not in MODELS_NOT_SAVED})
    manifest_path = os.path.join(OUT, "manifest.json")
    entries = {}
    stamp = commit + ("-dirty" if dirty else "")
    if args.only and os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            entries = {e["file"][: -len(".keras")]: e for e in json.load(f)["files"]}
    for name, build in cases.items():
        if args.only and name not in args.only:
            continue
        # Each file names the commit that wrote it: files added later (`--only`) for new classes are newer.
        entries[name] = {**write_case(name, build, _rng(name)), "sphere_tf_commit": stamp}
        print(f"{name}: {', '.join(entries[name]['classes']) or '(keras classes only)'}", flush=True)
    manifest = {
        "sphere_tf_version": sphere_tf.__version__,
        "keras_version": keras.__version__,
        "backend": "tensorflow",
        "tensorflow_version": __import__("tensorflow").__version__,
        "models_not_saved": MODELS_NOT_SAVED,
        "files": [entries[name] for name in sorted(entries)],
    }
    with open(manifest_path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
