r"""MHE Table 5.4 and Fig. 5.3: MHE on the hidden layers only, the output layer only, or both (CNN-9, CIFAR-100+).

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018), Table 4;
W. Liu's PhD thesis (2020), Table 5.4. Error % (paper; N/A: the output layer has no
half-space form):

| method                 | output | hidden | hidden+output |
|------------------------|--------|--------|---------------|
| mhe                    | 26.85  | 26.55  | 26.16         |
| half_space_mhe         | N/A    | 26.28  | 25.61         |
| angular_mhe            | 27.8   | 26.56  | 26.17         |
| half_space_angular_mhe | N/A    | 26.64  | 26.03         |
| baseline               | 28.13  |        |               |

The hidden+output column equals Table 5.1's best s of each row (mhe at s = 0, the
others at s = 2), so `s` defaults to that (not stated for this table).

Fig. 5.3 ("effect of hyperparameter"; MHE paper Fig. 2): the same CNN-9 on CIFAR-100 with the
MHE weight swept "from 10^-2 to 10^2", one curve per placement: MHE on the output layer (O),
MHE on the hidden layers (H), half-space MHE on the hidden layers (H). `lam` sets the factor of
every MHE term of the run to that value (the angular variants keep the code's 0.1 weight on top
for s = 1, 2); `lam=code` (default) is the authors' λ_h = 1, λ_o = 10 of the table. The figure
has no numbers in the text; its claims: MHE works well for λ from 1e-2 to 1e2, half-space MHE
beats MHE and hidden-layer MHE beats output-layer MHE at every λ. Which s the figure uses is not
stated (we keep the table's default).

Recipe: as sphere_tf/configs/mhe/table5_1_cnn9.py (SGD 0.1, batch 128, ×0.1 at 20k/30k/37.5k,
42.5k iterations, weight decay 5e-4; λ_h = 1, λ_o = 10 as the authors' code).

Run:
  sphere-tf train-classifier \
    --config mhe/table5_4_hidden_output:method=mhe,placement=hidden \
    --workdir runs/mhe_t5_4 --config.data.manual_dir=/path/to/cifar
  sphere-tf train-classifier \
    --config mhe/table5_4_hidden_output:method=half_space_mhe,placement=hidden,lam=0.01 \
    --workdir runs/mhe_f5_3 --config.data.manual_dir=/path/to/cifar      (Fig. 5.3)
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "mhe", "half_space_mhe", "angular_mhe", "half_space_angular_mhe")
# Fig. 5.3's x-axis: the MHE weight from 1e-2 to 1e2 ('code': the authors' λ_h = 1, λ_o = 10).
LAMBDAS = ("code", "0.01", "0.1", "1", "10", "100")
VARIANTS = {"method": METHODS, "placement": mhe.PLACEMENTS, "lam": LAMBDAS}
# The output layer has no half-space form (N/A in the table).
UNAVAILABLE = [{"method": "half_space_mhe", "placement": "output"},
               {"method": "half_space_angular_mhe", "placement": "output"}]
# The baseline has no MHE weight to sweep.
UNAVAILABLE += [{"method": "baseline", "lam": lam} for lam in LAMBDAS if lam != "code"]


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="half_space_mhe", placement="hidden+output", s=-1, lam="code")
    common.check(arg.method, "method", METHODS)
    common.check(arg.lam, "lam", LAMBDAS)
    if arg.method == "baseline" and arg.lam != "code":
        raise ValueError(f"lam={arg.lam!r} with method='baseline': the baseline has no MHE term to weigh "
                         "(Fig. 5.3 sweeps the MHE variants only).")
    power = (0 if arg.method == "mhe" else 2) if arg.s == -1 else arg.s
    entries = mhe.mhe_entries(arg.method, power, placement=arg.placement)
    if arg.lam != "code":
        angular_scale = 0.1 if "angular" in arg.method and power > 0 else 1.0
        for entry in entries:
            entry["factor"] = float(arg.lam) * angular_scale
    config = mhe.cifar_config(
        dataset="cifar100", model=mhe.plain_cnn("cnn9"),
        regularizers=entries,
        steps=mhe.MHE_STEPS, boundaries=mhe.MHE_BOUNDARIES,
    )
    return common.quick_narrow(config) if arg.quick else config
