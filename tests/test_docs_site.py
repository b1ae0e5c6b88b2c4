"""The documentation site's configuration (`mkdocs.yml`, `tools/docs/`), checked statically: cheap, no network, no
mkdocs, nothing of sphere_tf imported. The strict build and the browser check are `bash scripts/build_docs.sh`,
which CI runs on its own.

* the API generator covers every public module of the package as it is on disk (walked here independently with
  `pkgutil.iter_modules`, which imports nothing), leaves out private modules, the experiment configs and the C++
  kernel build, and includes `sphere_tf.cli` where it exists;
* every public module has a docstring (the build's griffe check covers classes, functions and methods too);
* `mkdocs.yml` generates the API pages with the tools of `tools/docs/`, and its nav holds every guide of docs/
  (and nothing missing);
* links in docs/*.md stay inside the site, and README.md (the home page) links only to guides that exist.
"""

import ast
import glob
import importlib.util
import os
import pkgutil
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
TOOLS = os.path.join(ROOT, "tools", "docs")


def _load_tool(name):
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", os.path.join(TOOLS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


api_modules = _load_tool("api_modules")


def _modules_on_disk():
    """Every module below sphere_tf/, by `pkgutil.iter_modules` over the folders (no import)."""
    found = ["sphere_tf"]

    def walk(path, prefix):
        for info in pkgutil.iter_modules([path]):
            name = prefix + info.name
            found.append(name)
            if info.ispkg:
                walk(os.path.join(path, info.name), name + ".")

    walk(os.path.join(ROOT, "sphere_tf"), "sphere_tf.")
    return found


def _below(name, package):
    return name == package or name.startswith(package + ".")


def _mkdocs_config():
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def _plugins(config):
    plugins = {}
    for entry in config["plugins"]:
        if isinstance(entry, str):
            plugins[entry] = {}
        else:
            plugins.update(entry)
    return plugins


