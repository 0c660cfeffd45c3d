"""The monitor's listener: uvicorn (h11) in a thread of the daemon's process, with the guards that uvicorn
does not have built in, each in a small subclass of its HTTP/1.1 protocol.

What uvicorn gives: ``timeout_keep_alive`` closes keep-alive connections idle after a response, h11 caps
the size of the request line and headers, the whole stack is asyncio (a held connection costs a socket,
not a thread). What it lacks, and why each guard is here:

- a deadline for the request line and headers: its keep-alive timer runs only *after* a response, and is
  cancelled by the first byte of the next request, so a client dripping one byte of ``GET /`` every few
  seconds holds its connection for ever (a slowloris). ``header_deadline_s`` is armed when the connection
  opens and after each response, and disarmed once a request's headers are parsed; a late connection is
  closed (``cut``).
- a connection cap that keeps serving what matters: ``limit_concurrency`` answers 503 to the *newcomer*,
  so 130 idle connections (no token needed) starved /healthz and /metrics, and refusing newcomers at a
  hard cap failed half the webhook deliveries and scrapes under 200 busy API clients. A newcomer cannot
  be told apart before its request arrives, so here one over ``max_connections`` closes a connection
  stuck in its headers for over half the deadline if there is one (``evicted``), and is admitted anyway,
  up to ``overflow`` more, to ask only for the paths in ``always_served`` (/healthz, /metrics, the
  webhook); anything else there gets 429 with ``Retry-After`` and the connection closes. Only past
  ``max_connections + overflow`` is an idle holder (last used for the API first), or else one mid-way
  through an API request, closed for it; failing both, the newcomer (``refused``).
- room for what is always served: at most ``max_busy`` requests for other paths run at once (more get
  429 at once: ``shed``), so API clients cannot take the worker threads /healthz, /metrics and the
  webhook run in; connections admitted into the last ``reserve`` slots of the cap may ask only for
  ``always_served``.
- a declared chunk size over the body limit: the ASGI app sees the body only as it arrives, so a chunk
  header announcing 5 MiB followed by silence would wait out the read deadline; the protocol flags it
  the moment h11 parses the header (h11 keeps the size in its reader), and the app answers 413. An
  unparseable ``Content-Length`` is answered 413 naming the limit, as the body limit promised, where h11
  would say only 400.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import h11
import uvicorn
from h11._readers import ChunkedReader  # the declared chunk size lives only here (see the module doc)
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_DEADLINE_S = 10.0
MAX_CONNECTIONS = 128
KEEP_ALIVE_S = 5.0
MAX_BUSY = 16  # requests outside always_served at once: well under the worker threads (anyio: 40)
ALWAYS_SERVED = ("/healthz", "/metrics")
OVERSIZE = "verl.declared_body_over_limit"  # scope key the protocol sets for the app (BodyLimit)

ASGIApp = Callable[[dict[str, Any], Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]], Awaitable[None]]


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol plus the header deadline, the evicting cap, the reserve and the chunk peek."""

    guard: GuardedServer

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.idle_since = self.armed_at = time.monotonic()
        self.pending = False  # bytes of a request arrived whose response is not complete
        self.used = False     # its last request was outside always_served (API or console)
        self.busy = False     # now running a request outside always_served
        self._deadline: asyncio.TimerHandle | None = None
        if not self.guard.admit(self):
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    @property
    def idle(self) -> bool:
        return not self.pending and (self.cycle is None or self.cycle.response_complete)

    @property
    def in_headers(self) -> bool:
        return self._deadline is not None and self.pending

    def _arm(self) -> None:
        self._disarm()
        self.armed_at = time.monotonic()  # this request's header phase began (not the connection's age)
        self._deadline = self.loop.call_later(self.guard.header_deadline_s, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.guard.cut += 1
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.pending = True
        super().data_received(data)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self._disarm()  # headers parsed: the body has the app's own deadline
            reader = getattr(self.conn, "_reader", None)
            if isinstance(reader, ChunkedReader) and reader._bytes_in_chunk > self.guard.max_body:
                cycle.scope[OVERSIZE] = True  # type: ignore[literal-required]
                cycle.message_event.set()

    def on_response_complete(self) -> None:
        self.pending = False
        self.idle_since = time.monotonic()
        super().on_response_complete()
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._arm()

    def send_400_response(self, msg: str) -> None:
        exc = sys.exc_info()[1]  # called from uvicorn's ``except h11.RemoteProtocolError`` block
        if isinstance(exc, h11.RemoteProtocolError) and "Content-Length" in str(exc):
            body = f"Content-Length is not a byte count; send at most {self.guard.max_body} bytes".encode()
            for event in (h11.Response(status_code=413, reason=b"Content Too Large", headers=[
                    (b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]),
                          h11.Data(data=body), h11.EndOfMessage()):
                with contextlib.suppress(h11.LocalProtocolError):
                    self.transport.write(self.conn.send(event))
            self.transport.close()
            return
        super().send_400_response(msg)


def _shed(reason: str) -> list[dict[str, Any]]:
    body = f"{reason}: try again in a second (/healthz, /metrics and the webhook are still served)".encode()
    return [{"type": "http.response.start", "status": 429, "headers": [
                (b"content-type", b"text/plain"), (b"connection", b"close"), (b"retry-after", b"1")]},
            {"type": "http.response.body", "body": body}]


def _gate(guard: GuardedServer, conn: GuardedProtocol, app: ASGIApp, priority_only: bool) -> ASGIApp:
    """Serves ``always_served`` as it comes; sheds anything else with 429 on a connection admitted past
    the cap's reserve, or while ``max_busy`` such requests are running."""

    async def gate(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in guard.always_served:
            conn.used = False
            await app(scope, receive, send)
            return
        conn.used = True
        if priority_only or guard.busy >= guard.max_busy:
            guard.shed += 1
            for message in _shed("connection cap reached" if priority_only else "too many API requests at once"):
                await send(message)
            return
        guard.busy += 1
        conn.busy = True
        try:
            await app(scope, receive, send)
        finally:
            guard.busy -= 1
            conn.busy = False
    return gate


class GuardedServer:
    """An ASGI app served by uvicorn on a socket bound here (OSError at once when the port is taken),
    in its own thread and event loop, so a busy daemon loop never delays /healthz."""

    def __init__(self, app: ASGIApp, host: str, port: int, header_deadline_s: float = HEADER_DEADLINE_S,
                 max_connections: int = MAX_CONNECTIONS, max_body: int = 4 * 1024 * 1024,
                 keep_alive_s: float = KEEP_ALIVE_S, always_served: tuple[str, ...] = ALWAYS_SERVED,
                 overflow: int | None = None, max_busy: int = MAX_BUSY) -> None:
        self.header_deadline_s = header_deadline_s
        self.max_connections = max_connections
        # connections cost a socket and a few kB on one loop: room for a flood of API clients beside the
        # scrapes and deliveries, while the API requests themselves stay bounded by max_busy
        self.overflow = 3 * max_connections if overflow is None else overflow
        self.reserve = max(1, max_connections // 16)
        self.always_served = always_served
        self.max_busy = max_busy
        self.busy = 0     # requests outside always_served running now (the server's loop alone counts)
        self.shed = 0     # requests outside always_served answered 429 (cap reached or max_busy)
        self.max_body = max_body
        self.refused = 0  # newcomers closed at once: every connection mid-request
        self.cut = 0      # connections closed for missing the header deadline
        self.evicted = 0  # idle (or stuck-in-headers, or busy API) holders closed to make room for a newcomer
        # proto named: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto is IPPROTO_TCP, and
        # uvicorn writes a response's head and body apart: with proto 0 each keep-alive answer waited out
        # the client's delayed ACK (45 ms instead of 1 ms)
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                                  socket.IPPROTO_TCP)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((host, port))
            self.sock.listen(max_connections + self.overflow)
        except OSError:
            self.sock.close()
            raise
        self.server_address = self.sock.getsockname()[:2]
        # uvicorn logs its start and stop at INFO and every malformed request at WARNING: a hostile client
        # would write the log full; the daemon logs its own listening line, the guards count in attributes
        logging.getLogger("uvicorn.error").setLevel(logging.ERROR)
        protocol = type("Protocol", (GuardedProtocol,), {"guard": self})
        config = uvicorn.Config(app, http=protocol, lifespan="off", access_log=False, log_config=None,
                                timeout_keep_alive=int(max(1, keep_alive_s)), timeout_graceful_shutdown=1,
                                server_header=False, proxy_headers=False)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="monitor-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def active(self) -> int:
        return len(self.server.server_state.connections)

    def _serve(self) -> None:
        self.server.run(sockets=[self.sock])

    def start(self) -> None:
        self._thread.start()

    def admit(self, conn: GuardedProtocol) -> bool:
        """Called on the server's loop as ``conn`` opens (it is already counted)."""
        conns = self.server.server_state.connections
        held = len(conns)
        if held > self.max_connections:
            victim = self._victim(conn, conns, hard=held > self.max_connections + self.overflow)
            if victim is None and held > self.max_connections + self.overflow:
                self.refused += 1
                conn.transport.abort()
                return False
            if victim is not None:
                self.evicted += 1
                victim._disarm()
                victim.transport.abort()  # leaves ``conns`` on the loop's next turn
                held -= 1
        conn.app = _gate(self, conn, conn.app, priority_only=held > self.max_connections - self.reserve)
        return True

    def _victim(self, newcomer: GuardedProtocol, conns: Any, hard: bool) -> GuardedProtocol | None:
        """Under the hard cap only a connection stuck in its headers past half the deadline makes room
        (an idle one may be a scrape or a delivery about to ask, its first bytes slow on a loaded
        machine); past it, an idle one last used for the API, any idle one, then one running an API
        request."""
        others = [c for c in conns if c is not newcomer and isinstance(c, GuardedProtocol)
                  and not c.transport.is_closing()]
        stale = time.monotonic() - self.header_deadline_s / 2
        stuck = [c for c in others if c.in_headers and c.armed_at < stale]
        if stuck:
            return min(stuck, key=lambda c: c.armed_at)
        if not hard:
            return None
        idle = [c for c in others if c.idle]
        for group in ([c for c in idle if c.used], idle):
            if group:
                return min(group, key=lambda c: c.idle_since)
        busy = [c for c in others if c.busy]
        return min(busy, key=lambda c: c.armed_at) if busy else None

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(5)
        else:
            self.sock.close()

    # the names the listener tests and callers used with the stdlib server
    def shutdown(self) -> None:
        self.stop()

    def server_close(self) -> None:
        self.sock.close()
