"""CNN-9 train-step and forward cost of the operator layers on any Keras backend, as ratios to Conv2D.

One command for every backend: it runs on the backend in `KERAS_BACKEND` (TensorFlow, JAX, PyTorch) and needs
Keras and that backend's framework only, so it also runs on a GPU host given this source tree and the Keras
wheel (`bench/gpu/run.sh`), and on CPU with small shapes (CI runs it that way through tests/bench). The network
is SphereNet's CNN-9 (3 stages × 3 conv 3×3 with 64/96/128 filters, BN, ReLU, max-pool, dense 256, 10 classes;
`bench.networks.cnn9`) with a different convolution per case (ConvNorm2D and OPTConv2D included).

Trainers (`--trainers`), each timed against Conv2D under the same trainer:
* `keras`: what a user gets, `model.compile(...)` with its defaults (`jit_compile="auto"`: XLA on JAX, eager
  on PyTorch, a `tf.function` without XLA on a TensorFlow CPU host) and `model.train_on_batch`; forward is
  `model.predict_on_batch`.
* `keras_jit` / `keras_eager`: the same with `jit_compile=True` (PyTorch: `torch.compile` of the step) / False.
* `stateless`: JAX, one `jax.jit` train step over Keras's stateless API (`model.stateless_call`, the
  optimizer's `stateless_apply`), buffers donated; PyTorch, the eager Keras model under `torch.autograd`.

Timing: every case is built and compiled first (compile time recorded: the first call, tracing and compilation
included), then the cases are timed round-robin, `--steps` calls of a case per round, finished with a device
sync, so drift hits every case alike; the median over rounds is reported, as seconds per step, images/s and the
ratio to `conv2d` of the same trainer, batch and dtype. `--results_file` writes one JSON line per row, with the
backend, device and library versions.

    KERAS_BACKEND=torch python -m bench.bench_backends --trainers=keras,keras_jit --batch_sizes=128 \
        --dtypes=float32 --results_file=bench/results/cpu/backends-torch.jsonl
"""

import json
import os
import platform
import re
import statistics
import time

from absl import app
from absl import flags

import contextlib

import keras
import numpy as np

from bench import networks
from sphere_tf import layers as sphere_layers
from sphere_tf.ops import acceleration

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "cases", ["conv2d", "sphere_cosine", "sphere_linear", "tanh_cosine"],
    "Convolutions to compare; a ':reference' suffix traces that case on the keras.ops reference path "
    "(sphere_tf.ops.set_acceleration(False)) instead of the backend's accelerator.",
)
flags.DEFINE_list("trainers", None, "keras, keras_jit, keras_eager, stateless (JAX and PyTorch); default: "
                  "TensorFlow keras,keras_jit; JAX stateless,keras; PyTorch keras,keras_jit.")
flags.DEFINE_list("batch_sizes", ["128", "512"], "Batch sizes.")
flags.DEFINE_list("dtypes", ["float32", "mixed_bfloat16"], "Keras dtype policies.")
flags.DEFINE_list("modes", ["train", "forward"], "What to time.")
flags.DEFINE_list("forward_batch_sizes", None, "Batch sizes of the forward timing (default: --batch_sizes).")
flags.DEFINE_list("widths", ["64", "96", "128"], "Filters of the three stages.")
flags.DEFINE_integer("image_size", 32, "Square input size (3 channels; the readme network: 28, 1 channel).")
flags.DEFINE_enum("network", "cnn9", ["cnn9", "readme", "layer"],
                  "cnn9: SphereNet's CNN-9 with every conv replaced by the case's; readme: the README's operator "
                  "example (cases conv2d, its Conv2D twin, and readme: DecoupledConv2D tanh + cosine then a strided "
                  "SphereConv2D linear); layer: one CNN-9 layer alone (the case's conv + BN + ReLU on "
                  "--image_size² × --layer_channels inputs), a per-layer profile.")
