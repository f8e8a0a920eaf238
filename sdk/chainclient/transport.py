"""HTTP to the control plane: where the chain lives, who is asking, and the connection.

``Endpoint`` holds what every request carries: the chain's path, the bearer token and the
identity headers the control plane shows fleet convergence with (``X-Chain-Client``,
``X-Chain-Applied-Version``). ``Connection`` is one keep-alive HTTP(S) connection whose
blocked read another thread can cut short: that is how ``stop()`` returns at once even in
the middle of a long poll. ``ControlPlaneConnection`` is what the client needs of one: a
service (or a test) may open its own instead (``ChainClient(connect=...)``). A ``Worker`` is
a daemon thread with its own connection; the poller and the usage reporter each run in one,
so a held long poll never delays a report.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import json
import math
import platform
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from typing import Protocol
from urllib.parse import quote, urlsplit

from chainclient._version import __version__

MAX_DOCUMENT_BYTES = 1 << 20
USER_AGENT = f"chainclient/{__version__} python/{platform.python_version()}"


class StoppedError(Exception):
    """The connection was interrupted by ``stop()``."""


class ControlPlaneConnection(Protocol):
    """A connection to the control plane, as the client uses one (``Connection`` is the
    default; ``ChainClient(connect=...)`` opens others). Each thread that talks to the
    control plane (the poller's, the usage reporter's) opens one and closes it when done, and
    so do ``poll_once()`` and ``flush_usage()``."""

    def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        read_timeout: float,
        *,
        body: bytes | None = None,
        connect_timeout: float | None = None,
    ) -> tuple[int, Message, bytes]:
        """Send one request (``path`` under the control plane's origin) and return its status,
        headers and body; raise OSError or ``http.client.HTTPException`` when it fails."""
        ...

    def interrupt(self) -> None:
        """Wake a request blocked in another thread and refuse new ones (``stop()``)."""
        ...

    def close(self) -> None:
        """Close the connection; a later request may open it again."""
        ...


@dataclass(frozen=True)
class Endpoint:
    """The chain's URL on the control plane, and the headers that say who is asking."""

    scheme: str
    host: str
    port: int | None
    path: str
    token: str | None = field(repr=False)  # a secret: never in a log line; None: sent without one
    client_id: str
    timeout: float
    """Connect and read timeout in seconds; a long poll's read adds its ``wait``."""
    opener: Callable[[], ControlPlaneConnection] | None = field(default=None, repr=False, compare=False)
    """Opens a connection instead of ``Connection`` (``ChainClient(connect=...)``)."""

    @classmethod
    def of(
        cls,
        base_url: str,
        *,
        chain: str,
        token: str | None,
        client_id: str,
        timeout: float,
        opener: Callable[[], ControlPlaneConnection] | None = None,
    ) -> Endpoint:
        """The endpoint of ``chain`` on the control plane at ``base_url``; ValueError unless
        ``base_url`` is an http(s) URL."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        return cls(
            scheme=parts.scheme,
            host=parts.hostname,
            port=parts.port,
            path=f"{parts.path.rstrip('/')}/api/v1/chains/{quote(chain, safe='')}",
            token=token,
            client_id=client_id,
            timeout=float(timeout),
            opener=opener,
        )

    @property
    def usage_path(self) -> str:
        return f"{self.path}/usage"

    def connect(self) -> ControlPlaneConnection:
        """A new, not yet opened, connection to the control plane."""
        if self.opener is not None:
            return self.opener()
        return Connection(self.scheme, self.host, self.port, self.timeout)

    def poll_headers(self, *, if_none_match: str, applied_version: int) -> dict[str, str]:
        return self._authorization() | {
            "If-None-Match": if_none_match,
            "X-Chain-Client": self.client_id,
            "X-Chain-Applied-Version": str(applied_version),
            "User-Agent": USER_AGENT,
            "Accept": "application/json",
        }

    def report_headers(self, *, applied_version: int) -> dict[str, str]:
        return self._authorization() | {
            "X-Chain-Client": self.client_id,
            "X-Chain-Applied-Version": str(applied_version),
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Connection": "close",
        }

    def _authorization(self) -> dict[str, str]:
        # Without a token (published documents), none: object stores refuse a bearer token.
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


class Connection:
    """One keep-alive HTTP(S) connection whose blocked read another thread can cut short."""

    def __init__(self, scheme: str, host: str, port: int | None, connect_timeout: float) -> None:
        self._scheme = scheme
        self._host = host
        self._port = port
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None
        self._socket: socket.socket | None = None
        self._interrupted = False

    def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        read_timeout: float,
        *,
        body: bytes | None = None,
        connect_timeout: float | None = None,
    ) -> tuple[int, Message, bytes]:
        for attempt in (1, 2):
            connection, fresh = self._connect(connect_timeout)
            try:
                assert connection.sock is not None
                connection.sock.settimeout(read_timeout)
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                answer = response.read(MAX_DOCUMENT_BYTES + 1)
            except (ConnectionError, http.client.BadStatusLine):
                self._drop()
                # Servers and load balancers close idle keep-alive connections; that is
                # not an outage, so a reused connection gets one fresh retry. A request
                # with a body is never resent: the server may have acted on it.
                if fresh or attempt == 2 or body is not None:
                    raise
                continue
            except BaseException:
                self._drop()
                raise
            if len(answer) > MAX_DOCUMENT_BYTES:
                self._drop()
                raise http.client.HTTPException(f"response larger than {MAX_DOCUMENT_BYTES} bytes")
            if response.will_close or not response.isclosed():
                self._drop()
            return response.status, response.headers, answer
        raise AssertionError("unreachable")

    def interrupt(self) -> None:
        """Wake a blocked request and refuse new ones; callable from any thread."""
        with self._lock:
            self._interrupted = True
            sock = self._socket
            if sock is not None:
                # shutdown() (not close()) wakes a recv blocked in another thread; the raw
                # socket method skips the TLS close_notify an SSLSocket would attempt.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def close(self) -> None:
        self._drop()

    def _connect(self, timeout: float | None = None) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._interrupted:
                raise StoppedError()
            if self._connection is not None:
                return self._connection, False
        timeout = self._connect_timeout if timeout is None else timeout
        connection: http.client.HTTPConnection
        if self._scheme == "https":
            connection = http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        connection.connect()
        with self._lock:
            if self._interrupted:
                connection.close()
                raise StoppedError()
            self._connection, self._socket = connection, connection.sock
        return connection, True

    def _drop(self) -> None:
        with self._lock:
            connection, self._connection, self._socket = self._connection, None, None
        if connection is not None:
            connection.close()


class Worker:
    """A daemon thread and the connection it owns: ``stop()`` wakes it by interrupting that
    connection, since a thread blocked in a read cannot be told anything else.

    ``target(stop_event, connection)`` gets both as arguments, so a thread that outlives
    ``stop()`` keeps its own and never touches the next ``start()``'s.
    """

    def __init__(
        self, target: Callable[[threading.Event, ControlPlaneConnection], None], *, name: str, endpoint: Endpoint
    ) -> None:
        self.connection = endpoint.connect()
        self._target = target
        self._name = name
        self.thread: threading.Thread | None = None

    def start(self, stop_event: threading.Event) -> None:
        thread = threading.Thread(target=self._target, args=(stop_event, self.connection), name=self._name, daemon=True)
        self.thread = thread
        thread.start()

    @property
    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def join(self, deadline: float) -> bool:
        """Wait for the thread until ``deadline`` (monotonic); True if it still runs then.
        A thread never waits for itself (``stop()`` called from ``on_change``): False."""
        thread = self.thread
        if thread is None or thread is threading.current_thread():
            return False
        thread.join(max(0.0, deadline - time.monotonic()))
        return thread.is_alive()


# What a failed request can raise: the network, the HTTP exchange, or stop().
REQUEST_ERRORS = (OSError, http.client.HTTPException, StoppedError)


def describe(exc: BaseException) -> str:
    """A failed request's error, short enough for one log line and ``health()``."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def error_message(body: bytes) -> str:
    """The API's ``{"error": {"message": ...}}`` if present, else a short excerpt."""
    try:
        data = json.loads(body)
        message = data["error"]["message"]
        if isinstance(message, str):
            return message[:200]
    except (ValueError, TypeError, KeyError, RecursionError):
        pass
    text = body[:200].decode("utf-8", errors="replace").strip()
    return text or "no body"


def retry_after(headers: Message) -> float | None:
    """``Retry-After`` in seconds, when the server sent a usable one."""
    return retry_after_value(headers.get("Retry-After"))


def retry_after_value(value: str | None) -> float | None:
    """A ``Retry-After`` value as seconds to wait: a number of seconds or an HTTP date (RFC
    9110); None when absent or unreadable (negative, infinite, not a number or a date)."""
    if value is None:
        return None
    seconds = non_negative_seconds(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def non_negative_seconds(value: str | None) -> float | None:
    """A finite, non-negative number given as text, or None."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


__all__ = [
    "MAX_DOCUMENT_BYTES",
    "REQUEST_ERRORS",
    "USER_AGENT",
    "Connection",
    "ControlPlaneConnection",
    "Endpoint",
    "StoppedError",
    "Worker",
    "describe",
    "error_message",
    "retry_after",
]
