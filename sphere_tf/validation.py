"""Constructor-argument checks shared by every layer, loss, regularizer, optimizer and callback.

Each check raises a Keras-style `ValueError` naming the argument and the value
(``Invalid value for argument `rho`: expected a float > 0. Received: rho=0``,
the wording of `keras.layers.Conv2D`) and returns the value as a plain Python
number, so configs stay JSON-serialisable. NumPy scalars are accepted wherever
Python numbers are, as in Keras; `bool` is never taken for a number.
"""

import difflib
import math
import numbers


def invalid_argument(name, expected, value):
    """The `ValueError` for argument `name`: "expected <expected>", with the value received."""
    return ValueError(f"Invalid value for argument `{name}`: expected {expected}. Received: {name}={value!r}")


def is_real(value):
    """True for Python/NumPy real numbers, False for bools and everything else."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int(value):
    """True for Python/NumPy integers, False for bools and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def real(value, name, low=None, high=None, low_open=False, high_open=False, allow_none=False):
    """`value` as a finite float in the interval given by `low`/`high` (None: unbounded).

    Args:
        value: the argument.
        name: str, the argument's name for the message.
        low, high: float or None, the bounds.
        low_open, high_open: bool, exclude the bound itself.
        allow_none: bool, let None through unchanged.

    Returns:
        float (or None when allowed).

    Raises:
        ValueError: not a finite real number inside the bounds.
    """
    if value is None and allow_none:
        return None
    if low is not None and high is not None:
        expected = f"a float in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        expected = f"a float {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        expected = f"a float {'<' if high_open else '<='} {high:g}"
    else:
        expected = "a finite float"
    if allow_none:
        expected += " or None"
    ok = is_real(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        raise invalid_argument(name, expected, value)
    return float(value)


def positive_float(value, name, allow_none=False):
    """`value` as a finite float > 0."""
    return real(value, name, low=0.0, low_open=True, allow_none=allow_none)


def non_negative_float(value, name, allow_none=False):
    """`value` as a finite float >= 0."""
    return real(value, name, low=0.0, allow_none=allow_none)


def unit_interval(value, name, allow_none=False):
    """`value` as a float in (0, 1] (a fraction or a decay factor)."""
    return real(value, name, low=0.0, high=1.0, low_open=True, allow_none=allow_none)


def integer(value, name, minimum=None, allow_none=False):
    """`value` as a Python int >= `minimum` (None: any int)."""
    if value is None and allow_none:
        return None
    if not is_int(value) or (minimum is not None and value < minimum):
        if minimum == 1:
            expected = "a positive int"
        elif minimum is not None:
            expected = f"an int >= {minimum}"
        else:
            expected = "an int"
        raise invalid_argument(name, expected + (" or None" if allow_none else ""), value)
    return int(value)


def positive_int(value, name, allow_none=False):
    """`value` as an int > 0."""
    return integer(value, name, minimum=1, allow_none=allow_none)


def int_pair(value, name):
    """A positive int or a pair of them as a tuple of two Python ints (Keras `standardize_tuple`)."""
    if is_int(value):
        pair = (value, value)
    else:
        try:
            pair = tuple(value)
        except TypeError:
            pair = ()
    if len(pair) != 2 or any(not is_int(v) or v <= 0 for v in pair):
        raise invalid_argument(name, "a positive int or a pair of positive ints", value)
    return tuple(int(v) for v in pair)


def did_you_mean(value, choices):
    """" Did you mean 'x'?" for the choice closest to the string `value` (difflib's ratio >= 0.6), else ""."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def one_of(value, name, choices):
    """`value` itself if it is one of `choices` (names, None, ...)."""
    try:
        ok = value in choices
    except TypeError:  # unhashable value against a set
        ok = False
    if not ok:
        shown = sorted(choices, key=str) if isinstance(choices, (set, frozenset)) else tuple(choices)
        error = invalid_argument(name, f"one of {shown}", value)
        hint = did_you_mean(value, shown)
        raise ValueError(f"{error}.{hint}") if hint else error
    return value


def padding(value, name="padding"):
    """'valid' or 'same' (any case), lower-cased, as `keras.layers.Conv2D`."""
    if not isinstance(value, str) or value.lower() not in ("valid", "same"):
        raise invalid_argument(name, "'valid' or 'same'", value)
    return value.lower()


def plain_number(value):
    """`value` as a Python int when it is integral, else a float (JSON-friendly configs: `power=2` stays 2)."""
    value = float(value)
    return int(value) if value.is_integer() else value
