"""A ``ThreadingHTTPServer`` that a slow or hostile client cannot pin: a bounded number of connections
and a deadline for the request line and headers.

The standard library's socket timeout is per read, so a client dripping one byte of the request line
every few seconds holds its thread for ever (a slowloris: 50 of 50 connections were still held after
100 s). Here every connection is armed with a deadline when it starts a request and disarmed once the
headers are parsed (the body has the API's own whole-body deadline); one reaper thread shuts down the
sockets whose deadline passed, which ends their blocked read. Connections beyond ``max_connections``
are closed at once, so a flood costs no threads.

Why not a library: the project's listeners are stdlib ``http.server`` (a handful of routes); the ASGI
servers that have these limits built in would replace the whole server for two settings.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HEADER_DEADLINE_S = 10.0
MAX_CONNECTIONS = 128


class GuardedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS  # socketserver's 5 drops connections of a burst before accept

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 header_deadline_s: float = HEADER_DEADLINE_S, max_connections: int = MAX_CONNECTIONS) -> None:
        self._closed = threading.Event()  # before binding: a failed bind calls server_close
        super().__init__(address, handler)
        self.header_deadline_s = header_deadline_s
        self.max_connections = max_connections
        self.refused = 0      # connections closed at once: over max_connections
        self.cut = 0          # connections closed for missing the header deadline
        self._active = 0
        self._armed: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._reap, name="http-guard", daemon=True).start()

    # -- connection count --------------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = self._active >= self.max_connections
            if not full:
                self._active += 1
        if full:
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            with self._lock:
                self._active -= 1
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._active -= 1
                self._armed.pop(request, None)

    @property
    def active(self) -> int:
        return self._active

    # -- header deadline ---------------------------------------------------------------------------
    def arm(self, conn: socket.socket) -> None:
        with self._lock:
            self._armed[conn] = time.monotonic() + self.header_deadline_s

    def disarm(self, conn: socket.socket) -> None:
        with self._lock:
            self._armed.pop(conn, None)

    def _reap(self) -> None:
        while not self._closed.wait(min(0.5, self.header_deadline_s / 4)):
            now = time.monotonic()
            with self._lock:
                late = [c for c, t in self._armed.items() if t <= now]
                for c in late:
                    del self._armed[c]
            for c in late:
                self.cut += 1
                with contextlib.suppress(OSError):  # the handler's blocked readline returns b"" and it ends
                    c.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (or was cut) is routine, not a traceback on stderr."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()


class GuardedHandler(BaseHTTPRequestHandler):
    """Arms the server's header deadline for each request line; disarms it once the headers parsed."""

    server: GuardedHTTPServer

    def handle_one_request(self) -> None:
        self.server.arm(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.disarm(self.connection)

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.server.disarm(self.connection)
        return ok
