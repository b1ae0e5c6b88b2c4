r"""Cost of FGSM and BIM-20 on DCNet's adversarial CNN-9, side by side with one forward+backward pass.

The issue's target: per batch, BIM-20 (20 input-gradient passes + its projections,
one compiled `tf.function`) costs <= 22x one forward+backward pass of the same
batch. Every case is built and traced first, then timed round-robin (one call of
each case per round), so load from other processes hits every case alike; the
medians over rounds are reported as wall time and as process CPU time (more
robust on a shared host), with images/s.

Cases, per operator (`--operators`: conv2d baseline, tanh = TanhConv + cosine):
  fwd_bwd   forward (training=True) + gradients of the loss w.r.t. the weights
  fgsm      `make_attack(model, 'fgsm', ...)`: one input-gradient pass + sign step + clip
  bim20     `make_attack(model, 'bim', ...)`: 20 steps of τ = 2 within ε = 8 (pixels)

    python -m bench.bench_adversarial --results_file=bench/results/cpu/adversarial.jsonl
"""

import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from bench import common
from sphere_tf import models
from sphere_tf.adversarial import make_attack
from sphere_tf.adversarial import pixel_space

_BATCH = flags.DEFINE_integer("batch_size", 64, "Images per batch.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed round-robin rounds (after one warm-up round).")
_OPERATORS = flags.DEFINE_list("operators", ["conv2d", "tanh"], "conv2d and/or tanh.")
_SHAPE = flags.DEFINE_list("input_shape", ["32", "32", "3"], "Image shape (CIFAR-10: 32,32,3).")
_RESULTS = flags.DEFINE_string("results_file", None, "JSON-lines output.")

_OPS = {"conv2d": {"layer": "conv2d"}, "tanh": {"layer": "decoupled", "magnitude": "tanh", "angular": "cosine"}}


def _fwd_bwd(model):
    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x, training=True)))
        return tape.gradient(loss, model.trainable_variables)

    return step


def main(argv):
    del argv
    shape = tuple(int(s) for s in _SHAPE.value)
    space = pixel_space("centered_128", shape[-1])
    x, y = common.random_batch(_BATCH.value, shape)
    x = tf.clip_by_value(x, space.lower[0], space.upper[0])
    cases = {}
    for op in _OPERATORS.value:
        model = models.create_model("dcnet_cnn9_adv", input_shape=shape, num_classes=10, operator=_OPS[op])
        cases[(op, "fwd_bwd")] = _fwd_bwd(model)
        cases[(op, "fgsm")] = make_attack(model, "fgsm", space, epsilon=8)
        cases[(op, "bim20")] = make_attack(model, "bim", space, epsilon=8, step=2, iterations=20)
    env = common.environment()
    wall = {k: [] for k in cases}
    cpu = {k: [] for k in cases}
    for round_ in range(_ROUNDS.value + 1):
        for key, fn in cases.items():
            w0, c0 = time.perf_counter(), time.process_time()
            common._block(fn(x, y))  # noqa: SLF001 (the shared "force completion" helper)
            if round_:  # round 0 traces and warms up
                wall[key].append(time.perf_counter() - w0)
                cpu[key].append(time.process_time() - c0)
    rows = []
    for op in _OPERATORS.value:
        base_w, base_c = np.median(wall[(op, "fwd_bwd")]), np.median(cpu[(op, "fwd_bwd")])
        for case in ("fwd_bwd", "fgsm", "bim20"):
            w, c = float(np.median(wall[(op, case)])), float(np.median(cpu[(op, case)]))
            rows.append({"operator": op, "case": case, "batch_size": _BATCH.value, "input_shape": list(shape),
                         "wall_s": w, "cpu_s": c, "images_per_s": _BATCH.value / w,
                         "wall_ratio_to_fwd_bwd": w / base_w, "cpu_ratio_to_fwd_bwd": c / base_c,
                         "traces": int(cases[(op, case)].experimental_get_tracing_count())})
    env["load_average_end"] = common.load_average()
    for row in rows:
        row["environment"] = env
    common.write_results(rows, _RESULTS.value)


if __name__ == "__main__":
    app.run(main)
