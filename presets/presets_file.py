"""Read and validate the reviewed presets file, without touching the database.

Every problem is reported with its JSON path and what to do about it, and a file with any
problem is rejected whole.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from presets.documents import NO_MARKING
from presets.providers import Provider
from presets.wire import (
    CHAIN_MAX_STEPS,
    CHAIN_MIN_STEPS,
    FAILURE_POLICY_BOUND_MAX_MS,
    FAILURE_POLICY_BOUND_MIN_MS,
    FAILURE_POLICY_COMMITS,
    FAILURE_POLICY_RETRY_MAX_WAIT_MS,
    STEP_MAX_TIMEOUT_MS,
    STEP_MIN_TIMEOUT_MS,
)

SCHEMA_PATH = Path(__file__).with_name("presets.schema.json")
STEP_TIMEOUTS = f"{STEP_MIN_TIMEOUT_MS}..{STEP_MAX_TIMEOUT_MS}"
POLICY_BOUNDS = f"{FAILURE_POLICY_BOUND_MIN_MS}..{FAILURE_POLICY_BOUND_MAX_MS}"


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class PresetsFileError(Exception):
    """The presets file cannot be used; ``problems`` lists every reason."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class PresetSpec:
    name: str
    steps: list[dict[str, Any]]
    marking: dict[str, Any]
    description: str
    failure_policy: dict[str, Any] | None = None
    """What the SDK's routers do on a failure for this preset (``normal_policy``'s form: every
    key present), its own or its chain's; None: none, the routers' defaults."""

    @property
    def source_hash(self) -> str:
        """Hash of the reviewed definition: a change here is a change to what is served. A
        preset without a failure policy hashes as it did before policies existed."""
        definition: dict[str, Any] = {"chain": self.steps, "marking": self.marking, "description": self.description}
        if self.failure_policy is not None:
            definition["failure_policy"] = self.failure_policy
        return canonical_hash(definition)


def normal_policy(raw: dict[str, Any]) -> dict[str, Any]:
    """A failure policy as the chain document carries it: every key, its default where the
    file leaves it out (commit at the first chunk, no bounds of its own, no same-step retry)."""
    return {
        "commit": raw.get("commit", FAILURE_POLICY_COMMITS[0]),
        "first_chunk_ms": raw.get("first_chunk_ms"),
        "idle_ms": raw.get("idle_ms"),
        "retry_same_step": dict(raw["retry_same_step"]) if raw.get("retry_same_step") is not None else None,
    }


@dataclass(frozen=True)
class ChainSpec:
    name: str
    description: str
    default: str
    contract: dict[str, Any]
    presets: dict[str, PresetSpec] = field(default_factory=dict)
    # An environment's own default, where the file gives one (``defaults``: {"staging": ...}).
    defaults: dict[str, str] = field(default_factory=dict)

    def default_in(self, environment: str) -> str:
        """The default preset of this chain in ``environment``."""
        return self.defaults.get(environment, self.default)


@dataclass(frozen=True)
class PresetsFile:
    path: str
    sha256: str
    chains: dict[str, ChainSpec]
    text: str = ""  # the file as reviewed: what a promotion carries to the next environment


def canonical_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema())


def schema() -> dict[str, Any]:
    """The presets file's JSON schema, with the step rules chainclient checks too (how many
    steps, the timeout's bounds) set from ``presets.wire``, their one home."""
    document = json.loads(SCHEMA_PATH.read_text())
    chain = document["$defs"]["preset"]["properties"]["chain"]
    chain["minItems"], chain["maxItems"] = CHAIN_MIN_STEPS, CHAIN_MAX_STEPS
    timeout = document["$defs"]["step"]["properties"]["timeout_ms"]
    timeout["minimum"], timeout["maximum"] = STEP_MIN_TIMEOUT_MS, STEP_MAX_TIMEOUT_MS
    policy = document["$defs"]["failure_policy"]["properties"]
    policy["commit"]["enum"] = list(FAILURE_POLICY_COMMITS)
    for bound in ("first_chunk_ms", "idle_ms"):
        policy[bound]["minimum"], policy[bound]["maximum"] = FAILURE_POLICY_BOUND_MIN_MS, FAILURE_POLICY_BOUND_MAX_MS
    wait = policy["retry_same_step"]["properties"]["max_wait_ms"]
    wait["minimum"], wait["maximum"] = 0, FAILURE_POLICY_RETRY_MAX_WAIT_MS
    return document


