"""The face task of the runner: train on an identity folder by config, evaluate a run on an LFW-format pair list.

`train_face(config, workdir)` is the classification run (`runners.classifier.train_and_evaluate`,
docs/runner.md) on the `face_folder` data set, followed, when the config's `verification` section names a pair
list, by `evaluate_workdir`. The section is recorded in `workdir/verification.json` (beside the runner's
`config.json`, whose schema the resume check compares), so a later `evaluate_workdir` uses the run's
`image_pattern`. `evaluate_workdir` loads the run's `checkpoints/model.keras`, verifies it
(`sphere_tf.evaluation.face.verify`) and adds to `workdir/results.json` the verification figures, `roc.png`
(where matplotlib is installed), `pairs` and `images`.

The head may be the sampled / sharded Partial FC head (`model.head.sample_rate`,
`model.head.shard_classes`: the runner's `_partial_fc_plan`, docs/partial_fc.md);
the export leaves the class matrix out by default (`export_class_matrix`).

Every Keras backend runs the task; JAX and PyTorch without TensorFlow: the identity folder is read by the Grain
pipeline (`data.pipeline`, Pillow decoding), the state kept in array checkpoints, and the verification is
`keras.ops` (`sphere_tf.evaluation`). What a backend cannot do is the classification run's to refuse
(`runners.classifier`), in one line naming the backend and the alternative, before any data is read and
without leaving a workdir: the TF Serving export without TensorFlow (`export=True`; export the run's
`model.keras` later), the tf.data pipeline without TensorFlow, `tf.distribute` strategies off TensorFlow, class
sharding (`model.head.shard_classes`) on PyTorch (JAX shards through `keras.distribution`).
"""

import copy
import json
import os

import keras
import numpy as np

from sphere_tf import dependencies
from sphere_tf import json_files
from sphere_tf import layers
from sphere_tf import models as models_lib
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.data import datasets as datasets_lib
from sphere_tf.data import faces
from sphere_tf.data import normalization as normalization_lib
from sphere_tf.evaluation import face as face_lib
from sphere_tf.evaluation import verification
from sphere_tf.runners import classifier
from sphere_tf.runners import recipe
from sphere_tf.runners import schema
from sphere_tf.runners import tasks
from sphere_tf.training import optimization
from sphere_tf.training import workdir_lock

# The `verification` section of a face config (not part of the runner's schema).
VERIFICATION_DEFAULTS = {
    "pairs": "",  # an LFW-format pairs.txt ('' = no verification after training)
    "images": "",  # the image folder the pair list refers to
    "image_pattern": faces.LFW_IMAGE_PATTERN,
    "batch_size": 64,
    "far_targets": list(verification.DEFAULT_FAR_TARGETS),
}
# The `training_set` section of a face config (not part of the runner's schema): the published size of the set
# the identity folder holds, which `dry_run` counts the steps with when the folder is not on this machine (a run
# always counts the folder). 0 / [] = not stated.
TRAINING_SET_DEFAULTS = {
    "name": "",  # for the printout, e.g. "CASIA-WebFace"
    "images": 0,
    "identities": 0,
    "image_shape": [],  # (height, width, channels) of the aligned crops
}
# The face-only sections, taken out of a face config before the runner sees it.
FACE_SECTIONS = {"verification": VERIFICATION_DEFAULTS, "training_set": TRAINING_SET_DEFAULTS}


def _check_verification(section):
    """The `verification` section's values, named (`evaluate_workdir` reads them after the training: a bad one
    would fail there, after hours)."""
    for key in ("pairs", "images"):  # paths, '' for no verification
        validation.text(section[key], f"verification.{key}", allow_empty=True)
    validation.text(section["image_pattern"], "verification.image_pattern")
    validation.positive_int(section["batch_size"], "verification.batch_size", maximum=validation.MAX_INT32)
    targets = section["far_targets"]
    if not isinstance(targets, (list, tuple)) or not targets:
        raise validation.invalid_argument("verification.far_targets", "a non-empty list of FARs in (0, 1]", targets)
    for i, target in enumerate(targets):
        validation.real(target, f"verification.far_targets[{i}]", low=0.0, high=1.0, low_open=True)
    return {**section, "far_targets": list(targets)}


