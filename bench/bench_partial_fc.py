"""The Partial FC head alone: dense `MarginHead` vs `PartialFCHead` (r = 0.1, r = 1), step time and memory.

One train step of the head alone: features `(B, d)` (synthetic identities, `bench.synthetic_identities`) →
head → loss (the batch mean of the margin softmax cross-entropy) → gradients → SGD(momentum 0.9) update; the
sampled heads use `PartialFCOptimizer(SGD)`, which restores the unsampled columns of the kernel and of its
momentum. Defaults: d = 512, B = 256, float32, ArcFace, C = 10^5 and 10^6.

Cases (`--cases`): `dense` (MarginHead), `pfc_r<rate>` (PartialFCHead, sample_rate=<rate>),
`sharded<N>_r<rate>` (JAX: the PartialFCHead with its classes split over N logical CPU devices by
`keras.distribution.ModelParallel` and `class_sharding_layout`, num_shards=N; JAX rows add the largest
per-device parameter + optimizer-state bytes, measured from the arrays' shards), and diagnostic suffixes that
split a step's time: `:plain_sgd` (the sampled head with a plain SGD, no wrapper) and `:no_update` (forward
and backward only, the gradients returned, no optimizer).

Backends: JAX (`KERAS_BACKEND=jax`): one `jax.jit` train step over Keras's stateless API (the head's
`stateless_call` and the optimizer's `stateless_apply` in one trace, state buffers donated: what `model.fit`
compiles); TensorFlow: a `tf.function` train step (`--tf_jit_compile` for XLA).

Every case runs in a fresh subprocess (`--worker`), which builds the case, compiles it (the first call),
runs `--warmup` steps, times `--steps` steps one by one (each finished with a device sync) and reports
the median, and its peak resident memory (`ru_maxrss`) next to the resident memory before the case was built.
The cases of a class count run one after another and, over `--passes` passes, in rotated order, so a drift of
the host's load hits every case alike; a case's time is the median of its steps over all passes, its ratio is
to `dense` of the same run. Cases are not held in one process side by side, because at C = 10^6 each holds
gigabytes. Computed next to the measurements: the logits' memory (B × columns × 4 bytes) and the kernel's
(d × C × 4 bytes).

    KERAS_BACKEND=jax python -m bench.bench_partial_fc --results_file bench/results/cpu/partial_fc.jsonl

Rows are appended to `--results_file` (JSON lines, one per case, with the environment). Every step is also
timed in process CPU time (all threads), which other jobs on the host disturb far less than wall time.
`--parts` (JAX) times the pieces of a step instead (see the flag).
"""

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_list("num_classes", ["100000", "1000000"], "Class counts C.")
flags.DEFINE_list("cases", ["dense", "pfc_r0.1", "pfc_r1"],
                  "Cases: dense, pfc_r<rate>, sharded<N>_r<rate> (JAX), with an optional ':plain_sgd' or "
                  "':no_update' suffix.")
flags.DEFINE_integer("batch_size", 256, "B.")
flags.DEFINE_integer("feature_dim", 512, "d.")
flags.DEFINE_string("loss_type", "arcface", "MarginHead loss type (cosface, arcface, ...).")
flags.DEFINE_float("noise", 0.5, "Noise level of the synthetic identities.")
flags.DEFINE_integer("steps", 3, "Timed steps per case and pass.")
flags.DEFINE_integer("warmup", 1, "Untimed steps after compilation.")
flags.DEFINE_integer("passes", 2, "Passes over the cases (rotated order), each case in a fresh process.")
flags.DEFINE_integer("worker_timeout_s", 900, "Give up on a case after this long (reported as an error row).")
flags.DEFINE_bool("tf_jit_compile", False, "TensorFlow: compile the train step with XLA.")
flags.DEFINE_string("results_file", None, "Append the JSON lines here.")
flags.DEFINE_bool("parts", False,
                  "JAX: instead of the cases, time the pieces of a step at each --num_classes (in this process): "
                  "the head's forward + backward on K and on C columns, the gather and its scatter gradient, the "
                  "class sampling, the SGD momentum update of (d, C) and the wrapper's restore of two (d, C) arrays.")
