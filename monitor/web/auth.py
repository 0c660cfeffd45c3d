"""Console sessions, the login throttle and the form token.

A token-protected monitor asks for the bearer token once (``/login``) and answers with a session cookie:
``<expiry>.<id>.<HMAC-SHA256(token, "console|<expiry>|<id>")>``, HttpOnly and SameSite=Strict, so it is
never sent from another site and scripts cannot read it. The signature (with the token itself, as the
plot links are) makes a forged cookie fail without a lookup; the id must also be live in the server's
``Sessions``, so logging out ends the session for good (a copied cookie stops working with it), and a
restart or a changed token ends every session. Wrong tokens are throttled per client address.

Forms that change state (a silence made or expired) carry a form token that must equal the ``csrf``
cookie (double submit; the cookie is SameSite=Strict too), and a request whose ``Origin`` names another
host is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from starlette.requests import Request

SESSION_COOKIE = "verl_monitor_session"
CSRF_COOKIE = "verl_monitor_csrf"
SESSION_S = 12 * 3600


MAX_SESSIONS = 1024            # live sessions kept; past it the oldest login ends
_SESSION_RE = re.compile(r"([0-9]{1,12})\.([0-9a-f]{16})\.([0-9a-f]{64})")  # ASCII digits only: int() is bounded


def _sig(token: str, exp: int, sid: str) -> str:
    return hmac.new(token.encode(), f"console|{exp}|{sid}".encode(), hashlib.sha256).hexdigest()


def parse_session(value: str) -> tuple[int, str, str] | None:
    """(expiry, id, signature) of a well-formed cookie value; None for anything else."""
    m = _SESSION_RE.fullmatch(value)
    return (int(m.group(1)), m.group(2), m.group(3)) if m else None


def absurd_session(value: str) -> bool:
    """A cookie no server ever wrote in any format: over 200 characters, not printable ASCII, or an
    expiry that is not 1-12 ASCII digits (a 5000-digit one made ``int`` raise). Refused with 400; a
    plausible but wrong or stale cookie is merely no session."""
    exp = value.split(".", 1)[0]
    return (len(value) > 200 or not (value.isascii() and value.isprintable())
            or not (exp.isascii() and exp.isdigit() and len(exp) <= 12))


def absurd_csrf(value: str) -> bool:
    """A form-token cookie this server never wrote (``secrets.token_urlsafe(24)``: 32 URL-safe characters)."""
    return len(value) > 200 or not (value.isascii() and value.isprintable())


class Sessions:
    """The live console sessions: ids the server issued and nobody logged out of (in memory).

    Own code: Starlette's ``SessionMiddleware`` keeps the session in the signed cookie itself, which is
    exactly what cannot be revoked at logout; a dict of ids under a lock is all revocation needs."""

    def __init__(self, clock: Callable[[], float] = time.time, limit: int = MAX_SESSIONS) -> None:
        self.clock = clock
        self.limit = limit
        self._live: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def issue(self, token: str) -> str:
        exp, sid = int(self.clock() + SESSION_S), secrets.token_hex(8)
        with self._lock:
            self._live[sid] = exp
            while len(self._live) > self.limit:
                self._live.popitem(last=False)
        return f"{exp}.{sid}.{_sig(token, exp, sid)}"

    def valid(self, value: str, token: str) -> bool:
        parsed = parse_session(value)
        if parsed is None:
            return False
        exp, sid, sig = parsed
        if exp <= self.clock() or not hmac.compare_digest(sig, _sig(token, exp, sid)):
            return False
        with self._lock:
            return self._live.get(sid) == exp

    def end(self, value: str) -> None:
        parsed = parse_session(value)
        if parsed is not None:
            with self._lock:
                self._live.pop(parsed[1], None)


def has_session(request: Request, token: str | None, sessions: Sessions) -> bool:
    if not token:
        return True
    return sessions.valid(request.cookies.get(SESSION_COOKIE, ""), token)


class LoginThrottle:
    """Wrong tokens per client address: ``burst`` at once, then one per ``every_s`` seconds (a token
    bucket). Right tokens are never held back while the bucket has room. Own code: the rate-limit
    libraries (slowapi, limits) decorate routes per request, not per failed attempt, and would be a
    dependency for one bucket."""

    def __init__(self, burst: int = 5, every_s: float = 2.0, clock: Callable[[], float] = time.monotonic,
                 clients: int = 4096) -> None:
        self.burst, self.every_s, self.clock, self.clients = burst, every_s, clock, clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client -> (tokens, at)
        self._lock = threading.Lock()

    def _level(self, client: str) -> float:
        tokens, at = self._buckets.get(client, (float(self.burst), self.clock()))
        return min(float(self.burst), tokens + (self.clock() - at) / self.every_s)

    def wait_s(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: now)."""
        with self._lock:
            level = self._level(client)
        return 0.0 if level >= 1.0 else (1.0 - level) * self.every_s

    def failed(self, client: str) -> None:
        with self._lock:
            self._buckets[client] = (max(0.0, self._level(client) - 1.0), self.clock())
            self._buckets.move_to_end(client)
            while len(self._buckets) > self.clients:
                self._buckets.popitem(last=False)


def token_ok(given: str, token: str) -> bool:
    return hmac.compare_digest(given.strip().encode(), token.encode())


def csrf_value(request: Request) -> str:
    return request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)


def csrf_ok(request: Request, form: dict[str, str]) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE, "")
    origin = request.headers.get("origin")
    if origin and origin != "null" and origin.split("://", 1)[-1] != request.headers.get("host", ""):
        return False
    return bool(cookie) and hmac.compare_digest(form.get("csrf", "").encode(), cookie.encode())


def cookie_args(max_age: int) -> dict[str, object]:
    return {"max_age": max_age, "httponly": True, "samesite": "strict", "path": "/"}


def safe_next(target: str) -> str:
    """Only a path on this server (``//host`` and ``/\\host`` would leave it)."""
    ok = target.startswith("/") and not target.startswith(("//", "/\\")) and target.isprintable()
    return target if ok else "/"
