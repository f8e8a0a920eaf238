"""LOG_FORMAT=json: each log record as one JSON object on one line, for log shippers."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

# What every LogRecord has; any other attribute came from ``extra=`` (or a filter, such as
# ``request_id``) and is written as a field of its own.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_JSON_TYPES = (str, int, float, bool, type(None))


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message"}``, plus ``exception`` (the traceback text) and
    ``stack`` when the record carries them, plus every ``extra=`` field (``request_id``,
    ``status_code``, ``duration_ms``, ...). Newlines stay inside the JSON strings; a value
    JSON has no form for is written as its ``str()``; an extra field never replaces one of the
    fields above."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        for name, value in record.__dict__.items():
            if name not in _STANDARD and name not in entry:
                entry[name] = _json_safe(value)
        return json.dumps(entry, ensure_ascii=False, default=str)


def _json_safe(value: Any) -> Any:
    """``value`` if JSON can write it as it is (nested lists and dicts of plain values
    included), else its ``str()``: a record never fails to be written for its extras."""
    if isinstance(value, _JSON_TYPES):
        return value
    try:
        json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return str(value)
    return value
