"""The documentation site as a newcomer meets it: it opens from the file system (the README says "open
site/index.html"), the install lines are the same on the README, the site's home and Getting started, and
the demo says what it does before its first long wait. The built site itself is checked by
scripts/check_site.py after each build (scripts/docs.sh; CI opens it in Chromium too)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import check_site  # noqa: E402  (scripts/ is no package)

INSTALL_PAGES = [ROOT / "README.md", ROOT / "docs" / "index.md", ROOT / "docs" / "guides" / "getting-started.md"]
CODE_WIDTH = 78  # characters of a code line the theme shows at 1280 px, clear of the copy button (measured)


def test_the_site_is_built_for_the_file_system() -> None:
    """Pages linked as guides/getting-started/ gave directory listings from file://."""
    assert re.search(r"^use_directory_urls: false$", (ROOT / "mkdocs.yml").read_text(), re.M)


def test_the_link_check_finds_what_needs_a_server(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "guides" / "getting-started").mkdir(parents=True)
    (site / "guides" / "getting-started" / "index.html").write_text("<p>a page</p>")
    (site / "guides" / "tensors.html").write_text('<a href="../index.html#top">home</a>')
    (site / "index.html").write_text(
        '<link href="assets/site.css" rel="stylesheet"><a href="guides/getting-started/">start</a>'
        '<a href="guides/tensors.html">tensors</a><a href="https://onnxruntime.ai/">ORT</a><a href="#x">here</a>'
        '<img src="/logo.png"><a href="missing.html">gone</a>')
    assert check_site.broken_links(site) == [
        "index.html: assets/site.css (no such file)",
        "index.html: guides/getting-started/ (a folder: only a server finds its index.html)",
        "index.html: /logo.png (absolute: file:// reads it from the file system's root)",
        "index.html: missing.html (no such file)",
    ]
    (site / "assets").mkdir()
    (site / "assets" / "site.css").write_text("")
    assert len(check_site.broken_links(site)) == 3


def install_block(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    section = text[text.index("## Install"):]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, f"{page}: no install block under ## Install"
    return match.group(1)


def test_one_install_block_everywhere() -> None:
    """The README had 4 install lines in whatever Python was active, the site's home 2, Getting started a
    `git clone <the ort_cffi repository>` placeholder. One block now, a virtual environment first."""
    blocks = {str(page.relative_to(ROOT)): install_block(page) for page in INSTALL_PAGES}
    readme = blocks["README.md"]
    assert all(block == readme for block in blocks.values()), blocks
    lines = readme.splitlines()
    assert lines[0].startswith("python3 -m venv .venv && . .venv/bin/activate")
    assert all(line.startswith("pip install ") for line in lines[1:]) and len(lines) >= 4
    assert all(len(line) <= CODE_WIDTH for line in lines), [line for line in lines if len(line) > CODE_WIDTH]
    for page in INSTALL_PAGES:
        assert "<the ort_cffi repository>" not in page.read_text(encoding="utf-8")


def test_the_demo_speaks_before_it_installs() -> None:
    """scripts/demo.sh printed nothing for its first 26 seconds (a fresh .venv, pip -q)."""
    lines = (ROOT / "scripts" / "demo.sh").read_text().splitlines()
    commands = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    first_wait = next(i for i, line in enumerate(commands) if "-m venv" in line or "pip install" in line)
    assert any(line.startswith('echo "demo: creating .venv') for line in commands[:first_wait]), commands[:first_wait]
    assert "--progress-bar on" in next(line for line in commands if "pip install" in line)


@pytest.mark.parametrize("page", ["docs/index.md", "docs/guides/getting-started.md", "docs/guides/models.md"])
def test_first_pages_code_fits_the_width_at_1280_px(page: str) -> None:
    """The home page's and Getting started's code, and the models guide's export snippet, were clipped on
    the right at 1280 px, under the copy button."""
    text = (ROOT / page).read_text(encoding="utf-8")
    blocks = re.findall(r"^```(?:bash|python)\n(.*?)^```", text, re.M | re.S)
    assert blocks
    wide = [line for block in blocks for line in block.splitlines() if len(line) > CODE_WIDTH]
    assert wide == []
