# Sourced by scripts/build_docs.sh and scripts/serve_docs.sh (from the repository root): creates .venv-docs and
# installs docs/requirements.txt into it when missing or when the requirements changed since the last install.
DOCS_VENV="${DOCS_VENV:-.venv-docs}"
DOCS_PYTHON="${PYTHON:-python3.11}"
if [ ! -x "$DOCS_VENV/bin/python" ]; then
  "$DOCS_PYTHON" -m venv "$DOCS_VENV"
fi
if [ ! -f "$DOCS_VENV/.installed" ] || [ docs/requirements.txt -nt "$DOCS_VENV/.installed" ]; then
  "$DOCS_VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$DOCS_VENV/bin/python" -m pip install -q -r docs/requirements.txt
  touch "$DOCS_VENV/.installed"
fi
# mkdocs-material 9.7+ and mkdocs-get-deps print a banner about MkDocs 2 and its forks on every run.
export NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