def _describe(error: jsonschema.ValidationError) -> str:
    """Turn a schema error into a sentence that says what is wrong and how to fix it."""
    what = error.validator
    if what == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        hints = {
            "default": "name the preset this chain serves when nothing is pinned",
            "presets": "add at least one preset",
            "chain": "list the preset's steps",
            "chains": "add a top-level 'chains' object",
            "timeout_ms": f"give each step a timeout in milliseconds ({STEP_TIMEOUTS})",
        }
        hint = hints.get(missing, "add it")
        return f"missing {missing!r}: {hint}"
    if what == "additionalProperties":
        return f"{error.message}; remove it or check its spelling"
    if what in {"minimum", "maximum"} and error.path and error.path[-1] == "timeout_ms":
        return f"timeout_ms {error.instance} is out of bounds: use {STEP_TIMEOUTS} milliseconds"
    if what in {"minimum", "maximum"} and error.path and error.path[-1] in ("first_chunk_ms", "idle_ms"):
        return f"{error.path[-1]} {error.instance} is out of bounds: use {POLICY_BOUNDS} milliseconds"
    if what in {"minimum", "maximum"} and error.path and error.path[-1] == "max_wait_ms":
        return (
            f"max_wait_ms {error.instance} is out of bounds: use 0..{FAILURE_POLICY_RETRY_MAX_WAIT_MS} milliseconds "
            "(a longer wait is better spent on the next step)"
        )
    if what == "enum" and error.path and error.path[-1] == "commit":
        return f"commit {error.instance!r} is not one of {', '.join(FAILURE_POLICY_COMMITS)}"

    if what in {"minItems", "maxItems"} and error.path and error.path[-1] == "chain":
        return (
            f"a preset has {CHAIN_MIN_STEPS} to {CHAIN_MAX_STEPS} steps, this one has {len(error.instance)}: "
            "split it or drop steps"
        )
    if what == "type":
        return f"{error.message}; fix the value's type"
    if what == "pattern" or (error.validator == "propertyNames"):
        return f"{error.message}: names are lower-case slugs (a-z, 0-9, _ and -)"
    return error.message