flags.DEFINE_list("layer_channels", ["64", "64"], "--network=layer: input channels and filters.")
flags.DEFINE_integer("steps", 10, "Calls of a case per round.")
flags.DEFINE_integer("rounds", 5, "Timed rounds.")
flags.DEFINE_integer("warmup", 2, "Untimed calls per case after compilation.")
flags.DEFINE_string("results_file", None, "Also write the JSON lines here.")
flags.DEFINE_bool("torch_static_shapes", False,
                  "PyTorch keras_jit: compile every shape statically (torch._dynamo automatic_dynamic_shapes off). "
                  "Inductor (PyTorch 2.14) fails on the README model once another model was compiled in the same "
                  "process ('cannot determine truth value of Relational'), on the reference path too.")
flags.DEFINE_string("hlo_dir", None, "JAX, trainer 'stateless': write the optimized HLO of each train step here "
                    "(fusion analysis).")

BASELINE = "conv2d"


def _opt_conv(filters, **kwargs):
    # Without a bias, as the Conv2D baseline (BatchNormalization follows every conv): the cost compared is the
    # orthogonalisation's alone, not also a bias add and its gradient's reduction over N·H·W.
    return sphere_layers.OPTConv2D(filters, 3, padding="same", use_bias=False, **kwargs)


# The README's operator example and its Conv2D twin (`--network=readme`): (first conv, strided second conv).
README_CASES = {
    "conv2d": (lambda f: keras.layers.Conv2D(f, 3, padding="same"),
               lambda f: keras.layers.Conv2D(f, 3, strides=2, padding="same")),
    "readme": (lambda f: sphere_layers.DecoupledConv2D(f, 3, padding="same", magnitude="tanh", angular="cosine"),
               lambda f: sphere_layers.SphereConv2D(f, 3, strides=2, padding="same", angular="linear")),
}
CASES = {
    "conv2d": lambda f: keras.layers.Conv2D(f, 3, padding="same", use_bias=False),
    "sphere_cosine": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="cosine"),
    "sphere_linear": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="linear"),
    "tanh_cosine": lambda f: sphere_layers.DecoupledConv2D(f, 3, padding="same", magnitude="tanh",
                                                           angular="cosine"),
    "linear_cosine": lambda f: sphere_layers.DecoupledConv2D(f, 3, padding="same", magnitude="linear",
                                                             angular="cosine"),
    # ConvNorm's own normalisation only (`batch_norm=False`): CNN-9 puts a BatchNormalization after every conv.
    "conv_norm": lambda f: sphere_layers.ConvNorm2D(f, 3, padding="same", batch_norm=False),
    # Without its affine depthwise conv: what that conv costs (docs/performance.md, "ConvNorm2D on JAX").
    "conv_norm_no_affine": lambda f: sphere_layers.ConvNorm2D(f, 3, padding="same", batch_norm=False, affine=False),
    # Gram-Schmidt, the default until Cayley took its place; `opt` keeps its figures comparable across releases.
    "opt": lambda f: _opt_conv(f, orthogonalization="gram_schmidt"),
    # The other orthogonalisations (docs/opt.md, "Cost of each orthogonalisation"). OGD is
    # not a case: its cost is its optimizer's Cayley step (`OPTOptimizer`), which this trainer does not run.
    "opt_householder": lambda f: _opt_conv(f, orthogonalization="householder"),
    "opt_lowdin": lambda f: _opt_conv(f, orthogonalization="lowdin"),
    "opt_lowdin_newton_schulz": lambda f: _opt_conv(f, orthogonalization="lowdin", newton_schulz_iters=5),
    "opt_cayley": lambda f: _opt_conv(f, orthogonalization="cayley"),
    "opt_exp": lambda f: _opt_conv(f, orthogonalization="exp"),
}
DEFAULT_TRAINERS = {"tensorflow": ["keras", "keras_jit"], "jax": ["stateless", "keras"],
                    "torch": ["keras", "keras_jit"]}
KERAS_TRAINERS = {"keras": "auto", "keras_jit": True, "keras_eager": False}


