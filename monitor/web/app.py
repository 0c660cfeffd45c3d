"""The ASGI app on the monitor's port: the console's pages and, for everything else, the JSON API's own
routes (``MonitorAPI.endpoint``). Pages are jinja2 with autoescaping on (alert labels are hostile
input); state changes are form POSTs guarded by SameSite cookies and a form token (``web.auth``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import anyio
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

import monitor.endpoints.api
from monitor.durations import DurationError, parse_duration
from monitor.web import auth, listing, views
from monitor.web.sameorigin import SameOriginGuard

FORM_LIMIT = 64 * 1024
_ENV = Environment(loader=FileSystemLoader(Path(__file__).with_name("templates")),
                   autoescape=select_autoescape(default=True, default_for_string=True), trim_blocks=True,
                   lstrip_blocks=True)


def build_app(api: Any) -> SameOriginGuard:
    """``api``: the daemon's ``MonitorAPI`` (its token, its routes, its daemon)."""
    sessions = auth.Sessions()
    throttle = auth.LoginThrottle()
    # scripts send the bearer token on every call: a wider burst, so a wrong one stays a plain 401 for a
    # while, but guessing is held to 2 a second
    bearer_throttle = auth.LoginThrottle(burst=30, every_s=0.5)

    def page(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        csrf = auth.csrf_value(request)
        html = _ENV.get_template(name).render(csrf=csrf, path=request.url.path, token_set=bool(api.token),
                                              cluster=api.daemon.config.cluster, now=views.clock_time(time.time()),
                                              **ctx)
        resp = HTMLResponse(html, status, headers={"cache-control": "no-store", "x-frame-options": "DENY",
                                                   "content-security-policy": _CSP,
                                                   "referrer-policy": "same-origin"})
        if request.cookies.get(auth.CSRF_COOKIE) != csrf:
            resp.set_cookie(auth.CSRF_COOKIE, csrf, **auth.cookie_args(auth.SESSION_S))  # type: ignore[arg-type]
        return resp

    def login_first(request: Request) -> Response | None:
        if auth.has_session(request, api.token, sessions):
            return None
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", 303)

    async def index(request: Request) -> Response:
        return login_first(request) or page(request, "index.html",
                                            **await views.overview(api, listing.parse_query(request.query_params)))

    async def alert(request: Request) -> Response:
        if (r := login_first(request)) is not None:
            return r
        found = await views.detail(api, request.path_params["fp"])
        if found is None:
            return page(request, "missing.html", 404, what=f"No alert or incident has the fingerprint {request.path_params['fp']}.")
        return page(request, "alert.html", **found)

    async def silences(request: Request) -> Response:
        if (r := login_first(request)) is not None:
            return r
        if request.method == "POST":
            return await _create_silence(request)
        return page(request, "silences.html", **await views.silences(api))

    async def new_silence(request: Request) -> Response:
        if (r := login_first(request)) is not None:
            return r
        fp = request.query_params.get("fp", "")
        found = await views.detail(api, fp) if fp else None
        labels = {"alertname": found["a"]["name"], **found["a"]["labels"]} if found else {}
        return page(request, "silence_form.html", matchers=views.matchers_of(labels), duration="2h", comment="",
                    creator="", about=found["a"] if found else None, **views.silence_offer(api))

    async def _create_silence(request: Request) -> Response:
        form = await _form(request)
        if form is None or not auth.csrf_ok(request, form):
            return page(request, "missing.html", 403, what="The form token is missing or stale: reload the page and try again.")
        matchers = [ln.strip() for ln in form.get("matchers", "").splitlines() if ln.strip()]
        redo = {"matchers": form.get("matchers", ""), "duration": form.get("duration", ""),
                "comment": form.get("comment", ""), "creator": form.get("creator", ""), "about": None,
                "unavailable": api.daemon.engine is None}
        try:
            parse_duration(form.get("duration", ""), "duration")
        except DurationError as exc:
            return page(request, "silence_form.html", 400, error=str(exc), **redo)
        status, doc = await views.call(api, "POST", "/api/v1/silences", {
            "matchers": matchers, "duration": form.get("duration", ""), "comment": form.get("comment", ""),
            "createdBy": form.get("creator", "") or "console"})
        if status != 200:
            return page(request, "silence_form.html", status, error=(doc or {}).get("error", f"HTTP {status}"), **redo)
        return RedirectResponse("/silences", 303)

    async def expire(request: Request) -> Response:
        if (r := login_first(request)) is not None:
            return r
        form = await _form(request)
        if form is None or not auth.csrf_ok(request, form):
            return page(request, "missing.html", 403, what="The form token is missing or stale: reload the page and try again.")
        await views.call(api, "DELETE", f"/api/v1/silences/{quote(request.path_params['sid'], safe='')}")
        return RedirectResponse("/silences", 303)

    async def targets(request: Request) -> Response:
        # the daemon's lock may be held by an evaluation tick: wait in a worker, not on the server's loop
        return login_first(request) or page(request, "targets.html", targets=await run_in_threadpool(views.targets, api))

    async def rules(request: Request) -> Response:
        return login_first(request) or page(request, "rules.html", rules=await run_in_threadpool(views.rules, api))

    async def login(request: Request) -> Response:
        nxt = auth.safe_next(request.query_params.get("next", "/"))
        if not api.token:
            return RedirectResponse(nxt, 303)
        if request.method == "GET":
            return page(request, "login.html", next=nxt, error="")
        form = await _form(request)
        nxt = auth.safe_next((form or {}).get("next", "/"))
        if form is None or not auth.csrf_ok(request, form):
            return page(request, "login.html", 403, next=nxt, error="The form expired: try again.")
        client = request.client.host if request.client else "?"
        if (wait := throttle.wait_s(client)) > 0:
            resp = page(request, "login.html", 429, next=nxt, error="Too many wrong tokens: wait a few seconds.")
            resp.headers["retry-after"] = str(max(1, round(wait)))
            return resp
        if not auth.token_ok(form.get("token", ""), api.token):
            throttle.failed(client)
            return page(request, "login.html", 401, next=nxt, error="That is not the monitor's token.")
        resp = RedirectResponse(nxt, 303)
        resp.set_cookie(auth.SESSION_COOKIE, sessions.issue(api.token), **auth.cookie_args(auth.SESSION_S))  # type: ignore[arg-type]
        return resp

    async def logout(request: Request) -> Response:
        form = await _form(request)
        resp = RedirectResponse("/login" if api.token else "/", 303)
        if form is not None and auth.csrf_ok(request, form):
            sessions.end(request.cookies.get(auth.SESSION_COOKIE, ""))  # a copy of the cookie ends with it
            resp.delete_cookie(auth.SESSION_COOKIE, path="/")
        return resp

    async def json_api(request: Request) -> Response:
        if request.url.path in ("/healthz", "/metrics"):  # neither reads the session nor a token
            return await api.endpoint(request)
        request.state.session = bool(api.token) and auth.has_session(request, api.token, sessions)
        guess = bool(api.token) and "authorization" in request.headers
        client = request.client.host if request.client else "?"
        if guess and (wait := bearer_throttle.wait_s(client)) > 0:
            return JSONResponse({"error": "too many wrong bearer tokens from this address: wait"}, 429,
                                headers={"retry-after": str(max(1, round(wait)))})
        resp = await api.endpoint(request)
        if guess and resp.status_code == 401:
            bearer_throttle.failed(client)
        return resp

    external = urlsplit(api.daemon.config.external_url or "").hostname
    return SameOriginGuard(Starlette(routes=[
        Route("/", index), Route("/alerts/{fp:str}", alert), Route("/silences", silences, methods=["GET", "POST"]),
        Route("/silences/new", new_silence), Route("/silences/{sid:str}/expire", expire, methods=["POST"]),
        Route("/targets", targets), Route("/rules", rules), Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/{rest:path}", json_api, methods=monitor.endpoints.api.METHODS),  # /api/*, /healthz, /metrics; JSON 404 for the rest
    ]), token_set=bool(api.token), names={api.daemon.config.host, external or ""})


_CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'none'; form-action 'self'; frame-ancestors 'none'"


async def _form(request: Request) -> dict[str, str] | None:
    """An urlencoded form of at most FORM_LIMIT bytes (None: too large or not a form)."""
    if "application/x-www-form-urlencoded" not in request.headers.get("content-type", ""):
        return None
    size, parts = 0, []
    with anyio.move_on_after(monitor.endpoints.api.READ_DEADLINE_S) as late:  # a dripping form cannot hold on
        async for chunk in request.stream():
            size += len(chunk)
            if size > FORM_LIMIT:
                return None
            parts.append(chunk)
    if late.cancelled_caught:
        return None
    try:
        text = b"".join(parts).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}
