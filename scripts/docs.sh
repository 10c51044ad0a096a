#!/usr/bin/env bash
# Build the documentation site into site/ with MkDocs (Material theme, mkdocstrings for the
# reference), strictly: any warning, broken link or unresolved cross-reference fails the build.
# Creates (or reuses) .venv and installs ".[docs]". Extra arguments go to `mkdocs build`.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[docs]"
# Material for MkDocs prints a banner at every build: it reaches end of life in May 2027, and its
# successor, Zensical (0.1 today), reads this mkdocs.yml. The banner says nothing about this site, so
# it is silenced; moving to Zensical once mkdocstrings runs there is a one-file change.
NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --clean "$@"
# The site opens from the file system: no internal link needs a server. With $SITE_BROWSER (a Chromium,
# as CI sets it), pages are also opened from file:// in it, with screenshots at 1280 px in .cache/.
.venv/bin/python scripts/check_site.py site ${SITE_BROWSER:+--browser "$SITE_BROWSER"}
echo "site built: $(pwd)/site/index.html (open it in a browser; no server needed)"
