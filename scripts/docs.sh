#!/usr/bin/env bash
# Build the documentation site into site/ with MkDocs (Material theme, mkdocstrings for the
# reference), strictly: any warning, broken link or unresolved cross-reference fails the build.
# Creates (or reuses) .venv and installs ".[docs]". Extra arguments go to `mkdocs build`.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[docs]"
# Material for MkDocs prints a banner about its end of life (May 2027) and its successor, Zensical, at
# every build; it is not about this site, so it is silenced here (the choice is explained in
# docs/index.md's source comment and the issue notes).
NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --clean "$@"
echo "site built: $(pwd)/site/index.html"
