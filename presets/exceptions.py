"""The errors service functions raise; the API, the web pages and the commands render them."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """A change was refused; nothing was written. ``message`` says what to do instead."""

    code = "validation_error"
    status = 400

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidInput(ServiceError):
    """The request's values break a rule (a blank reason, an expiry too far ahead...)."""

    def __init__(self, field: str, message: str, **details: Any) -> None:
        super().__init__(f"{field}: {message}", details={"field": field, **details})
        self.field = field
        self.field_message = message


class NotFound(ServiceError):
    code = "not_found"
    status = 404


class Conflict(ServiceError):
    """The chain changed since the version the caller saw."""

    code = "conflict"
    status = 409


class Forbidden(ServiceError):
    """The credential may not read or act on what was asked (a token of another environment, or
    bound to other chains); the message says which credential would."""

    code = "forbidden"
    status = 403
