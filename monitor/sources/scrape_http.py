"""The scrape transport: plain-http GETs on h11 over asyncio streams, with keep-alive.

Why not httpx for these: at 1000 GPUs (250 targets every 5 s) ``httpx.AsyncClient`` cost 0.39-0.58 s CPU
per round, most of the monitor's CPU once the scrape cache removed the parsing; the same GETs on h11 (the
HTTP/1.1 state machine httpx itself is built on) over asyncio streams cost 0.17-0.20 s. A scrape needs
one request shape (GET, no redirects, no cookies, no proxies), so the layers above h11 are all overhead.
The request's bytes are made once per URL, and the usual answer (``HTTP/1.x 200``, plain headers, one
``Content-Length``, its head in the first read) is read without h11's state machine (``_simple_head``);
any other answer goes to h11 from its first byte on, as if h11 had written the request.

``ScrapeClient`` *is* an ``httpx.AsyncClient``: every other request of the daemon (the trainers' API),
``https://`` targets, URLs with credentials and hosts an environment ``HTTP_PROXY`` applies to keep httpx. Its scrapes answer as httpx's did: the same
``ScrapeFailed`` reasons (``http_<status>``, ``body_size_limit``, ``connecterror``, ``readerror``,
``writeerror``, ``remoteprotocolerror``, ``decodingerror``), gzip/deflate bodies decoded, the body size
limit counted on the decoded bytes and checked against ``Content-Length`` first. The whole-request
deadline stays with the caller (``prom_text.scrape``): a connection interrupted mid-request is closed,
never reused.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
import zlib
from typing import Any

import h11
import httpx

from alerting.http_limits import tls_context

ACCEPT = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"
IDLE_EXPIRY_S = 60.0   # an idle connection older than this is closed (targets are scraped every few s)
MAX_IDLE = 1024        # idle connections kept over all hosts: one per target at 1000 GPUs is 250
READ_CHUNK = 65536
_END = h11.EndOfMessage()
# A plain answer, read without h11: "HTTP/1.x 200", header lines of a token, a colon and visible ASCII, one
# Content-Length and no Transfer-Encoding, its head in the first read. Each pattern accepts a subset of
# what h11 accepts (RFC 9112), so h11 would have read the same answer the same way; anything else goes
# to h11 from its first byte on.
_STATUS_200 = re.compile(rb"HTTP/1\.([01]) 200(?: [\x20-\x7e]*)?")
_FIELD = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?)?[ \t]*")


class ScrapeFailed(Exception):
    """A scrape that must count as failed (``up`` 0); ``reason`` is the error counter's label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Dropped(Exception):
    """The connection failed before any byte of the response: a kept one is retried once on a new one."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def fetch(client: httpx.AsyncClient, url: str, timeout: float, body_size_limit: int) -> tuple[bytes, str | None]:
    """Body and charset of one scrape GET; raises ScrapeFailed (or httpx's errors on the httpx path).
    The caller bounds it with the whole-request deadline."""
    if isinstance(client, ScrapeClient) and client.plain(url):
        return await client.fetch(url, body_size_limit)
    async with client.stream("GET", url, headers={"Accept": ACCEPT}, timeout=timeout) as resp:
        if resp.status_code != 200:
            raise ScrapeFailed(f"http_{resp.status_code}")
        declared = resp.headers.get("Content-Length", "")
        if body_size_limit and declared.isdigit() and int(declared) > body_size_limit:
            raise ScrapeFailed("body_size_limit")
        chunks, size = [], 0
        async for chunk in resp.aiter_bytes():
            size += len(chunk)
            if body_size_limit and size > body_size_limit:
                raise ScrapeFailed("body_size_limit")
            chunks.append(chunk)
        return b"".join(chunks), resp.charset_encoding


class _Conn:
    __slots__ = ("reader", "writer", "h11", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11: h11.Connection | None = None  # made for an answer that only h11 reads (``_simple_head``)
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        """Still open at both ends (a server closing an idle connection shows as EOF) and not too old."""
        return (not self.reader.at_eof() and not self.writer.is_closing()
                and now - self.idle_since < IDLE_EXPIRY_S and self.h11 is None)

    def close(self) -> None:
        self.writer.close()


def _simple_head(data: bytes) -> tuple[dict[str, str], int, bool] | None:
    """(headers, where the body starts, whether the connection stays open) of a plain 200 answer whose
    head is all in ``data``; None: h11 reads it. Why: h11's state machine took ~0.3 ms of Python per
    scrape, ~10 % of the monitor's CPU at 1000 GPUs, for answers that are nearly always of this shape."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    status, *lines = data[:end].split(b"\r\n")
    m = _STATUS_200.fullmatch(status)
    if m is None:
        return None
    headers: dict[str, str] = {}
    close = m[1] == b"0"  # HTTP/1.0: closed after the answer (h11's keep-alive rule)
    lengths = 0
    for line in lines:
        f = _FIELD.fullmatch(line)
        if f is None:
            return None
        name, value = f[1].decode().lower(), (f[2] or b"").decode()
        if name == "transfer-encoding":
            return None
        lengths += name == "content-length"
        if name == "connection" and "close" in (t.strip().lower() for t in value.split(",")):
            close = True
        headers[name] = value
    if lengths != 1 or not headers["content-length"].isdigit():
        return None
    return headers, end + 4, not close


class _Decoder:
    """Content-Encoding as httpx decodes it: gzip, deflate (zlib-wrapped or raw), unknown ones passed."""

    def __init__(self, encoding: str) -> None:
        self.z: Any = None
        self.raw_fallback = False
        for enc in (e.strip().lower() for e in encoding.split(",")):
            if enc in ("gzip", "x-gzip"):
                self.z = zlib.decompressobj(zlib.MAX_WBITS | 16)
            elif enc == "deflate":
                self.z, self.raw_fallback = zlib.decompressobj(), True

    def feed(self, data: bytes, first: bool) -> bytes:
        if self.z is None:
            return data
        try:
            return self.z.decompress(data)
        except zlib.error:
            if first and self.raw_fallback:  # deflate sent without its zlib header
                self.z, self.raw_fallback = zlib.decompressobj(-zlib.MAX_WBITS), False
                return self.feed(data, first)
            raise ScrapeFailed("decodingerror") from None

    def flush(self) -> bytes:
        try:
            return self.z.flush() if self.z is not None else b""
        except zlib.error:
            raise ScrapeFailed("decodingerror") from None


def _charset(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            return value.strip().strip('"\'') or None
    return None


class ScrapeClient(httpx.AsyncClient):
    """httpx's client, with ``fetch`` for scrapes: plain http on h11, idle connections kept per host."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"verify": tls_context(), **kwargs})
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._routes: dict[str, tuple[str, int, h11.Request, bytes] | None] = {}

    def _route(self, url: str) -> tuple[str, int, h11.Request, bytes] | None:
        """(host, port, the GET request, its bytes as h11 writes them) of a plain-http URL; None: httpx
        takes it. Made once: h11 validates the headers as it builds the request (~80 us a scrape)."""
        route = self._routes.get(url, False)
        if route is False:
            u = httpx.URL(url)
            if u.scheme != "http" or u.userinfo or self._proxied(u.host):
                route = None
            else:
                # the Host header as httpx writes it: the URL's netloc ([::1]:9100 keeps its brackets)
                request = h11.Request(method="GET", target=u.raw_path or b"/", headers=[
                    ("Host", u.netloc), ("Accept", ACCEPT), ("Accept-Encoding", "gzip, deflate"),
                    ("User-Agent", "verl-monitor")])
                writer = h11.Connection(h11.CLIENT)
                route = (u.host, u.port or 80, request, writer.send(request) + writer.send(_END))  # type: ignore[operator]
            self._routes[url] = route
        return route  # type: ignore[return-value]

    def _proxied(self, host: str) -> bool:
        """An HTTP_PROXY from the environment applies to this host: httpx honours it, so httpx scrapes it."""
        if not self.trust_env:
            return False
        proxy = urllib.request.getproxies().get("http")
        return bool(proxy) and not urllib.request.proxy_bypass(host)

    def plain(self, url: str) -> bool:
        return self._route(url) is not None

    async def fetch(self, url: str, body_size_limit: int) -> tuple[bytes, str | None]:
        """Body and charset of one GET of a plain-http ``url``; raises ScrapeFailed."""
        route = self._route(url)
        assert route is not None, url
        host, port, _, _ = route
        conn = self._checkout(host, port)
        if conn is not None:
            try:
                return await self._exchange(conn, route, body_size_limit)
            except _Dropped:  # the server closed the kept connection as we reused it: once more, anew
                pass
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=READ_CHUNK)
        except OSError:
            raise ScrapeFailed("connecterror") from None
        try:
            return await self._exchange(_Conn(reader, writer), route, body_size_limit)
        except _Dropped as exc:
            raise ScrapeFailed(exc.reason) from None

    def _checkout(self, host: str, port: int) -> _Conn | None:
        idle = self._idle.get((host, port))
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.usable(now):
                return conn
            conn.close()
        return None

    async def _exchange(self, conn: _Conn, route: tuple[str, int, h11.Request, bytes],
                        limit: int) -> tuple[bytes, str | None]:
        host, port, _, request = route
        done = False
        try:
            try:
                conn.writer.write(request)
                await conn.writer.drain()
            except OSError:
                raise _Dropped("writeerror") from None
            body, charset, kept = await self._response(conn, route, limit)
            done = True
        except h11.ProtocolError:
            raise ScrapeFailed("remoteprotocolerror") from None
        finally:
            if not done:
                conn.close()
        if kept:
            conn.idle_since = time.monotonic()
            if sum(map(len, self._idle.values())) < MAX_IDLE:
                self._idle.setdefault((host, port), []).append(conn)
                return body, charset
        conn.close()
        return body, charset

    async def _response(self, conn: _Conn, route: tuple[str, int, h11.Request, bytes],
                        limit: int) -> tuple[bytes, str | None, bool]:
        """Body, charset and whether the connection can be kept for the next request."""
        try:
            data = await conn.reader.read(READ_CHUNK)
        except OSError:
            raise _Dropped("readerror") from None
        if not data:  # httpx: "Server disconnected without sending a response."
            raise _Dropped("remoteprotocolerror")
        simple = _simple_head(data)
        if simple is None:  # h11 reads it all, as if it had written the request itself
            conn.h11 = h11.Connection(h11.CLIENT)
            conn.h11.send(route[2])
            conn.h11.send(_END)
            conn.h11.receive_data(data)
            body, charset = await self._h11_response(conn.h11, conn.reader, limit)
            kept = conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE \
                and not conn.h11.trailing_data[0]
            if kept:
                conn.h11 = None  # the next exchange starts as a new connection's would
            return body, charset, kept
        headers, start, kept = simple
        length = int(headers["content-length"])
        if limit and length > limit:
            raise ScrapeFailed("body_size_limit")
        decoder = _Decoder(headers.get("content-encoding", ""))
        chunks: list[bytes] = []
        size = 0
        data = data[start:]
        while True:
            if len(data) > length:  # bytes past the body: nothing to read them as, the connection goes
                data, kept = data[:length], False
            if data:
                length -= len(data)
                chunk = decoder.feed(data, not chunks)
                size += len(chunk)
                if limit and size > limit:
                    raise ScrapeFailed("body_size_limit")
                chunks.append(chunk)
            if not length:
                break
            try:
                data = await conn.reader.read(READ_CHUNK)
            except OSError:
                raise ScrapeFailed("readerror") from None
            if not data:  # closed before the whole body (h11: RemoteProtocolError)
                raise ScrapeFailed("remoteprotocolerror")
        tail = decoder.flush()
        if limit and size + len(tail) > limit:
            raise ScrapeFailed("body_size_limit")
        return b"".join(chunks) + tail, _charset(headers.get("content-type", "")), kept

    @staticmethod
    async def _h11_response(conn: h11.Connection, reader: asyncio.StreamReader,
                            limit: int) -> tuple[bytes, str | None]:
        chunks: list[bytes] = []
        size = 0
        decoder: _Decoder | None = None
        charset: str | None = None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await reader.read(READ_CHUNK)
                except OSError:
                    raise ScrapeFailed("readerror") from None
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                if event.status_code != 200:
                    raise ScrapeFailed(f"http_{event.status_code}")
                headers = {k.decode().lower(): v.decode("latin-1") for k, v in event.headers}
                declared = headers.get("content-length", "")
                if limit and declared.isdigit() and int(declared) > limit:
                    raise ScrapeFailed("body_size_limit")
                decoder = _Decoder(headers.get("content-encoding", ""))
                charset = _charset(headers.get("content-type", ""))
            elif isinstance(event, h11.Data):
                assert decoder is not None
                chunk = decoder.feed(bytes(event.data), not chunks)
                size += len(chunk)
                if limit and size > limit:
                    raise ScrapeFailed("body_size_limit")
                chunks.append(chunk)
            elif isinstance(event, h11.EndOfMessage):
                tail = decoder.flush() if decoder is not None else b""
                if limit and size + len(tail) > limit:
                    raise ScrapeFailed("body_size_limit")
                return b"".join(chunks) + tail, charset
            elif isinstance(event, h11.ConnectionClosed):
                raise ScrapeFailed("remoteprotocolerror")
            # h11.InformationalResponse (1xx): skipped, the final response follows

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        await super().aclose()