def _check_training_set(section):
    validation.text(section["name"], "training_set.name", allow_empty=True)
    validation.integer(section["images"], "training_set.images", minimum=0, maximum=validation.MAX_INT32)
    validation.integer(section["identities"], "training_set.identities", minimum=0, maximum=validation.MAX_INT32)
    shape = section["image_shape"]
    if not isinstance(shape, (list, tuple)) or len(shape) not in (0, 3) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise validation.invalid_argument("training_set.image_shape", "[] or [height, width, channels] (ints > 0)",
                                          shape)
    return {**section, "image_shape": list(shape)}


def face_sections(config):
    """`(runner_config, sections)` of a face config: plain dicts, defaults filled in; `sections` maps each name of
    `FACE_SECTIONS` (`verification`, `training_set`) to its section.

    The runner config's `export_class_matrix` is False unless the config sets it: the face runner exports the
    `embeddings` signature without the head's class matrix (`sphere_tf.export.export_model`'s `class_matrix`).

    Raises:
        ValueError: an unknown key in a face section, or a bad `training_set` or `verification` value (named).
    """
    config = copy.deepcopy(dict(tasks.without_task_key(config, "face")))
    # Face models serve embeddings: the export leaves the class matrix out unless the config keeps it.
    config.setdefault("export_class_matrix", False)
    sections = {}
    for name, defaults in FACE_SECTIONS.items():
        section = config.pop(name, None) or {}
        if not isinstance(section, dict):
            raise validation.invalid_argument(name, "a dict (a section of the face config)", section)
        section = dict(section)
        unknown = sorted(set(section) - set(defaults))
        if unknown:
            raise ValueError(f"Unknown config key '{name}.{unknown[0]}'; expected one of {sorted(defaults)}.")
        sections[name] = {**defaults, **section}
    sections["training_set"] = _check_training_set(sections["training_set"])
    sections["verification"] = _check_verification(sections["verification"])
    return config, sections


def split_config(config):
    """`(runner_config, verification_section)` of a face config (`face_sections`, without `training_set`).

    Raises:
        ValueError: an unknown key in a face section, or a bad `training_set` value (named).
    """
    config, sections = face_sections(config)
    return config, sections["verification"]


@schema.config_errors
def validate(config):
    """The face config checked once: the runner config over `schema.DEFAULTS` (`classifier.validate`) with the
    face sections (`FACE_SECTIONS`) beside it, defaults filled in.

    Raises:
        schema.ConfigError (a ValueError): an unknown key or a bad value, naming the dotted key.
    """
    runner_config, sections = face_sections(config)
    return {**classifier.validate(runner_config), **sections}


# Where `train_face` records the run's `verification` section (read back by `evaluate_workdir`).
VERIFICATION_FILE = "verification.json"


def _read_json(workdir, name):
    path = os.path.join(workdir, name)
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _run_normalization(workdir, model):
    """None for a model that normalises its own pixels (its first layer; `verify` reads it there); for a model
    saved before the runner put that layer first, the run's recorded `data.normalization`."""
    if layers.model_normalization(model) is not None:
        return None
    recorded = _read_json(workdir, "config.json").get("data", {}).get("normalization")
    return recorded or normalization_lib.DEFAULT_NORMALIZATION


def _run_image_pattern(workdir):
    """The `verification.image_pattern` the run in `workdir` was trained with (LFW's when none recorded)."""
    return _read_json(workdir, VERIFICATION_FILE).get("image_pattern", faces.LFW_IMAGE_PATTERN)


def tar_at_far_table(tar_at_far):
    """`verify`'s `tar_at_far` (`{str(far): percent}`) as a text table: a `FAR  TAR %` header, one row per FAR.

    FARs print in `%g` form (0.001), TARs with two decimals (6.33), right-aligned.
    """
    rows = [(f"{float(far):g}", f"{tar:.2f}") for far, tar in tar_at_far.items()]
    far_width = max([len("FAR")] + [len(far) for far, _ in rows])
    tar_width = max([len("TAR %")] + [len(tar) for _, tar in rows])
    return "\n".join(f"{far:>{far_width}}  {tar:>{tar_width}}" for far, tar in [("FAR", "TAR %")] + rows)


PROTOCOLS = ("lfw", "ytf")


