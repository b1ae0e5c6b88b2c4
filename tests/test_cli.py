"""The `sphere-tf` command (`sphere_tf_cli`) and the packaged configs' names (`sphere_tf.configs`)."""

import os
import re
import subprocess
import sys

import pytest

import sphere_tf_cli
from sphere_tf import configs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(ROOT, "sphere_tf", "configs")


def _config_files_by_regex():
    """Reference: every .py below sphere_tf/configs with a line `def get_config(`, as names (path, no .py)."""
    found = set()
    for dirpath, _, filenames in os.walk(CONFIG_DIR):
        for filename in filenames:
            path = os.path.join(dirpath, filename)
            if filename.endswith(".py") and re.search(r"^def get_config\(", open(path, encoding="utf-8").read(), re.M):
                found.add(os.path.relpath(path, CONFIG_DIR)[:-3].replace(os.sep, "/"))
    return found


def test_names_are_the_files_defining_get_config():
    names = configs.names()
    assert names == sorted(names)
    assert set(names) == _config_files_by_regex()
    assert "dcnet/fashion_mnist_tanh_cosine" in names and "face/recipe" not in names and "common" not in names


@pytest.mark.parametrize("spec", ["dcnet/fashion_mnist_tanh_cosine", "dcnet/fashion_mnist_tanh_cosine.py",
                                  "configs/dcnet/fashion_mnist_tanh_cosine.py",
                                  "sphere_tf/configs/dcnet/fashion_mnist_tanh_cosine.py"])
def test_config_path_resolves_names_and_paths(spec, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no source tree here: the names resolve in the package
    assert configs.config_path(spec) == os.path.join(CONFIG_DIR, "dcnet", "fashion_mnist_tanh_cosine.py")


def test_config_path_keeps_an_existing_file(tmp_path):
    path = tmp_path / "my_config.py"
    path.write_text("def get_config():\n    return {}\n")
    assert configs.config_path(str(path)) == str(path)


@pytest.mark.parametrize("spec", ["dcnet/no_such_table", "face/recipe", "common", "", "/nonexistent/x.py",
                                  "../configs/dcnet/fashion_mnist_tanh_cosine", "adversarial/_base", "dcnet"])
def test_config_path_refuses_what_is_not_a_config(spec):
    with pytest.raises(configs.ConfigNotFoundError, match=re.escape(repr(spec)) + ".*sphere-tf configs"):
        configs.config_path(spec)


def test_load_module_imports_a_config_and_refuses_a_file_without_get_config(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("def get_config(arg=None):\n    return {'arg': arg}\n")
    assert configs.load_module(str(path)).get_config("x") == {"arg": "x"}
    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 1\n")
    with pytest.raises(configs.ConfigNotFoundError, match="defines no get_config"):
        configs.load_module(str(helper))
    assert configs.load_module("dcnet/fashion_mnist_tanh_cosine").__name__ == "fashion_mnist_tanh_cosine"


def test_summary_is_the_docstring_first_line():
    with open(os.path.join(CONFIG_DIR, "dcnet", "table4_resnet32_adam.py"), encoding="utf-8") as f:
        text = f.read()
    first = re.search(r'"""(.*)', text).group(1)
    assert configs.summary("dcnet/table4_resnet32_adam") == first.strip()


def _cli(*args, cwd=ROOT):
    """`python -m sphere_tf_cli ARGS` in `cwd`, this source tree first on the path (as `sphere-tf` after an install)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.run([sys.executable, "-m", "sphere_tf_cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_usage_and_unknown_commands():
    result = _cli()
    assert result.returncode == 2 and "commands:" in result.stdout
    for name in sphere_tf_cli.COMMANDS:
        assert f"  {name} " in result.stdout
    result = _cli("trian")
    assert result.returncode == 2 and "unknown command 'trian'" in result.stderr
    assert _cli("--help").returncode == 0


def test_every_command_runs_its_main_module():
    for name, (module, _) in sphere_tf_cli.COMMANDS.items():
        if module is not None:
            assert os.path.isfile(os.path.join(ROOT, *module.split(".")) + ".py"), name


def test_the_command_package_imports_no_keras():
    code = "import sys, sphere_tf_cli; print(sorted(m for m in ('keras', 'sphere_tf', 'tensorflow') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_configs_lists_a_folder(tmp_path):
    result = _cli("configs", "dcnet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    expected = sorted(n for n in _config_files_by_regex() if n.startswith("dcnet/"))
    assert [line.split()[0] for line in lines] == expected
    assert "DCNet Table 4: ResNet-32 on CIFAR-100" in result.stdout
    result = _cli("configs", "nosuch", cwd=tmp_path)
    assert result.returncode == 2 and "no folder 'nosuch'" in result.stderr and "dcnet" in result.stderr


def test_run_a_config_by_name_from_anywhere(tmp_path):
    """`sphere-tf run --config NAME --dry_run` outside the source tree; an unknown name is one line."""
    result = _cli("run", "--config=dcnet/fashion_mnist_tanh_cosine:quick", "--dry_run", "--dry_run_steps=0",
                  "--backend=jax", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert '"name": "small_cnn"' in result.stdout
    result = _cli("run", "--config=dcnet/no_such_table", f"--workdir={tmp_path / 'w'}", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: --config: 'dcnet/no_such_table' is neither a config file nor a packaged config's name "
        "(`sphere-tf configs` lists them).")
    assert not (tmp_path / "w").exists()
