"""Runs pytest on the test files given as arguments; the `main` of every sphere_tf py_test.

The repo's tests are pytest modules (plain functions, fixtures, hypothesis), so running a
test file as a script would execute nothing. Bazel passes the file's runfiles path as an
argument (`args = ["$(rootpath tests/ops/test_x.py)"]` in //:BUILD).

Two things keep the run honest inside Bazel's sandbox:
  * the editable install of sphere_tf points at the source checkout (a `sys.path` entry
    from easy-install.pth, or a meta-path finder from a PEP 660 `__editable__` .pth);
    both are dropped so every import resolves to the runfiles tree, and a module missing
    from BUILD fails the test instead of being read silently from the checkout;
  * pytest's temporary directories, hypothesis' example database and matplotlib's cache
    go to $TEST_TMPDIR, since the runfiles tree and $HOME are read-only in the sandbox.
"""

import os
import sys


def _drop_source_checkout_from_path():
    """Removes sys.path entries that point at a sphere_tf checkout outside the runfiles."""
    runfiles = os.path.realpath(os.environ.get("RUNFILES_DIR") or os.getcwd())
    kept = []
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        in_runfiles = real == runfiles or real.startswith(runfiles + os.sep)
        is_checkout = os.path.isfile(os.path.join(real, "sphere_tf", "__init__.py"))
        if is_checkout and not in_runfiles and entry:
            continue
        kept.append(entry)
    sys.path[:] = kept
    # New-style (PEP 660) editable installs map `sphere_tf.*` to the checkout through a
    # meta-path finder instead of a sys.path entry: a submodule missing from the runfiles
    # would still be found there. Drop those finders too.
    for finder in list(sys.meta_path):
        module = sys.modules.get(getattr(finder, "__module__", ""))
        mapping = getattr(module, "MAPPING", None)
        if isinstance(mapping, dict) and "sphere_tf" in mapping:
            sys.meta_path.remove(finder)


def main(argv):
    tmp = os.environ.get("TEST_TMPDIR")
    if tmp:
        os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tmp, "hypothesis"))
        os.environ.setdefault("MPLCONFIGDIR", os.path.join(tmp, "matplotlib"))
    _drop_source_checkout_from_path()
    import pytest  # pylint: disable=import-outside-toplevel

    args = ["-q", "-p", "no:cacheprovider"]
    if tmp:
        args += ["--basetemp", os.path.join(tmp, "pytest")]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args += ["--junitxml", xml]
    return pytest.main(args + list(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