def _device():
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        dev = jax.devices()[0]
        return f"{dev.platform}:{getattr(dev, 'device_kind', dev)}"
    if backend == "torch":
        import torch

        return f"cuda:{torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "cpu"
    return backend


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def environment():
    env = {"backend": keras.backend.backend(), "device": _device(), "keras": keras.__version__,
           "machine": platform.machine(), "cpu_count": os.cpu_count(), "cpu": _cpu_model()}
    if env["backend"] == "jax":
        import jax

        env["jax"] = jax.__version__
    if env["backend"] == "torch":
        import torch

        env["torch"] = torch.__version__
    if env["backend"] == "tensorflow":
        import tensorflow as tf

        env["tensorflow"] = tf.__version__
    return env


class _JaxCase:
    """A jitted train step and forward pass of one model over Keras's stateless API."""

    def __init__(self, model, x, y):
        import jax

        self.jax = jax
        self.model = model
        self.optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        self.optimizer.build(model.trainable_variables)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.x, self.y = x, y

        def train_step(state, x, y):
            trainable, non_trainable, opt_vars = state

            def loss_of(trainable):
                logits, new_non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
                return loss_fn(y, logits), new_non_trainable

            (loss, new_non_trainable), grads = jax.value_and_grad(loss_of, has_aux=True)(trainable)
            new_trainable, new_opt_vars = self.optimizer.stateless_apply(opt_vars, grads, trainable)
            return (new_trainable, new_non_trainable, new_opt_vars), loss

        def forward(trainable, non_trainable, x):
            return model.stateless_call(trainable, non_trainable, x, training=False)[0]

        self.train_step = jax.jit(train_step, donate_argnums=0)
        self.forward_fn = jax.jit(forward)
        self.state = ([v.value for v in model.trainable_variables], [v.value for v in model.non_trainable_variables],
                      [v.value for v in self.optimizer.variables])

    def compile_train(self):
        start = time.perf_counter()
        self.state, loss = self.train_step(self.state, self.x, self.y)
        self.jax.block_until_ready(loss)
        return time.perf_counter() - start

    def compile_forward(self):
        start = time.perf_counter()
        self.jax.block_until_ready(self.forward_fn(self.state[0], self.state[1], self.x))
        return time.perf_counter() - start

    def run_train(self, steps):
        loss = None
        for _ in range(steps):
            self.state, loss = self.train_step(self.state, self.x, self.y)
        self.jax.block_until_ready(loss)
        return None if loss is None else float(loss)

    def run_forward(self, steps):
        out = None
        for _ in range(steps):
            out = self.forward_fn(self.state[0], self.state[1], self.x)
        self.jax.block_until_ready(out)

    def optimized_hlo(self):
        return self.train_step.lower(self.state, self.x, self.y).compile().as_text()


class _FirstCallCompiles:
    """A case whose first call compiles (or, eager, warms up): the compile time is that call's."""

    def _sync(self):
        if keras.backend.backend() == "torch":
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()

    def compile_train(self):
        start = time.perf_counter()
        self.run_train(1)
        return time.perf_counter() - start

    def compile_forward(self):
        start = time.perf_counter()
        self.run_forward(1)
        return time.perf_counter() - start


class _TorchCase(_FirstCallCompiles):
    """The eager Keras model with a `torch.autograd` train step (Keras's own PyTorch trainer does the same)."""

    def __init__(self, model, x, y):
        import torch

        self.torch = torch
        self.model = model
        self.optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.x, self.y = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)

    def _step(self):
        logits = self.model(self.x, training=True)
        loss = self.loss_fn(self.y, logits)
        self.model.zero_grad()
        loss.backward()
        trainable = self.model.trainable_variables
        self.optimizer.apply([v.value.grad for v in trainable], trainable)
        return loss

    def run_train(self, steps):
        loss = None
        for _ in range(steps):
            loss = self._step()
        self._sync()
        return None if loss is None else float(loss.detach().cpu())

    def run_forward(self, steps):
        with self.torch.no_grad():
            for _ in range(steps):
                self.model(self.x, training=False)
        self._sync()


