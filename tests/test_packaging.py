"""The package metadata (pyproject.toml) against the tree: one version, the console command, the extras."""

import ast
import os
import tomllib

import sphere_tf
import sphere_tf_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_the_version_is_written_once():
    project = _pyproject()
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "sphere_tf.version.__version__"}
    with open(os.path.join(ROOT, "sphere_tf", "version.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    literals = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__version__"]]
    assert literals == [sphere_tf.__version__]
    assert len(sphere_tf.__version__.split(".")) == 3
    # No other file of the package spells a version out.
    assert not os.path.exists(os.path.join(ROOT, "setup.py"))


def test_console_command_and_packages():
    project = _pyproject()
    assert project["project"]["scripts"] == {"sphere-tf": "sphere_tf_cli:main"}
    assert callable(sphere_tf_cli.main)
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert include == ["sphere_tf", "sphere_tf.*", "sphere_tf_cli", "sphere_tf_cli.*"]
    # Every folder of configs is a package (else the wheel would leave it out).
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, "sphere_tf", "configs")):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        assert "__init__.py" in filenames, dirpath


def test_extras_and_python():
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    assert {"tensorflow", "jax", "torch", "export", "adversarial", "test"} <= set(extras)
    assert any(r.startswith("tensorflow-cpu") for r in extras["tensorflow"])
    assert not any("tensorflow" in r for r in project["dependencies"])
    assert project["requires-python"] == ">=3.11"


def test_readme_first_command_runs_a_packaged_config_with_the_installed_command():
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from sphere_tf import configs  # noqa: PLC0415

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        first = [line for line in f.read().splitlines()[:6] if line.startswith("bash scripts/setup.sh")][0]
    words = first.split()
    assert words[3:5] == [".venv/bin/sphere-tf", "train-classifier"], first
    assert words[words.index("--config") + 1] in configs.names()
    # setup.sh's editable install puts the console script beside the interpreter, as a wheel install does.
    command = os.path.join(os.path.dirname(sys.executable), "sphere-tf")
    out = subprocess.run([command, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"sphere-tf {sphere_tf.__version__}"
