#!/usr/bin/env bash
# Serves the documentation site on http://127.0.0.1:${PORT:-8000}/ with live reload (edits to docs/, README.md,
# the docstrings of sphere_tf and tools/docs/ rebuild it). Not strict: warnings are printed, the site still
# serves; scripts/build_docs.sh is the strict build.
# Usage: bash scripts/serve_docs.sh [extra `mkdocs serve` options]
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/docs/ensure_venv.sh
exec "$DOCS_VENV/bin/mkdocs" serve --config-file mkdocs.yml --dev-addr "127.0.0.1:${PORT:-8000}" "$@"
