"""Adversarial robustness of hyperspherical / decoupled networks (DCNet §6.2, App. A.2/A.3/C).

`pixel_space` maps attack budgets on the 0–255 scale into a model's input space
(`input_space(model)` reads it from the model: raw pixels for one whose first layer
is a `PixelNormalization`; every function taking a `space` reads it so when None);
`fgsm`, `bim`, `pgd` and `make_attack` (one compiled function per model and attack;
`gradient_attacks`, `keras.ops` on every backend) craft examples; `FGSMAdversarialModel` / `adversarial_wrap`
train with FGSM examples from the current weights; `white_box`, `black_box`,
`accuracy_curve`, `deepfool_strength` (foolbox 3) evaluate; `run_experiment`
and the runner's adversarial task (`sphere_tf.runners.adversarial.run_experiment`,
`trainers/train_adversarial.py`) reproduces DCNet's Tables 7 and 8 from a config.

Every name here runs on every Keras backend: the package-level `fgsm`, `bim`, `pgd`, `make_attack`,
`make_fgsm_sweep` and `make_predict` are `sphere_tf.adversarial.gradient_attacks`' (`keras.ops`), and the training
and evaluation names (`FGSMAdversarialModel`, `white_box`, `black_box`, ...) and the runner's task craft their
examples with them. `sphere_tf.adversarial.attacks` keeps cleverhans 4's TensorFlow attacks as the reference they
are held to (the same adversarial images on TensorFlow, to the last bit, but PGD's random start, which cleverhans
draws from TensorFlow's global generator); it imports without TensorFlow and needs it when called. Every name is
imported on first access; `pixels` and `training` (which registers `FGSMAdversarialModel` for `.keras` files) on
`import sphere_tf.adversarial`.
"""

from sphere_tf import dependencies
from sphere_tf import deprecation
from sphere_tf.adversarial.pixels import PIXEL_MAX
from sphere_tf.adversarial.pixels import PixelSpace
from sphere_tf.adversarial.pixels import input_space
from sphere_tf.adversarial.pixels import pixel_space
from sphere_tf.adversarial.pixels import space_for

# Imported on first access; every one works on every backend.
_LAZY = {
    **{name: "sphere_tf.adversarial.gradient_attacks" for name in (
        "ATTACKS", "PAPER_EPSILON", "PAPER_ITERATIONS", "PAPER_STEP", "bim", "fgsm", "inference_fn", "make_attack",
        "make_fgsm_sweep", "make_predict", "pgd")},
    **{name: "sphere_tf.adversarial.evaluation" for name in (
        "MODELS", "PAPER_TABLE7", "PAPER_TABLE8", "TRAININGS", "accuracy_curve", "black_box", "deepfool_strength",
        "markdown_table", "plot_curves", "white_box")},
    **{name: "sphere_tf.adversarial.training" for name in (
        "DEFAULT_MIX", "FGSMAdversarialModel", "adversarial_wrap")},
}
_SUBMODULES = ("attacks", "evaluation", "gradient_attacks", "pixels", "training")

# The config-driven experiment moved above the library, to the runner's adversarial task (in 0.2.0); the old
# paths go in MOVED_REMOVED_IN.
MOVED = {name: f"sphere_tf.runners.adversarial:{name}"
         for name in ("DEFAULTS", "PAPER_OPERATORS", "run_experiment", "validate")}
MOVED["experiment"] = "sphere_tf.runners.adversarial"
MOVED_REMOVED_IN = "0.4.0"


def _lazy(name):
    if name in _LAZY:
        return getattr(dependencies.import_for(f"{__name__}.{name}", _LAZY[name]), name)
    if name in _SUBMODULES:
        return dependencies.import_for(f"{__name__}.{name}", f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__getattr__ = deprecation.moved_names(__name__, MOVED, _lazy, removed_in=MOVED_REMOVED_IN)


def __dir__():
    return sorted(list(globals()) + list(_LAZY) + list(_SUBMODULES))


# Registers `FGSMAdversarialModel` (a saved `.keras` file names it) on `import sphere_tf.adversarial`, on every
# backend.
from sphere_tf.adversarial import training  # noqa: E402, F401
