"""Check that the built documentation site works opened from the file system (``file://``), as the README
says to open it: every internal link and resource of every page names a file that exists. A link to a
folder (``guides/getting-started/``) needs a web server to find its index.html; from the file system it
shows a listing. With ``--browser CHROMIUM``, the home page and a guide are also opened from ``file://`` in
headless Chromium: their rendered text must be the page's, and 1280 px wide screenshots are written into
``--screenshots``.

Usage: python scripts/check_site.py [SITE] [--browser CHROMIUM --screenshots DIR]
(scripts/docs.sh runs it after each build; exit status 1 lists what is broken.)
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import List, Optional, Sequence, Tuple
from urllib.parse import unquote, urlsplit

# Pages opened in the browser, and a text each must show once rendered.
BROWSER_PAGES = (("index.html", "Ten lines"), ("guides/getting-started.html", "Train the embedded example"),
                 ("guides/models.html", "From PyTorch"), ("java-map.html", "The Java API in Python"))


class _Links(HTMLParser):
    """The href and src attributes of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: List[str] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        self.links += [value for name, value in attrs if name in ("href", "src") and value]


def broken_links(site: Path) -> List[str]:
    """'page: link (why)' for each internal link of the site's pages that needs a server, or finds nothing."""
    broken = []
    for page in sorted(site.rglob("*.html")):
        if page == site / "404.html":  # a server's page for a path it lacks: links from the root, by design
            continue
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:  # another site, mailto:, data:, or #anchor
                continue
            target = (page.parent / unquote(parts.path)).resolve() if not parts.path.startswith("/") else None
            where = f"{page.relative_to(site)}: {link}"
            if target is None:
                broken.append(f"{where} (absolute: file:// reads it from the file system's root)")
            elif target.is_dir():
                broken.append(f"{where} (a folder: only a server finds its index.html)")
            elif not target.is_file():
                broken.append(f"{where} (no such file)")
    return broken


def browse(site: Path, chromium: str, screenshots: Path) -> List[str]:
    """Open pages of the site from file:// in headless Chromium: what went wrong, per page."""
    screenshots.mkdir(parents=True, exist_ok=True)
    problems = []
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,900",
              "--allow-file-access-from-files"]
    for page, expected in BROWSER_PAGES:
        url = (site / page).resolve().as_uri()
        dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
        if dom.returncode != 0 or expected not in dom.stdout or "Index of " in dom.stdout:
            problems.append(f"{page}: Chromium did not render it from {url} (exit {dom.returncode}; "
                            f"{'found' if expected in dom.stdout else 'no'} {expected!r})")
            continue
        shot = screenshots / (page.replace("/", "_").replace(".html", "") + "-1280.png")
        subprocess.run(common + [f"--screenshot={shot}", url], capture_output=True, timeout=120)
        if not shot.is_file() or shot.stat().st_size < 10_000:  # a blank page compresses to almost nothing
            problems.append(f"{page}: no screenshot, or a blank one ({shot})")
    return problems


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent / "site")
    parser.add_argument("--browser", metavar="CHROMIUM", help="also open pages from file:// in this Chromium")
    parser.add_argument("--screenshots", type=Path, metavar="DIR", help="where the browser's screenshots go")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"check_site: {args.site} holds no built site (scripts/docs.sh builds it)", file=sys.stderr)
        return 1
    problems = broken_links(args.site)
    if args.browser:
        problems += browse(args.site, args.browser, args.screenshots or args.site.parent / ".cache" / "site-screenshots")
    for problem in problems:
        print(f"check_site: {problem}", file=sys.stderr)
    pages = len(list(args.site.rglob("*.html")))
    print(f"site checked: {pages} pages, every internal link a file" + (", opened in Chromium" if args.browser else "")
          if not problems else f"site check failed: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
