"""Helpers of the fuzzing tests (`test_fuzz_constructors.py`, `test_fuzz_configs.py`): the bad values, picked by
the type of what they replace, and the checks every example must pass.

The values are what a typo, a wrong config file or a careless caller gives: a wrong type (a str for an int, a
list for a float, None where something is required, a bool for a number, nested dicts), a value out of range
(negative and zero sizes, NaN and infinities, floats beyond float32, ints beyond int32 and int64, empty and unknown
names). Hypothesis draws them (`derandomize=True` in tests/conftest.py: the same examples every run).
"""

import copy
import math
import re

import numpy as np
from hypothesis import strategies as st

NAN, INF = float("nan"), float("inf")
NESTED = {"a": {"b": {"c": [1, None]}}}
# The largest int a size, count or seed may be (`sphere_tf.validation.MAX_INT32`); the fuzzers draw past it.
MAX_INT32 = 2**31 - 1
# Exceptions that end an example cleanly: the argument (or config key) is refused, named in the message.
CLEAN_ERRORS = (ValueError, TypeError)


def fresh(values):
    """`sampled_from(values)`, each draw a deep copy: a layer may keep (and Keras's tracking wrap) a dict or list
    it was given, and the next example must get the original."""
    return st.sampled_from(values).map(copy.deepcopy)


def wrong_types():
    return fresh([None, "", "nonexistent", [], [1, 2], {}, NESTED, {"class_name": "nonexistent", "config": NESTED},
                  (1.0, "a")])


def ints():
    return st.one_of(
        st.integers(-3, 8),
        st.sampled_from([2 ** 31, 2 ** 63, 10 ** 30, -(2 ** 63)]),  # huge: past int32, int64
        st.sampled_from([2.5, 2.0, -1.0, NAN, INF, True, False, "3", np.int64(2), np.float64(2.5)]),
    )


def floats():
    """Finite floats up to 1e6 in magnitude, and what is never a hyperparameter: NaN, infinities, magnitudes beyond
    float32 (infinite in the float32 maths), subnormals. Finite values between 1e6 and float32's limit are valid
    but may overflow the maths they scale (a regularizer factor of 1e30), as in Keras (`L2(1e30)`): the user's
    choice, not drawn."""
    return st.one_of(
        st.floats(-1e6, 1e6),
        st.sampled_from([NAN, INF, -INF, 1e39, -1e39, 1e308, 5e-324, 1e-30, 0.0, -0.0, -1.0, 0.5, 2, True, False,
                         "0.1", np.float32(0.5), np.float32(NAN), np.float64(1e6)]),
        fresh([[0.1]]),
    )


def strings(default):
    shown = default if isinstance(default, str) and default else "x"
    return st.one_of(st.sampled_from(["", " ", "nonexistent", shown.upper(), shown + " ", 3, True, None]),
                     st.text(max_size=4))


def bools():
    return st.one_of(st.sampled_from([True, False, 0, 1, 2, -1, 0.0, 1.0, NAN, "true", "false", "", None,
                                      np.bool_(False)]), fresh([[True]]))


def sequences():
    return st.one_of(
        st.lists(st.one_of(st.floats(-10.0, 10.0), st.sampled_from([NAN, INF, 1e39]), st.integers(-2, 5)),
                 max_size=4),
        st.lists(st.floats(0.0, 2.0), min_size=1, max_size=4).map(tuple),
        fresh([(1.0, "a", 0.0), ((1.0,), 0.5, 0.0), 1.0, "1,0.5,0"]),
    )


def by_default(default, real_valued=False):
    """The wrong values of `default`'s type (bool, int, float, str, sequence; any type for None), and the wrong
    types of every other (`wrong_types`). `real_valued`: an int default that stands for a real number."""
    if isinstance(default, (bool, np.bool_)):
        typed = bools()
    elif isinstance(default, int):
        typed = st.one_of(ints(), floats()) if real_valued else ints()
    elif isinstance(default, float):
        typed = floats()
    elif isinstance(default, str):
        typed = strings(default)
    elif isinstance(default, (list, tuple)):
        typed = sequences()
    else:  # None or required: any type
        typed = st.one_of(ints(), floats(), strings("x"), bools(), sequences())
    return st.one_of(typed, wrong_types())


def names(message, name):
    """Whether `message` names `name` as a word (`k` in "k=0" or "`k`", not in "kernel"; `train.steps` in
    "train.steps=0", not in "train.steps_per_epoch"); a dotted key's last part may be written as an index
    (`operators.tanhconv['magnitude']` names `operators.tanhconv.magnitude`)."""
    spellings = [re.escape(name)]
    if "." in name:
        section, key = name.rsplit(".", 1)
        spellings.append(re.escape(section) + r"\[['\"]" + re.escape(key) + r"['\"]\]")
    return any(re.search(rf"(?<![A-Za-z0-9_.]){spelling}(?![A-Za-z0-9_])", message) for spelling in spellings)


def is_number(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def same(a, b):
    """Config equality where NaN equals NaN, tuples equal lists (JSON has no tuples) and Keras's class names
    compare without case (a built-in optimizer made from its name serializes as 'sgd', rebuilt as 'SGD')."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(
            a[k].lower() == b[k].lower() if k == "class_name" and isinstance(a[k], str) and isinstance(b[k], str)
            else same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if is_number(a) and is_number(b):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def check_accepted(name, value, default, recorded, real_valued=False, pair=False, identifier=False,
                   non_negative=False):
    """Raises AssertionError when `value`, accepted for `name` (default `default`), is a silent wrong result.

    The rule: a bool argument took a bool; a number argument took a number (not a bool, str or list), an int one
    an integral number within int32 (`real_valued`: any real; `pair`: also a pair of ints); a str argument took a
    str (`identifier`: also an object or a config dict); nothing non-finite was kept (NaN or an infinity, alone or
    in a list); `non_negative`: no negative number; and what the object or resolved config `recorded` is the value
    itself (a float recorded as float32 is fine, a float cut to an int is not). None passes the type rules: it is
    the documented "default" or "off" of an argument, and what it does is exercised by the caller.
    """
    if value is None:
        pass
    elif isinstance(default, (bool, np.bool_)):
        assert isinstance(value, (bool, np.bool_)), f"{name}={value!r} accepted for a bool"
    elif is_number(default) and not (pair and isinstance(value, (list, tuple))):
        assert is_number(value), f"{name}={value!r} accepted for a number"
        if not (real_valued or isinstance(default, (float, np.floating))):
            assert float(value).is_integer(), f"{name}={value!r} accepted for an int"
            assert abs(value) <= MAX_INT32, f"{name}={value!r} accepted (past int32)"
    elif isinstance(default, str) and not identifier:
        assert isinstance(value, str), f"{name}={value!r} accepted for a str"
    if is_number(value):
        assert math.isfinite(value), f"{name}={value!r} accepted (not a finite number)"
        assert not (non_negative and value < 0), f"{name}={value!r} accepted (negative)"
        if is_number(recorded):
            # The value itself, as a float if need be (float32 in a Keras variable: an optimizer's learning rate);
            # never cut to an int.
            assert float(recorded) in (float(value), float(np.float32(value))), f"{name}={value!r} recorded as " \
                                                                                f"{recorded!r}"
    if isinstance(value, (list, tuple)):
        assert not any(is_number(v) and not math.isfinite(v) for v in value), f"{name}={value!r} accepted (not finite)"
