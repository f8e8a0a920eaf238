"""The fault provider's side of the wire: accepting connections, reading requests, writing
answers whole or chunk by chunk, and ending a connection with a FIN or a reset.

A minimal HTTP/1.1 server's, from the standard library's sockets: enough for the vendors'
clients, which send a request with a ``Content-Length`` and read a response framed by one
or chunked.
"""

from __future__ import annotations

import http
import json
import selectors
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

REASONS: Mapping[int, str] = {529: "Overloaded"}
"""Reason phrases the standard library does not know."""
_MAX_HEAD_BYTES = 64 * 1024
_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST instead of FIN


class Listener:
    """Accepts connections on ``sock`` in a thread until ``stop()``, which closes ``sock``
    before it returns (so the port refuses connections from then on)."""

    def __init__(self, sock: socket.socket, accepted: Callable[[socket.socket], None]) -> None:
        self._sock = sock
        self._accepted = accepted
        # A blocked accept() is not woken by closing its socket on every platform; a byte
        # on this pair is.
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="fault-provider-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout=5.0)
        self._wake_w.close()

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            try:
                while True:
                    ready = {key.fileobj for key, _ in selector.select()}
                    if self._wake_r in ready:
                        return
                    try:
                        conn, _ = self._sock.accept()
                    except OSError:
                        continue
                    self._accepted(conn)
            finally:
                self._sock.close()
                self._wake_r.close()


class Wire:
    """One server-side connection: reads requests, writes responses and chunks."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def read_request(self) -> tuple[str, str, dict[str, str], bytes] | None:
        """The next request (method, path, lower-cased headers, body), or None when the
        client closed the connection."""
        while b"\r\n\r\n" not in self._buffer:
            if len(self._buffer) > _MAX_HEAD_BYTES:
                return None
            data = self._sock.recv(65536)
            if not data:
                return None
            self._buffer += data
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        request_line = lines[0].split(" ")
        method, path = request_line[0], request_line[1] if len(request_line) > 1 else ""
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        while len(self._buffer) < length:
            data = self._sock.recv(65536)
            if not data:
                return None
            self._buffer += data
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return method, path.split("?", 1)[0], headers, body

    def head(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        reason = REASONS.get(status) or http.HTTPStatus(status).phrase
        lines = [f"HTTP/1.1 {status} {reason}", *(f"{name}: {value}" for name, value in headers)]
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def send_json(self, status: int, document: Any, headers: Iterable[tuple[str, str]] = ()) -> None:
        body = json.dumps(document).encode()
        self.head(status, [("Content-Type", "application/json"), *headers, ("Content-Length", str(len(body)))])
        self.send(body)

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def chunk(self, data: bytes) -> None:
        self._sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunks(self) -> None:
        self._sock.sendall(b"0\r\n\r\n")

    def reset(self) -> None:
        """Drop the connection with a TCP RST: what a crashed peer or a balancer's
        timeout looks like to the client."""
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
        finally:
            self._sock.close()

    def close(self) -> None:
        self._sock.close()


def shut(sock: socket.socket) -> None:
    """Wake whatever is blocked on ``sock`` (closing alone does not wake a blocked recv)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


__all__ = ["REASONS", "Listener", "Wire", "shut"]
