"""Every module of the SDK is one a reviewer reads in one sitting, or says why it is not.

A module of ``chainclient`` (integrations included) has at most ``MAX_LINES`` lines, unless
the first paragraph of its docstring has a line starting with ``MARKER`` that says why it
must be longer. A module that says so and is not longer carries a stale reason: it fails
too. Complexity has its own rule, in ruff.toml (C901 for the SDK).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "chainclient"
MAX_LINES = 450
MARKER = "Long because"


def modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def says_why_it_is_long(source: str) -> bool:
    """Whether the first paragraph of the module's docstring has a line starting with ``MARKER``."""
    docstring = ast.get_docstring(ast.parse(source)) or ""
    first_paragraph = docstring.split("\n\n", 1)[0]
    return any(line.lstrip().startswith(MARKER) for line in first_paragraph.splitlines())


def test_the_package_is_found() -> None:
    names = {path.relative_to(PACKAGE).as_posix() for path in modules()}
    assert {"__init__.py", "routing.py", "testing.py", "integrations/openai.py"} <= names


@pytest.mark.parametrize("path", modules(), ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_a_module_is_read_in_one_sitting_or_says_why_not(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    lines = len(source.splitlines())
    if says_why_it_is_long(source):
        assert lines > MAX_LINES, (
            f"{path.name} has {lines} lines, within {MAX_LINES}, but its docstring still says why it is long: "
            f"drop the {MARKER!r} line"
        )
    else:
        assert lines <= MAX_LINES, (
            f"{path.name} has {lines} lines (at most {MAX_LINES}): split it into modules named for what they do, "
            f"or say why it must be longer on a line starting {MARKER!r} in its docstring's first paragraph"
        )


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ('"""A module.\n\nLong because the table is one."""', False),  # not in the first paragraph
        ('"""A module.\nLong because the table is one, and reads in order."""', True),
        ('"""A module that is long because of its table."""', False),  # the marker starts a line
        ("# Long because a comment is not the docstring.\nX = 1\n", False),
    ],
    ids=["second-paragraph", "first-paragraph", "mid-line", "comment"],
)
def test_only_the_docstrings_first_paragraph_says_why(source: str, says: bool) -> None:
    assert says_why_it_is_long(source) is says
