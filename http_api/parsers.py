"""The API's JSON parser: valid JSON the control plane cannot take is a 400 naming where.

Python's parser recurses once per ``[`` or ``{``, so a body of a few thousand brackets raises
RecursionError (a 500 with DRF's parser). PostgreSQL text cannot hold NUL, and a lone
surrogate (``"\\ud800"``) cannot even be encoded to UTF-8: either one reaching the database
or the renderer is a 500 or a 503. Refusing them here, before any view runs, keeps that rule
in one place for every endpoint, and nothing is half-applied because nothing started.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions, parsers

# Our bodies nest three levels (a usage report's providers); 32 is generous for any client.
MAX_DEPTH = 32

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


class BodyRejected(exceptions.ParseError):
    """Valid JSON the control plane will not take; ``field`` says where (``reason``,
    ``providers["vendor_a"]``, ``body`` for the whole)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _where(path: tuple[str | int, ...]) -> str:
    """A JSON path readable in an error, ASCII only (a lone surrogate cannot be rendered)."""
    if not path:
        return "body"
    parts = []
    for part in path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif _NAME.match(part):
            parts.append(f".{part}" if parts else part)
        else:
            parts.append(f"[{json.dumps(part[:60])}]")
    return "".join(parts)


def unstorable_character(text: str) -> str | None:
    """What in ``text`` PostgreSQL cannot store (a NUL, a lone surrogate), said for an error
    message; None when there is nothing."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "a NUL character (\\u0000)"
    return f"a lone surrogate (\\u{ord(found.group()):04x}), which is not valid UTF-8"


def _check_text(text: str, path: tuple[str | int, ...], what: str) -> None:
    problem = unstorable_character(text)
    if problem is not None:
        raise BodyRejected(_where(path), f"{what} contains {problem}; remove it")


def check_body(data: Any) -> None:
    """Raise ``BodyRejected`` when ``data`` nests deeper than ``MAX_DEPTH`` or holds a string
    (a key or a value) PostgreSQL cannot store. Iterative: a deep body must not recurse."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            _check_text(value, path, "the text")
        elif isinstance(value, (dict, list)):
            if len(path) >= MAX_DEPTH:
                raise BodyRejected(
                    _where(path[:4]) if path else "body", f"nested too deep: at most {MAX_DEPTH} levels of [ and {{"
                )
            if isinstance(value, dict):
                for key, child in value.items():
                    _check_text(key, (*path, key), "the key")
                    stack.append((child, (*path, key)))
            else:
                stack.extend((child, (*path, index)) for index, child in enumerate(value))


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, plus the checks of ``check_body``."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        encoding = (parser_context or {}).get("encoding") or "utf-8"
        try:
            data = json.loads(stream.read().decode(encoding), parse_float=_finite_float, parse_constant=_no_constant)
        except RecursionError:
            raise BodyRejected("body", f"nested too deep: at most {MAX_DEPTH} levels of [ and {{") from None
        # ValueError: UnicodeDecodeError and JSONDecodeError included. LookupError: a charset
        # that is a codec but no text encoding (charset=rot13, charset=hex).
        except (ValueError, LookupError) as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None
        check_body(data)
        return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
