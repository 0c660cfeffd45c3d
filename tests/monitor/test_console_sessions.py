"""Console sessions against a hostile client: an absurd cookie is refused with 400 (never a 500 that took
/healthz down too), logging out ends the session for every copy of its cookie, wrong tokens are
throttled."""

from __future__ import annotations

import logging
import re
import socket
from pathlib import Path

import httpx
import pytest
import yaml
from monitor_http import RunningDaemon

from monitor.web import auth

TOKEN = "s3cret-console"


@pytest.fixture
def daemon(tmp_path: Path):
    cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp_path / "state" / "state.db"), "eval_interval": "0.5s",
           "targets": [], "cluster": "test", "bearer_token": TOKEN}
    (tmp_path / "monitor.yaml").write_text(yaml.safe_dump(cfg))
    d = RunningDaemon(tmp_path / "monitor.yaml")
    yield d
    d.stop()


def _raw_get(port: int, path: str, cookie: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode()
                  + b"Cookie: verl_monitor_session=" + cookie + b"\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def test_absurd_session_cookies_get_400_and_healthz_and_metrics_still_answer(
        daemon: RunningDaemon, caplog: pytest.LogCaptureFixture) -> None:
    port = daemon.daemon.api.port
    caplog.set_level(logging.ERROR)
    for cookie in [b"9" * 5000 + b".ab", "\uff11\uff12.ab".encode(), b"9999999999.\xe9" + b"a" * 63,
                   b"abc.def", b"1" * 13 + b".x"]:
        assert _raw_get(port, "/healthz", cookie) == 200, cookie[:20]
        assert _raw_get(port, "/metrics", cookie) == 200, cookie[:20]
        assert _raw_get(port, "/api/v1/alerts", cookie) == 400, cookie[:20]
        assert _raw_get(port, "/", cookie) == 400, cookie[:20]
    absurd_csrf = f"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nCookie: verl_monitor_csrf={'x' * 300}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(absurd_csrf.encode())
        assert s.recv(64).startswith(b"HTTP/1.1 400")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # a plausible but wrong cookie is no session: 401 on the API, the login page on the console
    assert _raw_get(port, "/api/v1/alerts", b"9999999999.abc") == 401


def _login(c: httpx.Client, token: str) -> httpx.Response:
    page = c.get("/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    return c.post("/login", data={"csrf": csrf, "token": token, "next": "/"})


def test_logout_ends_the_session_for_a_copied_cookie_too(daemon: RunningDaemon) -> None:
    with httpx.Client(base_url=daemon.url, follow_redirects=False, timeout=5) as c:
        assert _login(c, TOKEN).status_code == 303
        session = c.cookies[auth.SESSION_COOKIE]
        assert c.get("/").status_code == 200
        csrf = c.cookies[auth.CSRF_COOKIE]
        assert c.post("/logout", data={"csrf": csrf}).status_code == 303
    copied = httpx.get(f"{daemon.url}/", cookies={auth.SESSION_COOKIE: session}, follow_redirects=False)
    assert copied.status_code == 303 and copied.headers["location"].startswith("/login")
    api = httpx.get(f"{daemon.url}/api/v1/alerts", cookies={auth.SESSION_COOKIE: session})
    assert api.status_code == 401


def test_wrong_tokens_are_throttled(daemon: RunningDaemon) -> None:
    with httpx.Client(base_url=daemon.url, follow_redirects=False, timeout=5) as c:
        codes = [_login(c, f"guess-{i}").status_code for i in range(12)]
        assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}
        held = _login(c, TOKEN)  # still held back: the guesser's bucket is empty
        assert held.status_code == 429 and int(held.headers["retry-after"]) >= 1


def test_the_throttle_refills_on_its_clock() -> None:
    now = [0.0]
    throttle = auth.LoginThrottle(burst=2, every_s=2.0, clock=lambda: now[0])
    throttle.failed("a")
    throttle.failed("a")
    assert throttle.wait_s("a") == pytest.approx(2.0) and throttle.wait_s("b") == 0.0
    now[0] = 2.0
    assert throttle.wait_s("a") == 0.0


def test_a_session_is_live_until_its_expiry_or_its_end() -> None:
    now = [1000.0]
    sessions = auth.Sessions(clock=lambda: now[0], limit=2)
    first = sessions.issue("t")
    assert sessions.valid(first, "t") and not sessions.valid(first, "other-token")
    sessions.issue("t")
    sessions.issue("t")  # past the limit: the oldest login ends
    assert not sessions.valid(first, "t")
    last = sessions.issue("t")
    now[0] += auth.SESSION_S
    assert not sessions.valid(last, "t")


def test_wrong_bearer_tokens_are_throttled_too(daemon: RunningDaemon) -> None:
    with httpx.Client(base_url=daemon.url, timeout=5) as c:
        codes = [c.get("/api/v1/alerts", headers={"Authorization": f"Bearer guess-{i}"}).status_code
                 for i in range(35)]
        assert codes[:30] == [401] * 30 and set(codes[30:]) == {429}
        held = c.get("/api/v1/alerts", headers={"Authorization": f"Bearer {TOKEN}"})
        assert held.status_code == 429 and int(held.headers["retry-after"]) >= 1
        assert c.get("/healthz").status_code == 200 and c.get("/metrics").status_code == 200