def _nav_targets(nav):
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from _nav_targets(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _nav_targets(value)


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _links(path):
    """The link targets of a Markdown file, outside fenced code blocks and inline code."""
    targets, in_fence = [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if _FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            targets += _LINK.findall(re.sub(r"`[^`]*`", "", line))
    return targets


def _is_external(target):
    return re.match(r"^[a-z][a-z0-9+.-]*:", target) is not None or target.startswith("#")


def test_every_public_module_gets_an_api_page():
    expected = sorted(
        name for name in _modules_on_disk()
        if not any(part.startswith("_") for part in name.split("."))
        and not _below(name, "sphere_tf.configs")
        and not _below(name, "sphere_tf.backends.tensorflow.kernels")
    )
    modules = api_modules.public_modules()
    assert modules == expected
    assert {"sphere_tf", "sphere_tf.layers", "sphere_tf.losses", "sphere_tf.runners"} <= set(modules)
    if os.path.isfile(os.path.join(ROOT, "sphere_tf", "cli", "__init__.py")):
        assert "sphere_tf.cli" in modules


def test_configs_private_modules_and_kernel_build_are_left_out():
    modules = api_modules.public_modules()
    assert not [name for name in modules if _below(name, "sphere_tf.configs")]
    assert not [name for name in modules if _below(name, api_modules.KERNELS_PACKAGE)]
    assert not [name for name in modules if any(part.startswith("_") for part in name.split("."))]
    assert api_modules.CONFIGS_PACKAGE == "sphere_tf.configs"


def test_api_pages_are_distinct_and_below_the_api_folder():
    pages = [api_modules.page_path(name) for name in api_modules.public_modules()]
    assert len(set(pages)) == len(pages)
    assert all(page.startswith(api_modules.API_DIR + "/") and page.endswith(".md") for page in pages)
    assert api_modules.page_path("sphere_tf.layers") == "api/sphere_tf/layers/index.md"
    assert api_modules.page_path("sphere_tf.layers.opt") == "api/sphere_tf/layers/opt.md"


def test_every_public_module_has_a_docstring():
    missing = []
    for name in api_modules.public_modules():
        with open(api_modules.module_path(name), encoding="utf-8") as f:
            if not (ast.get_docstring(ast.parse(f.read())) or "").strip():
                missing.append(name)
    assert not missing, f"public modules without a docstring (the site's API pages need one): {missing}"


def test_mkdocs_config_generates_the_api_reference_from_the_package():
    config = _mkdocs_config()
    plugins = _plugins(config)
    assert {"search", "gen-files", "literate-nav", "mkdocstrings"} <= set(plugins)
    assert config["theme"]["name"] == "material"
    scripts = plugins["gen-files"]["scripts"]
    assert scripts == ["tools/docs/gen_api_pages.py"]
    python = plugins["mkdocstrings"]["handlers"]["python"]
    assert python["paths"] == ["."]
    options = python["options"]
    assert options["allow_inspection"] is False  # static analysis: the site builds without TensorFlow
    assert options["docstring_style"] == "google"
    for extension in options["extensions"]:
        assert os.path.isfile(os.path.join(ROOT, extension.split(":")[0]))
    for hook in config["hooks"]:
        assert os.path.isfile(os.path.join(ROOT, hook))
    for script in scripts:
        assert os.path.isfile(os.path.join(ROOT, script))
    nav_targets = list(_nav_targets(config["nav"]))
    assert api_modules.API_DIR + "/" in nav_targets  # the generated module tree (api/SUMMARY.md)
    assert config["docs_dir"] == "docs"


def test_every_guide_is_in_the_nav():
    config = _mkdocs_config()
    pages = {target for target in _nav_targets(config["nav"]) if target.endswith(".md")}
    guides = {os.path.relpath(path, DOCS).replace(os.sep, "/") for path in glob.glob(os.path.join(DOCS, "*.md"))}
    assert len(guides) >= 17
    assert guides - pages == set(), "docs/*.md pages missing from mkdocs.yml's nav"
    # index.md is README.md, generated at build time; every other nav page is a file in docs/.
    assert pages - guides == {"index.md"}
    assert os.path.isfile(os.path.join(ROOT, "README.md"))


def test_guide_links_stay_inside_the_site():
    dead = []
    for path in sorted(glob.glob(os.path.join(DOCS, "*.md"))):
        for target in _links(path):
            if _is_external(target):
                continue
            file_part = target.split("#", 1)[0]
            resolved = os.path.normpath(os.path.join(DOCS, file_part))
            if target.startswith("/") or not resolved.startswith(DOCS + os.sep) or not os.path.exists(resolved):
                dead.append(f"{os.path.basename(path)}: {target}")
    assert not dead, f"links that would be dead on the site (outside docs/ or missing): {dead}"


def test_readme_links_only_to_guides():
    dead = []
    for target in _links(os.path.join(ROOT, "README.md")):
        if _is_external(target):
            continue
        file_part = target.split("#", 1)[0]
        # The site's home page is README.md with `docs/` dropped from these links (tools/docs/gen_api_pages.py).
        if not (file_part.startswith("docs/") and os.path.isfile(os.path.join(ROOT, file_part))):
            dead.append(target)
    assert not dead, f"README.md links that would be dead on the site: {dead}"


def test_build_script_is_strict_and_runs_the_browser_check():
    with open(os.path.join(ROOT, "scripts", "build_docs.sh"), encoding="utf-8") as f:
        script = f.read()
    assert "build --strict" in script
    assert "tools/docs/browser_check.py" in script
    for name in ("build_docs.sh", "serve_docs.sh"):
        assert os.access(os.path.join(ROOT, "scripts", name), os.X_OK)
    with open(os.path.join(DOCS, "requirements.txt"), encoding="utf-8") as f:
        pinned = [line.split("==")[0] for line in f if line.strip() and not line.startswith("#")]
    assert {"mkdocs", "mkdocs-material", "mkdocstrings-python", "selenium"} <= set(pinned)
