"""Weight regularizers on the hypersphere: MHE, CoMHE, orthogonality, SRIP.

`get(identifier)` resolves None, a registry name, a config dict or a callable,
like `keras.regularizers.get`; unknown names fall through to Keras's own.
"""

import keras

from sphere_tf.regularizers import random_state  # noqa: F401  (public: seeds and step counter)
from sphere_tf.regularizers.comhe import CoMHE
from sphere_tf.regularizers.mhe import MHE
from sphere_tf.regularizers.mhe import DataDependentMHE
from sphere_tf.regularizers.orthogonality import Orthogonality
from sphere_tf.regularizers.random_state import track_state
from sphere_tf.regularizers.srip import SRIP
from sphere_tf.regularizers.srip import SRIPSchedule

REGULARIZERS = {
    "mhe": MHE,
    "half_space_mhe": lambda: MHE(half_space=True),
    "output_mhe": lambda: MHE(role="output"),
    "comhe": CoMHE,
    "orthonormal": lambda: Orthogonality(mode="orthonormal"),
    "orthogonal": lambda: Orthogonality(mode="orthogonal"),
    "srip": SRIP,
}

_CLASSES = {"MHE": MHE, "CoMHE": CoMHE, "Orthogonality": Orthogonality, "SRIP": SRIP}


def get(identifier):
    """Resolves a regularizer identifier.

    Args:
        identifier: None; a name from `REGULARIZERS` ('mhe', 'half_space_mhe',
            'output_mhe', 'comhe', 'orthonormal', 'orthogonal', 'srip') or a Keras
            built-in name ('l2'); a dict `{"class_name": ..., "config": ...}`
            (ours by bare or 'sphere_tf>' name, else Keras's); a callable.

    Returns:
        A regularizer instance, the callable, or None.

    Raises:
        ValueError: on an unknown identifier.
    """
    if identifier is None:
        return None
    if isinstance(identifier, str):
        if identifier in REGULARIZERS:
            return REGULARIZERS[identifier]()
        try:
            return keras.regularizers.get(identifier)
        except ValueError:
            raise ValueError(
                f"Unknown regularizer {identifier!r}; expected one of {sorted(REGULARIZERS)} or a Keras name."
            ) from None
    if isinstance(identifier, dict):
        name = identifier.get("class_name", "")
        short = name.split(">")[-1]
        if short in _CLASSES:
            return _CLASSES[short].from_config(identifier.get("config", {}))
        return keras.regularizers.get(identifier)
    if callable(identifier):
        return identifier
    raise ValueError(f"Could not interpret regularizer identifier: {identifier!r}")
