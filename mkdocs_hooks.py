"""The documentation site's Markdown, made to read as it does on GitHub (mkdocs.yml, `hooks`).

The home page is the repository's README.md: GitHub shows it at the repository's root, the site
as docs/index.md, so a newcomer reads one text in both places. Its links are written for the
root (`docs/relays.md`, `sdk/README.md`), so they are rewritten to where the same pages are in
the site; a link this does not know is left as it is, for strict mode's link checks to report.

And a table cell's code span writes a pipe as `\\|` (the command tables' `read\\|write`): GitHub
shows `|`, Python-Markdown the backslash too, so the backslash is dropped there.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

HOME = "index.md"
# The READMEs beside the code each have a page of the site that includes them whole.
INCLUDED = {
    "sdk/README.md": "sdk-python.md",
    "sdk-ts/README.md": "sdk-typescript.md",
    "bench/README.md": "bench.md",
}
# A Markdown link's target, or an <img>'s src, up to its anchor.
TARGET = re.compile(r'(\]\(|src=")([^)"#\s]+)')
CODE_SPAN = re.compile(r"`[^`\n]*`")


def site_path(target: str) -> str:
    """Where a link of the README, written from the repository's root, points in the site."""
    if target in INCLUDED:
        return INCLUDED[target]
    if target.startswith("docs/"):
        return target.removeprefix("docs/")
    return target


def unescape_table_pipes(markdown: str) -> str:
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("|") and "\\|" in line:
            lines[i] = CODE_SPAN.sub(lambda code: code.group(0).replace("\\|", "|"), line)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri == HOME:
        readme = (Path(config.config_file_path).parent / "README.md").read_text(encoding="utf-8")
        markdown = TARGET.sub(lambda link: link.group(1) + site_path(link.group(2)), readme)
    return unescape_table_pipes(markdown)
