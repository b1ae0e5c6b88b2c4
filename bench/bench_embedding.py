"""SphereFace-20 face embedding: image + flip (one compiled batched function) vs the same net's plain forward.

Cases, timed side by side in one process on one SphereFace-20 (112x96x3 crops,
FC 512 embedding, `sphere_tf.models.create_model('sphereface20')`):

* `plain`: `verification.plain_embedding_fn(embedder)`, the net's forward pass
  on a batch of B images (the baseline);
* `flip`: `verification.flip_embedding_fn(embedder)`, the evaluation protocol:
  the B images and their horizontal flips in one pass, features concatenated
  (B x 1024);
* `classifier` (diagnostic): the whole classifier's forward (embedding + a
  10,575-way dense layer) on the B images.

Timing: `--rounds` round-robin rounds of one call of every case (so load from
other processes hits all alike), after `--warmup` calls each; the median per
call is reported as wall and process-CPU time, with images/s (B per call) and
the ratio to `plain`. Target (issue 17): flip / plain <= 2.05x (the flip doubles
the images, so 2x is the floor).

    python -m bench.bench_embedding --results_file=bench/results/cpu/embedding.jsonl
"""

import statistics
import time

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

from bench import common
from sphere_tf import models
from sphere_tf.evaluation import verification

_BATCH = flags.DEFINE_integer("batch_size", 16, "Images per call (B).")
_ROUNDS = flags.DEFINE_integer("rounds", 7, "Round-robin rounds.")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed calls of each case first.")
_JIT = flags.DEFINE_bool("jit_compile", False, "XLA-compile the functions.")
_RESULTS = flags.DEFINE_string("results_file", None, "Write the JSON lines here.")


def main(argv):
    del argv
    env = common.environment()
    model = models.create_model("sphereface20", input_shape=(112, 96, 3), num_classes=10575)
    embedder = verification.embedding_model(model)
    images = tf.constant(np.random.default_rng(0).uniform(-1, 1, (_BATCH.value, 112, 96, 3)).astype(np.float32))

    @tf.function(jit_compile=_JIT.value)
    def classifier(x):
        return model(x, training=False)

    cases = {
        "plain": verification.plain_embedding_fn(embedder, jit_compile=_JIT.value),
        "flip": verification.flip_embedding_fn(embedder, jit_compile=_JIT.value),
        "classifier": classifier,
    }
    for fn in cases.values():
        for _ in range(_WARMUP.value):
            fn(images).numpy()
    wall = {name: [] for name in cases}
    cpu = {name: [] for name in cases}
    for _ in range(_ROUNDS.value):
        for name, fn in cases.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn(images).numpy()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    base_wall, base_cpu = statistics.median(wall["plain"]), statistics.median(cpu["plain"])
    rows = []
    for name in cases:
        median_wall, median_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        rows.append({
            "case": name, "batch_size": _BATCH.value, "rounds": _ROUNDS.value, "jit_compile": _JIT.value,
            "median_wall_s": median_wall, "median_cpu_s": median_cpu,
            "images_per_s_wall": _BATCH.value / median_wall, "images_per_s_cpu": _BATCH.value / median_cpu,
            "wall_ratio_to_plain": median_wall / base_wall, "cpu_ratio_to_plain": median_cpu / base_cpu,
            "target": "flip <= 2.05x plain" if name == "flip" else None,
            **env, "load_average_end": common.load_average(),
        })
    common.write_results(rows, _RESULTS.value)


if __name__ == "__main__":
    app.run(main)
