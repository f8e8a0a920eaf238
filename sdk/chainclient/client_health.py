"""What ``ChainClient.health()`` reports: one dict for health endpoints and logs, built from
the client's parts at one instant, without I/O (sdk/README.md lists its keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chainclient.snapshot import Snapshot
from chainclient.stats import ClientStats


def health_of(
    *,
    chain: str,
    now: float,
    snapshot: Snapshot,
    stats: ClientStats,
    long_poll: bool,
    published: bool,
    running: bool,
    state_file: Path | None,
    unreported: int,
    signatures_required: bool,
) -> dict[str, Any]:
    """The client's health at ``now`` (its wall clock): what it serves, and its counts."""
    expired = now >= snapshot.expires_at
    if expired:
        stats.note_expired(snapshot)
    document = snapshot.expired if expired else snapshot.document
    held = snapshot.document
    ahead = stats.ahead_of_server(now, held=held)
    view = stats.view()
    return {
        "chain": chain,
        "source": document.source,
        "epoch": document.epoch,
        "version": document.version,
        "preset": document.preset,
        "expired_pin": {
            "preset": held.preset,
            "version": held.version,
            "expires_at": held.expires_at_s,
        }
        if expired
        else None,
        "ahead_of_server": {
            "server_epoch": ahead.epoch,
            "server_version": ahead.version,
            "since": ahead.since,
        }
        if ahead is not None
        else None,
        "last_success_at": view.last_success_at,
        "last_failure_at": view.last_failure_at,
        "last_error": view.last_error,
        "consecutive_failures": view.consecutive_failures,
        "rejected": view.rejected,
        "changes": view.changes,
        "polls": view.polls,
        "long_poll": long_poll,
        "published": published,
        "running": running,
        "state_file": str(state_file) if state_file else None,
        "state_file_refused": view.state_file_refused,
        "unreported_requests": unreported,
        "last_usage_report_at": view.last_report_at,
        "usage_report_failures": view.report_failures,
        "last_save_error": view.last_save_error,
        "last_save_error_at": view.last_save_error_at,
        "signatures": {
            "required": signatures_required,
            "key_id": held.signature.key_id if held.signature is not None else None,
            "refused": view.signature_refusals,
            "last_refused": view.last_signature_refusal,
        },
    }


__all__ = ["health_of"]
