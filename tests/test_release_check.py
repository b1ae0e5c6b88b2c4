"""tools/release/check_wheel.py: what the release check lets into the wheel and the sdist."""

import importlib.util
import os
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENTRY_POINTS = "[console_scripts]\nsphere-tf = sphere_tf_cli:main\n"
METADATA = "Metadata-Version: 2.4\nName: sphere_tf\n" + "".join(
    f"Provides-Extra: {extra}\n" for extra in ("tensorflow", "jax", "torch"))


def _check_wheel():
    spec = importlib.util.spec_from_file_location("check_wheel", os.path.join(ROOT, "tools", "release", "check_wheel.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _configs():
    return sorted(os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/")
                  for d, _, files in os.walk(os.path.join(ROOT, "sphere_tf", "configs"))
                  for f in files if f.endswith(".py"))


def _wheel(path, extra_files=(), drop=(), metadata=METADATA, entry_points=ENTRY_POINTS):
    names = ["sphere_tf/__init__.py", "sphere_tf_cli/__init__.py",
             "sphere_tf/backends/tensorflow/kernels/fused_kernels.cc", *_configs(), *extra_files]
    with zipfile.ZipFile(path, "w") as wheel:
        for name in names:
            if name not in drop:
                wheel.writestr(name, "")
        wheel.writestr("sphere_tf-9.9.9.dist-info/METADATA", metadata)
        wheel.writestr("sphere_tf-9.9.9.dist-info/entry_points.txt", entry_points)
        wheel.writestr("sphere_tf-9.9.9.dist-info/RECORD", "")
    return str(path)


def test_a_complete_wheel_passes(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    problems, count = _check_wheel().wheel_problems(_wheel(tmp_path / "w.whl"))
    assert problems == [] and count == len(_configs()) + 6


def test_what_does_not_belong_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    bad = ["tests/test_x.py", "sphere_tf/backends/tensorflow/kernels/_build/fused.so", "runs/a/results.json",
           "sphere_tf/__pycache__/x.cpython-311.pyc", "configs/common.py", "sphere_tf/notes.md"]
    problems, _ = _check_wheel().wheel_problems(
        _wheel(tmp_path / "w.whl", extra_files=bad, drop=["sphere_tf/configs/dcnet/table4_resnet32_adam.py"],
               metadata="Name: sphere_tf\nProvides-Extra: jax\n", entry_points=""))
    for name in bad:
        assert f"w.whl: {name} does not belong in the wheel" in problems
    assert "the wheel lacks the config sphere_tf/configs/dcnet/table4_resnet32_adam.py" in problems
    assert "the wheel's METADATA has no extra 'tensorflow'" in problems
    assert "the wheel's METADATA has no extra 'torch'" in problems
    assert "the wheel's entry_points.txt has no `sphere-tf` console script" in problems
    assert len(problems) == len(bad) + 4


def test_sdist_needs_its_metadata_and_no_build_products(tmp_path):
    path = tmp_path / "s.tar.gz"
    with tarfile.open(path, "w:gz") as sdist:
        for name in ("pyproject.toml", "README.md", "sphere_tf/__init__.py", "build/lib/x.py"):
            source = tmp_path / "f"
            source.write_text("")
            sdist.add(source, arcname=f"sphere_tf-9.9.9/{name}")
    problems = _check_wheel().sdist_problems(str(path))
    assert sorted(problems) == sorted([
        "s.tar.gz lacks PKG-INFO", "s.tar.gz lacks sphere_tf_cli/__init__.py",
        "s.tar.gz: build/lib/x.py does not belong in the sdist"])
