"""What each console page shows, from the JSON API's answers and the daemon's state; no HTML here."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime, timezone
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers

from monitor.api import Exchange, MonitorAPI

_PLOT_NAME = re.compile(r"/api/v1/plots/([A-Za-z0-9_.-]+\.png)")
SEVERITY_ORDER = {"P0": 0, "critical": 0, "P1": 1, "P2": 2, "warning": 2, "P3": 3, "info": 3}


async def call(api: MonitorAPI, method: str, path: str, doc: Any = None) -> tuple[int, Any]:
    """One request through the API's own routes (validation and all), as the console's user."""
    headers = Headers({"authorization": f"Bearer {api.token}"} if api.token else {})
    h = Exchange(method, path, headers, raw=json.dumps(doc).encode() if doc is not None else b"")
    await run_in_threadpool(api.handle, h, method)
    try:
        return h.status or 500, json.loads(h.body or b"null")
    except ValueError:
        return h.status or 500, None


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None or not math.isfinite(ts):
        return "never"
    s = max(0.0, (now or time.time()) - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit} ago"
    return f"{s:.0f}s ago"


def _parse(rfc: str | None) -> float | None:
    if not rfc or rfc.startswith("0001"):
        return None
    try:
        return datetime.fromisoformat(rfc.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def stamp(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def plot_path(link: str) -> str:
    """A plot link (absolute, maybe signed for chat) as the console's own path; the session cookie
    authorizes it."""
    m = _PLOT_NAME.search(link or "")
    return f"/api/v1/plots/{m.group(1)}" if m else ""


def alert_row(a: dict[str, Any], kind: str, state: str) -> dict[str, Any]:
    labels = dict(a.get("labels", {}))
    ann = a.get("annotations", {})
    starts, ends = _parse(a.get("startsAt")), _parse(a.get("endsAt"))
    return {"kind": kind, "state": state, "fingerprint": a.get("fingerprint", ""),
            "name": labels.get("alertname", "?"), "severity": labels.get("severity", "?"),
            "labels": {k: v for k, v in sorted(labels.items()) if k not in ("alertname", "severity")},
            "summary": ann.get("summary", ""), "since": ago(starts), "started": stamp(starts),
            "ended": stamp(ends) if state == "resolved" else "", "ended_ago": ago(ends) if state == "resolved" else "",
            "annotations": ann, "members": a.get("members", []),
            "root_cause": a.get("root_cause") or ann.get("root_cause", ""),
            "suggestion": a.get("suggestion") or ann.get("suggestion", ""),
            "evidence": [e.strip() for e in ann.get("evidence", "").split(";") if e.strip()],
            "plot": plot_path(ann.get("plot", ""))}


async def overview(api: MonitorAPI) -> dict[str, Any]:
    d = api.daemon
    _, alerts = await call(api, "GET", "/api/v1/alerts")
    _, incidents = await call(api, "GET", "/api/v1/incidents")
    rows = [alert_row(a, "alert", a.get("state", "firing")) for a in (alerts or {}).get("data", [])]
    inc_rows = [alert_row(i, "incident", "firing" if i.get("status") == "firing" else "resolved")
                for i in (incidents or {}).get("data", [])]
    resolved = await run_in_threadpool(d.pipeline.book.recently_resolved)
    rows += [alert_row(dict(a.to_json()), "alert", "resolved") for a in resolved]

    def order(r: dict[str, Any]) -> tuple[int, int, str]:
        return ({"firing": 0, "pending": 1}.get(r["state"], 2), SEVERITY_ORDER.get(r["severity"], 9), r["name"])

    return {"alerts": sorted(rows, key=order), "incidents": sorted(inc_rows, key=order),
            "health": await run_in_threadpool(d.health), "silences_on": d.engine is not None}


async def detail(api: MonitorAPI, fp: str) -> dict[str, Any] | None:
    status, doc = await call(api, "GET", f"/api/v1/alerts/{fp}")
    if status != 200:
        return None
    a = doc["data"]
    kind = "incident" if a.get("kind") == "incident" else "alert"
    row = alert_row(a, kind, a.get("state") or a.get("status", "firing"))
    members = []
    if kind == "incident":  # the member alerts now firing with their own plots
        _, alerts = await call(api, "GET", "/api/v1/alerts")
        ids = set(row["members"])  # the members' fingerprints
        members = [alert_row(m, "alert", m.get("state", "firing")) for m in (alerts or {}).get("data", [])
                   if m.get("fingerprint") in ids]
    return {"a": row, "members": members, "silences_on": api.daemon.engine is not None}


def matchers_of(labels: dict[str, str]) -> str:
    """Matchers for a silence of these labels, one per line in the matcher syntax, where only ``\\"``
    is unescaped: a value with a backslash, a line break or another unprintable character becomes an
    anchored regex spelling those as ``\\xNN``/``\\uNNNN``, so every line still matches its alert."""
    return "\n".join(_matcher_line(k, v) for k, v in sorted(labels.items()) if k != "severity")


def _matcher_line(name: str, value: str) -> str:
    if value.isprintable() and "\\" not in value:
        return f'{name}="{value.replace(chr(34), chr(92) + chr(34))}"'
    spelled = "".join(re.escape(c) if c.isprintable() and c not in "\\\"" else f"\\x{ord(c):02x}" if ord(c) < 0x100
                      else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}" for c in value)
    return f'{name}=~"{spelled}"'


async def silences(api: MonitorAPI) -> dict[str, Any]:
    status, doc = await call(api, "GET", "/api/v1/silences")
    if status != 200:
        return {"error": (doc or {}).get("error", f"HTTP {status}"), "active": [], "expired": []}
    rows = []
    for s in doc["data"]:
        ends = _parse(s.get("endsAt"))
        rows.append({"id": s["id"], "state": s.get("status", {}).get("state", "?"),
                     "matchers": [_matcher_text(m) for m in s.get("matchers", [])],
                     "comment": s.get("comment", ""), "createdBy": s.get("createdBy", ""),
                     "starts": stamp(_parse(s.get("startsAt"))), "ends": stamp(ends), "ends_ts": ends or 0.0})
    rows.sort(key=lambda r: -r["ends_ts"])
    return {"error": "", "active": [r for r in rows if r["state"] in ("active", "pending")],
            "expired": [r for r in rows if r["state"] not in ("active", "pending")]}


def _matcher_text(m: dict[str, Any]) -> str:
    equal, regex = m.get("isEqual", True) is not False, bool(m.get("isRegex"))
    op = {(True, False): "=", (False, False): "!=", (True, True): "=~", (False, True): "!~"}[(equal, regex)]
    return f"{m.get('name', '?')}{op}{json.dumps(m.get('value', ''), ensure_ascii=False)}"


def targets(api: MonitorAPI) -> list[dict[str, Any]]:
    d = api.daemon
    with d.lock:
        rows = d.sources.rows(d.pipeline.store.held_by)
    now = time.time()
    for r in rows:
        r["last_ago"] = ago(r["last_round"], now)
        r["duration_ms"] = "" if r["duration"] is None else f"{r['duration'] * 1000:.0f} ms"
    return sorted(rows, key=lambda r: (r["health"] == "up", r["kind"], r["name"]))


def rules(api: MonitorAPI) -> list[dict[str, Any]]:
    d = api.daemon
    with d.lock:
        rs = list(d.pipeline.evaluator.rules)
        states = d.pipeline.evaluator.rule_states()
        firing = {a.labels.get("alertname") for a in d.pipeline.book.firing()}
        pending = {a.labels.get("alertname") for a in d.pipeline.book.pending()}
    out = []
    for r, st in zip(rs, states, strict=True):
        doc = r.to_json()
        conds = doc["conditions"]
        state = "firing" if r.alert in firing else "pending" if r.alert in pending else \
            ("inactive" if st["series"] else "no data")
        last = st["last_value"]
        out.append({"name": r.alert, "severity": r.severity, "state": state, "series": st["series"],
                    "active": st["active"], "units": ", ".join(sorted({c["judged_in"] for c in conds})),
                    "for": _for_text(doc), "detectors": ", ".join(c["detector"] for c in conds),
                    "select": "; ".join(s for c in conds for s in c["select"]),
                    "warmup_left": st["warmup_left"],
                    "last_value": "" if last is None or not math.isfinite(last) else f"{last:.6g}",
                    "last_ago": ago(st["last_t"]) if st["last_t"] is not None else ""})
    return out


def _for_text(doc: dict[str, Any]) -> str:
    if doc.get("for_steps"):
        return f"{doc['for_steps']} steps"
    return f"{doc.get('for_s') or 0:g}s"
