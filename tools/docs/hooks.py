"""mkdocs hooks of the site build (`mkdocs.yml`, `hooks:`).

`on_pre_build`: the public objects of `sphere_tf` without a docstring, and the documented parameters their
signatures lack (`check_docstrings.py`, static: no TensorFlow), each logged as a warning, which fails
`mkdocs build --strict` (and shows in `mkdocs serve`).

`on_nav`: the generated API navigation file is not built as a page.
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mkdocs.structure.files import InclusionLevel  # noqa: E402

import api_modules  # noqa: E402
import check_docstrings  # noqa: E402

log = logging.getLogger("mkdocs.hooks.sphere_tf_docs")


def on_pre_build(config, **kwargs):
    """Warns once per public module, class, function or method of `sphere_tf` that has no docstring, and once
    per documented parameter that is not in the signature."""
    missing, problems = check_docstrings.check()
    for path in missing:
        log.warning("missing docstring: %s (every public object of sphere_tf needs one; "
                    "tools/docs/check_docstrings.py)", path)
    for line in problems:
        log.warning("%s (tools/docs/check_docstrings.py)", line)


def on_nav(nav, config, files, **kwargs):
    """Leaves the API navigation file (`api/SUMMARY.md`, read by mkdocs-literate-nav) out of the built pages
    and the search index: it is the nav's source, not a page."""
    summary = files.get_file_from_path(f"{api_modules.API_DIR}/SUMMARY.md")
    if summary is not None:
        summary.inclusion = InclusionLevel.EXCLUDED
    return nav
