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

from monitor.endpoints.api import Exchange, MonitorAPI
from monitor.web import links, listing

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


def alert_row(a: dict[str, Any], kind: str, state: str, silences: dict[str, dict[str, Any]] | None = None,
              names: dict[str, str] | None = None, member_of: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """``silences`` by id, ``names`` (alert names by fingerprint) and ``member_of`` (incident by member
    fingerprint) say who handles the alert: the silences muting it, the alerts inhibiting it, its incident."""
    labels = dict(a.get("labels", {}))
    ann = a.get("annotations", {})
    status = a.get("status") if isinstance(a.get("status"), dict) else {}
    fp = a.get("fingerprint", "")
    starts, ends = _parse(a.get("startsAt")), _parse(a.get("endsAt"))
    severity = labels.get("severity", "?")
    return {"kind": kind, "state": state, "fingerprint": fp,
            "name": labels.get("alertname", "?"), "severity": severity,
            "rank": {"firing": 0, "pending": 1}.get(state, 2) * 10 + SEVERITY_ORDER.get(severity, 9),
            "labels": {k: v for k, v in sorted(labels.items()) if k not in ("alertname", "severity")},
            "short_labels": {k: listing.cut(v) for k, v in sorted(labels.items()) if k not in ("alertname", "severity")},
            "summary": ann.get("summary", ""), "since": ago(starts), "started": stamp(starts),
            "ended": stamp(ends) if state == "resolved" else "", "ended_ago": ago(ends) if state == "resolved" else "",
            "annotations": ann, "members": a.get("members", []),
            "root_cause": a.get("root_cause") or ann.get("root_cause", ""),
            "suggestion": a.get("suggestion") or ann.get("suggestion", ""),
            "evidence": [e.strip() for e in ann.get("evidence", "").split(";") if e.strip()],
            "plot": plot_path(ann.get("plot", "")),
            "silenced_by": [(silences or {}).get(sid) or {"id": sid, "createdBy": "?", "comment": "", "ends": "",
                                                         "ends_in": ""} for sid in status.get("silencedBy", [])],
            "inhibited_by": [{"fingerprint": f, "name": (names or {}).get(f, f)} for f in status.get("inhibitedBy", [])],
            "incident": (member_of or {}).get(fp)}


async def overview(api: MonitorAPI, q: listing.Query) -> dict[str, Any]:
    """The alert list as ``q`` asks: unhandled ones by default (silenced or inhibited ones one filter
    away, marked with who silenced them, until when and why), grouped by node or run, at most
    PAGE_ROWS rows a group or a page."""
    d = api.daemon
    _, alerts = await call(api, "GET", "/api/v1/alerts")
    _, incidents = await call(api, "GET", "/api/v1/incidents")
    silences = await _silence_map(api)
    raw = (alerts or {}).get("data", [])
    names = {a.get("fingerprint", ""): a.get("labels", {}).get("alertname", "?") for a in raw}
    inc_raw = (incidents or {}).get("data", [])
    member_of = {m: {"fingerprint": i.get("fingerprint", ""), "name": i.get("labels", {}).get("alertname", "?")}
                 for i in inc_raw for m in i.get("members", [])}
    rows = [alert_row(a, "alert", a.get("state", "firing"), silences, names, member_of) for a in raw]
    inc_rows = [alert_row(i, "incident", "firing" if i.get("status") == "firing" else "resolved")
                for i in inc_raw]
    resolved = await run_in_threadpool(d.pipeline.book.recently_resolved)
    rows += [alert_row(dict(a.to_json()), "alert", "resolved", member_of=member_of) for a in resolved]
    rows.sort(key=_order)
    shown = listing.selected(rows, q)
    unhandled = [r for r in rows if not listing.handled(r)]
    return {"alerts": listing.grouped(shown, q), "shown": len(shown), "q": q,
            "incidents": sorted(inc_rows, key=_order),
            "counts": {"firing": sum(r["state"] == "firing" for r in unhandled),
                       "pending": sum(r["state"] == "pending" for r in unhandled),
                       "handled": sum(listing.handled(r) for r in rows)},
            "health": await run_in_threadpool(d.health), "runs": await run_in_threadpool(job_health, api),
            "silences_on": d.engine is not None, "updated": clock_time(time.time())}


def _order(r: dict[str, Any]) -> tuple[int, str]:
    return r["rank"], r["name"]


def clock_time(ts: float) -> str:
    """The page's "updated HH:MM:SS", in UTC like every other stamp on the console."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%H:%M:%S UTC")


async def _silence_map(api: MonitorAPI) -> dict[str, dict[str, Any]]:
    if api.daemon.engine is None:
        return {}
    status, doc = await call(api, "GET", "/api/v1/silences")
    if status != 200:
        return {}
    return {s["id"]: {"id": s["id"], "createdBy": s.get("createdBy", ""), "comment": s.get("comment", ""),
                      "ends": stamp(_parse(s.get("endsAt"))), "ends_in": until(_parse(s.get("endsAt"))),
                      "starts_ts": _parse(s.get("startsAt")) or 0.0}
            for s in doc["data"]}


def until(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return ""
    s = max(0.0, ts - (now or time.time()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"in {s / size:.0f}{unit}"
    return f"in {s:.0f}s"


def job_health(api: MonitorAPI) -> list[dict[str, Any]]:
    """One line per watched source: up or down, its last training step (``verl_global_step``) and how
    long ago the last record and the last scrape were."""
    d = api.daemon
    with d.lock:
        rows = d.sources.rows(d.pipeline.store.held_by)
        steps: dict[str, tuple[float, float]] = {}
        for s in d.pipeline.store:
            if s.name == "verl_global_step" and math.isfinite(s.last_t) and \
                    (s.source not in steps or s.last_t > steps[s.source][1]):
                steps[s.source] = (s.last_v, s.last_t)
    now_clock, now = d.clock.now(), time.time()
    out = []
    for r in sorted(rows, key=lambda r: r["name"]):
        step = max((steps[src] for src in r["sources"] if src in steps), key=lambda st: st[1], default=None)
        out.append({"name": r["name"], "health": r["health"], "address": r["address"],
                    "step": "" if step is None or not math.isfinite(step[0]) else f"{step[0]:.0f}",
                    "record_ago": "" if step is None else ago(now - (now_clock - step[1]), now),
                    "scrape_ago": ago(r["last_round"], now)})
    return out


async def detail(api: MonitorAPI, fp: str) -> dict[str, Any] | None:
    status, doc = await call(api, "GET", f"/api/v1/alerts/{fp}")
    if status != 200:
        return None
    a = doc["data"]
    kind = "incident" if a.get("kind") == "incident" else "alert"
    _, alerts = await call(api, "GET", "/api/v1/alerts")
    _, incidents = await call(api, "GET", "/api/v1/incidents")
    live = (alerts or {}).get("data", [])
    names = {x.get("fingerprint", ""): x.get("labels", {}).get("alertname", "?") for x in live}
    member_of = {m: {"fingerprint": i.get("fingerprint", ""), "name": i.get("labels", {}).get("alertname", "?")}
                 for i in (incidents or {}).get("data", []) for m in i.get("members", [])}
    silences = await _silence_map(api)
    state = a.get("state") or (a.get("status") if isinstance(a.get("status"), str) else "firing")
    row = alert_row(a, kind, state, silences, names, member_of)
    members, member_raw = [], []
    if kind == "incident":  # its members, firing or resolved since, with their own plots
        by_fp = {m.get("fingerprint"): m for m in live}
        for m in row["members"]:
            found = by_fp.get(m)
            if found is None:
                got, one = await call(api, "GET", f"/api/v1/alerts/{m}")
                found = one["data"] if got == 200 else None
            if found is not None:
                member_raw.append(found)
                members.append(alert_row(found, "alert", found.get("state", "firing"), silences, names))
    base = api.daemon.engine.views.runbook_base() if api.daemon.engine is not None else ""
    out = links.out_links(api.daemon.config, row, rule_select(api, row["name"]), base)
    for m in members:  # an incident links out where its members do
        out += [x for x in links.out_links(api.daemon.config, m, rule_select(api, m["name"]), base) if x not in out]
    events = await run_in_threadpool(timeline, api, a, row)
    seen = {(e["at"], e["what"]) for e in events}
    for raw, m in zip(member_raw, members, strict=True):  # ... and its timeline holds theirs, each
        for e in await run_in_threadpool(timeline, api, raw, m):  # notification once (it carries them all)
            shared = e["kind"] not in ("firing", "pending", "resolved", "silenced")
            if not (shared and (e["at"], e["what"]) in seen):
                events.append(dict(e, what=e["what"] if shared else f"{m['name']}: {e['what']}"))
                seen.add((e["at"], e["what"]))
    events.sort(key=lambda e: e["at"])
    return {"a": row, "members": members, "silences_on": api.daemon.engine is not None, "links": out,
            "timeline": events, "updated": clock_time(time.time())}


def rule_select(api: MonitorAPI, name: str) -> str:
    for r in api.daemon.pipeline.evaluator.rules:
        if r.alert == name:
            return "; ".join(s for c in r.to_json()["conditions"] for s in c["select"])
    return ""


def timeline(api: MonitorAPI, a: dict[str, Any], row: dict[str, Any]) -> list[dict[str, str]]:
    """What happened to the alert, oldest first: firing, each notification that carried it with its
    outcome, the silences muting it, resolved."""
    events: list[tuple[float, str, str]] = []
    starts, ends = _parse(a.get("startsAt")), _parse(a.get("endsAt"))
    if starts is not None:
        events.append((starts, "firing" if row["state"] != "pending" else "pending", "started"))
    engine = api.daemon.engine
    for dlv in engine.views.deliveries(row["fingerprint"]) if engine is not None else []:
        outcome = dlv["outcome"] + (f" after {dlv['attempts']} attempt(s)" if dlv["attempts"] > 1 else "")
        what = f"{dlv['status']} notification to {dlv['receiver']}: {outcome}"
        events.append((dlv["at"], dlv["outcome"], what + (f" ({dlv['error']})" if dlv["error"] else "")))
    for sil in row["silenced_by"]:
        events.append((sil.get("starts_ts", 0.0), "silenced",
                       f"silenced by {sil['createdBy']} until {sil['ends']}: {sil['comment']}"))
    if row["state"] == "resolved" and ends is not None:
        events.append((ends, "resolved", "resolved"))
    events.sort(key=lambda e: e[0])
    return [{"at": stamp(t), "kind": kind, "what": what} for t, kind, what in events]


def matchers_of(labels: dict[str, str]) -> str:
    """Matchers for a silence of these labels, one per line in the matcher syntax, where only ``\\"``
    is unescaped: a value with a backslash, a line break or another unprintable character becomes an
    anchored regex spelling those as ``\\xNN``/``\\x{NNNN}`` (RE2 syntax), so every line still matches its alert."""
    return "\n".join(_matcher_line(k, v) for k, v in sorted(labels.items()) if k != "severity")


def _matcher_line(name: str, value: str) -> str:
    if value.isprintable() and "\\" not in value:
        return f'{name}="{value.replace(chr(34), chr(92) + chr(34))}"'
    # RE2 / Go regexp spelling (alerting/matchers.py compiles with RE2): \\xNN, and \\x{NNNN} beyond a byte
    spelled = "".join(re.escape(c) if c.isprintable() and c not in "\\\"" else f"\\x{ord(c):02x}" if ord(c) < 0x100
                      else f"\\x{{{ord(c):x}}}" for c in value)
    return f'{name}=~"{spelled}"'


NO_SILENCES = ("This monitor prints its alerts to the terminal and sends them nowhere (no notify_config), so "
               "there is nothing to silence here: run it with --notify-config FILE (or notify_config: in its "
               "config; see alerting/README.md) to route alerts to receivers and silence them from this page.")


def silence_offer(api: MonitorAPI) -> dict[str, Any]:
    """Whether the silence form is offered: silences live in the alerting engine (None: say why not)."""
    return {"unavailable": api.daemon.engine is None, "error": NO_SILENCES if api.daemon.engine is None else ""}


async def silences(api: MonitorAPI) -> dict[str, Any]:
    if api.daemon.engine is None:
        return {"error": NO_SILENCES, "active": [], "expired": []}
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
