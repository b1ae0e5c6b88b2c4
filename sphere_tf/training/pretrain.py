"""Pretraining as initialisation [D §4.3]: start a DCNet from a trained CNN of the same structure.

"We use a CNN model that has the same structure and is pre-trained on the same
training set to initialize the DCNet" (used for the starred ResNet-18 rows of
DCNet Table 6). `initialize_from_pretrained` copies the variables of a trained
model built with `Conv2D` / `Dense` (and `BatchNormalization`, plain heads, ...)
into the same architecture built with decoupled / Sphere layers:

* layers are paired by position (the order of the parameterised leaf layers,
  nested models flattened) or by name (or an explicit `{target: source}` dict);
* inside a pair, variables are matched by their short name (`kernel`, `bias`,
  `gamma`, `beta`, `moving_mean`, `moving_variance`, ...) and copied when the
  shapes agree; everything else is reported as skipped with the reason;
* decoupled variables with no CNN counterpart (ρ, E{‖x‖}, learnable k) keep
  their initial values (ρ = 1, the `radius` initialiser of wy1iu/DCNets
  `dcnet_cifar100/*/architecture.py`), unless calibration data
  is given, in which case E{‖x‖} is set from one forward pass on it;
* optionally the copied operator kernels are projected to s·ŵ (only the
  direction matters for a standard operator, so this costs nothing).

The paper describes the method in that one sentence, so the mechanics (what to
copy, how to pair layers, E{‖x‖} from data) are this package's choice.
"""

import dataclasses
import logging

import keras
import numpy as np

from sphere_tf import validation
from sphere_tf import walk
from sphere_tf.training import model as model_lib

_logger = logging.getLogger("sphere_tf.training")

MATCH_MODES = ("position", "name")
# Variables of the decoupled operators that E{‖x‖} calibration may change.
_NORM_MEAN_NAMES = ("norm_mean_biased", "norm_mean_weight")


@dataclasses.dataclass(frozen=True)
class TransferEntry:
    """One line of a `TransferReport`.

    Attributes:
        status: 'copied', 'shape_mismatch', 'missing_in_target',
            'missing_in_source', 'unmatched_source_layer', 'unmatched_target_layer',
            'projected', 'skipped_projection' or 'calibrated'.
        target_layer: str or None, the target layer's name.
        source_layer: str or None, the source layer's name.
        variable: str or None, the variable's short name.
        detail: str, shapes or the reason.
    """

    status: str
    target_layer: object
    source_layer: object
    variable: object
    detail: str = ""


