"""Fault providers driven from another process: JSON lines on stdin, one JSON line back each.

``python -m chainclient.fault_serve vendor backup`` starts one ``FaultProvider`` per name
(each answering ``ok``) and prints one line::

    {"providers": {"vendor": {"url": ..., "openai_base_url": ..., "anthropic_base_url": ...}, ...},
     "scenarios": [...], "default_params": {...}}

then reads commands, one JSON object a line, and answers each with one line:

- ``{"op": "set", "provider": "vendor", "scenario": "no_headers", "params": {"hang_s": 10}}``:
  ``provider.set(scenario, **params)``; answers ``{"ok": true}``;
- ``{"op": "sequence", "provider": "vendor", "plans": ["server_error", ["ok", {"chunks": 2}]]}``:
  ``provider.sequence(plans)``; ``{"ok": true}``;
- ``{"op": "requests", "provider": "vendor"}``: ``{"requests": [{"method", "path", "headers",
  "body"}, ...], "connections": N}``;
- ``{"op": "clear", "provider": "vendor"}``: ``provider.clear()``; ``{"ok": true}``;
- ``{"op": "close"}``: closes every provider, answers ``{"closed": true}`` and exits (as does
  the end of stdin, without an answer).

A command that fails answers ``{"error": "<type>: <message>"}`` and the providers stay as
they were. This is how a test in another language (the TypeScript client's conformance
table) drives the very providers the Python tests use; everything it does is
``FaultProvider``'s own methods. Standard library only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from chainclient.fault_provider import DEFAULT_PARAMS, SCENARIOS, FaultProvider


def run_command(providers: Mapping[str, FaultProvider], command: Mapping[str, Any]) -> dict[str, Any]:
    """Carry out one command on ``providers``; the answer to print (a failure raises)."""
    op = command.get("op")
    if op == "close":
        for provider in providers.values():
            provider.close()
        return {"closed": True}
    name = command.get("provider")
    if not isinstance(name, str) or name not in providers:
        raise KeyError(f"no provider {name!r}; one of: {', '.join(providers)}")
    provider = providers[name]
    if op == "set":
        provider.set(command["scenario"], **command.get("params", {}))
        return {"ok": True}
    if op == "sequence":
        plans: Sequence[Any] = command["plans"]
        provider.sequence([plan if isinstance(plan, str) else (plan[0], plan[1]) for plan in plans])
        return {"ok": True}
    if op == "requests":
        return {
            "requests": [
                {"method": r.method, "path": r.path, "headers": dict(r.headers), "body": r.body}
                for r in provider.requests
            ],
            "connections": provider.connections,
        }
    if op == "clear":
        provider.clear()
        return {"ok": True}
    raise ValueError(f"unknown op {op!r}; one of: set, sequence, requests, clear, close")


def serve(names: Sequence[str], commands: TextIO, answers: TextIO) -> None:
    """Start a provider per name, say where they listen, then answer ``commands`` until
    ``close`` or their end; every provider is closed on the way out."""
    if not names or len(set(names)) != len(names):
        raise ValueError("name one or more providers, each once")
    providers: dict[str, FaultProvider] = {}
    try:
        for name in names:
            providers[name] = FaultProvider()
        where = {
            name: {"url": p.url, "openai_base_url": p.openai_base_url, "anthropic_base_url": p.anthropic_base_url}
            for name, p in providers.items()
        }
        _say(answers, {"providers": where, "scenarios": list(SCENARIOS), "default_params": dict(DEFAULT_PARAMS)})
        for line in commands:
            if not line.strip():
                continue
            try:
                command = json.loads(line)
                if not isinstance(command, dict):
                    raise TypeError("a command is a JSON object")
                answer = run_command(providers, command)
            except Exception as exc:  # a bad command is answered, and the providers stay
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            _say(answers, answer)
            if answer.get("closed"):
                return
    finally:
        for provider in providers.values():
            provider.close()


def _say(answers: TextIO, answer: Mapping[str, Any]) -> None:
    answers.write(json.dumps(answer) + "\n")
    answers.flush()


def main(argv: Sequence[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv) or ["vendor", "backup"]
    serve(names, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["main", "run_command", "serve"]