def evaluate_workdir(workdir, pairs, images, *, image_pattern=None, batch_size=64,
                     far_targets=verification.DEFAULT_FAR_TARGETS, protocol="lfw", frames_per_video=100):
    """Verification of a finished run in `workdir`; merges the results into `workdir/results.json`.

    Args:
        workdir: str, a run of `train_face` / the runner (holds `checkpoints/model.keras`).
        pairs: str, the pair list: LFW `pairs.txt` format, or YouTube Faces `splits.txt` with
            `protocol='ytf'`.
        images: str, the image folder (YTF: the `aligned_images_DB` folder of video folders).
        image_pattern: str, see `faces.read_pairs`; None: the run's `verification.image_pattern`
            (recorded by `train_face` in `workdir/verification.json`), else LFW's `NAME/NAME_%04d.jpg`.
        batch_size: int, images per embedding batch.
        far_targets: floats.
        protocol: 'lfw' (image pairs) or 'ytf' (video pairs, frames averaged).
        frames_per_video: int or None, see `verify`.

    Returns:
        dict, the verification results (see `verify`) plus `pairs`, `images`, `roc_png` (None where matplotlib
        is not installed: no plot).

    Raises:
        DataNotFoundError: no model in `workdir`, or missing pair list / images.
        CorruptDataError: a malformed pair list.
    """
    model_path = os.path.join(workdir, "checkpoints", "model.keras")
    if not os.path.isfile(model_path):
        raise faces.DataNotFoundError(f"no trained model in workdir {workdir!r} (expected {model_path}).")
    validation.one_of(protocol, "protocol", PROTOCOLS)
    if image_pattern is None:
        image_pattern = _run_image_pattern(workdir)
    parsed = faces.read_ytf_splits(pairs) if protocol == "ytf" else faces.read_pairs(pairs, image_pattern=image_pattern)
    model = saving.load_model(model_path)
    roc_path = os.path.join(workdir, "roc.png")
    if not dependencies.installed("matplotlib"):
        # The plot is optional (matplotlib is not a core dependency); the figures are the same without it.
        print(f"{roc_path} not written: matplotlib is not installed (pip install matplotlib).")
        roc_path = None
    results = face_lib.verify(model, parsed, images, batch_size=batch_size, normalization=_run_normalization(workdir, model),
                     far_targets=far_targets, roc_path=roc_path, frames_per_video=frames_per_video)
    results.update({"pairs": os.path.abspath(pairs), "images": os.path.abspath(images), "roc_png": roc_path})
    results_path = os.path.join(workdir, "results.json")
    merged = {}
    if os.path.isfile(results_path):
        with open(results_path) as f:
            merged = json.load(f)
    merged.update(results)
    json_files.write_json(results_path, merged)
    return results


@workdir_lock.held_while_running  # the workdir's lock, taken below before the first write, ends with the run
def train_face(config, workdir):
    """Trains by config on a face folder (the runner), then verifies on the config's pair list.

    The `verification` section is written to `workdir/verification.json` first, for `evaluate_workdir`.

    Args:
        config: a runner config (docs/runner.md; `data.name='face_folder'`, `data.manual_dir` the
            identity folder) with an optional `verification` section (`VERIFICATION_DEFAULTS`).
        workdir: str, the output folder.

    Returns:
        dict, the contents of `workdir/results.json`.
    """
    runner_config, section = split_config(config)
    new_workdir = not os.path.exists(workdir)
    os.makedirs(workdir, exist_ok=True)
    # Before the record: a second run on the workdir is refused before it overwrites anything (the
    # classification run inside re-acquires the lock this process holds).
    if workdir_lock.is_writer(runner_config.get("strategy")):
        workdir_lock.acquire(workdir)
    record = os.path.join(workdir, VERIFICATION_FILE)
    json_files.write_json(record, section)
    try:
        results = classifier.train_and_evaluate(runner_config, workdir)
    except BaseException:
        # What the runner refuses before it reads data (a bad config, what this backend cannot do, missing data)
        # leaves no workdir behind, as a classification run's: only the record written above (and the lock
        # file) is there then.
        if new_workdir and set(os.listdir(workdir)) <= {VERIFICATION_FILE, workdir_lock.LOCK_FILE}:
            workdir_lock.release(workdir, remove=True)
            os.remove(record)
            os.rmdir(workdir)
        raise
    if section["pairs"]:
        if not section["images"]:
            raise validation.invalid_argument("verification.images", "the pair list's image folder", "")
        results.update(evaluate_workdir(
            workdir, section["pairs"], section["images"], image_pattern=section["image_pattern"],
            batch_size=section["batch_size"], far_targets=tuple(section["far_targets"])))
    return results


