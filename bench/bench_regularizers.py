"""Train-step overhead of MHE and RP-CoMHE on the 9-layer CNN (ratios to no regularizer).

Cases, timed round-robin in one process so machine load hits all alike:

* train steps of `cnn9(Conv2D)` (Adam, forward + loss + backward + update):
  `none`; `mhe_s2` (MHE s = 2 on all 9 convs and the dense-256 layer, output
  MHE ×10, upstream setting); `hs_mhe_s2` (half-space hidden); `rp_comhe`
  (CoMHE pd 30, 5 projections, re-sampled each step, output MHE ×10);
* the regularizer alone (value + gradient) on the widest layer, the dense
  kernel (2048, 256): `widest_mhe_s2`, `widest_hs_mhe_s2`, `widest_rp_comhe`,
  `widest_rp_comhe_every100` (P redrawn every 100 steps, cached in between).

    python bench/bench_regularizers.py --batch_size 64 --num_iters 15 \
        --results_file bench/results/cpu/regularizers.jsonl

`--cases widest` times only the `widest_*` cases (no CNN train steps), plus
`widest_rp_comhe_looped`, RP-CoMHE with the pre-batching per-projection loop, as a same-run reference.
`--cases parts` times the pieces of both on the widest layer, each forward + backward with a fixed
upstream gradient (`part_*`, ratios to `part_mhe_total`): MHE's Gram and its pair sum; RP-CoMHE's
Gaussian draw, projection, column normalisation + batched Gram, and its 2·C half-space pair blocks.
Every row has wall-time median/p90/min and the median process CPU time (`cpu_median_s`, all threads).
"""

import statistics
import time

import keras
import tensorflow as tf
from absl import app
from absl import flags

from bench import common
from sphere_tf import energy
from sphere_tf import regularizers
from sphere_tf.ops import angles
from sphere_tf.regularizers import comhe

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 64, "Batch size.")
flags.DEFINE_integer("num_warmup", 3, "Untimed calls per case.")
flags.DEFINE_integer("num_iters", 15, "Timed calls per case (median reported).")
flags.DEFINE_bool("jit_compile", False, "XLA-compile the train step.")
flags.DEFINE_string("results_file", None, "JSON-lines output file.")
flags.DEFINE_enum(
    "cases", "all", ["all", "widest", "parts"],
    "'widest': only the widest_* regularizer-alone cases; 'parts': their pieces (part_*).",
)


def _conv(reg):
    return lambda filters: keras.layers.Conv2D(filters, 3, padding="same", kernel_regularizer=reg)


def _model(hidden_reg, output_reg):
    model = common.cnn9(_conv(hidden_reg))
    if hidden_reg is not None or output_reg is not None:
        # cnn9 builds its dense layers unregularized: attach the regularizers to their kernels.
        dense_hidden, dense_out = model.layers[-2], model.layers[-1]
        dense_hidden.kernel.regularizer = hidden_reg
        dense_out.kernel.regularizer = output_reg
    return model


def _train_cases(batch):
    keras.utils.set_random_seed(0)
    setups = {
        "none": (None, None),
        "mhe_s2": (regularizers.MHE(power=2), regularizers.MHE(power=2, role="output")),
        "hs_mhe_s2": (regularizers.MHE(power=2, half_space=True), regularizers.MHE(power=2, role="output")),
        "rp_comhe": (regularizers.CoMHE(), regularizers.MHE(power=2, role="output")),
    }
    cases = {}
    for name, (hidden, output) in setups.items():
        model = _model(hidden, output)
        step = common.make_train_step(model, keras.optimizers.Adam(1e-3), jit_compile=FLAGS.jit_compile)
        cases[name] = (step, batch)
    return cases


class _LoopedCoMHE(regularizers.CoMHE):
    """RP-CoMHE as before issue 4: Ŵ normalised first, one `hyperspherical_energy` call per projection
    (same random draw and energy code as the current class)."""

    def _projected_energy(self, w2d, stacked, c):
        w_hat = energy.normalized_neurons(w2d, self.epsilon)
        k = stacked.shape[-1] // c
        values = [self._energy(tf.matmul(stacked[:, i * k : (i + 1) * k], w_hat, transpose_a=True)) for i in range(c)]
        stacked_values = tf.stack(values)
        return tf.reduce_max(stacked_values) if self.aggregation == "max" else tf.reduce_mean(stacked_values)


def _widest_cases():
    kernel = tf.Variable(tf.random.normal((2048, 256), stddev=0.03))
    cases = {}
    for name, reg in {
        "widest_mhe_s2": regularizers.MHE(power=2),
        "widest_hs_mhe_s2": regularizers.MHE(power=2, half_space=True),
        "widest_rp_comhe": regularizers.CoMHE(),
        # P kept for 100 steps (thesis Table E.4: as accurate as every step), drawn from the cache.
        "widest_rp_comhe_every100": regularizers.CoMHE(resample_every=100),
    }.items():

        def fn(reg=reg):
            with tf.GradientTape() as tape:
                value = reg(kernel)
            return value, tape.gradient(value, kernel)

        cases[name] = (tf.function(fn, jit_compile=FLAGS.jit_compile), ())
    if FLAGS.cases == "widest":
        # Same-run reference: RP-CoMHE with the pre-batching projected_energy (issue 4).
        looped = _LoopedCoMHE()

        def loop_fn():
            with tf.GradientTape() as tape:
                value = looped(kernel)
            return value, tape.gradient(value, kernel)

        cases["widest_rp_comhe_looped"] = (tf.function(loop_fn, jit_compile=FLAGS.jit_compile), ())
    return cases