flags.DEFINE_integer(
    "profile_ops", 0,
    "JAX: after the timed steps, trace one more step with `jax.profiler` and report its N longest XLA operations "
    "(wall ms summed over the step's threads, with the JAX operation each fusion comes from): where a step's time "
    "goes, op by op.")
flags.DEFINE_list("parts_list", None, "With --parts: only the parts whose names start with one of these.")
flags.DEFINE_string("worker", None, "Internal: run this one case for --num_classes (a single value), print JSON.")

BASELINE = "dense"


def parse_case(name):
    """(head kind, sample rate or None, variant) of a case name."""
    base, _, variant = name.partition(":")
    if variant not in ("", "plain_sgd", "no_update"):
        raise ValueError(f"Unknown variant in case {name!r}: '', ':plain_sgd' or ':no_update'.")
    if base == "dense":
        if variant == "plain_sgd":
            raise ValueError("':plain_sgd' applies to the sampled heads only.")
        return "dense", None, variant
    if base.startswith("pfc_r") or (base.startswith("sharded") and "_r" in base):
        kind, _, rate = base.partition("_r")
        rate = float(rate)
        if not 0 < rate <= 1:
            raise ValueError(f"Sample rate of {name!r} must be in (0, 1].")
        if kind != "pfc":
            shard_count(name)
        return ("pfc" if kind == "pfc" else "sharded"), rate, variant
    raise ValueError(f"Unknown case {name!r}: dense, pfc_r<rate> or sharded<N>_r<rate>.")


def shard_count(name):
    """N of a `sharded<N>_r<rate>` case (1 for the others)."""
    base = name.partition(":")[0]
    if not base.startswith("sharded"):
        return 1
    count = base[len("sharded"):].partition("_r")[0]
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"Unknown case {name!r}: sharded<N>_r<rate> with N a positive int.")
    return int(count)


def columns_per_step(kind, rate, num_classes, batch_size, num_shards=1):
    """Logit columns of one training step (K for the sampled head, C for the dense one)."""
    if kind == "dense":
        return num_classes
    from sphere_tf.ops import sampling  # noqa: PLC0415  (keras import: after the backend is chosen)

    block_size = sampling.padded_num_classes(num_classes, num_shards) // num_shards
    return num_shards * sampling.block_sample_size(block_size, rate, batch_size)


def rss_mb():
    """Current resident set size (MB) from /proc/self/statm, or None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


class _Clock:
    """Wall time, process CPU time (all threads), its system part, and minor page faults of a stretch of code.

    System time and page faults show the cost of touching freshly allocated memory (a new (d, C) buffer is
    2 GB at C = 10^6: half a million 4 KB pages faulted in by the kernel)."""

    def __enter__(self):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._start = (time.perf_counter(), time.process_time(), usage.ru_stime, usage.ru_minflt)
        return self

    def __exit__(self, *exc_info):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        wall, cpu, sys_s, faults = self._start
        self.wall = time.perf_counter() - wall
        self.cpu = time.process_time() - cpu
        self.sys = usage.ru_stime - sys_s
        self.faults = usage.ru_minflt - faults


# ------------------------------------------------------------------------------------------------------------
# One case (in a worker process).


def _build(kind, rate, variant, num_classes):
    import keras  # noqa: PLC0415

    from sphere_tf.layers import MarginHead  # noqa: PLC0415
    from sphere_tf.layers import PartialFCHead  # noqa: PLC0415
    from sphere_tf.optimizers import PartialFCOptimizer  # noqa: PLC0415

    keras.utils.set_random_seed(0)
    if kind == "dense":
        head = MarginHead(num_classes, loss_type=FLAGS.loss_type)
    else:
        num_shards = len(keras.distribution.list_devices()) if kind == "sharded" else 1
        head = PartialFCHead(num_classes, loss_type=FLAGS.loss_type, sample_rate=rate, seed=0, num_shards=num_shards,
                             name="head")
    head.build((None, FLAGS.feature_dim))
    optimizer = None
    if variant != "no_update":
        optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
        if kind != "dense" and variant != "plain_sgd":
            optimizer = PartialFCOptimizer(optimizer)
        optimizer.build(head.trainable_variables)
    return head, optimizer


def _class_parallel(num_devices):
    """Sets `keras.distribution.ModelParallel` over `num_devices` devices, the head's classes split (JAX)."""
    import keras  # noqa: PLC0415

    from sphere_tf.layers import class_sharding_layout  # noqa: PLC0415

    devices = keras.distribution.list_devices()
    if len(devices) != num_devices:
        raise ValueError(f"Expected {num_devices} devices (XLA_FLAGS), found {len(devices)}.")
    mesh = keras.distribution.DeviceMesh((num_devices,), ("devices",), devices)
    layout_map = class_sharding_layout(keras.distribution.LayoutMap(mesh), "head", "devices")
    distribution = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="devices")
    keras.distribution.set_distribution(distribution)
    return distribution


