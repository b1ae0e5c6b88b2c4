"""Constructor-argument checks shared by the layers (Keras-style messages naming the argument).

NumPy scalars are accepted wherever Python numbers are, as `keras.layers.Conv2D` does, and
stored as plain Python numbers so configs stay JSON-serialisable.
"""

import numbers


def positive_float(value, name, allow_none=False):
    """`value` as a float > 0 (None passes through when `allow_none`)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(
            f"Invalid value for argument `{name}`: expected a float > 0. Received: {name}={value!r}"
        )
    return float(value)


def positive_int(value, name, allow_none=False):
    """`value` as an int > 0 (None passes through when `allow_none`)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(
            f"Invalid value for argument `{name}`: expected a positive int. Received: {name}={value!r}"
        )
    return int(value)


def int_pair(value, name):
    """A positive int or a pair of them as a tuple of two Python ints."""
    if isinstance(value, numbers.Integral):
        pair = (value, value)
    else:
        try:
            pair = tuple(value)
        except TypeError:
            pair = ()
    if len(pair) != 2 or any(
        isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0 for v in pair
    ):
        raise ValueError(
            f"Invalid value for argument `{name}`: expected a positive int or a pair of "
            f"positive ints. Received: {name}={value!r}"
        )
    return tuple(int(v) for v in pair)