def _with_grad(fn, x, upstream=None):
    """tf.function of `fn(x)` and its gradient w.r.t. `x` (fixed upstream gradient, no extra loss ops)."""

    def run():
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = fn(x)
        return out, tape.gradient(out, x, output_gradients=upstream)

    return tf.function(run, jit_compile=FLAGS.jit_compile)


def _part_cases():
    """The widest-layer regularizers taken apart (same shapes and code paths as the classes use)."""
    d, n = 2048, 256
    reg = regularizers.CoMHE()
    c, k = reg.num_projections, reg.projection_dim
    kernel = tf.random.normal((d, n), stddev=0.03)
    stacked = comhe.draw_projections(reg, "dim2048", d, 0)  # (d, C·k)
    projected = tf.reshape(tf.linalg.matmul(stacked, kernel, transpose_a=True), (c, k, n))

    def normalise_and_gram(p):
        u, _ = angles.normalize(p, axis=-2, epsilon=reg.epsilon)
        return energy.gram(u, scale=2.0)

    doubled = normalise_and_gram(projected)
    mhe_doubled = energy._doubled_cosines(kernel)

    mhe = regularizers.MHE(power=2)
    draw_step = tf.Variable(0, dtype=tf.int64)

    @tf.function(jit_compile=FLAGS.jit_compile)
    def draw():
        draw_step.assign_add(1)
        return comhe.draw_projections(reg, "dim2048", d, draw_step)

    return {
        "part_mhe_total": (_with_grad(mhe, kernel), ()),
        "part_mhe_gram": (_with_grad(energy._doubled_cosines, kernel, tf.random.normal((n, n))), ()),
        "part_mhe_pairs": (_with_grad(lambda dc: energy.energy_from_cosines(doubled_cos=dc), mhe_doubled), ()),
        "part_comhe_draw": (draw, ()),
        "part_comhe_projection": (
            _with_grad(lambda w: tf.linalg.matmul(stacked, w, transpose_a=True), kernel, tf.random.normal((c * k, n))),
            (),
        ),
        "part_comhe_batched_gram": (_with_grad(normalise_and_gram, projected, tf.random.normal((c, n, n))), ()),
        "part_comhe_pairs": (
            _with_grad(lambda x: tf.reduce_mean(energy.energy_from_cosines(doubled_cos=x, half_space=True)), doubled),
            (),
        ),
        "part_comhe_total": (_with_grad(reg, kernel), ()),
        "part_comhe_total_fixed_p": (
            _with_grad(lambda w: reg._projected_energy(w, stacked, c), kernel),
            (),
        ),
    }


def _block(result):
    for t in tf.nest.flatten(result):
        if hasattr(t, "numpy"):
            t.numpy()


def main(argv):
    del argv
    if FLAGS.cases == "parts":
        cases = _part_cases()
    else:
        cases = _widest_cases()
    if FLAGS.cases == "all":
        cases = {**_train_cases(common.random_batch(FLAGS.batch_size)), **cases}
    for fn, args in cases.values():
        for _ in range(FLAGS.num_warmup):
            _block(fn(*args))
    times = {name: [] for name in cases}
    cpu_times = {name: [] for name in cases}
    for _ in range(FLAGS.num_iters):
        for name, (fn, args) in cases.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            _block(fn(*args))
            times[name].append(time.perf_counter() - start)
            # Process CPU time (all threads): less sensitive than wall time to other jobs on the cores.
            cpu_times[name].append(time.process_time() - cpu_start)
    env = common.environment()
    median = {name: statistics.median(t) for name, t in times.items()}
    fastest = {name: min(t) for name, t in times.items()}
    cpu_median = {name: statistics.median(t) for name, t in cpu_times.items()}
    rows = []
    for name, t in times.items():
        t = sorted(t)
        baseline = "none"
        if name.startswith("widest"):
            baseline = "widest_mhe_s2"
        elif name.startswith("part"):
            baseline = "part_mhe_total"
        rows.append({
            **env,
            "bench": "regularizers",
            "case": name,
            "batch_size": FLAGS.batch_size,
            "jit_compile": FLAGS.jit_compile,
            "median_s": median[name],
            "p90_s": t[min(len(t) - 1, int(0.9 * len(t)))],
            "baseline": baseline,
            "ratio_to_baseline": median[name] / median[baseline],
            # The minimum is the least load-sensitive statistic on a shared machine.
            "min_s": fastest[name],
            "min_ratio_to_baseline": fastest[name] / fastest[baseline],
            "cpu_median_s": cpu_median[name],
            "cpu_ratio_to_baseline": cpu_median[name] / cpu_median[baseline],
            "num_iters": FLAGS.num_iters,
            "cases": FLAGS.cases,
        })
    common.write_results(rows, FLAGS.results_file)


if __name__ == "__main__":
    app.run(main)
