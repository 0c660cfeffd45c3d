"""Message rendering: Jinja2 in a ``SandboxedEnvironment`` so user templates cannot reach Python
internals. Built-in layouts ``default.en.j2`` / ``default.zh-CN.j2`` put the page's title first
(``【verl-alert】P0: Dataflow Collapse``), then Cluster / Time / Root Cause / Suggestion lines.

A receiver's own template that fails (syntax error, sandbox violation, runtime error) falls back to the
built-in one; the caller counts it. Oversize messages are shortened by UTF-8 bytes: alert lines are
dropped from the end and replaced by ``+N more: <monitor link>``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import SandboxedEnvironment

from alerting.model import SEVERITIES, Alert, Notification
from alerting.templates.safe import clean, clean_map, host_of

HERE = Path(__file__).parent
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def humanize(name: str) -> str:
    """``DataflowCollapse`` -> ``Dataflow Collapse``; ``RewardModelOOM`` -> ``Reward Model OOM``."""
    return _CAMEL.sub(" ", name).replace("NV Link", "NVLink")


def format_time(ts: float | None) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def sandbox() -> SandboxedEnvironment:
    env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, autoescape=False)
    env.filters["humanize"] = humanize
    env.filters["ftime"] = format_time
    return env


_ENV = sandbox()
_BUILTIN = {lang: _ENV.from_string((HERE / f"default.{lang}.j2").read_text(encoding="utf-8"))
            for lang in ("en", "zh-CN")}


@dataclass
class Rendered:
    title: str  # first line, also the DingTalk/Feishu title
    text: str   # whole message, first line included
    fell_back: bool = False  # the receiver's own template failed and the built-in one was used
    error: str = ""


def _top_severity(alerts: list[Alert]) -> str:
    ranks = [SEVERITIES.index(a.severity) if a.severity in SEVERITIES else len(SEVERITIES) for a in alerts]
    best = min(ranks, default=len(SEVERITIES) - 1)
    return SEVERITIES[min(best, len(SEVERITIES) - 1)]


_REPO_PATH = re.compile(r"^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*\.md(?:#[A-Za-z0-9_-]*)?$")


def runbook_link(text: str, base: str) -> str:
    """A runbook given as a repository path (``prometheus/README.md#trainerdown``) joined to ``base``;
    prose runbooks and absolute URLs stay as they are."""
    if base and _REPO_PATH.match(text.strip()):
        return base.rstrip("/") + "/" + text.strip().lstrip("./")
    return text


@dataclass(frozen=True)
class Safety:
    """How values from labels/annotations are made inert (``templates.safe``): the robot's markup
    dialect and the hosts whose URLs may render as links."""

    dialect: str = "plain"
    link_hosts: tuple[str, ...] = ()

    def __call__(self, value: object) -> str:
        return clean(value, self.dialect, self.link_hosts)


def _alert_view(a: Alert, runbook_base: str = "", safe: Safety = Safety()) -> dict[str, Any]:
    annotations = dict(a.annotations)
    if "runbook" in annotations:
        annotations["runbook"] = runbook_link(annotations["runbook"], runbook_base)
    where = " ".join(f"{k}={a.labels[k]}" for k in ("node", "gpu", "component") if a.labels.get(k))
    return {
        "status": a.status, "severity": safe(a.severity), "alertname": safe(a.name), "title": safe(humanize(a.name)),
        "where": safe(where), "summary": safe(a.annotations.get("summary", "")),
        "labels": clean_map(a.labels, safe.dialect, safe.link_hosts),
        "annotations": clean_map(annotations, safe.dialect, safe.link_hosts), "value": a.value,
        "fingerprint": a.fingerprint, "starts_at": format_time(a.starts_at),
    }


def console_link(base: str, alerts: list[Alert]) -> str:
    """The monitor console's page of a lone alert or incident (its index for several); empty without a
    base URL. A bare URL, as the "+N more" link: WeCom, DingTalk and Feishu markdown make it a link,
    and no ``[text](url)`` ever reaches a message (the hostile-input checks refuse any). Built from our
    config and a hex fingerprint: nothing to clean."""
    if not base:
        return ""
    return f"{base.rstrip('/')}/alerts/{alerts[0].fingerprint}" if len(alerts) == 1 else f"{base.rstrip('/')}/"


def context(notes: list[Notification], link: str, receiver: str, runbook_base: str = "",
            safe: Safety = Safety(), console: str = "") -> dict[str, Any]:
    """Template variables for one notification, or for a digest folding several; every value from
    labels and annotations passes through ``safe``."""
    alerts = [a for n in notes for a in n.alerts]
    first = alerts[0] if alerts else Alert(labels={"alertname": "Empty"})
    names = {a.name for a in alerts}
    lone = len(alerts) == 1
    firing = sum(a.status == "firing" for a in alerts)
    return {
        "receiver": receiver,
        "digest": len(notes) > 1,
        "digest_count": len(notes),
        "status": "firing" if firing else "resolved",
        "firing_count": firing,
        "resolved_count": len(alerts) - firing,
        "severity": _top_severity(alerts),
        "alertname": safe(first.name) if len(names) == 1 else "",
        "title": safe(humanize(first.name)) if len(names) == 1 else f"{len(alerts)} alerts",
        "cluster": safe(first.labels.get("cluster", "default")),
        "time": format_time(min((a.starts_at for a in alerts), default=None)),
        "root_cause": safe(first.annotations.get("root_cause", "")) if lone else "",
        "suggestion": safe(first.annotations.get("suggestion", "")) if lone else "",
        "summary": safe(first.annotations.get("summary", "")) if lone else "",
        "runbook": safe(runbook_link(first.annotations.get("runbook", ""), runbook_base)) if len(names) == 1 else "",
        "group_labels": clean_map(dict(notes[0].group_labels), safe.dialect, safe.link_hosts) if notes else {},
        "alerts": [_alert_view(a, runbook_base, safe) for a in alerts],
        "link": link,
        "console": console_link(console, alerts),
        "more": 0,
    }


def _tidy(text: str) -> str:
    lines = [ln.rstrip() for ln in text.strip().splitlines()]
    return "\n".join(ln for ln in lines if ln)


def _render_once(ctx: dict[str, Any], template: str | None, lang: str) -> Rendered:
    if template:
        try:
            src = Path(template).read_text(encoding="utf-8") if "\n" not in template and Path(template).is_file() \
                else template
            text = _tidy(_ENV.from_string(src).render(**ctx))
            if text:
                return Rendered(text.splitlines()[0], text)
            error = "template rendered an empty message"
        except (TemplateError, OSError, ValueError, TypeError, ArithmeticError, AttributeError, KeyError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        out = _render_once(ctx, None, lang)
        out.fell_back, out.error = True, error
        return out
    text = _tidy(_BUILTIN.get(lang, _BUILTIN["en"]).render(**ctx))
    return Rendered(text.splitlines()[0], text)


def fit_bytes(text: str, max_bytes: int) -> str:
    """Cut to at most ``max_bytes`` UTF-8 bytes without splitting a character."""
    raw = text.encode("utf-8")
    return text if len(raw) <= max_bytes else raw[:max_bytes].decode("utf-8", errors="ignore")


def render(notes: list[Notification], *, template: str | None = None, lang: str = "en", link: str = "",
           receiver: str = "", max_bytes: int = 4096, runbook_base: str = "", dialect: str = "plain",
           link_hosts: tuple[str, ...] = (), console: str = "") -> Rendered:
    """Render, then shrink the alert list until the message fits ``max_bytes`` (UTF-8). Values from
    labels and annotations are made inert for ``dialect``; the hosts of ``link`` and ``runbook_base``
    and ``link_hosts`` may render as links; ``console``: the monitor console's base URL (a link to the
    alert's page closes the message)."""
    hosts = tuple(h for h in (host_of(link), host_of(runbook_base), *link_hosts) if h)
    ctx = context(notes, link, receiver, runbook_base, Safety(dialect, hosts), console)
    out = _render_once(ctx, template, lang)
    if len(out.text.encode("utf-8")) <= max_bytes:
        return out
    views, lo, hi = ctx["alerts"], 0, len(ctx["alerts"])
    best = None
    while lo <= hi:  # largest number of alert lines that still fits
        mid = (lo + hi) // 2
        trial = _render_once(dict(ctx, alerts=views[:mid], more=len(views) - mid), template, lang)
        if len(trial.text.encode("utf-8")) <= max_bytes:
            best, lo = trial, mid + 1
        else:
            hi = mid - 1
    if best is None:  # even the header is too long: cut it, keep the "+N more" pointer
        tail = f"\n+{len(views)} more: {link}"
        best = Rendered(out.title, fit_bytes(out.text, max_bytes - len(tail.encode())) + tail)
    best.fell_back, best.error = out.fell_back, out.error
    return best