class _KerasTrainerCase(_FirstCallCompiles):
    """`model.compile(...)` and `model.train_on_batch` / `predict_on_batch`: the step a user's `fit` runs."""

    def __init__(self, model, x, y, jit_compile):
        self.model = model
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit_compile)
        self.jit_compile = model.jit_compile  # "auto" resolved by Keras
        self.x, self.y = x, y

    def run_train(self, steps):
        loss = None
        for _ in range(steps):
            loss = self.model.train_on_batch(self.x, self.y)  # a Python float: the step has finished
        self._sync()
        return loss

    def run_forward(self, steps):
        for _ in range(steps):
            self.model.predict_on_batch(self.x)
        self._sync()


@contextlib.contextmanager
def traced_as(case_name):
    """The hot-path switches a case is traced (compiled) under: ':reference' turns the accelerator off."""
    reference = case_name.endswith(":reference")
    if reference:
        acceleration.set_acceleration(False)
    try:
        yield
    finally:
        if reference:
            acceleration.set_acceleration(True)


def _make_case(name, batch_size, policy, trainer="stateless"):
    base_name, _, variant = name.partition(":")
    known = README_CASES if FLAGS.network == "readme" else CASES
    if base_name not in known or variant not in ("", "reference"):
        raise ValueError(f"Unknown case {name!r} of --network={FLAGS.network}: one of {sorted(known)}, "
                         "optionally with ':reference'.")
    keras.mixed_precision.set_global_policy(policy)
    try:
        keras.utils.set_random_seed(0)
        if FLAGS.network == "readme":
            channels = 1
            model = networks.readme_model(*README_CASES[base_name], input_shape=(FLAGS.image_size,) * 2 + (1,))
        elif FLAGS.network == "layer":
            channels, filters = (int(c) for c in FLAGS.layer_channels)
            model = networks.single_layer(CASES[base_name], input_shape=(FLAGS.image_size, FLAGS.image_size,
                                                                         channels), filters=filters)
        else:
            channels = 3
            model = networks.cnn9(CASES[base_name], input_shape=(FLAGS.image_size, FLAGS.image_size, 3),
                                  widths=[int(w) for w in FLAGS.widths], output_dtype="float32")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch_size, FLAGS.image_size, FLAGS.image_size, channels)).astype(np.float32)
    y = rng.integers(0, 10, batch_size).astype(np.int32)
    backend = keras.backend.backend()
    if trainer in KERAS_TRAINERS:
        return _KerasTrainerCase(model, x, y, KERAS_TRAINERS[trainer])
    if trainer != "stateless":
        raise ValueError(f"Unknown trainer {trainer!r}: one of {sorted(KERAS_TRAINERS) + ['stateless']}.")
    if backend == "jax":
        return _JaxCase(model, x, y)
    if backend == "torch":
        return _TorchCase(model, x, y)
    raise ValueError(f"The stateless trainer runs on the jax and torch backends; KERAS_BACKEND={backend!r} "
                     f"takes --trainers={','.join(KERAS_TRAINERS)}")


def _run_traced_as(name, run):
    def traced_run(steps):
        with traced_as(name):
            return run(steps)

    return traced_run


