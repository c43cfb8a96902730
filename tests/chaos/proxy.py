"""A TCP proxy on 127.0.0.1 that the tests can tell to misbehave, between one process and PostgreSQL.

- ``hold()``: a partition. Nothing is forwarded either way (bytes wait in the
  kernel's buffers, so neither side sees an error: the half-open case that
  only application-level timeouts notice); new connections hang too.
  ``held_requests`` counts client requests caught by the hold.
  ``heal()`` lets everything through again, late.
- ``hold_on(marker)``: like hold(), from the first client chunk that contains
  ``marker`` on (that chunk is the first one held), so a test can freeze a
  process exactly as it sends a given statement.
- ``cut()``: every open connection is reset (RST) at once; new ones work.
- ``down()``: like cut(), and new connections are reset until ``heal()``.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class Proxy:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self._server = socket.create_server((host, 0))
        self.port = int(self._server.getsockname()[1])
        self._flowing = threading.Event()
        self._flowing.set()
        self._refuse = False
        self._marker: bytes | None = None
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        self.accepted = 0
        self.held_requests = 0  # chunks from clients waiting at a hold()
        threading.Thread(target=self._accept_loop, name=f"proxy-{self.port}", daemon=True).start()

    # -- faults ----------------------------------------------------------

    def hold(self) -> None:
        self._flowing.clear()

    def hold_on(self, marker: bytes) -> None:
        self._marker = marker

    def heal(self) -> None:
        self._refuse = False
        self._marker = None
        self._flowing.set()

    def cut(self) -> int:
        """Reset every open connection; returns how many were cut."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            _reset(a)
            _reset(b)
        return len(pairs)

    def down(self) -> int:
        self._refuse = True
        return self.cut()

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._server.close()
        self.cut()

    # -- plumbing --------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        self._flowing.wait()
        if self._refuse or self._closed:
            _reset(client)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
            upstream.settimeout(None)
        except OSError:
            _reset(client)
            return
        self.accepted += 1
        with self._lock:
            self._pairs.append((client, upstream))
        for src, dst, to_server in ((client, upstream, True), (upstream, client, False)):
            threading.Thread(target=self._pump, args=(src, dst, to_server), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, to_server: bool) -> None:
        try:
            src.settimeout(0.2)  # in the try: a cut may have closed the pair before this thread started
            while True:
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                marker = self._marker
                if to_server and marker is not None and marker in data:
                    self._marker = None
                    self._flowing.clear()
                if not self._flowing.is_set():
                    # Held: this chunk waits here, and the kernel buffers what follows.
                    with self._lock:
                        self.held_requests += to_server
                    self._flowing.wait()
                    with self._lock:
                        self.held_requests -= to_server
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._forget(src, dst)

    def _forget(self, a: socket.socket, b: socket.socket) -> None:
        with self._lock:
            self._pairs = [p for p in self._pairs if a not in p and b not in p]
        _reset(a)
        _reset(b)


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
