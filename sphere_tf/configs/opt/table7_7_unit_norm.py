r"""OPT Table 7.7: unit-norm fixed neurons (CNN-6, CIFAR-100).

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021), Table 5; W. Liu's PhD
thesis (2020), Table 7.7 and §7.3.7. Error % (paper):

| method   | norm=off | norm=on |
|----------|----------|---------|
| baseline | 37.59    | 36.05   |
| gs       | 33.02    | 32.54   |
| hr       | 35.67    | 35.30   |
| ls       | 34.48    | 32.11   |
| cp       | 33.53    | 32.49   |
| ogd      | 33.37 (33.33 in Table 7.4) | 32.70 |
| or       | 34.70    | 33.27   |

`norm=on` rescales every randomly initialised neuron to unit norm once, before training (§7.5.3:
"After randomly initializing the neurons, we directly normalize the scale of the weights to 1"):
for OPT the fixed neurons V of every OPT layer, convs and FC 64 (`normalize_fixed_kernel`), which
OPT never rescales; for the baseline the initial weights of its plain convs and FC 64
(`sphere_tf.initializers.UnitNormNeurons` around their usual He-normal / Glorot-uniform draws),
which then train freely: the thesis describes a preprocessing of the initial neurons and no
renormalisation during training. The classifier is not normalised in either case (OPT keeps it
a plain layer).

Recipe: sphere_tf/configs/opt/__init__.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k, 75k iterations,
weight decay 5e-4).

Run:
  sphere-tf train-classifier \
    --config opt/table7_7_unit_norm:method=ls,norm=on \
    --workdir runs/opt_t7_7 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import opt

METHODS = ("baseline", "gs", "hr", "ls", "cp", "ogd", "or")
VARIANTS = {"method": METHODS, "norm": ("off", "on")}


def unit_norm(base):
    """The `UnitNormNeurons` initializer spec around `base` (a Keras initializer name)."""
    return {"class_name": "sphere_tf>UnitNormNeurons", "config": {"base": base}}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="gs", norm="on")
    common.check(arg.method, "method", METHODS)
    common.check(arg.norm, "norm", ("off", "on"))
    if arg.method == "baseline":
        model = opt.model_section("cnn6", "baseline")
        if arg.norm == "on":
            # The baseline's own draws (He-normal convs, Keras's Glorot-uniform FC 64), each neuron at unit norm.
            model["operator"] = dict(model["operator"], kernel_initializer=unit_norm(
                model["operator"]["kernel_initializer"]))
            model["fc_operator"] = {"layer": "conv2d", "kernel_initializer": unit_norm("glorot_uniform")}
    else:
        options = {"normalize_fixed_kernel": True} if arg.norm == "on" else {}
        model = opt.model_section("cnn6", arg.method, **options)
    config = opt.cifar_config(model, arg.method)
    return opt.quick(config) if arg.quick else config
