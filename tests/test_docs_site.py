"""The documentation site (mkdocs.yml, `make docs`): README.md stays the short page a newcomer
reads first, every section the reference had when it was all in README.md is still in the
documentation, every page of docs/ is in the site's navigation, and the site builds in strict
mode, so a broken link or anchor, or a page left out, fails here as it fails `make docs`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_MAX_LINES = 250

# Every heading README.md had while it held the whole reference (before the site): each is
# still a heading of README.md or of a page of docs/, so no section was lost in the move.
FORMER_README_HEADINGS = [
    "Fallback-chain control plane",
    "The two commands",
    "Concepts",
    "Reviewed presets",
    "HTTP API",
    "Operations from the command line",
    "The access history",
    "The on-call pages",
    "Expiry and alerts",
    "Planned pins",
    "Guarded pins",
    "Failover drills",
    "Change notifications",
    "Acting from the alert",
    "Acting from Slack",
    "SDK quick start",
    "Signed documents",
    "TypeScript and Node services",
    "OpenFeature (OFREP)",
    "Relays",
    "Publishing to a static host or object store",
    "What a change costs",
    "Fleet status",
    "Audit export",
    "Configuration",
    "OpenTelemetry",
    "Request ids, metrics and logs",
    "Secrets, sign-in and password reset",
    "Single sign-on",
    "Deploy and scale",
    "Database roles",
]


def headings(markdown: str) -> set[str]:
    """The text of every ATX heading outside fenced code (a shell comment is no heading)."""
    found: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6} +(.+?)\s*#*\s*$", line)):
            found.add(heading.group(1))
    return found


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move reference into docs/"


def test_every_section_the_readme_had_is_still_in_the_documentation() -> None:
    present = headings((ROOT / "README.md").read_text(encoding="utf-8"))
    for page in DOCS.glob("**/*.md"):
        present |= headings(page.read_text(encoding="utf-8"))
    assert [heading for heading in FORMER_README_HEADINGS if heading not in present] == []


class MkDocsYaml(yaml.SafeLoader):
    """mkdocs.yml with MkDocs' own tags (`!relative`) read as nothing: only the nav is wanted."""


MkDocsYaml.add_multi_constructor("!", lambda loader, suffix, node: None)


def nav_pages(nav: Any) -> Iterator[str]:
    """Every page the nav lists: a list of `Title: page.md`, `page.md` or `Section: [...]`."""
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)


def test_every_page_of_docs_is_in_the_navigation() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=MkDocsYaml)
    listed = set(nav_pages(config["nav"]))
    pages = {page.relative_to(DOCS).as_posix() for page in DOCS.glob("**/*.md")}
    assert sorted(pages - listed) == [], "pages of docs/ missing from mkdocs.yml's nav"
    assert sorted(listed - pages) == [], "mkdocs.yml's nav lists pages docs/ does not have"


@pytest.mark.system
def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    # Material prints a banner about its end of life on every build; it is no warning of ours.
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr, done.stdout + done.stderr
    home = (site / "index.html").read_text(encoding="utf-8")
    # The home page is README.md, its links made the site's (mkdocs_hooks.py).
    assert "The two commands" in home and 'href="relays.html"' in home
