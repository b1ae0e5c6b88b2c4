"""mkdocs-gen-files script: the site's generated pages, from the source tree at build time.

* `index.md`: the repository's README.md (the site's home page), its `docs/x.md` links turned into site links;
* `api/...`: one page per public module of `sphere_tf` (`api_modules.public_modules()`: the package tree walked
  as it is now, so new, moved or removed modules need no edit here), each rendered by mkdocstrings from the
  docstrings (a package's page lists its modules, and links each name it re-exports to the object's page);
* `api/configs.md`: the experiment config files (`sphere_tf/configs/`), one line each by name, instead of API
  pages;
* `api/cli.md`: the `sphere-tf` command (`sphere_tf_cli`): its command list and each command's usage, from the
  mains' module docstrings;
* `api/SUMMARY.md`: the API section of the navigation (mkdocs-literate-nav), the module tree.
"""

import ast
import os
import re
import sys

import mkdocs_gen_files

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import api_modules  # noqa: E402
import check_docstrings  # noqa: E402

ROOT = api_modules.ROOT

# Links of README.md into docs/ (`[runner.md](docs/runner.md#x)`): relative to the site's home page they lose
# the `docs/` prefix. Links elsewhere in the repository would be dead on the site; strict mode reports them.
_README_DOCS_LINK = re.compile(r"(\]\()docs/")


def readme_page():
    """README.md as the site's home page."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    with mkdocs_gen_files.open("index.md", "w") as f:
        f.write(_README_DOCS_LINK.sub(r"\1", text))


def _relative(from_page, to_page):
    return os.path.relpath(to_page, os.path.dirname(from_page)).replace(os.sep, "/")


def _summary(obj):
    doc = obj.docstring.value.strip() if obj.docstring else ""
    return doc.splitlines()[0].strip() if doc else ""


def exported_names(package, name, pages):
    """`(name, target path, summary)` of what package module `name` re-exports from its submodules and
    mkdocstrings does not render on its page: public imported names, when the module has no `__all__` (with one,
    its names are rendered in full). Only targets rendered on some page (`pages`: the modules that have one;
    public, with a docstring) are listed."""
    import griffe

    module = package if name == api_modules.PACKAGE else package[name.split(".", 1)[1]]
    if module.exports is not None:
        return []
    found = []
    for member_name, member in module.members.items():
        if member_name.startswith("_") or not member.is_alias:
            continue
        try:
            target = member.final_target
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue  # outside the package
        if target.is_module or not target.docstring or target.module.path not in pages:
            continue
        if any(part.startswith("_") for part in target.path.split(".")[len(target.module.path.split(".")):]):
            continue
        found.append((member_name, target.path, _summary(target)))
    return found


def module_pages(modules, configs_page):
    """One page per module; returns the literate-nav lines of the module tree."""
    package = check_docstrings.load_package(ROOT)
    with_pages = set(modules)
    nav_lines = []
    for name in modules:
        page = api_modules.page_path(name)
        depth = name.count(".")
        title = name.rpartition(".")[2] if depth else name
        nav_lines.append(f"{'    ' * depth}* [{title}]({_relative(f'{api_modules.API_DIR}/SUMMARY.md', page)})")
        with mkdocs_gen_files.open(page, "w") as f:
            # The full name as the page's title (browser tab, search); the nav shows the last component.
            f.write(f"---\ntitle: {name}\n---\n\n::: {name}\n")
            exports = exported_names(package, name, with_pages)
            if exports:
                # Cross-references (mkdocs-autorefs): each resolves to the object's own page, or strict fails.
                f.write(f"\n## Exported names\n\nImported from its modules, `{name}.X` is the object documented "
                        "at each link.\n\n| Name | Summary |\n| --- | --- |\n")
                for export, target, summary in exports:
                    f.write(f"| [`{export}`][{target}] | {summary.replace('|', chr(92) + '|')} |\n")
            if name == api_modules.PACKAGE and configs_page:
                f.write(f"\nThe experiment config files are listed on [their own page]"
                        f"({_relative(page, api_modules.CONFIGS_PAGE)}).\n")
    return nav_lines


def configs_page():
    """The list of experiment config files; returns False when there are none."""
    files = api_modules.config_files(ROOT, api_modules.CONFIGS_PACKAGE)
    if not files:
        return False
    folder = api_modules.CONFIGS_PACKAGE.replace(".", "/") + "/"
    with mkdocs_gen_files.open(api_modules.CONFIGS_PAGE, "w") as f:
        f.write("# Experiment configs\n\n")
        f.write(f"The `ml_collections` config files of the papers' experiments, below `{folder}` in the package "
                "(what each table runs, with commands and the papers' numbers: "
                f"[Experiments]({_relative(api_modules.CONFIGS_PAGE, 'experiments.md')})). Run one by its name: "
                "`sphere-tf run --config NAME --workdir DIR` ([command line]"
                f"({_relative(api_modules.CONFIGS_PAGE, api_modules.CLI_PAGE)})). They are experiment recipes, not "
                "API, so they have no reference pages; files that hold what configs share have no name.\n\n")
        f.write("| Name | What it runs |\n| --- | --- |\n")
        for path in files:
            source = os.path.join(ROOT, path)
            with open(source, encoding="utf-8") as config:
                if not re.search(r"^def get_config\(", config.read(), re.M):
                    continue
            summary = api_modules.first_docstring_line(source).replace("|", "\\|")
            f.write(f"| `{path[len(folder):-len('.py')]}` | {summary} |\n")
    return True


def cli_page():
    """The `sphere-tf` command's page: the package docstring, then each command's usage (its main's docstring)."""
    package = api_modules.CLI_PACKAGE
    init = api_modules.module_path(package)
    if not os.path.isfile(init):
        return False
    with open(init, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    commands = {}
    for node in tree.body:  # COMMANDS = {"run": ("sphere_tf_cli.run", "..."), ...}: read, not imported
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["COMMANDS"]:
            commands = ast.literal_eval(node.value)
    with mkdocs_gen_files.open(api_modules.CLI_PAGE, "w") as f:
        f.write("# Command line: `sphere-tf`\n\n```text\n" + (ast.get_docstring(tree) or "") + "\n```\n")
        for command, (module, summary) in commands.items():
            f.write(f"\n## `sphere-tf {command}`\n\n{summary}.\n")
            if module is None:
                continue
            with open(api_modules.module_path(module), encoding="utf-8") as source:
                doc = ast.get_docstring(ast.parse(source.read())) or ""
            f.write(f"\n```text\n{doc}\n```\n")
    return True


def main():
    """Writes every generated page."""
    readme_page()
    has_configs = configs_page()
    has_cli = cli_page()
    nav_lines = module_pages(api_modules.public_modules(), has_configs)
    summary = f"{api_modules.API_DIR}/SUMMARY.md"
    if has_cli:
        nav_lines.insert(0, f"* [Command line: sphere-tf]({_relative(summary, api_modules.CLI_PAGE)})")
    if has_configs:
        nav_lines.append(f"* [Experiment configs]({_relative(summary, api_modules.CONFIGS_PAGE)})")
    with mkdocs_gen_files.open(summary, "w") as f:
        f.write("\n".join(nav_lines) + "\n")


main()
