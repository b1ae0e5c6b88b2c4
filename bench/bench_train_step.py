"""Train-step, forward and peak-memory cost of the operator layers in the 9-layer CNN.

Every case is the same `bench.common.cnn9` network (3 stages × 3 conv 3×3 with
64/96/128 filters, BN, ReLU, max-pool, dense 256, 10 classes) with a different
convolution; `conv2d` (`keras.layers.Conv2D`, no bias as BN follows, like the
operator layers) is always measured and every figure is reported as a ratio to it.

Timing: all cases are built first, warmed up, then timed round-robin (one step
of each case per round), so load from other processes hits every case alike;
the median over rounds is reported, as wall time and as process CPU time.

Memory: TensorFlow's CPU allocator keeps no statistics
(`tf.config.experimental.get_memory_info('CPU:0')` raises), so each case runs
in a fresh subprocess that builds the model and a traced step, records
`ru_maxrss`, runs `--memory_steps` train steps and records `ru_maxrss` again.
The reported figure is the growth of peak RSS over the steps (activations kept
for the backward pass, gradients, workspace), plus the absolute peak.

    python -m bench.bench_train_step --results_file=bench/results/cpu/train_step.jsonl

Cases (`--layers`): conv2d, tanh_cosine (DecoupledConv2D tanh + cosine),
sphere_linear (SphereConv2D linear), sphere_cosine, linear_cosine, tanh_sqcosine,
linear_sqcosine, sphere_sigmoid. A suffix picks the operator layers' training
path while the step is traced (`sphere_tf.backends.tensorflow.fused.Path`): `:plain` (TensorFlow
ops, `set_training_fusion(False)`), `:xla` (XLA clusters, compiled kernels off),
`:reference` (the keras.ops reference, `sphere_tf.ops.set_acceleration(False)`),
none: whatever this process gets (the compiled kernels where they build).

Every row says which path ran (`path`: 'kernels', 'xla' or 'plain', read from the
traced step's graph: a compiled `SphereTf*` op, an XLA cluster, or neither;
'whole-step XLA' with `--jit_compile=true`), and the environment holds the CPU
model, whether it has AVX-512 FP16, the kernels' build status and flags, and
the load average before and after the run (the ratios are robust to load,
absolute times are not).
"""

import contextlib
import json
import resource
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

import keras
import tensorflow as tf

from bench import common
from sphere_tf import layers as sphere_layers
from sphere_tf.backends.tensorflow.kernels import build as kernel_build
from sphere_tf.ops import acceleration
from sphere_tf.training import runtime

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "layers", ["tanh_cosine", "sphere_linear"], "Cases to compare with conv2d (always included)."
)
flags.DEFINE_integer("batch_size", 128, "Batch size.")
flags.DEFINE_integer("image_size", 32, "Square input size (3 channels).")
flags.DEFINE_list("jit_compile", ["false"], "One run per value: 'false', 'true'.")
flags.DEFINE_integer("num_warmup", 3, "Untimed steps per case before timing.")
flags.DEFINE_integer("num_iters", 10, "Timed rounds (one step of every case per round).")
flags.DEFINE_list("modes", ["train", "forward", "memory"], "What to measure.")
flags.DEFINE_integer("memory_steps", 3, "Train steps per memory subprocess.")
flags.DEFINE_string("results_file", None, "Write the JSON lines here as well.")
flags.DEFINE_string("memory_case", None, "Internal: measure one case's memory and exit.")
flags.DEFINE_enum(
    "cpu_allocator", "bfc", ["bfc", "default"],
    "TensorFlow's CPU allocator for the whole run (sphere_tf.training.runtime; the trainers use 'bfc').",
)

BASELINE = "conv2d"

_CASES = {
    "conv2d": lambda f: keras.layers.Conv2D(f, 3, padding="same", use_bias=False),
    "tanh_cosine": lambda f: sphere_layers.DecoupledConv2D(
        f, 3, padding="same", magnitude="tanh", angular="cosine"
    ),
    "sphere_linear": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="linear"),
    "sphere_cosine": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="cosine"),
    "linear_cosine": lambda f: sphere_layers.DecoupledConv2D(
        f, 3, padding="same", magnitude="linear", angular="cosine"
    ),
    "tanh_sqcosine": lambda f: sphere_layers.DecoupledConv2D(
        f, 3, padding="same", magnitude="tanh", angular="sqcosine"
    ),
    "sphere_sigmoid": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="sigmoid"),
    # The square-cosine operator of the released DCNet code (linear_sqcos_wo_bn).
    "linear_sqcosine": lambda f: sphere_layers.DecoupledConv2D(
        f, 3, padding="same", magnitude="linear", angular="sqcosine"
    ),
}


