"""White-box and black-box accuracy under attack, accuracy-vs-ε curves, DeepFool strength, Tables 7/8.

DCNet (Liu et al., Decoupled Networks, CVPR 2018) §6.2:

* white-box (Table 7): the examples are crafted on the target itself;
* black-box (Table 8): "the adversarial examples are computed from a CNN
  baseline with the same architecture as the target models", then applied to
  every target. Only the source's gradients are taken; targets run forward only
  (`gradient_attacks.make_predict`), so a target's gradient is never computed.

Accuracies are percentages of the evaluated images classified correctly. A `space`
of None is read from the (source) model (`pixels.input_space`: raw pixels for a
model whose first layer is a `PixelNormalization`).

On every Keras backend: the examples are `gradient_attacks`' (FGSM, BIM, PGD in `keras.ops`, compiled once per
model and attack), whose FGSM and BIM examples on TensorFlow are cleverhans' (`attacks`) to the last bit, so the
accuracies are too. PGD's random start is drawn by `keras.random` (a seeded `SeedGenerator` per attack) rather than
TensorFlow's global generator: the same distribution, another stream. No framework is imported here.
"""

import numpy as np
from keras import ops

from sphere_tf import validation
from sphere_tf.adversarial import gradient_attacks
from sphere_tf.adversarial import pixels as pixels_lib
from sphere_tf.training import progress

# Table 7/8 layout: rows (training, attack), columns (model).
MODELS = ("baseline", "sphereconv", "ballconv", "tanhconv")
MODEL_TITLES = {"baseline": "Baseline", "sphereconv": "SphereConv", "ballconv": "BallConv", "tanhconv": "TanhConv"}
TRAININGS = ("natural", "fgsm")
TABLE_ATTACKS = ("none", "fgsm", "bim")
_TRAINING_TITLES = {"natural": "natural", "fgsm": "FGSM-adv"}
_ATTACK_TITLES = {"none": "None", "fgsm": "FGSM", "bim": "BIM", "pgd": "PGD"}

# The functions made once per model on TensorFlow (the attacks' and predictions' compiled body, Keras's fit and
# evaluate steps of a new model): one trace each, which TensorFlow's retracing detector, counting per Python code
# object, reports as retracing across models.
PER_MODEL_FUNCTIONS = ("ModelFunction.__init__.<locals>.compiled_body", "TensorFlowTrainer._make_function")

# The paper's numbers (DCNet Tables 7 and 8, CIFAR-10, CNN-9, accuracy %).
PAPER_TABLE7 = {
    "natural": {"none": (85.35, 88.58, 91.13, 91.45), "fgsm": (18.82, 43.64, 50.47, 52.60),
                "bim": (8.67, 8.89, 7.74, 10.18)},
    "fgsm": {"none": (83.70, 87.41, 87.47, 87.54), "fgsm": (78.96, 85.98, 82.20, 81.46),
             "bim": (7.96, 35.07, 17.38, 19.86)},
}
PAPER_TABLE8 = {
    "natural": {"none": (85.35, 88.58, 91.13, 91.45), "fgsm": (50.90, 56.71, 49.50, 50.61),
                "bim": (36.22, 43.10, 27.48, 29.06)},
    "fgsm": {"none": (83.70, 87.41, 87.47, 87.54), "fgsm": (77.57, 76.29, 78.67, 80.38),
             "bim": (78.55, 77.79, 80.59, 82.47)},
}


def per_model_tracing():
    """Within it, TensorFlow's "N out of the last M calls to <f> triggered tf.function retracing" warning is
    dropped for the `PER_MODEL_FUNCTIONS` (each traced once per model). Every other warning, and that one for any
    other function, passes; on JAX and PyTorch there is no such warning. Usable as a decorator."""
    return progress.quiet_retracing(PER_MODEL_FUNCTIONS)


def _correct(predict, images, labels):
    """How many of `images` `predict` classifies as `labels` (a backend tensor read by `keras.ops`)."""
    return int(np.sum(ops.convert_to_numpy(predict(images)) == labels))


