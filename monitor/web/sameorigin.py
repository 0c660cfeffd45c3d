"""What a browser may make the monitor do: the guard in front of the console and the JSON API.

A web page the monitor's user has open elsewhere can send requests to the monitor's port: a cross-origin
``POST`` with ``text/plain`` needs no CORS preflight, so without a bearer token it could create a
catch-all silence or inject an alert; with DNS rebinding (a page's own name re-pointed at 127.0.0.1) its
requests are even same-origin in the browser's eyes, and the console's form works for it. So:

- a write (``POST``/``PUT``/``PATCH``/``DELETE``) that a browser marks as coming from another site
  (``Sec-Fetch-Site``) or another origin (``Origin``, ``null`` included) is refused (403), token or not;
- without a token, an ``/api/`` write must carry a JSON content type (a form or ``text/plain`` is what
  a page can send without asking), and the ``Host`` must be one of this monitor's names (421): an IP
  literal, a name without a dot (``localhost``, an intranet host name: a rebinding page needs a public
  name it controls), or the host of ``external_url``. With a token neither matters: the page lacks it,
  and the session cookie is bound to the name the user logged in at;
- a session or form-token cookie whose fields are absurd (``auth.absurd_session``: a 5000-digit expiry,
  say) is refused with 400 and cleared, never read further.

/healthz and /metrics pass untouched: scrapers use whatever name their config has, and neither writes.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import cookie_parser

from monitor.web import auth

ASGIApp = Callable[[dict[str, Any], Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]], Awaitable[None]]
UNGUARDED = ("/healthz", "/metrics")
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _hostname(host: str) -> str:
    """``name:port``, ``[v6]:port`` or a bare name, lower-cased without the port."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class SameOriginGuard:
    """ASGI middleware: refuses what only a hostile page would send (see the module doc)."""

    def __init__(self, app: ASGIApp, token_set: bool, names: set[str]) -> None:
        self.app = app
        self.token_set = token_set
        self.names = {n.lower() for n in names if n}

    def host_ok(self, host: str) -> bool:
        name = _hostname(host)  # none at all: an HTTP/1.0 client, never a browser
        return "." not in name or _is_ip(name) or name in self.names

    def refusal(self, scope: dict[str, Any]) -> tuple[int, str] | None:
        headers = Headers(scope=scope)
        method, path = scope["method"], scope["path"]
        if not self.token_set and not self.host_ok(headers.get("host", "")):
            return 421, (f"Host {headers.get('host', '')[:80]!r} is not this monitor's name: set external_url to "
                         "the address you use (or a bearer_token)")
        if method in WRITES:
            site = headers.get("sec-fetch-site", "")
            origin = headers.get("origin")
            if site and site not in ("same-origin", "none"):
                return 403, f"cross-site write refused (Sec-Fetch-Site: {site[:40]})"
            if origin is not None and urlsplit(origin).netloc.lower() != headers.get("host", "").lower():
                return 403, f"cross-origin write refused (Origin: {origin[:80]})"
            ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if (not self.token_set and path.startswith("/api/") and method != "DELETE"
                    and not (ctype == "application/json" or ctype.endswith("+json"))):
                return 415, "the API takes JSON: send Content-Type: application/json"
        cookies = cookie_parser(headers.get("cookie", ""))
        session, csrf = cookies.get(auth.SESSION_COOKIE), cookies.get(auth.CSRF_COOKIE)
        if (session is not None and auth.absurd_session(session)) or (csrf is not None and auth.absurd_csrf(csrf)):
            return 400, "a console cookie is malformed: log in again (the cookies are cleared)"
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in UNGUARDED:
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, why = refused
        body = json.dumps({"error": why}).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        if status == 400:  # the browser forgets the bad cookies
            headers += [(b"set-cookie", f"{name}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict".encode())
                        for name in (auth.SESSION_COOKIE, auth.CSRF_COOKIE)]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
