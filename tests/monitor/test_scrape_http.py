"""The h11 scrape transport (monitor/sources/scrape_http.py): keep-alive, and every answer read as httpx
read it (same body, charset and failure reasons), checked against httpx itself on the same server."""

from __future__ import annotations

import asyncio
import gzip
import time
import zlib
from collections.abc import Awaitable, Callable

import httpx
import pytest

from monitor.model import SourceBatch
from monitor.sources.prom_text import Target, scrape
from monitor.sources.scrape_http import ScrapeClient

BODY = b'# TYPE a gauge\na 1\nb{x="y"} 2\n'
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def answer(body: bytes, *headers: str, status: str = "200 OK", length: bool = True) -> bytes:
    head = [f"HTTP/1.1 {status}", *headers]
    head.append(f"Content-Length: {len(body)}" if length else "Transfer-Encoding: chunked")
    data = body if length else b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


def keep_alive(body: bytes, *headers: str, length: bool = True) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await read_request(reader)
                writer.write(answer(body, *headers, length=length))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()
    return handle


def once(data: bytes) -> Handler:
    """Writes ``data`` after the request, then closes the connection."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(data)
        await writer.drain()
        writer.close()
    return handle


async def serve(handle: Handler) -> tuple[asyncio.Server, str, list[int]]:
    connections: list[int] = []

    async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handle(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()

    server = await asyncio.start_server(counted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/metrics", connections


def summary(batch: SourceBatch, up: bool) -> tuple[bool, dict[str, int], list[tuple[object, ...]]]:
    return up, dict(batch.errors), sorted((s.name, s.value, *sorted(s.labels.items())) for s in batch.samples)


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def both(handle: Handler, **target: object) -> tuple[object, object]:
    """The same server scraped by httpx (the old transport) and by ScrapeClient."""
    async def go() -> tuple[object, object]:
        server, url, _ = await serve(handle)
        out = []
        for client in (httpx.AsyncClient(), ScrapeClient()):
            async with client:
                batch, _, up = await scrape(client, Target("t", url, **target), time.time())  # type: ignore[arg-type]
                out.append(summary(batch, up))
        server.close()
        return out[0], out[1]
    return run(go())  # type: ignore[return-value]


GZ = gzip.compress(BODY)
CASES = {
    "plain": (keep_alive(BODY), {}),
    "chunked": (keep_alive(BODY, length=False), {}),
    "gzip": (keep_alive(GZ, "Content-Encoding: gzip"), {}),
    "deflate": (keep_alive(zlib.compress(BODY), "Content-Encoding: deflate"), {}),
    "raw deflate": (keep_alive(zlib.compress(BODY, wbits=-15), "Content-Encoding: deflate"), {}),
    "corrupt gzip": (keep_alive(b"\x1f\x8b not gzip at all", "Content-Encoding: gzip"), {}),
    "unknown encoding": (keep_alive(BODY, "Content-Encoding: snappy-ish"), {}),
    "latin-1": (keep_alive('t{x="caf\u00e9"} 1\n'.encode("latin-1"), "Content-Type: text/plain; charset=latin-1"), {}),
    "unknown charset": (keep_alive(BODY, "Content-Type: text/plain; charset=klingon"), {}),
    "http 404": (once(answer(b"nope", status="404 Not Found")), {}),
    "http 500 chunked": (once(answer(b"oops", status="500 Oops", length=False)), {}),
    "declared over limit": (keep_alive(BODY * 10), {"body_size_limit": 100}),
    "streamed over limit": (keep_alive(BODY * 10, length=False), {"body_size_limit": 100}),
    "gzip over limit decoded": (keep_alive(gzip.compress(BODY * 100), "Content-Encoding: gzip"),
                                {"body_size_limit": 1000}),
    "closed without answer": (once(b""), {}),
    "not http": (once(b"SSH-2.0-OpenSSH_9.2\r\n\r\n"), {}),
    "truncated body": (once(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\na 1\n"), {}),
    "http/1.0 body to close": (once(b"HTTP/1.0 200 OK\r\n\r\n" + BODY), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_scrape_reads_every_answer_as_httpx_did(case: str) -> None:
    handle, target = CASES[case]
    old, new = both(handle, **target)
    assert new == old
    expected = {"corrupt gzip": "decodingerror", "unknown charset": "bad_charset", "http 404": "http_404",
                "http 500 chunked": "http_500", "declared over limit": "body_size_limit",
                "streamed over limit": "body_size_limit", "gzip over limit decoded": "body_size_limit",
                "closed without answer": "remoteprotocolerror", "not http": "remoteprotocolerror",
                "truncated body": "remoteprotocolerror"}
    up, errors, samples = new  # type: ignore[misc]
    if case in expected:
        assert not up and errors == {expected[case]: 1}
    else:
        assert up and not errors and len(samples) >= 2, new


def test_connection_refused_is_a_connect_error() -> None:
    async def go() -> object:
        server, url, _ = await serve(once(b""))
        server.close()
        await server.wait_closed()
        async with ScrapeClient() as client:
            batch, _, up = await scrape(client, Target("t", url), time.time())
        return summary(batch, up)
    up, errors, samples = run(go())  # type: ignore[misc]
    assert (up, errors, [s[:2] for s in samples]) == (False, {"connecterror": 1}, [("up", 0.0)])


def test_one_connection_is_kept_for_many_scrapes() -> None:
    async def go() -> tuple[list[object], int]:
        server, url, connections = await serve(keep_alive(BODY, length=False))
        async with ScrapeClient() as client:
            out = [summary(*(await scrape(client, Target("t", url), time.time()))[::2]) for _ in range(4)]
        server.close()
        return out, len(connections)
    results, connections = run(go())  # type: ignore[misc]
    assert connections == 1
    assert all(r == results[0] and r[0] for r in results)


def test_a_kept_connection_the_server_closed_is_replaced_without_an_error() -> None:
    async def go() -> tuple[list[object], int]:
        # answers one request per connection but says keep-alive: the client learns of the close later
        server, url, connections = await serve(once(answer(BODY)))
        out = []
        async with ScrapeClient() as client:
            for _ in range(3):
                out.append(summary(*(await scrape(client, Target("t", url), time.time()))[::2]))
                await asyncio.sleep(0.05)
        server.close()
        return out, len(connections)
    results, connections = run(go())  # type: ignore[misc]
    assert connections == 3
    assert all(r[0] and not r[1] for r in results), results


def test_a_connection_cut_by_the_deadline_is_not_reused() -> None:
    async def go() -> tuple[object, object, int]:
        slow = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    await read_request(reader)
                    if not slow.is_set():
                        slow.set()
                        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\na")  # then nothing
                    else:
                        writer.write(answer(BODY))
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                writer.close()
        server, url, connections = await serve(handle)
        async with ScrapeClient() as client:
            first = summary(*(await scrape(client, Target("t", url, timeout=0.3), time.time()))[::2])
            second = summary(*(await scrape(client, Target("t", url, timeout=0.3), time.time()))[::2])
        server.close()
        return first, second, len(connections)
    first, second, connections = run(go())  # type: ignore[misc]
    assert first[:2] == (False, {"timeout": 1}) and [s[:2] for s in first[2]] == [("up", 0.0)]
    assert second[0] and not second[1] and connections == 2


@pytest.mark.parametrize(("url", "plain"), [("http://127.0.0.1:9100/metrics", True),
                                            ("http://h:80/m?x=1", True),
                                            ("https://127.0.0.1:9100/metrics", False),
                                            ("http://user:pw@127.0.0.1:9100/metrics", False)])
def test_tls_and_credentials_stay_on_httpx(url: str, plain: bool) -> None:
    async def go() -> bool:
        async with ScrapeClient() as client:
            return client.plain(url)
    assert run(go()) is plain


def test_the_request_names_the_same_host_path_and_accept_as_httpx() -> None:
    async def go() -> list[dict[str, str]]:
        seen: list[bytes] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(await read_request(reader))
            writer.write(answer(BODY, "Connection: close"))
            await writer.drain()
            writer.close()
        server, url, _ = await serve(handle)
        for client in (httpx.AsyncClient(), ScrapeClient()):
            async with client:
                await scrape(client, Target("t", url + "?collect=dcgm"), time.time())  # type: ignore[arg-type]
        server.close()
        out = []
        for raw in seen:
            line, *headers = raw.decode().split("\r\n")
            fields = {k.lower(): v for k, v in (h.split(": ", 1) for h in headers if h)}
            out.append({"line": line, "host": fields["host"], "accept": fields["accept"]})
        return out
    old, new = run(go())  # type: ignore[misc]
    assert new == old and new["line"] == "GET /metrics?collect=dcgm HTTP/1.1"


def test_a_host_behind_an_environment_proxy_stays_on_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")

    async def go() -> tuple[bool, bool]:
        async with ScrapeClient() as client:
            return client.plain("http://gpu-01:9400/metrics"), client.plain("http://127.0.0.1:9400/metrics")
    assert run(go()) == (False, True)


HEADS = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 200 \r\ncontent-length:3\r\nConnection: keep-alive, Close\r\n\r\n",
    b"HTTP/1.1 200\r\nContent-Length:   3  \r\nX-Empty:\r\nX-Tab:\tv\t\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",  # h11 folds equal ones: ours declines
    b"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n folded\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nBad Name: 1\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length : 3\r\n\r\n",
    b"HTTP/1.1 200 Caf\xe9\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/2 200\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n",  # the head not complete yet
]


@pytest.mark.parametrize("head", HEADS)
def test_a_head_read_without_h11_reads_as_h11_reads_it(head: bytes) -> None:
    """What ``_simple_head`` takes, h11 reads to the same headers, body length and keep-alive; the rest
    (None) is h11's to read, and each kind of it declines here."""
    import h11

    from monitor.sources.scrape_http import _simple_head

    simple = _simple_head(head + b"abc")
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "h")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(head + b"abc")
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError:
        event = None
    if simple is None:
        accepted = HEADS.index(head) < 4
        assert not accepted, "a plain head must take the path without h11"
        return
    assert isinstance(event, h11.Response) and event.status_code == 200
    headers, start, kept = simple
    assert headers == {k.decode(): v.decode("latin-1") for k, v in event.headers}
    assert head[start:] == b"" and int(headers["content-length"]) == 3
    body = conn.next_event()
    assert isinstance(body, h11.Data) and bytes(body.data) == b"abc"
    assert isinstance(conn.next_event(), h11.EndOfMessage)
    assert kept == (conn.their_state is h11.DONE and conn.our_state is h11.DONE)