# The dry run builds no class matrix whose float weights and optimizer slots together exceed this: its probe
# allocates them on this one machine, where a Partial FC run would split them over its devices.
DRY_RUN_CLASS_MEMORY_BYTES = 2 * 2**30


def _training_data(runner_config, training_set):
    """`(source, images, identities, image_shape)` the dry run counts with: the identity folder `data.manual_dir`
    where it is a folder here (read as the run reads it), else the config's `training_set` ('training_set' where
    it states the images, else 'unknown'; None for what it does not state)."""
    folder = runner_config["data"]["manual_dir"]
    if folder and os.path.isdir(folder):
        index = faces.index_identity_folder(folder)
        return "folder", len(index.paths), index.num_classes, faces.image_shape(index.paths[0])
    source = "training_set" if training_set["images"] else "unknown"
    return (source, training_set["images"] or None, training_set["identities"] or None,
            tuple(training_set["image_shape"]) or None)


def _class_matrix(runner_config, num_classes, input_shape):
    """The head's `(d, C)` class matrix: `width` d, `classes` C, `bytes` (in the variable dtype),
    `optimizer_slots` (the configured optimizer's slots per weight) and `total_bytes` (weights and slots).

    d is read from the model built with a handful of classes (not C: that is the allocation to be judged)."""
    model_cfg = recipe.model_kwargs(runner_config["model"])
    head = model_cfg.get("head") if isinstance(model_cfg.get("head"), dict) else {}
    name = model_cfg.pop("name")
    small = models_lib.create_model(name, input_shape=input_shape, num_classes=max(2, head.get("num_shards", 1)),
                                    **model_cfg)
    head_layer = small.get_layer(head.get("name", "logits"))
    # MarginHead's kernel is (d, C); a PartialFCHead stores its class-major, `real_kernel()` is the (d, C) view.
    kernel = head_layer.real_kernel() if hasattr(head_layer, "real_kernel") else head_layer.kernel
    width = int(kernel.shape[0])
    itemsize = np.dtype(keras.mixed_precision.DTypePolicy(runner_config["mixed_precision"]).variable_dtype).itemsize
    # The slots per weight: the variables a built optimizer adds for one weight (momentum 1, Adam 2, plain SGD 0).
    bare = optimization.build_optimizer(runner_config["optimizer"], 0.1)
    bare.build([])
    one = optimization.build_optimizer(runner_config["optimizer"], 0.1)
    one.build([keras.Variable(np.zeros((1,), "float32"))])
    slots = len(one.variables) - len(bare.variables)
    matrix = width * int(num_classes) * itemsize
    return {"width": width, "classes": int(num_classes), "bytes": matrix, "optimizer_slots": slots,
            "total_bytes": matrix * (1 + slots)}


