"""Constructor-argument checks shared by every layer, loss, regularizer, optimizer and callback.

Each check raises a Keras-style `ValueError` naming the argument and the value
(``Invalid value for argument `rho`: expected a float > 0. Received: rho=0``,
the wording of `keras.layers.Conv2D`) and returns the value as a plain Python
number, so configs stay JSON-serialisable. NumPy scalars are accepted wherever
Python numbers are, as in Keras; `bool` is never taken for a number.
"""

import contextlib
import difflib
import math
import numbers
import os

# The largest size, stride, step count or seed every backend takes: TensorFlow's op attributes (strides, a
# one-hot depth) and JAX without x64 hold them as int32, so a larger one fails deep inside an op.
MAX_INT32 = 2**31 - 1
# Hyperparameters are used in float32 maths: a Python float beyond this is infinite there.
FLOAT32_MAX = 3.4028234663852886e38
# float32's smallest positive (subnormal) value: a positive float below it is 0 there.
FLOAT32_TINY = 1.401298464324817e-45


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
    if ok and abs(value) > FLOAT32_MAX:  # finite in Python, infinite in the float32 maths that uses it
        expected += f" within float32's range (magnitude <= {FLOAT32_MAX:.4g})"
        ok = False
    if ok and low == 0 and low_open and 0 < value < FLOAT32_TINY:  # > 0 in Python, 0 in float32
        expected += f" (at least {FLOAT32_TINY:.4g}, float32's smallest)"
        ok = False
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


def integer(value, name, minimum=None, allow_none=False, maximum=None):
    """`value` as a Python int >= `minimum` and <= `maximum` (None: unbounded; `MAX_INT32` for what reaches a
    backend: a size, a step count, a seed)."""
    if value is None and allow_none:
        return None
    if (not is_int(value) or (minimum is not None and value < minimum)
            or (maximum is not None and value > maximum)):
        if minimum == 1:
            expected = "a positive int"
        elif minimum is not None:
            expected = f"an int >= {minimum}"
        else:
            expected = "an int"
        if maximum is not None and is_int(value) and value > maximum:  # the bound it broke (others: as before)
            expected += f" (at most {maximum})"
        raise invalid_argument(name, expected + (" or None" if allow_none else ""), value)
    return int(value)


def positive_int(value, name, allow_none=False, maximum=None):
    """`value` as an int > 0 (and <= `maximum`, when given)."""
    return integer(value, name, minimum=1, allow_none=allow_none, maximum=maximum)


def int_pair(value, name):
    """A positive int or a pair of them as a tuple of two Python ints (Keras `standardize_tuple`), each at most
    `MAX_INT32` (a kernel size, stride or dilation is an int32 attribute of the backends' ops)."""
    if is_int(value):
        pair = (value, value)
    else:
        try:
            pair = tuple(value)
        except TypeError:
            pair = ()
    if len(pair) != 2 or any(not is_int(v) or not 0 < v <= MAX_INT32 for v in pair):
        raise invalid_argument(name, "a positive int or a pair of positive ints", value)
    return tuple(int(v) for v in pair)


def boolean(value, name):
    """`value` as a Python bool: True or False (NumPy's too), never a truthy string, number or list (`bool("no")`
    is True)."""
    if not _is_bool(value):
        raise invalid_argument(name, "True or False", value)
    return bool(value)


def text(value, name, allow_empty=False, allow_none=False):
    """`value` as a str (a name, a prefix, a metric key); '' only when `allow_empty`."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or (not value and not allow_empty):
        expected = "a str" if allow_empty else "a non-empty str"
        raise invalid_argument(name, expected + (" or None" if allow_none else ""), value)
    return value


def path(value, name, allow_none=False):
    """`value` as a str path (`os.fspath`): a non-empty str or `os.PathLike` naming a str path."""
    if value is None and allow_none:
        return None
    fspath = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(fspath, str) or not fspath.strip():
        raise invalid_argument(name, "a non-empty str or os.PathLike path" + (" or None" if allow_none else ""),
                               value)
    return fspath


def keras_object(get, value, name, kind):
    """`get(value)` (`keras.initializers.get`, `keras.regularizers.get`, ...), its errors re-raised naming the
    argument: Keras's own say "Could not interpret initializer identifier: x", without it.

    Args:
        get: the Keras getter.
        value: None, a registered name, a config dict, or a callable / object.
        name: str, the argument's name for the message.
        kind: str, what `value` identifies ("initializer", "regularizer", ...), for the message.

    Returns:
        What `get` returns.

    Raises:
        ValueError: `value` is not one of those, or `get` fails on it (Keras's message kept).
    """
    article = "an" if kind[0] in "aeiou" else "a"
    expected = f"None, a Keras {kind} name, a serialized {kind} (a dict) or {article} {kind} object"
    # A number or a list is not an identifier (Keras takes an array as a constant initializer of its own shape,
    # which then fails at build on the variable's shape).
    if _is_bool(value) or isinstance(value, (numbers.Number, list, tuple, set, bytes)):
        raise invalid_argument(name, expected, value)
    try:
        return get(value)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as error:
        raise ValueError(f"{invalid_argument(name, expected, value)}: {type(error).__name__}: {error}") from None


@contextlib.contextmanager
def argument_errors(name):
    """Re-raises a `ValueError` / `TypeError` of the block naming the argument `name` (when its message does not
    already): a layer's `build` filling a variable with the initializer given as `name`, which Keras checks only
    then (`bias_initializer='orthogonal'`: "The tensor to initialize must be at least two-dimensional")."""
    try:
        yield
    except (ValueError, TypeError) as error:
        if f"`{name}`" in str(error):
            raise
        kind = ValueError if isinstance(error, ValueError) else TypeError
        raise kind(f"Invalid value for argument `{name}`: {error}") from None


def did_you_mean(value, choices):
    """" Did you mean 'x'?" for the choice closest to the string `value` (difflib's ratio >= 0.6), else ""."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [c for c in choices if isinstance(c, str)], n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _is_bool(value):
    # NumPy's bool (`numpy.bool_`, `numpy.bool` in NumPy 2), without importing NumPy.
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool"))


def _is_choice(value, choice):
    # `1 == True` and `1.0 == True` in Python: a bool matches only a bool, anything else only a non-bool.
    if _is_bool(value) != _is_bool(choice):
        return False
    try:
        return bool(value == choice)
    except (TypeError, ValueError):  # an array's elementwise comparison
        return False


def one_of(value, name, choices):
    """`value` itself if it is one of `choices` (names, None, ...); a bool is one of them only if a bool is (True
    does not pass for the choice 1, nor 1 for True)."""
    ok = any(_is_choice(value, choice) for choice in choices)
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