_VARIANTS = ("", "plain", "xla", "reference")
_KERNELS_ENABLED = kernel_build.enabled()  # SPHERE_TF_CUSTOM_OPS=0 turns them off for every case


def conv_factory(case):
    """`(filters) -> layer` for a case name (the `:plain` / `:xla` suffix is read by `path_switches`)."""
    name, _, variant = case.partition(":")
    if name not in _CASES:
        raise ValueError(f"Unknown case {case!r}; expected one of {sorted(_CASES)} (+ ':plain' or ':xla').")
    if variant not in _VARIANTS:
        raise ValueError(f"Unknown variant in {case!r}; only ':plain', ':xla' and ':reference' exist.")
    return _CASES[name]


@contextlib.contextmanager
def path_switches(case):
    """The process-wide switches a case's step is traced under (the layers read them while tracing)."""
    variant = case.partition(":")[2]
    acceleration.set_training_fusion(variant != "plain")
    acceleration.set_acceleration(variant != "reference")
    kernel_build.set_enabled(variant != "xla" and _KERNELS_ENABLED)
    try:
        yield
    finally:
        acceleration.set_training_fusion(True)
        acceleration.set_acceleration(True)
        kernel_build.set_enabled(_KERNELS_ENABLED)



def path_of(concrete, jit):
    """Which training path a traced step runs: 'kernels', 'xla', 'plain' or 'whole-step XLA'."""
    if jit:
        return "whole-step XLA"
    graph_def = concrete.graph.as_graph_def()
    functions = list(graph_def.library.function)
    op_types = {node.op for node in graph_def.node} | {n.op for f in functions for n in f.node_def}
    if any(op.startswith("SphereTf") for op in op_types):
        return "kernels"
    if any("_XlaMustCompile" in f.attr and f.attr["_XlaMustCompile"].b for f in functions):
        return "xla"
    return "plain"


def trace(fn, case, args, jit):
    """Traces `fn` under the case's path switches; returns the path that ran."""
    with path_switches(case):
        concrete = fn.get_concrete_function(*args)
    return path_of(concrete, jit)


def _build(case, seed=0):
    keras.utils.set_random_seed(seed)
    image_shape = (FLAGS.image_size, FLAGS.image_size, 3)
    return common.cnn9(conv_factory(case), input_shape=image_shape)


def _block(result):
    for t in tf.nest.flatten(result):
        t.numpy()


def time_round_robin(fns, args, num_warmup, num_iters):
    """Median/p90 wall and CPU seconds per case, timed one call of each case per round."""
    for fn in fns.values():
        for _ in range(num_warmup):
            _block(fn(*args))
    wall = {name: [] for name in fns}
    cpu = {name: [] for name in fns}
    for _ in range(num_iters):
        for name, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            _block(fn(*args))
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
    out = {}
    for name in fns:
        w = sorted(wall[name])
        out[name] = {
            "median_s": statistics.median(w),
            "p90_s": w[min(len(w) - 1, int(0.9 * len(w)))],
            "cpu_median_s": statistics.median(cpu[name]),
        }
    return out


def _memory_of_case(case, jit):
    """Runs in a fresh process: peak RSS (MiB) before and after `memory_steps` train steps.

    With the BFC allocator also the allocator's own peak of live tensor bytes
    during the steps (activations kept for the backward pass, gradients,
    workspaces), which no other process or the runtime's code can blur.
    """
    x, y = common.random_batch(FLAGS.batch_size, (FLAGS.image_size, FLAGS.image_size, 3))
    model = _build(case)
    step = common.make_train_step(model, jit_compile=jit)
    path = trace(step, case, (x, y), jit)  # trace (and build the optimizer) before the baseline
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    bfc = runtime.bfc_cpu_allocator_active()
    if bfc:
        tf.config.experimental.reset_memory_stats("CPU:0")
        resident = tf.config.experimental.get_memory_info("CPU:0")["current"]
    for _ in range(FLAGS.memory_steps):
        step(x, y).numpy()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    out = {"peak_rss_mib": peak, "rss_before_steps_mib": before, "step_rss_growth_mib": peak - before,
           "path": path}
    if bfc:
        info = tf.config.experimental.get_memory_info("CPU:0")
        out["step_tensor_peak_mib"] = (info["peak"] - resident) / 2**20
    return out