def dry_run(config, probe_steps=3, class_memory_limit=DRY_RUN_CLASS_MEMORY_BYTES):
    """What `train_face(config, workdir)` would do, before anything trains or any file is written: the resolved
    config, the step count, the class matrix's memory and an estimated training time on this machine.

    The config is checked as the run checks it (`face_sections`, then the runner's `validate`: the same errors).
    The steps count the identity folder `data.manual_dir` where it is a folder on this machine (its images, with
    `data.train_limit`, and identities, as the run reads them), else the published size the config's
    `training_set` states (CASIA-WebFace, MS1M in sphere_tf/configs/face/), else they are unknown. The time is
    `runners.classifier.dry_run`'s: the model, head and optimizer built and compiled as the run
    builds them (a Partial FC head as `PartialFCHead` with its own loss and `PartialFCOptimizer`, one device) on
    the folder's (or `training_set`'s) image shape and identity count, one step on a synthetic batch to compile,
    `probe_steps` timed. A class matrix whose weights and optimizer slots exceed `class_memory_limit` bytes is
    not built: its memory is reported and the time is not measured.

    Args:
        config: ConfigDict or dict, a face config (runner config plus `FACE_SECTIONS`).
        probe_steps: int >= 0, timed steps (0: no model is built, no time estimate).
        class_memory_limit: int > 0, bytes.

    Returns:
        dict: `classifier.dry_run`'s plan (`config` now holds the face sections too), plus `data_source`
        ('folder', 'training_set' or 'unknown'), `folder_images`, `identities`, `image_shape`, `class_matrix`
        (see `_class_matrix`) and `probe_skipped` (None, or why no time was measured).

    Raises:
        ConfigError / ValueError: a bad config, as the run (named).
        DataNotFoundError, CorruptDataError: `data.manual_dir` is a folder but not an identity folder.
    """
    runner_config, sections = face_sections(config)
    runner_config = classifier.validate(runner_config)
    probe_steps = validation.integer(probe_steps, "probe_steps", minimum=0)
    class_memory_limit = validation.positive_int(class_memory_limit, "class_memory_limit")
    source, images, identities, image_shape = _training_data(runner_config, sections["training_set"])
    # Not stated: timed on the face_folder data set's own shapes (the SphereFace crops of CASIA-WebFace).
    spec = datasets_lib.DATASETS["face_folder"]
    identities, image_shape = identities or spec.num_classes, tuple(image_shape or spec.input_shape)
    matrix = _class_matrix(runner_config, identities, image_shape)
    skipped = None
    if probe_steps and matrix["total_bytes"] > class_memory_limit:
        skipped = (f"the class matrix and its optimizer slots ({matrix['total_bytes'] / 2**30:.2f} GiB) exceed the "
                   f"dry run's limit of {class_memory_limit / 2**30:.2f} GiB on this machine")
    plan = classifier.dry_run(runner_config, probe_steps=0 if skipped else probe_steps,
                              data={"train_images": images, "num_classes": identities, "input_shape": image_shape})
    plan.update(config={**plan["config"], **sections}, data_source=source, folder_images=images,
                identities=identities, image_shape=image_shape, class_matrix=matrix, probe_skipped=skipped)
    return plan


def dry_run_lines(plan):
    """The face dry run's summary (`dry_run`), printed after the resolved config."""
    config = plan["config"]
    shape = "x".join(str(d) for d in plan["image_shape"])
    folder = config["data"]["manual_dir"]
    absent = f"data.manual_dir {folder!r} is not a folder here" if folder else "data.manual_dir is not set"
    if plan["data_source"] == "folder":
        data = (f"identity folder {folder}: {plan['folder_images']:,} images of "
                f"{plan['identities']:,} identities, {shape}")
    elif plan["data_source"] == "training_set":
        name = config["training_set"]["name"] or "the config's training_set"
        data = (f"{name} as published (training_set): {plan['folder_images']:,} images of {plan['identities']:,} "
                f"identities, {shape}; {absent}")
    else:
        data = (f"unknown: {absent} and the config states no training_set.images (timed with "
                f"{plan['identities']:,} identities, {shape})")
    matrix = plan["class_matrix"]
    memory = (f"{matrix['width']} x {matrix['classes']:,}: {matrix['bytes'] / 2**20:,.1f} MiB, "
              f"{matrix['total_bytes'] / 2**20:,.1f} MiB with {matrix['optimizer_slots']} optimizer slot(s) per weight")
    head = config["model"].get("head") or {}
    if head.get("shard_classes"):
        memory += " (split over the devices: model.head.shard_classes)"
    lines = [f"data             {data}"] + classifier.dry_run_lines(plan) + [f"class matrix     {memory}"]
    if plan["probe_skipped"]:
        lines.append(f"step time        not measured: {plan['probe_skipped']} (--dry_run_class_memory_gb)")
    pairs = config["verification"]["pairs"]
    lines.append(f"verification     {pairs if pairs else 'none'}" + (
        f" with images {config['verification']['images']}" if pairs else " (verification.pairs is '')"))
    return lines


def _schema():
    return {**copy.deepcopy(schema.DEFAULTS), "export_class_matrix": False, **copy.deepcopy(FACE_SECTIONS)}


def result_lines(results):
    """The verification figures of a run's results: the 10-fold accuracy and the `FAR  TAR %` table."""
    lines = []
    if results.get("lfw_accuracy") is not None:
        lines.append(f"Verification: {results['lfw_accuracy']:.2f}% +- {results['lfw_std']:.2f} (10-fold)")
    if "tar_at_far" in results:
        lines.append(tar_at_far_table(results["tar_at_far"]))
    return lines


TASK = tasks.Task(validate=validate, run=train_face, dry_run=dry_run, dry_run_lines=dry_run_lines, schema=_schema,
                  result_lines=result_lines)
