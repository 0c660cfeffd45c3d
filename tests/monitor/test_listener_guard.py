"""Issue 24: listeners close slowloris connections (request line / headers deadline), bound their
connections, and keep answering; silences are matched through an index; fingerprints cannot collide."""

from __future__ import annotations

import socket
import sqlite3
import time

import httpx

from alerting.model import Alert, fingerprint
from alerting.silence import SilenceStore
from monitor.endpoints.httpguard import GuardedServer


async def hello(scope, receive, send) -> None:  # noqa: ANN001
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def serve(**kw: float) -> GuardedServer:
    server = GuardedServer(hello, "127.0.0.1", 0, **kw)  # type: ignore[arg-type]
    server.start()
    return server


def drip(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /")  # the request line never ends
    return s


def closed(s: socket.socket) -> bool:
    s.settimeout(0.05)
    try:
        return s.recv(1) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except OSError:
        return True


def test_slowloris_connections_are_closed_and_the_server_keeps_answering() -> None:
    server = serve(header_deadline_s=1.0, max_connections=64)
    port = server.server_address[1]
    try:
        held = [drip(port) for _ in range(40)]
        for s in held:  # a byte now and then: a per-read socket timeout alone never fires
            s.sendall(b"x")
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=2).text == "ok"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(closed(s) for s in held):
            time.sleep(0.1)
        assert all(closed(s) for s in held) and server.cut >= 40
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=2).text == "ok"
        for s in held:
            s.close()
    finally:
        server.shutdown()
        server.server_close()


def test_connections_beyond_the_cap_are_closed_at_once() -> None:
    server = serve(header_deadline_s=30.0, max_connections=5, overflow=0)  # no room over the cap
    port = server.server_address[1]
    try:
        held = [drip(port) for _ in range(5)]
        time.sleep(0.3)
        extra = drip(port)
        time.sleep(0.3)
        assert closed(extra) and server.refused == 1 and not any(closed(s) for s in held)
        for s in held + [extra]:
            s.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_separator_inside_a_value_cannot_collide_and_plain_fingerprints_are_unchanged() -> None:
    forged = {"alertname": "GPUXidError\x1fnode=gpu-01", "severity": "P1"}
    own = {"alertname": "GPUXidError", "node": "gpu-01", "severity": "P1"}
    assert fingerprint(forged) != fingerprint(own)
    assert fingerprint({"a=b": "c"}) != fingerprint({"a": "b=c"})
    assert fingerprint(own) == "c7fba9fceaa4ed74"  # the old encoding: stored state keeps its ids


def _silences() -> tuple[SilenceStore, sqlite3.Connection]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE silences (id TEXT PRIMARY KEY, matchers TEXT, starts_at REAL, ends_at REAL, "
                 "created_by TEXT, comment TEXT, created_at REAL)")
    return SilenceStore(conn), conn


def test_indexed_silences_match_like_a_scan() -> None:
    store, _ = _silences()
    for i in range(200):
        store.add([f'node="gpu-{i:03d}"', 'alertname="GPUXidError"'], 0.0, 100.0)
    store.add(['alertname=~"Reward.*"'], 0.0, 100.0)  # no equality matcher: scanned
    store.add(['node="late"'], 50.0, 100.0)           # pending until 50
    gone = store.add(['node="expired"'], 0.0, 100.0)
    mute = store.muting(10.0)
    assert mute(Alert({"alertname": "GPUXidError", "node": "gpu-042"}))
    assert not mute(Alert({"alertname": "GPUXidError", "node": "gpu-999"}))
    assert not mute(Alert({"alertname": "NCCLTimeout", "node": "gpu-042"}))
    assert mute(Alert({"alertname": "RewardModelOOM", "node": "x"}))
    assert not mute(Alert({"alertname": "A", "node": "late"})) and store.muting(60.0)(Alert({"node": "late"}))
    assert store.muting(10.0)(Alert({"node": "expired"}))
    assert store.expire(gone, 20.0) and not store.muting(20.0)(Alert({"node": "expired"}))


def test_the_trainers_metrics_listener_cuts_slowloris_too(monkeypatch) -> None:  # noqa: ANN001
    from prometheus_client import CollectorRegistry

    import verl.metrics.server as srv

    monkeypatch.setattr(srv, "REQUEST_DEADLINE_S", 0.5)
    server = srv.MetricsServer(CollectorRegistry(), "127.0.0.1", 0, lambda: {"status": "ok"}, lambda k: [])
    try:
        held = [drip(server.port) for _ in range(20)]
        assert httpx.get(server.url, timeout=2).status_code == 200
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(closed(s) for s in held):
            time.sleep(0.1)
        assert all(closed(s) for s in held)
        assert httpx.get(server.url, timeout=2).status_code == 200
        for s in held:
            s.close()
    finally:
        server.close()
