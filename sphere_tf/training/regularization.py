"""Kernel regularizers attached to a built model's layers by name pattern (the runner's `regularizers`).

Each entry of the config's `regularizers` list is `{'name': NAME, 'layers':
PATTERN, **kwargs}`; PATTERN is an `fnmatch` pattern (or a list of them) over
layer names, e.g. `'conv*'`, `'logits'`. NAME is one of `REGULARIZERS`:

- `mhe`: `sphere_tf.regularizers.MHE` (kwargs `role`, `power` s,
  `half_space`, `distance` incl. 'normalized_angular', `factor`, ...);
  Learning towards Minimum Hyperspherical Energy (NeurIPS 2018), Eq. 3-6;
- `comhe`: `sphere_tf.regularizers.CoMHE` (`projection` 'random' |
  'angle_preserving' | 'adversarial' | 'group', ...); Compressive MHE
  (CVPR 2020), Eq. 6.4-6.9 of Liu's thesis (2020);
- `orthogonality`: `sphere_tf.regularizers.Orthogonality` (`mode`
  'orthonormal' | 'orthogonal');
- `srip`: `sphere_tf.regularizers.SRIP` (`factor`, `power_iterations`,
  `squared`, `gram`); Bansal, Chen, Wang, "Can We Gain More from
  Orthogonality Regularizations in Training Deep CNNs?" (NeurIPS 2018);
- `weight_decay`: `keras.regularizers.L2(factor)` (plain weight decay).

SphereFace+'s data-dependent MHE needs the labels and goes on the margin head
(`loss.data_dependent_mhe`), not here.

The regularizer becomes the `regularizer` of the layer's `kernel` variable,
which Keras adds to the training loss (`model.losses`). A layer matched by
several entries (the papers' weight decay on every layer plus MHE on the
hidden ones) gets their sum, a `SummedRegularizer` whose `parts` are the
entries' regularizers in list order.
"""

import fnmatch

import keras

from sphere_tf import registry
from sphere_tf import regularizers as regularizers_lib
from sphere_tf import validation
from sphere_tf import walk

# Regularizers that act on each weight alone, so a kernel's layout does not matter to them.
ELEMENTWISE = frozenset({"weight_decay"})

REGULARIZERS = {
    "mhe": regularizers_lib.MHE,
    "comhe": regularizers_lib.CoMHE,
    "orthogonality": regularizers_lib.Orthogonality,
    "srip": regularizers_lib.SRIP,
    "weight_decay": lambda factor=5e-4: keras.regularizers.L2(factor),
}


def register_regularizer(name, factory):
    """Adds `factory(**kwargs) -> regularizer` under `name`."""
    return registry.register(REGULARIZERS, name, factory, "regularizer")


def _patterns(entry, index):
    patterns = entry.get("layers")
    if isinstance(patterns, str):
        patterns = [patterns]
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise validation.invalid_argument(f"regularizers[{index}].layers", "a layer-name pattern or a list of them",
                                          entry.get("layers"))
    return list(patterns)


def build_regularizer(entry, index=0):
    """The regularizer instance of one `regularizers` entry (checks its name and options)."""
    if not isinstance(entry, dict):
        raise validation.invalid_argument(f"regularizers[{index}]", "a dict {'name': ..., 'layers': ...}", entry)
    options = {k: v for k, v in entry.items() if k not in ("name", "layers")}
    factory = registry.lookup(REGULARIZERS, entry.get("name"), f"regularizers[{index}].name")
    _patterns(entry, index)
    try:
        return factory(**options)
    except (TypeError, ValueError) as error:
        raise ValueError(f"Invalid option in regularizers[{index}] ({entry.get('name')!r}): {error}") from None


class SummedRegularizer:
    """The sum of several kernel regularizers (a layer matched by several `regularizers` entries).

    Args:
        parts: list of callables `regularizer(kernel) -> scalar`, kept in order as `parts`.
    """

    def __init__(self, parts):
        self.parts = list(parts)

    def __call__(self, x):
        total = self.parts[0](x)
        for part in self.parts[1:]:
            total = total + part(x)
        return total


def kernel_layers(model):
    """Layers under `model` that own a `kernel` variable, in walk order."""
    return walk.find_layers(model, lambda layer: isinstance(getattr(layer, "kernel", None), keras.Variable))


def attach(model, entries):
    """Sets each entry's regularizer on the kernels of the layers its pattern matches.

    Args:
        model: a built `keras.Model`.
        entries: list of dicts (the config's `regularizers`).

    Returns:
        dict layer name -> regularizer name, the layers regularized (names of
        several entries on one layer joined by '+', e.g. 'weight_decay+mhe').

    Raises:
        ValueError: a pattern matches no layer with a kernel (the message lists
            them).
    """
    candidates = kernel_layers(model)
    attached, parts = {}, {}
    for index, entry in enumerate(entries or ()):
        reg = build_regularizer(entry, index)
        patterns = _patterns(entry, index)
        matched = [layer for layer in candidates if any(fnmatch.fnmatchcase(layer.name, p) for p in patterns)]
        if not matched:
            raise ValueError(
                f"regularizers[{index}].layers={patterns} matches no layer with a kernel; "
                f"layers: {[layer.name for layer in candidates]}."
            )
        for layer in matched:
            if getattr(layer, "class_major_kernel", False) and entry["name"] not in ELEMENTWISE:
                # Its kernel is (C, d): a neuron-wise regularizer would read classes as inputs.
                raise ValueError(
                    f"regularizers[{index}] ({entry['name']!r}) matches {layer.name!r}, a {type(layer).__name__} "
                    f"whose kernel is stored class-major (C, d); only {sorted(ELEMENTWISE)} apply to it."
                )
            parts.setdefault(layer.name, (layer, []))[1].append(reg)
            previous = attached.get(layer.name)
            attached[layer.name] = f"{previous}+{entry['name']}" if previous else entry["name"]
    for layer, regs in parts.values():
        layer.kernel.regularizer = regs[0] if len(regs) == 1 else SummedRegularizer(regs)
    return attached