def measure(mode, batch_size, policy, trainer="stateless"):
    """One row per case: median seconds per step over the rounds, images/s, compile seconds, ratio to conv2d.

    A case whose model fails to build or compile (a compiler's bug, such as Inductor's on some shapes) gets a row
    with its `error` and no timing, and the others are timed; the baseline failing leaves every ratio undefined.
    """
    names = [BASELINE] + [c for c in FLAGS.cases if c != BASELINE]
    cases, compile_s, errors = {}, {}, {}
    for name in names:
        try:
            case = _make_case(name, batch_size, policy, trainer)
            with traced_as(name):  # JAX traces on the first call (and on `lower`); PyTorch on every call
                compile_s[name] = case.compile_train() if mode == "train" else case.compile_forward()
        except ValueError as error:
            if "Unknown" in str(error):
                raise  # a flag error, not a compiler's
            errors[name] = f"{type(error).__name__}: {error}"
            continue
        except Exception as error:  # noqa: BLE001  (recorded in the results, named, and the run goes on)
            # The innermost error a wrapper (Keras's layer-call message) names, without its terminal colours.
            lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
            named = [line for line in lines if re.search(r"\w+(Error|Exception): ", line)]
            errors[name] = f"{type(error).__name__}: {(named or lines or [''])[-1]}"
            continue
        # The hand-written `jax.jit` step's HLO (`--trainers=stateless`); Keras's trainer compiles its own step.
        if mode == "train" and FLAGS.hlo_dir and isinstance(case, _JaxCase):
            os.makedirs(FLAGS.hlo_dir, exist_ok=True)
            path = os.path.join(FLAGS.hlo_dir, f"train_{name.replace(':', '-')}_b{batch_size}_{policy}.hlo.txt")
            with open(path, "w") as f:
                f.write(case.optimized_hlo())
        run = case.run_train if mode == "train" else case.run_forward
        run = _run_traced_as(name, run)  # PyTorch (and an eager Keras step) traces on every call
        run(FLAGS.warmup)
        cases[name] = (case, run)
    times = {name: [] for name in cases}
    for _ in range(FLAGS.rounds):
        for name, (_, run) in cases.items():
            start = time.perf_counter()
            run(FLAGS.steps)
            times[name].append((time.perf_counter() - start) / FLAGS.steps)
    base = statistics.median(times[BASELINE]) if BASELINE in times else None
    rows = []
    for name in names:
        row = {"mode": mode, "case": name, "batch_size": batch_size, "dtype_policy": policy, "trainer": trainer,
               "network": FLAGS.network, "image_size": FLAGS.image_size}
        if FLAGS.network == "layer":
            row["layer_channels"] = [int(c) for c in FLAGS.layer_channels]
        if name in errors:
            rows.append(dict(row, error=errors[name]))
            continue
        med = statistics.median(times[name])
        rows.append(dict(
            row,
            jit_compile=getattr(cases[name][0], "jit_compile", trainer == "stateless" and
                                keras.backend.backend() == "jax"),
            median_step_s=med, images_per_s=batch_size / med, compile_s=compile_s[name],
            ratio_to_conv2d=None if base is None else med / base, min_step_s=min(times[name]),
            max_step_s=max(times[name]),
        ))
    return rows


def main(argv):
    del argv
    if FLAGS.torch_static_shapes and keras.backend.backend() == "torch":
        import torch._dynamo

        torch._dynamo.config.automatic_dynamic_shapes = False
        torch._dynamo.config.cache_size_limit = 64  # one graph per layer shape
    env = environment()
    print(json.dumps({"environment": env}))
    rows = []
    forward_batches = FLAGS.forward_batch_sizes or FLAGS.batch_sizes
    trainers = FLAGS.trainers or DEFAULT_TRAINERS[env["backend"]]
    for trainer in trainers:
        for policy in FLAGS.dtypes:
            for mode in FLAGS.modes:
                for batch in (FLAGS.batch_sizes if mode == "train" else forward_batches):
                    for row in measure(mode, int(batch), policy, trainer):
                        row.update(env)
                        rows.append(row)
                        print(json.dumps(row, sort_keys=True), flush=True)
    if FLAGS.results_file:
        with open(FLAGS.results_file, "w") as f:
            f.write("\n".join(json.dumps(r, sort_keys=True) for r in rows) + "\n")
    _print_table(rows)


def _print_table(rows):
    print("\n| trainer | mode | batch | dtype | case | ms/step | images/s | compile s | ratio to Conv2D |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        prefix = f"| {r['trainer']} | {r['mode']} | {r['batch_size']} | {r['dtype_policy']} | {r['case']} "
        if "error" in r:
            print(prefix + f"| failed: {r['error'][:120]} | | | |")
            continue
        ratio = "n/a" if r["ratio_to_conv2d"] is None else f"{r['ratio_to_conv2d']:.2f}"
        print(prefix + f"| {1e3 * r['median_step_s']:.2f} | {r['images_per_s']:.0f} | {r['compile_s']:.1f} | {ratio} |")


if __name__ == "__main__":
    app.run(main)
