"""Console sessions and the form token.

A token-protected monitor asks for the bearer token once (``/login``) and answers with a session cookie:
``<expiry>.<HMAC-SHA256(token, "console|<expiry>")>``, HttpOnly and SameSite=Strict, so it is never sent
from another site and scripts cannot read it. Signed with the token itself (as the plot links are): no
server-side session store, and changing the token ends every session.

Forms that change state (a silence made or expired) carry a form token that must equal the ``csrf``
cookie (double submit; the cookie is SameSite=Strict too), and a request whose ``Origin`` names another
host is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from starlette.requests import Request

SESSION_COOKIE = "verl_monitor_session"
CSRF_COOKIE = "verl_monitor_csrf"
SESSION_S = 12 * 3600


def _sig(token: str, exp: int) -> str:
    return hmac.new(token.encode(), f"console|{exp}".encode(), hashlib.sha256).hexdigest()


def session_value(token: str) -> str:
    exp = int(time.time() + SESSION_S)
    return f"{exp}.{_sig(token, exp)}"


def has_session(request: Request, token: str | None) -> bool:
    if not token:
        return True
    exp, _, sig = request.cookies.get(SESSION_COOKIE, "").partition(".")
    return exp.isdigit() and int(exp) > time.time() and hmac.compare_digest(sig, _sig(token, int(exp)))


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
