r"""Exports a finished runner workdir for TensorFlow Serving.

  sphere-tf export --workdir=runs/fashion_mnist --export_base=/models \
      --model_name=fashion_mnist [--version=N] [--formats=onnx,tflite]

Reads `<workdir>/checkpoints/model.keras` (whose first layer, `PixelNormalization`, normalises the raw pixels
the serving signature takes) and `<workdir>/config.json`, and writes `<export_base>/<model_name>/<version>/` plus
`<export_base>/models.config` through `sphere_tf.export.export_model`: the next
free version unless `--version` is given (an existing version is refused),
verified in a fresh process before it becomes visible. A model saved before the
runner put that layer first is served behind the config's `data.normalization`
(for `mean_subtraction` the per-channel training mean is recomputed from the
configured data set unless `--channel_mean` gives it). `--formats` also
writes `<model_name>/<version>.onnx` / `.tflite` beside the version folder, each
verified against the SavedModel (`sphere_tf.export.export_onnx` / `export_tflite`).
"""

import json
import os

from sphere_tf_cli import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished runner workdir (config.json, checkpoints/model.keras).")
_EXPORT_BASE = flags.DEFINE_string("export_base", None, "Folder of the TF Serving model folders.")
_MODEL_NAME = flags.DEFINE_string("model_name", None, "Model name (folder and TF Serving name); default: "
                                  "the config's model name.")
_VERSION = flags.DEFINE_integer("version", None, "Version number; default: the next free one.")
_INPUT_DTYPE = flags.DEFINE_enum("input_dtype", "uint8", ["uint8", "float32"], "dtype of the `images` input.")
_CHANNEL_MEAN = flags.DEFINE_list("channel_mean", None, "Per-channel means for normalization='mean_subtraction' "
                                  "(default: recomputed from the training data).")
_VERIFY = flags.DEFINE_bool("verify", True, "Verify before the version becomes visible (fresh-process reload "
                            "without sphere_tf, saved_model_cli run, warmup parse-back).")
_FORMATS = flags.DEFINE_list("formats", [], "Optional formats written beside the version folder: onnx, tflite "
                             "(ONNX needs tf2onnx and onnxruntime).")
_FOLD_BATCH_NORM = flags.DEFINE_bool("fold_batch_norm", True, "Serve operator → BatchNormalization pairs "
                                     "(cosine angular activation) as one operator with the BN scale on its kernel.")
flags.mark_flags_as_required(["workdir", "export_base"])


def read_workdir(workdir):
    """`(config dict, model path)` of a runner workdir; `FileNotFoundError` naming the missing file."""
    config_path = os.path.join(workdir, "config.json")
    model_path = os.path.join(workdir, "checkpoints", "model.keras")
    for path in (config_path, model_path):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--workdir={workdir!r} holds no {os.path.relpath(path, workdir)}; expected a "
                                    "workdir written by sphere_tf_cli.train_classifier.")
    with open(config_path) as f:
        config = json.load(f)
    return config, model_path


def _channel_mean(config):
    if _CHANNEL_MEAN.value:
        return [float(v) for v in _CHANNEL_MEAN.value]
    data_cfg = config.get("data", {})
    if data_cfg.get("normalization") != "mean_subtraction":
        return None
    from sphere_tf import data as data_lib  # noqa: PLC0415 (after flag parsing: --help is fast)
    from sphere_tf.runners import classifier  # noqa: PLC0415

    _, _, info = data_lib.get_datasets(data_cfg["name"], batch_size=1, seed=config.get("seed", 0),
                                       **classifier.data_kwargs(data_cfg))
    return info["channel_mean"]


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")

    from sphere_tf import export as export_lib  # noqa: PLC0415 (imports sphere_tf: registers its layers)

    from sphere_tf import layers  # noqa: PLC0415
    from sphere_tf import saving  # noqa: PLC0415

    config, model_path = read_workdir(_WORKDIR.value)
    model = saving.load_model(model_path, compile=False)  # a newer release's file: its one clear error
    model_name = _MODEL_NAME.value or config.get("model", {}).get("name") or "model"
    if layers.model_normalization(model) is not None:  # the model normalises its pixels: export reads it there
        normalization = channel_mean = None
    else:  # saved before the runner put PixelNormalization first: the pipeline's, from the run's config
        normalization, channel_mean = config.get("data", {}).get("normalization"), _channel_mean(config)
    result = export_lib.export_model(
        model, _EXPORT_BASE.value, model_name=model_name, version=_VERSION.value,
        normalization=normalization, channel_mean=channel_mean, input_dtype=_INPUT_DTYPE.value, verify=_VERIFY.value,
        formats=tuple(_FORMATS.value), fold_batch_norm=_FOLD_BATCH_NORM.value,
    )
    print(f"Exported {model_name!r} version {result.version} to {result.path}")
    print(f"Signatures: {json.dumps(result.signatures)}")
    for name, path in sorted(result.formats.items()):
        print(f"{name}: {path}")
    print(f"Serve with: tensorflow_model_server --rest_api_port=8501 --model_config_file={result.models_config}")


if __name__ == "__main__":
    app.run(main)
