#!/usr/bin/env bash
# Builds the documentation site and checks it in a browser:
#   1. .venv-docs with the pinned tools of docs/requirements.txt (created / updated when missing or changed);
#   2. `mkdocs build --strict` into build/site/: README.md as the home page, the guides of docs/, one API page
#      per public module of sphere_tf from its docstrings (generated from the package tree). Any warning fails
#      it: a dead link or anchor in a page, an unresolved cross-reference, a docstring griffe cannot parse, a
#      public module / class / function / method without a docstring or a documented parameter that is not in
#      the signature (tools/docs/hooks.py), a docs/*.md page missing from the nav;
#   3. tools/docs/browser_check.py: headless Chromium (Debian's chromium and chromium-driver, installed with
#      apt-get when missing) opens the home page and the sphere_tf.layers page over a local HTTP server, checks
#      title, navigation, search results and that the console logged no error, and saves screenshots in
#      build/site-check/ (index.png, api.png; the CI artifacts).
# Usage: bash scripts/build_docs.sh [--no-browser-check]
set -euo pipefail
cd "$(dirname "$0")/.."

browser_check=1
for arg in "$@"; do
  case "$arg" in
    --no-browser-check) browser_check=0 ;;
    *) echo "usage: bash scripts/build_docs.sh [--no-browser-check]" >&2; exit 2 ;;
  esac
done

source tools/docs/ensure_venv.sh
"$DOCS_VENV/bin/mkdocs" build --strict --clean --config-file mkdocs.yml --site-dir build/site
if [ "$browser_check" = 1 ]; then
  "$DOCS_VENV/bin/python" tools/docs/browser_check.py --site build/site --out build/site-check
fi
