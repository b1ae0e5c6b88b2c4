"""Strict JSON files (results, configs, histories): never a bare `NaN` or `Infinity`.

Python's `json.dump` writes a non-finite float as the bare token `NaN` /
`Infinity` unless `allow_nan=False`; those tokens are not JSON (RFC 8259 §6:
"Numeric values that cannot be represented ... such as Infinity and NaN are not
permitted"), and `JSON.parse`, `jq` and most other readers reject the whole
file. Every JSON file the package writes goes through `write_json`: a non-finite
number becomes `null`, and a top-level `non_finite_values` entry records which
key held what, so a diverged loss or an undefined median stays visible without
breaking the file. Code that knows *why* a value is undefined writes `None`
itself with a note beside it (e.g. DeepFool medians with nothing fooled).
"""

import json
import math
import os

import numpy as np

# Top-level key listing the dotted paths whose non-finite values were written as null.
NON_FINITE_KEY = "non_finite_values"


def _plain(value, path, found):
    """`value` with NumPy scalars/arrays as Python values and non-finite floats as None (noted in `found`)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        found[path or "<root>"] = repr(value)  # 'nan', 'inf', '-inf'
        return None
    if isinstance(value, dict):
        return {k: _plain(v, f"{path}.{k}" if path else str(k), found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


def strict_json_value(value):
    """`value` made writable as strict JSON: non-finite floats become None, listed under `NON_FINITE_KEY`.

    Args:
        value: JSON-like data (dicts, lists, tuples, str, numbers, bool, None, NumPy scalars/arrays).

    Returns:
        The converted copy. When a non-finite number was replaced, `value` must be a dict and
        the copy gains `{NON_FINITE_KEY: {dotted_path: 'nan' | 'inf' | '-inf'}}`.

    Raises:
        ValueError: a non-finite number in a value that is not a dict (nowhere to note it).
    """
    found = {}
    converted = _plain(value, "", found)
    if found:
        if not isinstance(converted, dict):
            raise ValueError(f"non-finite number(s) at {sorted(found)} in a JSON value that is not a dict: "
                             "nowhere to record them; write None with a reason instead.")
        converted[NON_FINITE_KEY] = {**converted.get(NON_FINITE_KEY, {}), **found}
    return converted


def dumps(value, indent=2):
    """`value` as strict JSON text (`strict_json_value`, then `json.dumps(..., allow_nan=False)`)."""
    return json.dumps(strict_json_value(value), indent=indent, allow_nan=False)


def write_json(path, value, indent=2):
    """Writes `value` to `path` as strict JSON, atomically (a temporary file renamed over `path`).

    A reader never sees a half-written file, and a crash while writing leaves the
    previous version in place.

    Args:
        path: str, the file to (over)write.
        value: JSON-like data, see `strict_json_value`.
        indent: int, the `json.dumps` indentation.

    Returns:
        The value as written (non-finite numbers replaced).
    """
    converted = strict_json_value(value)
    text = json.dumps(converted, indent=indent, allow_nan=False)
    temporary = f"{path}.tmp"
    try:
        with open(temporary, "w") as f:
            f.write(text + "\n")
        os.replace(temporary, path)
    except OSError as error:
        # A write that failed (a full disk: ENOSPC) leaves `path` as it was and gives the partial file's space back.
        try:
            os.remove(temporary)
        except OSError:
            pass
        if error.filename is None:  # a failed write() names no file: name it
            raise OSError(error.errno, error.strerror, temporary) from error
        raise
    return converted


__all__ = ["NON_FINITE_KEY", "dumps", "strict_json_value", "write_json"]