def _bytes_per_device(variables):
    """The largest number of bytes of `variables` that one device holds (JAX arrays' addressable shards)."""
    per_device = {}
    for variable in variables:
        for shard in variable.value.addressable_shards:
            per_device[shard.device] = per_device.get(shard.device, 0) + shard.data.size * shard.data.dtype.itemsize
    return max(per_device.values())


def _loss(head, kind, outputs, losses, labels):
    from keras import ops  # noqa: PLC0415

    from sphere_tf.ops import sampling  # noqa: PLC0415

    if kind != "dense":
        return losses[-1]  # the head's own add_loss term
    return ops.mean(sampling.softmax_cross_entropy(outputs, labels))


class _JaxCase:
    def __init__(self, kind, head, optimizer, x, y):
        import jax  # noqa: PLC0415
        import keras  # noqa: PLC0415

        self.jax = jax
        no_update = optimizer is None

        def train_step(state, x, y):
            trainable, non_trainable, opt_vars = state

            def loss_of(trainable):
                outputs, new_non_trainable, losses = head.stateless_call(
                    trainable, non_trainable, x, labels=y, training=True, return_losses=True
                )
                return _loss(head, kind, outputs, losses, y), new_non_trainable

            (loss, new_non_trainable), grads = jax.value_and_grad(loss_of, has_aux=True)(trainable)
            if no_update:
                return (trainable, new_non_trainable, opt_vars), (loss, grads)
            new_trainable, new_opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
            return (new_trainable, new_non_trainable, new_opt_vars), (loss, None)

        self.step_fn = jax.jit(train_step, donate_argnums=0)
        self.state = ([v.value for v in head.trainable_variables], [v.value for v in head.non_trainable_variables],
                      [] if optimizer is None else [v.value for v in optimizer.variables])
        self.x, self.y = jax.numpy.asarray(x), jax.numpy.asarray(y)
        distribution = keras.distribution.distribution()
        if distribution is not None:  # the batch split over the devices, as `fit` distributes it
            self.x, self.y = (jax.device_put(a, distribution.get_data_layout(a.shape).backend_layout)
                              for a in (self.x, self.y))

    def step(self):
        self.state, out = self.step_fn(self.state, self.x, self.y)
        self.jax.block_until_ready(out)
        return float(out[0])

    def profile_ops(self, top):
        """The `top` longest XLA operations of one traced step: `[{op, ms, count, jax_op}]`, longest first."""
        import collections  # noqa: PLC0415
        import glob  # noqa: PLC0415
        import gzip  # noqa: PLC0415
        import re  # noqa: PLC0415
        import tempfile  # noqa: PLC0415

        hlo = self.step_fn.lower(self.state, self.x, self.y).compile().as_text()
        # The JAX operation each instruction of the compiled step comes from (its `op_name` metadata).
        origin = dict(re.findall(r"^\s*(?:ROOT )?%([\w.\-]+) = .*?op_name=\"([^\"]+)\"", hlo, flags=re.M))
        with tempfile.TemporaryDirectory() as folder:
            with self.jax.profiler.trace(folder, create_perfetto_trace=True):
                self.step()
            (path,) = glob.glob(os.path.join(folder, "**", "perfetto_trace.json.gz"), recursive=True)
            with gzip.open(path) as f:
                events = json.load(f)
        events = events["traceEvents"] if isinstance(events, dict) else events
        total, count = collections.Counter(), collections.Counter()
        for event in events:
            if event.get("ph") == "X" and event["name"] in origin:
                total[event["name"]] += event.get("dur", 0) / 1e3
                count[event["name"]] += 1
        return [{"op": name, "ms": round(ms, 1), "count": count[name], "jax_op": origin[name]}
                for name, ms in total.most_common(top)]


