"""The SDK's error types: a small hierarchy whose aggregated errors carry their parts as data."""

from __future__ import annotations


class ChainClientError(Exception):
    """Base of every error the SDK raises."""
