"""LOG_FORMAT=plain: one line per record, whatever the message holds.

Messages carry text people and clients sent (a change's reason, a client name); a newline in
one would start what looks like a second record (``... INFO presets.services select by
alice``) and forge the log. So control characters in the message are written escaped, as
``\\n``, ``\\r``, ``\\t`` or ``\\xNN``; an exception's traceback, which we wrote, stays
multi-line below its record.
"""

from __future__ import annotations

import logging
import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """``text`` with every control character (and line separator, and lone surrogate)
    written as an escape, so it is one line of printable text."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group()) or _escape(m.group()), text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class PlainFormatter(logging.Formatter):
    """``logging.Formatter`` with the rendered message escaped by ``escape_controls``, and
    `` request_id=...`` after it when the record was written during a request."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's naming
        escaped = logging.makeLogRecord({**record.__dict__, "message": escape_controls(record.message)})
        line = super().formatMessage(escaped)
        request_id = getattr(record, "request_id", None)
        # The id is one of the safe characters request_context accepts; escaped all the same.
        return f"{line} request_id={escape_controls(str(request_id))}" if request_id else line