def _json_path(parts: Any) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _nul_characters(value: Any, parts: tuple[Any, ...] = ()) -> list[Problem]:
    """Strings holding NUL (\\u0000): PostgreSQL cannot store them, so the file is refused here
    rather than failing halfway through a sync."""
    if isinstance(value, str):
        if "\x00" in value:
            return [Problem(_json_path(parts), "contains a NUL character (\\u0000): remove it")]
        return []
    found: list[Problem] = []
    if isinstance(value, dict):
        for key, child in value.items():
            if "\x00" in key:
                found.append(
                    Problem(_json_path((*parts, key)), "the key contains a NUL character (\\u0000): remove it")
                )
            found += _nul_characters(child, (*parts, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _nul_characters(child, (*parts, index))
    return found


def parse_presets(text: str, *, registry: Mapping[str, Provider], path: str = "<text>") -> PresetsFile:
    """Validate the presets file's text against its schema and the provider registry."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PresetsFileError(
            [Problem("$", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")]
        ) from None
    problems = [
        Problem(_json_path(e.absolute_path), _describe(e))
        for e in sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    ]
    problems += _nul_characters(data)
    if problems:
        raise PresetsFileError(problems)

    chains: dict[str, ChainSpec] = {}
    for chain_name, raw_chain in data["chains"].items():
        chain_path = f"$.chains.{chain_name}"
        contract = raw_chain.get("contract", {})
        requires = set(contract.get("requires", []))
        destinations = contract.get("destinations")
        presets: dict[str, PresetSpec] = {}
        chain_policy = raw_chain.get("failure_policy")
        for preset_name, raw_preset in raw_chain["presets"].items():
            preset_path = f"{chain_path}.presets.{preset_name}"
            seen: set[tuple[str, str]] = set()
            for i, step in enumerate(raw_preset["chain"]):
                step_path = f"{preset_path}.chain[{i}]"
                provider = registry.get(step["provider"])
                if provider is None:
                    problems.append(
                        Problem(
                            f"{step_path}.provider",
                            f"unknown provider {step['provider']!r}: use one of "
                            f"{', '.join(sorted(registry))} (providers are compiled in)",
                        )
                    )
                    continue
                if step["model"] not in provider.models:
                    problems.append(
                        Problem(
                            f"{step_path}.model",
                            f"unknown model {step['model']!r} for {step['provider']}: use one of "
                            f"{', '.join(sorted(provider.models))}",
                        )
                    )
                    continue
                key = (step["provider"], step["model"])
                if key in seen:
                    problems.append(
                        Problem(
                            step_path,
                            f"duplicate step {step['provider']}/{step['model']}: each provider's "
                            "model may appear once per preset; remove the repeat",
                        )
                    )
                seen.add(key)
                missing = requires - provider.models[step["model"]]
                if missing:
                    problems.append(
                        Problem(
                            step_path,
                            f"violates the chain's contract: {step['provider']}/{step['model']} lacks "
                            f"{', '.join(sorted(missing))}; pick a model that has it",
                        )
                    )
                if destinations is not None and provider.destination not in destinations:
                    problems.append(
                        Problem(
                            step_path,
                            f"violates the chain's contract: destination {provider.destination!r} "
                            f"is not allowed (allowed: {', '.join(destinations)})",
                        )
                    )
            policy = raw_preset["failure_policy"] if "failure_policy" in raw_preset else chain_policy
            presets[preset_name] = PresetSpec(
                name=preset_name,
                steps=[dict(s) for s in raw_preset["chain"]],
                marking={**NO_MARKING, **raw_preset.get("marking", {})},
                description=raw_preset.get("description", ""),
                failure_policy=normal_policy(policy) if policy is not None else None,
            )
        if raw_chain["default"] not in raw_chain["presets"]:
            problems.append(
                Problem(
                    f"{chain_path}.default",
                    f"default preset {raw_chain['default']!r} is not defined in this chain: "
                    f"use one of {', '.join(sorted(raw_chain['presets']))}",
                )
            )
        defaults = dict(raw_chain.get("defaults", {}))
        for environment, name in sorted(defaults.items()):
            if name not in raw_chain["presets"]:
                problems.append(
                    Problem(
                        f"{chain_path}.defaults.{environment}",
                        f"default preset {name!r} is not defined in this chain: "
                        f"use one of {', '.join(sorted(raw_chain['presets']))}",
                    )
                )
        chains[chain_name] = ChainSpec(
            name=chain_name,
            description=raw_chain.get("description", ""),
            default=raw_chain["default"],
            contract=contract,
            presets=presets,
            defaults=defaults,
        )
    if problems:
        raise PresetsFileError(problems)
    return PresetsFile(path=path, sha256=hashlib.sha256(text.encode()).hexdigest(), chains=chains, text=text)


def load_presets_file(path: str | Path, *, registry: Mapping[str, Provider]) -> PresetsFile:
    """Read and validate a presets file; raise PresetsFileError naming every problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PresetsFileError([Problem("$", f"cannot read {path}: {exc}")]) from None
    return parse_presets(text, registry=registry, path=str(path))