@dataclasses.dataclass
class TransferReport:
    """What `initialize_from_pretrained` copied and what it skipped, and why."""

    entries: list = dataclasses.field(default_factory=list)

    def add(self, status, target_layer=None, source_layer=None, variable=None, detail=""):
        """Appends a `TransferEntry` of these fields."""
        self.entries.append(TransferEntry(status, target_layer, source_layer, variable, detail))

    def by_status(self, status):
        """Entries with the given status."""
        return [e for e in self.entries if e.status == status]

    @property
    def copied(self):
        """The entries whose value was copied as it is."""
        return self.by_status("copied")

    @property
    def skipped(self):
        """Every entry that did not copy or derive a value (mismatches and missing pieces)."""
        return [e for e in self.entries if e.status not in ("copied", "projected", "calibrated")]

    def summary(self):
        """A multi-line human-readable report."""
        counts = {}
        for e in self.entries:
            counts[e.status] = counts.get(e.status, 0) + 1
        lines = ["Pretrained initialisation: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))]
        for e in self.entries:
            pair = f"{e.source_layer or '-'} -> {e.target_layer or '-'}"
            var = f"/{e.variable}" if e.variable else ""
            lines.append(f"  {e.status:<22} {pair}{var}  {e.detail}".rstrip())
        return "\n".join(lines)

    def __str__(self):
        return self.summary()


def _short_name(variable):
    return variable.path.split("/")[-1] if getattr(variable, "path", None) else variable.name


def owns_variables(layer):
    """True when `layer` holds a variable that none of its sub-layers holds.

    That is every leaf layer with weights, and a custom block with variables of
    its own beside those of the layers it holds; never a model made only of
    other layers.
    """
    inherited = {id(v) for sub in walk.iter_layers(layer) if sub is not layer for v in sub.weights}
    return any(id(v) not in inherited for v in layer.weights)


def parameterised_layers(model):
    """Layers that own variables (`owns_variables`), in model order, nested models flattened.

    Args:
        model: a built `keras.Model`.

    Returns:
        list of layers.
    """
    return walk.find_layers(model, owns_variables)


def _pair_layers(source_layers, target_layers, match, report):
    if isinstance(match, dict):
        by_name_s = {l.name: l for l in source_layers}
        by_name_t = {l.name: l for l in target_layers}
        pairs = []
        for t_name, s_name in match.items():
            if t_name not in by_name_t:
                raise ValueError(
                    f"Invalid value for argument `match`: no parameterised target layer named {t_name!r}. "
                    f"Target layers: {sorted(by_name_t)}"
                )
            if s_name not in by_name_s:
                raise ValueError(
                    f"Invalid value for argument `match`: no parameterised source layer named {s_name!r}. "
                    f"Source layers: {sorted(by_name_s)}"
                )
            pairs.append((by_name_s[s_name], by_name_t[t_name]))
        used_s = {id(s) for s, _ in pairs}
        used_t = {id(t) for _, t in pairs}
    elif match == "position":
        n = min(len(source_layers), len(target_layers))
        pairs = list(zip(source_layers[:n], target_layers[:n]))
        used_s = {id(l) for l in source_layers[:n]}
        used_t = {id(l) for l in target_layers[:n]}
    else:  # "name"
        by_name_s = {l.name: l for l in source_layers}
        pairs = [(by_name_s[t.name], t) for t in target_layers if t.name in by_name_s]
        used_s = {id(s) for s, _ in pairs}
        used_t = {id(t) for _, t in pairs}
    for layer in source_layers:
        if id(layer) not in used_s:
            report.add("unmatched_source_layer", source_layer=layer.name, detail=type(layer).__name__)
    for layer in target_layers:
        if id(layer) not in used_t:
            report.add("unmatched_target_layer", target_layer=layer.name, detail=type(layer).__name__)
    return pairs


def initialize_from_pretrained(
    target,
    source,
    match="position",
    projection_scale=None,
    calibration_data=None,
    verbose=True,
):
    """Copies a trained CNN's variables into the same architecture built with decoupled layers.

    [D §4.3]: the DCNet starts from the CNN's kernels. Conv2D → DecoupledConv2D /
    SphereConv2D and Dense → DecoupledDense / SphereDense have the same kernel
    layout (HWIO, (in, out)), so kernels copy as they are; biases, BatchNorm
    parameters and moving statistics, and plain layers kept in both models copy
    by variable name when the shapes agree.

    Args:
        target: a built `keras.Model` (the decoupled network), modified in place.
        source: a built `keras.Model` (the trained CNN); not modified.
        match: 'position' (pair the i-th parameterised leaf layers), 'name' (pair
            layers with equal names) or a dict `{target_layer_name:
            source_layer_name}` (only those pairs).
        projection_scale: None, or float > 0: project every copied kernel of a
            standard operator layer to s·ŵ [D §4.1] (weighted operators keep
            their norm, since it changes their output; the report says so).
        calibration_data: None, or a batch of inputs for `target`: one forward
            pass in training mode sets each operator's E{‖x‖} to the batch mean
            of its patch norms (zero-debiased average after one update). Every
            other variable (e.g. copied BatchNorm moving statistics) is restored.
        verbose: bool, log the report's summary at INFO level on the
            "sphere_tf.training" logger.

    Returns:
        A `TransferReport`.

    Raises:
        ValueError: an unknown `match`, a bad `projection_scale`, names missing
            from a `match` dict, or an unbuilt model.
    """
    if not (isinstance(match, dict) or match in MATCH_MODES):
        raise validation.invalid_argument(
            "match", f"one of {MATCH_MODES} or a dict {{target_layer_name: source_layer_name}}", match
        )
    validation.positive_float(projection_scale, "projection_scale", allow_none=True)
    for arg, m in (("target", target), ("source", source)):
        if not m.built or not m.weights:
            raise validation.invalid_argument(
                arg, "a built model with weights (call it on data or build it with an Input first)", m
            )

    report = TransferReport()
    pairs = _pair_layers(parameterised_layers(source), parameterised_layers(target), match, report)
    copied_kernels = []
    for src, dst in pairs:
        src_vars = {_short_name(v): v for v in src.weights}
        dst_vars = {_short_name(v): v for v in dst.weights}
        common = [name for name in src_vars if name in dst_vars]
        for name, s_var in src_vars.items():
            if name not in dst_vars:
                report.add("missing_in_target", dst.name, src.name, name,
                           f"{type(dst).__name__} has no variable {name!r}")
                continue
            d_var = dst_vars[name]
            if tuple(s_var.shape) != tuple(d_var.shape):
                report.add("shape_mismatch", dst.name, src.name, name,
                           f"source {tuple(s_var.shape)} vs target {tuple(d_var.shape)}")
                continue
            d_var.assign(keras.ops.cast(keras.ops.convert_to_tensor(s_var), d_var.dtype))
            report.add("copied", dst.name, src.name, name, str(tuple(s_var.shape)))
            if name == "kernel" and d_var is getattr(dst, "kernel", None):
                copied_kernels.append(dst)
        for name in dst_vars:
            if name not in src_vars:
                detail = "kept its initial value"
                if not common:
                    detail += f"; no variable in common ({type(src).__name__} vs {type(dst).__name__})"
                report.add("missing_in_source", dst.name, src.name, name, detail)

    if projection_scale is not None:
        for layer in copied_kernels:
            if not model_lib.is_operator_layer(layer):
                continue
            if not layer.supports_weight_projection:
                report.add("skipped_projection", layer.name, None, "kernel",
                           f"weighted operator (weighted={getattr(layer, 'weighted', None)!r}): its output "
                           "depends on ‖w‖")
                continue
            layer.kernel.assign(
                keras.ops.cast(model_lib.project_kernel(layer.kernel, projection_scale), layer.kernel.dtype)
            )
            report.add("projected", layer.name, None, "kernel", f"per-channel norm {projection_scale:g}")

    if calibration_data is not None:
        _calibrate_norm_means(target, calibration_data, report)

    if verbose:
        _logger.info("%s", report.summary())
    return report


def _calibrate_norm_means(target, data, report):
    """Sets E{‖x‖} of every operator to its batch mean in one training-mode forward pass on `data`.

    The moving-average variables are zeroed first, so after the pass
    ``biased / weight`` is exactly the batch mean (per group for grouped layers);
    it is then stored as a fully warmed-up average (``biased = E``, ``weight = 1``),
    which `norm_mean()` returns whether or not the layer zero-debiases.
    """
    keep = {}
    operator_vars = {}
    for layer in model_lib.find_operator_layers(target):
        for v in layer.weights:
            if _short_name(v) in _NORM_MEAN_NAMES:
                operator_vars[id(v)] = layer
                v.assign(keras.ops.zeros(v.shape, v.dtype))  # not zeros_like: JAX cannot read a Variable's dtype
    for v in target.weights:
        if id(v) not in operator_vars:
            keep[id(v)] = (v, keras.ops.convert_to_numpy(v))
    target(data, training=True)
    for v, value in keep.values():
        v.assign(value)
    for layer in {id(l): l for l in operator_vars.values()}.values():
        if hasattr(layer, "norm_mean_biased"):
            batch_mean = layer.norm_mean_biased / layer.norm_mean_weight
            layer.norm_mean_biased.assign(batch_mean)
            layer.norm_mean_weight.assign(keras.ops.ones(layer.norm_mean_weight.shape, layer.norm_mean_weight.dtype))
            value = np.round(keras.ops.convert_to_numpy(layer.norm_mean()).astype(np.float64), 6).tolist()
            report.add("calibrated", layer.name, None, "norm_mean", f"E{{‖x‖}} = {value}")
