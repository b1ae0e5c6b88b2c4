r"""SphereNet Fig. 5: SphereNorm vs BatchNorm with small mini-batches (CNN-9, CIFAR-10).

Deep Hyperspherical Learning (Liu et al., NIPS 2017), §2.5 and Fig. 5 (thesis §3.4.4, Fig. 3.5).

Recipe (§2.5, §4.1, §4.4): CNN-9 of App. Table 5 (64/96/128, FC 256) with the softmax loss; SphereNorm is the
cosine SphereConv used as the normaliser (no BatchNorm); the BatchNorm curve is the original conv with BN;
"Rescaled SphereNorm" is β·F_s(w, x) + γ with learned per-channel β, γ; "SphereNorm w/ Orth." adds
‖WᵀW − I‖²_F on the conv kernels; "SphereNorm+BatchNorm" puts BN after the SphereConv. CIFAR-10 without
augmentation, mean subtraction; ADAM 1e-3. The legible panel of Fig. 5 has mini-batch size 4 (the other
panels' sizes cannot be read from the text; the batch is a variant). Not stated in the paper; we use: the
§4.1 schedule (÷10 at 34K and 54K, stop at 64K iterations) at every batch size, the orthogonality
coefficient 1e-5 (Liu's thesis, App. D.1), He-normal initialisation.

Variants: `norm` = batchnorm, spherenorm, rescaled, spherenorm_orth, spherenorm_bn; `batch` = the mini-batch
size (default 4).

Paper: curves only (no numbers); SphereNorm reaches a final accuracy similar to BN but converges faster and
more stably; the orthogonality constraint helps a little; rescaled SphereNorm "does not seem to work well";
SphereNorm + BatchNorm converges fastest and ends best.

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config spherenet/fig5_spherenorm:norm=spherenorm,batch=4 \
    --workdir runs/spherenet_f5 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

_COSINE = spherenet.OPERATORS["cosine"]
# norm -> (operator, BatchNorm, orthogonality)
CURVES = {
    "batchnorm": (spherenet.OPERATORS["conv"], True, False),
    "spherenorm": (_COSINE, False, False),
    "rescaled": ({**_COSINE, "rescale": True}, False, False),
    "spherenorm_orth": (_COSINE, False, True),
    "spherenorm_bn": (_COSINE, True, False),
}
VARIANTS = {"norm": tuple(CURVES)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, norm="spherenorm", batch=4)
    operator, batch_norm, orth = CURVES[common.choose(arg, "norm", VARIANTS["norm"])]
    if arg.batch < 1:
        raise ValueError(f"Invalid config argument batch={arg.batch!r}; expected a positive mini-batch size.")
    config = spherenet.cifar_config(
        dict(name="cnn9", operator=operator, batch_norm=batch_norm, head=None),
        batch_size=arg.batch, regularizers=[dict(spherenet.ORTHONORMAL)] if orth else ())
    if arg.quick:
        common.quick(config, batch_size=arg.batch, width_multiplier=0.25, name="cnn3")
    return config
