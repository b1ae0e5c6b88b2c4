"""ConvNorm2D train-step time relative to Conv2D + BatchNorm on the 9-layer CNN.

Both models are `bench.common.cnn9` (3 stages × 3 conv 3×3 'same' + BN + ReLU,
widths 64/96/128, 32×32×3 inputs). The baseline uses `keras.layers.Conv2D`; the
ConvNorm model uses `ConvNorm2D(width, 3, padding='same', batch_norm=False)`, so
the CNN's own BN follows it ("ConvNorm + BN", as upstream's `PreConv(bn=True)`).
Cases are timed round-robin in one process (one step of each per round), so
machine load hits them alike; we report the median over rounds and the ratio
to the baseline with the same `jit_compile`. The paper's Table 8 (ResNet-18,
CIFAR-10, RTX-8000) gives 60 s vs 21 s per epoch, about 2.9×.

    python -m bench.bench_conv_norm --batch_size 64 --num_iters 15 \
        --results_file bench/results/cpu/conv_norm.jsonl
"""

import statistics
import time

import keras
from absl import app
from absl import flags

from bench import common
from sphere_tf.layers import conv_norm

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 64, "Batch size.")
flags.DEFINE_integer("image_size", 32, "Input height = width.")
flags.DEFINE_integer("num_warmup", 3, "Untimed steps per case before timing.")
flags.DEFINE_integer("num_iters", 15, "Timed rounds (one step per case per round).")
flags.DEFINE_list("jit_compile", ["false", "true"], "jit_compile settings to time (each with its own baseline).")
flags.DEFINE_string("results_file", None, "Write JSON lines here.")

_LAYERS = {
    "conv2d_bn": lambda width: keras.layers.Conv2D(width, 3, padding="same"),
    "convnorm_bn": lambda width: conv_norm.ConvNorm2D(width, 3, padding="same", batch_norm=False),
}


def main(argv):
    del argv
    shape = (FLAGS.image_size, FLAGS.image_size, 3)
    x, y = common.random_batch(FLAGS.batch_size, shape)
    cases = []
    for jit in FLAGS.jit_compile:
        jit = jit.lower() in ("1", "true", "yes")
        for name, factory in _LAYERS.items():
            keras.utils.set_random_seed(0)
            model = common.cnn9(factory, input_shape=shape)
            step = common.make_train_step(model, keras.optimizers.SGD(0.01, momentum=0.9), jit_compile=jit)
            for _ in range(FLAGS.num_warmup):
                common._block(step(x, y))
            cases.append({"layer": name, "jit_compile": jit, "step": step, "times": []})
    for _ in range(FLAGS.num_iters):
        for case in cases:
            start = time.perf_counter()
            common._block(case["step"](x, y))
            case["times"].append(time.perf_counter() - start)
    rows = []
    env = common.environment()
    for case in cases:
        times = sorted(case["times"])
        base = next(c for c in cases if c["layer"] == "conv2d_bn" and c["jit_compile"] == case["jit_compile"])
        median = statistics.median(times)
        rows.append({
            **env,
            "benchmark": "conv_norm_train_step",
            "model": "cnn9",
            "layer": case["layer"],
            "jit_compile": case["jit_compile"],
            "batch_size": FLAGS.batch_size,
            "input_shape": list(shape),
            "dtype": "float32",
            "num_iters": FLAGS.num_iters,
            "median_s": median,
            "p90_s": times[min(len(times) - 1, int(0.9 * len(times)))],
            "ratio_to_conv2d_bn": median / statistics.median(base["times"]),
        })
    common.write_results(rows, FLAGS.results_file)


if __name__ == "__main__":
    app.run(main)
