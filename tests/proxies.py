"""A TCP proxy for fault tests: a network path that goes silent, on demand or at a chosen
statement, with every socket kept open (the kernel on each side still acknowledges the bytes,
so TCP keepalives and ``tcp_user_timeout`` notice nothing)."""

from __future__ import annotations

import select
import socket
import threading


class FreezableProxy:
    """A TCP proxy to ``target_port`` that can stop forwarding (and accepting) while keeping
    every socket open: a network path that goes silent. With ``freeze_on``, it freezes by
    itself when a client sends bytes holding it (before forwarding them): the path goes
    silent at a chosen statement."""

    def __init__(self, target_port: int, *, freeze_on: bytes | None = None) -> None:
        self.target_port = target_port
        self.freeze_on = freeze_on
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.flowing.clear()

    def thaw(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.closed.set()
        self.flowing.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            if not self.flowing.wait(0.1):
                continue
            try:
                ready, _, _ = select.select([self.listener], [], [], 0.1)
                if not ready:
                    continue
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for source, destination, watch in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(source, destination, watch), daemon=True).start()

    def _pump(self, source: socket.socket, destination: socket.socket, watch: bool) -> None:
        try:
            while not self.closed.is_set():
                if not self.flowing.wait(0.1):
                    continue
                ready, _, _ = select.select([source], [], [], 0.1)
                if not ready or not self.flowing.is_set():
                    continue
                data = source.recv(65536)
                if not data:
                    break
                if watch and self.freeze_on is not None and self.freeze_on in data:
                    self.freeze()
                    self.flowing.wait()  # until thawed (or closed), then forward what came
                destination.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, destination):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
