"""The alert list's filter, grouping and paging, from the GET form on ``/`` (it works with script off:
the form's fields are the query string). No HTML here: ``views.overview`` hands the result to the page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from alerting.matchers import Matcher, all_match, parse_matcher

PAGE_ROWS = 50  # rows per page, and per group before it says "N more"
STATES = ("", "firing", "pending", "resolved", "handled", "silenced", "inhibited", "all")  # "": needs someone
_STATE_ALIASES = {"suppressed": "handled", "active": ""}  # Alertmanager's words for the same
GROUPS = ("node", "run", "none")
LIST_VALUE_CHARS = 120  # a label value longer than this is cut in the list; the alert page shows it whole
REFRESH_S = 30
GROUP_LABELS = {"node": ("node", "instance"), "run": ("run", "run_id", "experiment", "job", "cluster")}


@dataclass
class Query:
    matchers_text: str = ""
    matchers: list[Matcher] = field(default_factory=list)
    state: str = ""
    severity: str = ""
    group: str = "node"
    page: int = 1
    refresh: int = REFRESH_S
    error: str = ""

    def link(self, **change: Any) -> str:
        """This query's URL with ``change`` applied (the pager's and the groups' links)."""
        now = {"q": self.matchers_text, "state": self.state, "severity": self.severity, "group": self.group,
               "page": self.page, "refresh": self.refresh}
        now.update(change)
        keep = {k: v for k, v in now.items() if v not in ("", None) and not (k == "page" and v == 1)
                and not (k == "group" and v == "node") and not (k == "refresh" and v == REFRESH_S)}
        return "/?" + urlencode(keep) if keep else "/"


def parse_query(params: Any) -> Query:
    """The form's fields; a bad one is reported on the page (``error``) and left out, never a 500."""
    texts = [t.strip() for key in ("q", "filter") for t in _all(params, key) if t.strip()]
    q = Query(matchers_text=", ".join(texts))  # ``filter``: Alertmanager's name for the same matchers
    errors = []
    for text in _split_matchers(q.matchers_text):
        try:
            q.matchers.append(parse_matcher(text))
        except ValueError as exc:
            errors.append(str(exc))
    state = _STATE_ALIASES.get(params.get("state", ""), params.get("state", ""))
    q.state = state if state in STATES else ""
    q.severity = params.get("severity", "")[:32]
    group = {"job": "run", "": "none"}.get(params.get("group", "node"), params.get("group", "node"))
    q.group = group if group in GROUPS else "node"
    q.page = _int(params.get("page"), 1, 1, 10**6)
    q.refresh = _int(params.get("refresh"), REFRESH_S, 0, 3600)
    if q.refresh and q.refresh < 2:
        q.refresh = 2
    q.error = "; ".join(errors)
    return q


def _all(params: Any, key: str) -> list[str]:
    return list(params.getlist(key)) if hasattr(params, "getlist") else [params[key]] if key in params else []


def _int(text: str | None, default: int, lo: int, hi: int) -> int:
    try:
        return min(hi, max(lo, int(text or default)))
    except ValueError:
        return default


def _split_matchers(text: str) -> list[str]:
    """``a="x", b=~"y.*"`` (Alertmanager's ``{...}`` braces optional): split on commas and line breaks
    outside quoted values."""
    text = text.strip().removeprefix("{").removesuffix("}")
    out, cur, quoted, escaped = [], [], False, False
    for c in text:
        if escaped:
            escaped = False
        elif c == "\\" and quoted:
            escaped = True
        elif c == '"':
            quoted = not quoted
        elif c in ",\n" and not quoted:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(c)
    out.append("".join(cur).strip())
    return [m for m in out if m]


def handled(row: dict[str, Any]) -> bool:
    return bool(row["silenced_by"] or row["inhibited_by"])


def selected(rows: list[dict[str, Any]], q: Query) -> list[dict[str, Any]]:
    def keep(r: dict[str, Any]) -> bool:
        if q.state == "handled":
            ok = handled(r)
        elif q.state in ("silenced", "inhibited"):
            ok = bool(r[f"{q.state}_by"])
        elif q.state == "all":
            ok = True
        elif q.state:
            ok = r["state"] == q.state and not handled(r)
        else:
            ok = not handled(r)
        labels = dict(r["labels"], alertname=r["name"], severity=r["severity"])
        return ok and (not q.severity or r["severity"] == q.severity) and all_match(q.matchers, labels)
    return [r for r in rows if keep(r)]


def group_key(row: dict[str, Any], by: str) -> str:
    for name in GROUP_LABELS.get(by, ()):
        if row["labels"].get(name):
            return f'{name}="{row["labels"][name]}"'
    return f"no {by}"


def grouped(rows: list[dict[str, Any]], q: Query) -> dict[str, Any]:
    """Groups (by node or run) of at most PAGE_ROWS rows each, the worst first, open when the whole list
    is short; or, ungrouped, one page of PAGE_ROWS rows."""
    if q.group == "none":
        pages = max(1, -(-len(rows) // PAGE_ROWS))
        page = min(q.page, pages)
        shown = rows[(page - 1) * PAGE_ROWS: page * PAGE_ROWS]
        return {"groups": [{"key": "", "rows": shown, "more": 0, "open": True, "count": len(rows),
                            "firing": sum(r["state"] == "firing" for r in rows), "link": ""}],
                "page": page, "pages": pages}
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(group_key(r, q.group), []).append(r)
    groups = []
    for key, members in by.items():
        name = key.split("=", 1)[0]
        link = q.link(q=", ".join(filter(None, [q.matchers_text, key])), page=1) if "=" in key else ""
        groups.append({"key": key, "title": cut(key), "rows": members[:PAGE_ROWS], "more": max(0, len(members) - PAGE_ROWS),
                       "count": len(members), "firing": sum(r["state"] == "firing" for r in members),
                       "worst": min(r["rank"] for r in members), "link": link, "label": name})
    groups.sort(key=lambda g: (g["worst"], -g["count"], g["key"]))
    short = len(rows) <= PAGE_ROWS or len(groups) == 1
    for i, g in enumerate(groups):
        g["open"] = short or i == 0
    return {"groups": groups, "page": 1, "pages": 1}


def cut(value: str, limit: int = LIST_VALUE_CHARS) -> str:
    return value if len(value) <= limit else value[:limit] + f"… ({len(value)} chars)"