def _check_data(images, labels):
    images = np.asarray(images, np.float32)
    labels = np.asarray(labels).astype(np.int32).reshape(-1)
    if images.ndim != 4 or images.shape[0] != labels.shape[0] or images.shape[0] == 0:
        raise validation.invalid_argument(
            "images", f"a non-empty (N, H, W, C) array with one label each ({labels.shape[0]} labels)", images.shape)
    return images, labels


def _batches(n, batch_size):
    batch_size = validation.positive_int(batch_size, "batch_size")
    return [(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]


def white_box(model, images, labels, space=None, attacks=TABLE_ATTACKS, batch_size=256, **budget):
    """Accuracy (%) of `model` on `images` under each attack crafted on `model` itself.

    Args:
        model: Keras model (images -> logits).
        images: (N, H, W, C) model inputs; labels: (N,) ints.
        space: `PixelSpace` of the inputs, or None: read from the model (`pixels.input_space`).
        attacks: names in `gradient_attacks.ATTACKS`.
        batch_size: int > 0.
        **budget: `epsilon`, `step`, `iterations` (pixels) and `seed` (PGD's starts) for
            `gradient_attacks.make_attack`.

    Returns:
        dict attack -> accuracy %.
    """
    images, labels = _check_data(images, labels)
    space = pixels_lib.space_for(model, space)
    predict = gradient_attacks.make_predict(model)
    results = {}
    for name in attacks:
        # 'none' classifies the clean images directly (no identity function to compile).
        attack = gradient_attacks.make_attack(model, name, space, **budget) if name != "none" else None
        correct = 0
        for lo, hi in _batches(len(labels), batch_size):
            adv = attack(images[lo:hi], labels[lo:hi]) if attack is not None else images[lo:hi]
            correct += _correct(predict, adv, labels[lo:hi])
        results[name] = 100.0 * correct / len(labels)
    return results


def black_box(source, targets, images, labels, space=None, attacks=TABLE_ATTACKS, batch_size=256, **budget):
    """Accuracy (%) of every target under examples crafted on `source` (transfer attack).

    Each batch is attacked once on `source`; the targets only classify the
    result (forward passes, no gradient of a target is ever taken).

    Args:
        source: Keras model the examples are crafted on.
        targets: dict name -> Keras model.
        images, labels, space, attacks, batch_size, **budget: as `white_box` (`space` None: the source's,
            `pixels.input_space`); the targets must take the same inputs (checked against a target's
            `PixelNormalization`).

    Returns:
        dict target name -> {attack: accuracy %}.
    """
    images, labels = _check_data(images, labels)
    if not isinstance(targets, dict) or not targets:
        raise validation.invalid_argument("targets", "a non-empty dict name -> model", targets)
    space = pixels_lib.space_for(source, space)
    for target in targets.values():
        pixels_lib.space_for(target, space)
    predicts = {name: gradient_attacks.make_predict(model) for name, model in targets.items()}
    results = {name: {} for name in targets}
    for attack_name in attacks:
        attack = gradient_attacks.make_attack(source, attack_name, space, **budget)
        correct = dict.fromkeys(targets, 0)
        for lo, hi in _batches(len(labels), batch_size):
            adv = attack(images[lo:hi], labels[lo:hi])
            for name, predict in predicts.items():
                correct[name] += _correct(predict, adv, labels[lo:hi])
        for name in targets:
            results[name][attack_name] = 100.0 * correct[name] / len(labels)
    return results


def accuracy_curve(model, images, labels, space, epsilons, attack="fgsm", batch_size=256, **budget):
    """White-box accuracy (%) at each ε (pixels) of `attack` (for BIM/PGD τ = min(step, ε)).

    FGSM curves use one compiled function for every ε (`gradient_attacks.make_fgsm_sweep`). `space` as `white_box`
    (None: read from the model).

    Returns:
        list of accuracies, one per ε.
    """
    space = pixels_lib.space_for(model, space)
    if attack == "fgsm":
        images, labels = _check_data(images, labels)
        sweep = gradient_attacks.make_fgsm_sweep(model, space)
        predict = gradient_attacks.make_predict(model)
        curve = []
        for epsilon in epsilons:
            epsilon = validation.non_negative_float(epsilon, "epsilons[...]")
            correct = 0
            for lo, hi in _batches(len(labels), batch_size):
                adv = sweep(images[lo:hi], labels[lo:hi], np.float32(epsilon))
                correct += _correct(predict, adv, labels[lo:hi])
            curve.append(100.0 * correct / len(labels))
        return curve
    curve = []
    for epsilon in epsilons:
        epsilon = validation.non_negative_float(epsilon, "epsilons[...]")
        extra = {k: v for k, v in budget.items() if k != "epsilon"}
        if attack in ("bim", "pgd"):
            extra["step"] = min(extra.get("step", gradient_attacks.PAPER_STEP), epsilon)
        curve.append(white_box(model, images, labels, space, attacks=(attack,), batch_size=batch_size,
                               epsilon=epsilon, **extra)[attack])
    return curve


def deepfool_strength(model, images, labels, space=None, steps=50, overshoot=0.02, batch_size=100):
    """Perturbation needed to fool `model` per image, by DeepFool through foolbox 3 (DCNet App. C, Fig. 5).

    Only images the model classifies correctly are attacked. Sizes are on the
    0–255 pixel scale. foolbox 3.3 + eagerpy under NumPy 2: the labels must have
    the dtype of the model's argmax (int64; JAX's default int), else eagerpy's
    `np.find_common_type` (removed in NumPy 2) raises (`gradient_attacks.foolbox_labels`).

    On every Keras backend: the foolbox model is the backend's (`fb.TensorFlowModel`,
    `fb.JAXModel`, `fb.PyTorchModel`: `gradient_attacks.foolbox_model`) and the
    predictions are `gradient_attacks.make_predict`'s.

    Args:
        model: Keras model (images -> logits).
        images, labels, space: as `white_box`.
        steps: int > 0, DeepFool iterations.
        overshoot: float >= 0, DeepFool's overshoot.
        batch_size: int > 0.

    Returns:
        dict with `l2` and `linf` (lists, pixel units, one per image that attack fooled),
        `attacked` (the images classified correctly, attacked by both), and per norm
        `<norm>_fooled` (count), `<norm>_success_rate` (% of `attacked`) and `<norm>_median`.
        A median of no fooled image, or a rate of no attacked image, is undefined: it is None
        (null in JSON, never NaN) and `note` says why.

    Raises:
        ImportError: foolbox is not installed (`pip install foolbox`).
    """
    try:
        import foolbox  # noqa: PLC0415 (optional dependency)
    except ImportError as error:
        raise ImportError("deepfool_strength needs foolbox 3 (`pip install foolbox`).") from error

    images, labels = _check_data(images, labels)
    space = pixels_lib.space_for(model, space)
    steps = validation.positive_int(steps, "steps")
    overshoot = validation.non_negative_float(overshoot, "overshoot")
    predict = gradient_attacks.make_predict(model)
    lo_b, hi_b = min(space.lower), max(space.upper)
    fmodel = gradient_attacks.foolbox_model(foolbox, model, (lo_b, hi_b))
    sizes, attacked = {"l2": [], "linf": []}, 0
    for lo, hi in _batches(len(labels), batch_size):
        x, y = images[lo:hi], labels[lo:hi]
        keep = ops.convert_to_numpy(predict(x)) == y
        if not np.any(keep):
            continue
        x, y = x[keep], y[keep]
        attack_l2 = foolbox.attacks.L2DeepFoolAttack(steps=steps, overshoot=overshoot)
        attack_linf = foolbox.attacks.LinfDeepFoolAttack(steps=steps, overshoot=overshoot)
        xt, yt = ops.convert_to_tensor(x), gradient_attacks.foolbox_labels(y)
        attacked += len(y)
        for attack, norm, order in ((attack_l2, "l2", 2), (attack_linf, "linf", np.inf)):
            _, clipped, success = attack(fmodel, xt, yt, epsilons=None)
            clipped = np.clip(ops.convert_to_numpy(clipped), np.asarray(space.lower), np.asarray(space.upper))
            delta = (clipped - x).reshape(len(y), -1) / space.scale
            ok = ops.convert_to_numpy(success) & (ops.convert_to_numpy(predict(clipped)) != y)
            sizes[norm].extend(np.linalg.norm(delta[ok], ord=order, axis=1).tolist())
    return _deepfool_summary(sizes, attacked, len(labels))


def _deepfool_summary(sizes, attacked, total):
    """Per-norm counts, success rates and medians of DeepFool sizes; None (with a note) where undefined."""
    summary, notes = {**sizes, "attacked": attacked}, []
    if not attacked:
        notes.append(f"none of the {total} images was classified correctly, so none was attacked: "
                     "success rates and medians are undefined")
    for norm, values in sizes.items():
        summary[f"{norm}_fooled"] = len(values)
        summary[f"{norm}_success_rate"] = 100.0 * len(values) / attacked if attacked else None
        summary[f"{norm}_median"] = float(np.median(values)) if values else None
        if attacked and not values:
            notes.append(f"the {norm} attack fooled none of the {attacked} attacked images: {norm}_median is "
                         "undefined")
    if notes:
        summary["note"] = "; ".join(notes)
    return summary


def _cell(values, bold=False):
    values = [v for v in np.ravel(values) if v is not None]
    if not values:
        return "–"
    text = f"{np.mean(values):.2f}"
    if len(values) > 1:
        text += f" ± {np.std(values, ddof=1):.2f}"
    return f"**{text}**" if bold else text


def markdown_table(per_seed, title, attacks=TABLE_ATTACKS, paper=None):
    """The Table 7/8 layout in Markdown: rows (training, attack), columns the four models.

    Args:
        per_seed: dict training -> model -> attack -> list of accuracies (one per seed);
            a missing entry prints '–'.
        title: str, the heading line.
        attacks: the attack rows.
        paper: optional dict training -> attack -> 4-tuple of the paper's numbers,
            printed in brackets after each cell.

    Returns:
        str. Cells are mean ± sample std over seeds; the row's best mean is bold.
    """
    lines = [f"**{title}**", "", "| Training | Attack | " + " | ".join(MODEL_TITLES[m] for m in MODELS) + " |",
             "|---|---|" + "---|" * len(MODELS)]
    for training in TRAININGS:
        if training not in per_seed:
            continue
        for attack in attacks:
            means = [np.mean(per_seed[training].get(m, {}).get(attack) or [np.nan]) for m in MODELS]
            best = np.nanmax(means) if not np.all(np.isnan(means)) else None
            cells = []
            for i, model in enumerate(MODELS):
                values = per_seed[training].get(model, {}).get(attack) or []
                cell = _cell(values, bold=best is not None and means[i] == best)
                if paper is not None and attack in paper.get(training, {}):
                    cell += f" ({paper[training][attack][i]:.2f})"
                cells.append(cell)
            lines.append(f"| {_TRAINING_TITLES[training]} | {_ATTACK_TITLES[attack]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(curves, epsilons, path, title="White-box FGSM accuracy vs ε"):
    """Writes the accuracy-vs-ε PNG: one line per (training, model), mean over seeds with a ±std band.

    Args:
        curves: dict training -> model -> list (seeds) of lists (one accuracy per ε).
        epsilons: the ε values (pixels).
        path: str, the PNG file.
        title: str.

    Returns:
        `path`.
    """
    import matplotlib  # noqa: PLC0415 (plotting only here)

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    colors = dict(zip(MODELS, ("tab:gray", "tab:blue", "tab:green", "tab:red")))
    styles = {"natural": "-", "fgsm": "--"}
    for training, per_model in curves.items():
        for model, runs in per_model.items():
            runs = np.asarray(runs, np.float64)
            mean = runs.mean(axis=0)
            ax.plot(epsilons, mean, styles.get(training, ":"), color=colors.get(model), marker="o", markersize=3,
                    label=f"{MODEL_TITLES.get(model, model)} ({_TRAINING_TITLES.get(training, training)})")
            if len(runs) > 1:
                std = runs.std(axis=0, ddof=1)
                ax.fill_between(epsilons, mean - std, mean + std, color=colors.get(model), alpha=0.12)
    ax.set_xlabel("ε (0–255 pixel scale)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


__all__ = ["MODELS", "MODEL_TITLES", "PAPER_TABLE7", "PAPER_TABLE8", "PER_MODEL_FUNCTIONS", "TABLE_ATTACKS",
           "TRAININGS", "accuracy_curve", "black_box", "deepfool_strength", "markdown_table", "per_model_tracing",
           "plot_curves", "white_box"]
