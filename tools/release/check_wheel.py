"""Checks the contents of a built wheel and sdist (scripts/check_release.sh).

    python check_wheel.py dist/sphere_tf-X-py3-none-any.whl dist/sphere_tf-X.tar.gz

The wheel may hold the `sphere_tf` and `sphere_tf_cli` packages (Python files, the C++ kernel sources) and its
`.dist-info`; nothing else: no tests, runs, results, benchmarks or build products (compiled kernels, caches). Every
packaged paper config is in it, and its metadata names the `sphere-tf` command and the backend extras. The sdist
holds the same package files plus the README, change log and pyproject. Exits 1 naming every file out of place.
"""

import os
import re
import sys
import tarfile
import zipfile

ALLOWED_TOP = ("sphere_tf/", "sphere_tf_cli/")
ALLOWED_SUFFIXES = (".py", ".cc")
FORBIDDEN = re.compile(r"(^|/)(tests?|runs|results|build|_build|bench|__pycache__)/|\.(so|o|pyc|failed)$")


def wheel_problems(path):
    problems = []
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        dist_info = [n for n in names if re.match(r"^sphere_tf-[^/]+\.dist-info/", n)]
        for name in names:
            if name in dist_info:
                continue
            if not name.startswith(ALLOWED_TOP) or not name.endswith(ALLOWED_SUFFIXES) or FORBIDDEN.search(name):
                problems.append(f"{os.path.basename(path)}: {name} does not belong in the wheel")
        metadata = next((wheel.read(n).decode() for n in dist_info if n.endswith("/METADATA")), "")
        entry_points = next((wheel.read(n).decode() for n in dist_info if n.endswith("/entry_points.txt")), "")
    for extra in ("tensorflow", "jax", "torch"):
        if f"Provides-Extra: {extra}" not in metadata:
            problems.append(f"the wheel's METADATA has no extra {extra!r}")
    if "sphere-tf = sphere_tf_cli:main" not in entry_points:
        problems.append("the wheel's entry_points.txt has no `sphere-tf` console script")
    source_configs = {os.path.join(dirpath, f) for dirpath, _, files in os.walk("sphere_tf/configs")
                      for f in files if f.endswith(".py")}
    missing = sorted(c for c in source_configs if c.replace(os.sep, "/") not in names)
    problems += [f"the wheel lacks the config {c}" for c in missing]
    return problems, len(names)


def sdist_problems(path):
    problems = []
    with tarfile.open(path) as sdist:
        names = [n.split("/", 1)[1] for n in sdist.getnames() if "/" in n]
    for required in ("pyproject.toml", "README.md", "PKG-INFO", "sphere_tf/__init__.py", "sphere_tf_cli/__init__.py"):
        if required not in names:
            problems.append(f"{os.path.basename(path)} lacks {required}")
    problems += [f"{os.path.basename(path)}: {n} does not belong in the sdist" for n in names
                 if FORBIDDEN.search(n) and not n.startswith("sphere_tf.egg-info/")]
    return problems


def main(wheel, sdist):
    problems, count = wheel_problems(wheel)
    problems += sdist_problems(sdist)
    for problem in problems:
        print(f"check_wheel: {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"check_wheel: {os.path.basename(wheel)}: {count} files, all in place; {os.path.basename(sdist)} too")


if __name__ == "__main__":
    main(*sys.argv[1:3])