def _measure_memory(case, jit):
    cmd = [
        sys.executable, "-m", "bench.bench_train_step", f"--memory_case={case}",
        f"--batch_size={FLAGS.batch_size}", f"--image_size={FLAGS.image_size}",
        f"--jit_compile={'true' if jit else 'false'}", f"--memory_steps={FLAGS.memory_steps}",
        f"--cpu_allocator={FLAGS.cpu_allocator}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ratio_rows(kind, results, extra, keys):
    base = results[BASELINE]
    rows = []
    for name, stats in results.items():
        row = {"bench": "train_step", "mode": kind, "layer": name, **extra, **stats}
        for key in keys:
            row[f"{key}_ratio"] = stats[key] / base[key] if base[key] > 0 else None
        if name == BASELINE and not extra["jit_compile"]:
            row["path"] = "n/a (keras.layers.Conv2D)"
        rows.append(row)
    return rows


def print_table(rows):
    print("\n| mode | jit | layer | path | median s | ratio (wall) | ratio (CPU) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["mode"] == "memory":
            growth = r["step_rss_growth_mib_ratio"]
            growth = "n/a" if growth is None else f"{growth:.2f}"
            tensors = ""
            if "step_tensor_peak_mib" in r:
                tensors = (f", tensors {r['step_tensor_peak_mib']:.0f} MiB "
                           f"({r['step_tensor_peak_mib_ratio']:.2f})")
            print(f"| memory | {r['jit_compile']} | {r['layer']} | {r['path']} | growth {r['step_rss_growth_mib']:.0f} MiB, "
                  f"peak {r['peak_rss_mib']:.0f} MiB{tensors} | {growth} | peak {r['peak_rss_mib_ratio']:.2f} |")
        else:
            print(f"| {r['mode']} | {r['jit_compile']} | {r['layer']} | {r['path']} | {r['median_s']:.3f} | "
                  f"{r['median_s_ratio']:.3f} | {r['cpu_median_s_ratio']:.3f} |")


def main(argv):
    del argv
    if FLAGS.cpu_allocator == "bfc":
        runtime.use_bfc_cpu_allocator()  # before any tensor exists
    jit_values = [v.strip().lower() in ("1", "true", "yes") for v in FLAGS.jit_compile]
    if FLAGS.memory_case:
        print(json.dumps(_memory_of_case(FLAGS.memory_case, jit_values[0])))
        return
    cases = [BASELINE] + [c for c in FLAGS.layers if c != BASELINE]
    for case in cases:
        conv_factory(case)  # fail early on typos
    x, y = common.random_batch(FLAGS.batch_size, (FLAGS.image_size, FLAGS.image_size, 3))
    kernel_build.compiled_kernels()  # build or load now, so the status below is final
    env = {**common.environment(), "kernels": kernel_build.status()}
    rows = []
    for jit in jit_values:
        extra = {
            "jit_compile": jit, "batch_size": FLAGS.batch_size, "image_size": FLAGS.image_size,
            "num_iters": FLAGS.num_iters, "num_warmup": FLAGS.num_warmup,
            "cpu_allocator": FLAGS.cpu_allocator, **env,
        }
        # Memory first: a child's peak RSS starts at this process's RSS, which the
        # timing runs raise (the BFC allocator keeps what it has taken).
        if "memory" in FLAGS.modes:
            results = {c: _measure_memory(c, jit) for c in cases}
            keys = ("peak_rss_mib", "step_rss_growth_mib")
            if all("step_tensor_peak_mib" in r for r in results.values()):
                keys += ("step_tensor_peak_mib",)
            rows += _ratio_rows("memory", results, {**extra, "memory_steps": FLAGS.memory_steps}, keys)
        models = {case: _build(case) for case in cases}
        if "train" in FLAGS.modes:
            steps = {c: common.make_train_step(m, jit_compile=jit) for c, m in models.items()}
            paths = {c: trace(step, c, (x, y), jit) for c, step in steps.items()}
            results = time_round_robin(steps, (x, y), FLAGS.num_warmup, FLAGS.num_iters)
            for c in results:
                results[c]["path"] = paths[c]
            rows += _ratio_rows("train", results, extra, ("median_s", "cpu_median_s"))
        if "forward" in FLAGS.modes:
            fwds = {c: common.make_forward(m, jit_compile=jit) for c, m in models.items()}
            paths = {c: trace(fwd, c, (x,), jit) for c, fwd in fwds.items()}
            results = time_round_robin(fwds, (x,), FLAGS.num_warmup, FLAGS.num_iters)
            for c in results:
                results[c]["path"] = paths[c]
            rows += _ratio_rows("forward", results, extra, ("median_s", "cpu_median_s"))
        del models
    end_load = common.load_average()
    for row in rows:
        row["load_average_end"] = end_load
    common.write_results(rows, FLAGS.results_file)
    print_table(rows)


if __name__ == "__main__":
    app.run(main)