class _TensorFlowCase:
    def __init__(self, kind, head, optimizer, x, y):
        import tensorflow as tf  # noqa: PLC0415

        variables = head.trainable_variables

        @tf.function(jit_compile=FLAGS.tf_jit_compile)
        def train_step(x, y):
            with tf.GradientTape() as tape:
                outputs = head(x, labels=y, training=True)
                loss = _loss(head, kind, outputs, head.losses, y)
            grads = tape.gradient(loss, variables)
            if optimizer is None:
                return loss, [tf.convert_to_tensor(g) for g in grads]  # the gradients, made dense
            optimizer.apply(grads, variables)
            return loss, []

        self.step_fn = train_step
        self.x, self.y = tf.constant(x), tf.constant(y)

    def step(self):
        loss, grads = self.step_fn(self.x, self.y)
        for g in grads:
            g.numpy()
        return float(loss.numpy())


def run_worker(name, num_classes):
    """Builds, compiles and times one case; returns its JSON row (without ratios)."""
    import keras  # noqa: PLC0415

    from bench.synthetic_identities import synthetic_identities  # noqa: PLC0415

    kind, rate, variant = parse_case(name)
    backend = keras.backend.backend()
    if kind == "sharded":
        if backend != "jax":
            raise ValueError(f"Case {name!r} runs on the jax backend (keras.distribution's ModelParallel).")
        _class_parallel(shard_count(name))
    x, y = synthetic_identities(FLAGS.batch_size, num_classes, FLAGS.feature_dim, noise=FLAGS.noise, seed=0)
    rss_before = rss_mb()
    head, optimizer = _build(kind, rate, variant, num_classes)
    extra = {}
    if backend == "jax":  # parameters and optimizer state on the busiest device (all of it, on one device)
        state = head.trainable_variables + ([] if optimizer is None else list(optimizer.variables))
        extra["param_mb_per_device"] = _bytes_per_device(state) / 2**20
    if backend == "jax":
        case = _JaxCase(kind, head, optimizer, x, y)
    elif backend == "tensorflow":
        case = _TensorFlowCase(kind, head, optimizer, x, y)
    else:
        raise ValueError(f"bench_partial_fc runs on the jax and tensorflow backends; KERAS_BACKEND={backend!r}")
    start = time.perf_counter()
    first_loss = case.step()  # tracing and compilation included
    compile_s = time.perf_counter() - start
    for _ in range(FLAGS.warmup):
        case.step()
    times, cpu_times, sys_times, faults, loss = [], [], [], [], None
    for _ in range(FLAGS.steps):
        with _Clock() as clock:
            loss = case.step()
        times.append(clock.wall)
        cpu_times.append(clock.cpu)
        sys_times.append(clock.sys)
        faults.append(clock.faults)
    if FLAGS.profile_ops:
        if backend != "jax":
            raise ValueError("--profile_ops runs on the jax backend.")
        extra["profile_ops"] = case.profile_ops(FLAGS.profile_ops)
    devices = shard_count(name)
    columns = columns_per_step(kind, rate, num_classes, FLAGS.batch_size, devices)
    return {**extra, "devices": devices, "logits_mb_per_device": FLAGS.batch_size * columns * 4 / 2**20 / devices,
        "case": name, "num_classes": num_classes, "batch_size": FLAGS.batch_size, "feature_dim": FLAGS.feature_dim,
        "loss_type": FLAGS.loss_type, "columns": columns, "step_s": times, "cpu_step_s": cpu_times,
        "sys_step_s": sys_times, "minor_faults_per_step": faults, "compile_s": compile_s,
        "first_loss": first_loss, "last_loss": loss,
        "rss_before_mb": rss_before, "peak_rss_mb": peak_rss_mb(),
        "logits_mb": FLAGS.batch_size * columns * 4 / 2**20,
        "kernel_mb": FLAGS.feature_dim * num_classes * 4 / 2**20,
    }


