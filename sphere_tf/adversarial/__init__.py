"""Adversarial robustness of hyperspherical / decoupled networks (DCNet §6.2, App. A.2/A.3/C).

`pixel_space` maps attack budgets on the 0–255 scale into a model's input space
(`input_space(model)` reads it from the model: raw pixels for one whose first layer
is a `PixelNormalization`; every function taking a `space` reads it so when None);
`fgsm`, `bim`, `pgd` (cleverhans 4) and `make_attack` (one compiled function per
model and attack) craft examples; `FGSMAdversarialModel` / `adversarial_wrap`
train with FGSM examples from the current weights; `white_box`, `black_box`,
`accuracy_curve`, `deepfool_strength` (foolbox 3) evaluate; `run_experiment`
and the runner's adversarial task (`sphere_tf.runners.adversarial.run_experiment`,
`trainers/train_adversarial.py`) reproduces DCNet's Tables 7 and 8 from a config.
"""

from sphere_tf import dependencies
from sphere_tf import deprecation

dependencies.tensorflow(__name__)  # before the submodules: one line naming this package, not a submodule

from sphere_tf.adversarial.attacks import ATTACKS
from sphere_tf.adversarial.attacks import PAPER_EPSILON
from sphere_tf.adversarial.attacks import PAPER_ITERATIONS
from sphere_tf.adversarial.attacks import PAPER_STEP
from sphere_tf.adversarial.attacks import bim
from sphere_tf.adversarial.attacks import fgsm
from sphere_tf.adversarial.attacks import inference_fn
from sphere_tf.adversarial.attacks import make_attack
from sphere_tf.adversarial.attacks import make_fgsm_sweep
from sphere_tf.adversarial.attacks import make_predict
from sphere_tf.adversarial.attacks import pgd
from sphere_tf.adversarial.evaluation import MODELS
from sphere_tf.adversarial.evaluation import PAPER_TABLE7
from sphere_tf.adversarial.evaluation import PAPER_TABLE8
from sphere_tf.adversarial.evaluation import TRAININGS
from sphere_tf.adversarial.evaluation import accuracy_curve
from sphere_tf.adversarial.evaluation import black_box
from sphere_tf.adversarial.evaluation import deepfool_strength
from sphere_tf.adversarial.evaluation import markdown_table
from sphere_tf.adversarial.evaluation import plot_curves
from sphere_tf.adversarial.evaluation import white_box
from sphere_tf.adversarial.pixels import PIXEL_MAX
from sphere_tf.adversarial.pixels import PixelSpace
from sphere_tf.adversarial.pixels import input_space
from sphere_tf.adversarial.pixels import pixel_space
from sphere_tf.adversarial.pixels import space_for
from sphere_tf.adversarial.training import DEFAULT_MIX
from sphere_tf.adversarial.training import FGSMAdversarialModel
from sphere_tf.adversarial.training import adversarial_wrap

# The config-driven experiment moved above the library, to the runner's adversarial task.
MOVED = {name: f"sphere_tf.runners.adversarial:{name}"
         for name in ("DEFAULTS", "PAPER_OPERATORS", "run_experiment", "validate")}
MOVED["experiment"] = "sphere_tf.runners.adversarial"
__getattr__ = deprecation.moved_names(__name__, MOVED)