# ------------------------------------------------------------------------------------------------------------
# The pieces of a step (--parts, JAX).


def _time_jitted(fn, args, donate=False):
    """Compiles `fn`, runs it `--warmup` more times, then times `--steps` calls: medians of `_Clock`'s fields."""
    import jax  # noqa: PLC0415

    jitted = jax.jit(fn, donate_argnums=0 if donate else ())
    out = jitted(*args)
    jax.block_until_ready(out)
    if donate:
        args = (out,) + tuple(args[1:])
    clocks = []
    for _ in range(FLAGS.warmup + FLAGS.steps):
        with _Clock() as clock:
            out = jitted(*args)
            jax.block_until_ready(out)
        clocks.append(clock)
        if donate:
            args = (out,) + tuple(args[1:])
    del out, args
    timed = clocks[FLAGS.warmup:]
    return {"median_step_s": statistics.median(c.wall for c in timed),
            "median_cpu_step_s": statistics.median(c.cpu for c in timed),
            "median_sys_step_s": statistics.median(c.sys for c in timed),
            "median_minor_faults": statistics.median(c.faults for c in timed)}


def measure_parts(num_classes):
    """Rows of the pieces of one step at C = `num_classes`, K = the sampled columns at r = 0.1."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    import keras  # noqa: PLC0415

    from bench.synthetic_identities import synthetic_identities  # noqa: PLC0415
    from sphere_tf.backends import jax as jax_plugin  # noqa: PLC0415
    from sphere_tf.layers import MarginHead  # noqa: PLC0415
    from sphere_tf.ops import sampling  # noqa: PLC0415

    b, d, c = FLAGS.batch_size, FLAGS.feature_dim, num_classes
    k = sampling.block_sample_size(c, 0.1, b)
    x, y = synthetic_identities(b, c, d, noise=FLAGS.noise, seed=0)
    x = jnp.asarray(x)
    rows = []

    def add(part, columns, fn, args, donate=False):
        if FLAGS.parts_list and not any(part.startswith(p) for p in FLAGS.parts_list):
            return
        rows.append({"part": part, "num_classes": c, "columns": columns, "batch_size": b, "feature_dim": d,
                     **_time_jitted(fn, args, donate=donate)})
        print(json.dumps(rows[-1]), flush=True)

    def head_fwd_bwd(columns):
        # The margin head's forward and backward on `columns` columns (matmuls, normalisation, margin, softmax).
        head = MarginHead(columns, loss_type=FLAGS.loss_type)
        head.build((None, d))
        labels = jnp.asarray(y % columns)
        non_trainable = [v.value for v in head.non_trainable_variables]

        def fn(trainable, features):
            def loss_of(trainable, features):
                logits, _ = head.stateless_call(trainable, non_trainable, features, labels=labels, training=True)
                return jnp.mean(sampling.softmax_cross_entropy(logits, labels))

            return jax.grad(loss_of, argnums=(0, 1))(trainable, features)

        trainable = [v.value for v in head.trainable_variables]
        add(f"head forward+backward, {columns} columns", columns, fn, (trainable, x))

    keras.utils.set_random_seed(0)
    head_fwd_bwd(k)
    head_fwd_bwd(c)
    w = jax.random.normal(jax.random.PRNGKey(0), (d, c), jnp.float32)
    index = jnp.sort(jax.random.choice(jax.random.PRNGKey(1), c, (k,), replace=False)).astype(jnp.int32)
    sub_grad = jnp.ones((d, k), jnp.float32)

    def gather_scatter(w, index, sub_grad):
        sub, vjp = jax.vjp(lambda w: jnp.take(w, index, axis=1), w)
        return sub, vjp(sub_grad)[0]  # the (d, C) gradient: zeros plus the scattered K columns

    add("gather K columns + its (d, C) scatter gradient", k, gather_scatter, (w, index, sub_grad))
    w_rows, sub_grad_rows = w.T + 0.0, sub_grad.T + 0.0

    def gather_scatter_rows(w, index, sub_grad):
        # The same with classes on axis 0 (upstream's (C, d) weight): each class a contiguous row of d floats.
        sub, vjp = jax.vjp(lambda w: jnp.take(w, index, axis=0), w)
        return sub, vjp(sub_grad)[0]

    add("gather K rows of a (C, d) kernel + its (C, d) scatter gradient", k, gather_scatter_rows,
        (w_rows, index, sub_grad_rows))
    del w_rows, sub_grad_rows

    def sample(labels):
        index, remapped, mask, _ = sampling.sample_classes(labels, c, 1, k, sampling.step_seed(0, 1))
        return index, remapped, mask

    add("class sampling (scores over C, top_k, sort, searchsorted, mask)", k, sample, (jnp.asarray(y),))
    grad = jnp.zeros((d, c), jnp.float32).at[:, index].set(1.0)

    def sgd(state, grad):
        w, m = state
        m = 0.9 * m - 0.1 * grad
        return w + m, m

    # Donated state: fresh copies of w each time.
    add("SGD momentum update of (d, C) (kernel and momentum)", c, sgd, ((w + 0.0, jnp.zeros_like(w)), grad),
        donate=True)
    mask = jnp.zeros((c,), bool).at[index].set(True)

    def restore(state, before, mask):
        w, m = state
        return jnp.where(mask[None, :], w, before[0]), jnp.where(mask[None, :], m, before[1])

    add("PartialFCOptimizer restore: where() over kernel and momentum", c, restore,
        ((w + 1.0, jnp.ones_like(w)), (w, jnp.zeros_like(w)), mask), donate=True)

    def sgd_with_restore(state, grad, mask):
        # What the wrapper's step is: the update and the restore in one trace (XLA may fuse them).
        w, m = state
        new_m = 0.9 * m - 0.1 * grad
        new_w = w + new_m
        return jnp.where(mask[None, :], new_w, w), jnp.where(mask[None, :], new_m, m)

    add("SGD momentum + restore in one trace", c, sgd_with_restore, ((w + 0.0, jnp.zeros_like(w)), grad, mask),
        donate=True)

    def sgd_masked(state, grad, mask):
        # PartialFCOptimizer's masked rule: each output a select of its own old value (written in place).
        w, m = state
        new_m = jnp.where(mask[None, :], 0.9 * m - 0.1 * grad, m)
        return jnp.where(mask[None, :], w + new_m, w), new_m

    add("masked SGD momentum rule, one pass (PartialFCOptimizer)", c, sgd_masked,
        ((w + 0.0, jnp.zeros_like(w)), grad, mask), donate=True)

    def sgd_columns(state, grad, index):
        # Upstream v1's update of the gathered rows, on the (d, C) layout: gather K columns of kernel, momentum and
        # gradient, update, scatter both back (in place: donated).
        w, m = state
        new_m = 0.9 * m[:, index] - 0.1 * grad[:, index]
        new_w = w[:, index] + new_m
        return (w.at[:, index].set(new_w, indices_are_sorted=True, unique_indices=True),
                m.at[:, index].set(new_m, indices_are_sorted=True, unique_indices=True))

    add("SGD momentum on the K gathered columns, scattered back", k, sgd_columns,
        ((w + 0.0, jnp.zeros_like(w)), grad, index), donate=True)

    def gather_and_update(gather):
        # The column gather's backward feeding the masked rule, as in the sampled train step: with the reference
        # gather JAX writes a zero-filled (d, C) gradient and scatters into it; the plug-in's gradient is a gather
        # XLA fuses into the update.
        def fn(state, sub_grad, index, mask):
            w, m = state
            _, vjp = jax.vjp(lambda w: gather(w, index, 1, 1), w)
            (g,) = vjp(sub_grad)
            return sgd_masked((w, m), g, mask)

        return fn

    add("gather (reference) + its scatter gradient + masked SGD rule, one trace", k,
        gather_and_update(sampling.reference_gather_columns), ((w + 0.0, jnp.zeros_like(w)), sub_grad, index, mask),
        donate=True)
    add("gather (JAX plug-in) + its fused gradient + masked SGD rule, one trace", k,
        gather_and_update(jax_plugin.gather_columns), ((w + 0.0, jnp.zeros_like(w)), sub_grad, index, mask),
        donate=True)
    return rows


# ------------------------------------------------------------------------------------------------------------
# The driver.


def environment():
    import keras  # noqa: PLC0415

    env = {"backend": keras.backend.backend(), "keras": keras.__version__, "machine": platform.machine(),
           "cpu_count": os.cpu_count(), "load_avg_1m_start": os.getloadavg()[0],
           "tf_jit_compile": FLAGS.tf_jit_compile if keras.backend.backend() == "tensorflow" else None}
    try:
        with open("/proc/cpuinfo") as f:
            env["cpu"] = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        env["cpu"] = platform.processor()
    try:
        with open("/proc/meminfo") as f:
            env["mem_total_gb"] = int(f.readline().split()[1]) / 2**20
    except OSError:
        pass
    if env["backend"] == "jax":
        import jax  # noqa: PLC0415

        env["jax"] = jax.__version__
        env["device"] = str(jax.devices()[0].platform)
    elif env["backend"] == "tensorflow":
        import tensorflow as tf  # noqa: PLC0415

        env["tensorflow"] = tf.__version__
        env["device"] = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
    return env


def _worker_command(name, num_classes):
    argv = [sys.executable, "-m", "bench.bench_partial_fc", f"--worker={name}", f"--num_classes={num_classes}",
            f"--batch_size={FLAGS.batch_size}", f"--feature_dim={FLAGS.feature_dim}",
            f"--loss_type={FLAGS.loss_type}", f"--noise={FLAGS.noise}", f"--steps={FLAGS.steps}",
            f"--warmup={FLAGS.warmup}", f"--tf_jit_compile={FLAGS.tf_jit_compile}",
            f"--profile_ops={FLAGS.profile_ops}"]
    return argv


def run_case(name, num_classes):
    """A case in a fresh process: its row, or a row with `error` (out of memory, time-out, exception)."""
    start = time.perf_counter()
    env = dict(os.environ)
    if shard_count(name) > 1:  # N logical CPU devices, set before the worker imports JAX
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={shard_count(name)}"
    try:
        proc = subprocess.run(_worker_command(name, num_classes), capture_output=True, text=True,
                              timeout=FLAGS.worker_timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"case": name, "num_classes": num_classes, "error": f"timeout after {FLAGS.worker_timeout_s} s"}
    if proc.returncode != 0:
        reason = "killed (out of memory?)" if proc.returncode in (-9, 137) else f"exit {proc.returncode}"
        return {"case": name, "num_classes": num_classes, "error": reason, "stderr": proc.stderr[-2000:]}
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["wall_s"] = time.perf_counter() - start
    return row


def measure(num_classes, cases):
    """Rows of one class count: every case over the passes, medians and ratios to `dense`."""
    runs = {name: [] for name in cases}
    for p in range(FLAGS.passes):
        order = cases[p % len(cases):] + cases[:p % len(cases)]
        for name in order:
            row = run_case(name, num_classes)
            print(json.dumps({"pass": p, **{k: v for k, v in row.items() if k != "stderr"}}), flush=True)
            runs[name].append(row)
    rows = []
    for name in cases:
        ok = [r for r in runs[name] if "error" not in r]
        if not ok:
            rows.append({**runs[name][-1], "passes": len(runs[name])})
            continue
        steps = [t for r in ok for t in r["step_s"]]
        cpu_steps = [t for r in ok for t in r.get("cpu_step_s", [])]
        row = {**ok[-1], "step_s": steps, "passes": len(ok), "median_step_s": statistics.median(steps),
               "cpu_step_s": cpu_steps, "median_cpu_step_s": statistics.median(cpu_steps) if cpu_steps else None,
               "min_step_s": min(steps), "max_step_s": max(steps),
               "pass_medians_s": [statistics.median(r["step_s"]) for r in ok],
               "peak_rss_mb": max(r["peak_rss_mb"] for r in ok),
               "compile_s": statistics.median(r["compile_s"] for r in ok)}
        row["peak_over_start_mb"] = row["peak_rss_mb"] - row["rss_before_mb"]
        rows.append(row)
    base = next((r for r in rows if r["case"] == BASELINE and "median_step_s" in r), None)
    for row in rows:
        if base is not None and "median_step_s" in row:
            row["ratio_to_dense"] = row["median_step_s"] / base["median_step_s"]
            if row["median_cpu_step_s"] and base["median_cpu_step_s"]:
                row["cpu_ratio_to_dense"] = row["median_cpu_step_s"] / base["median_cpu_step_s"]
    return rows


def _print_table(rows):
    print("\n| backend | C | case | columns | ms/step (median) | ratio to dense | CPU ms/step | CPU ratio "
          "| peak RSS MB | over start MB | logits MB | kernel MB | devices | params+state MB/device "
          "| logits MB/device |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "median_step_s" not in r:
            print(f"| {r.get('backend')} | {r['num_classes']} | {r['case']} | | {r.get('error')} "
                  "| | | | | | | | | | |")
            continue
        per_device = r.get("param_mb_per_device")
        print(f"| {r['backend']} | {r['num_classes']} | {r['case']} | {r['columns']} | {1e3 * r['median_step_s']:.0f} "
              f"| {r.get('ratio_to_dense', float('nan')):.3f} | {1e3 * (r['median_cpu_step_s'] or float('nan')):.0f} "
              f"| {r.get('cpu_ratio_to_dense', float('nan')):.3f} | {r['peak_rss_mb']:.0f} "
              f"| {r['peak_over_start_mb']:.0f} "
              f"| {r['logits_mb']:.1f} | {r['kernel_mb']:.0f} | {r.get('devices', 1)} "
              f"| {'' if per_device is None else f'{per_device:.0f}'} | {r.get('logits_mb_per_device', 0):.1f} |")


def main(argv):
    del argv
    if FLAGS.worker:
        (num_classes,) = [int(c) for c in FLAGS.num_classes]
        print(json.dumps(run_worker(FLAGS.worker, num_classes)))
        return
    for name in FLAGS.cases:
        parse_case(name)
    env = environment()
    print(json.dumps({"environment": env}), flush=True)
    if FLAGS.parts:
        if env["backend"] != "jax":
            raise ValueError("--parts runs on the JAX backend.")
        for num_classes in (int(c) for c in FLAGS.num_classes):
            for row in measure_parts(num_classes):
                row.update(env)
                row["load_avg_1m_end"] = os.getloadavg()[0]
                if FLAGS.results_file:
                    with open(FLAGS.results_file, "a") as f:
                        f.write(json.dumps(row, sort_keys=True) + "\n")
        return
    cases = [BASELINE] + [c for c in FLAGS.cases if c != BASELINE] if BASELINE in FLAGS.cases else list(FLAGS.cases)
    rows = []
    for num_classes in (int(c) for c in FLAGS.num_classes):
        for row in measure(num_classes, cases):
            row.update(env)
            row["load_avg_1m_end"] = os.getloadavg()[0]
            rows.append(row)
            if FLAGS.results_file:
                with open(FLAGS.results_file, "a") as f:
                    f.write(json.dumps(row, sort_keys=True) + "\n")
    _print_table(rows)


if __name__ == "__main__":
    app.run(main)
