"""Where an alert page links out: its runbook, its panel on the shipped Grafana dashboards (with
``grafana_url`` in the monitor config) and its rule's query (on ``prometheus_url``'s graph page, else
the console's own rules page)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from alerting.templates import runbook_link

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"  # shipped beside the packages in the repo
_METRIC = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


@functools.cache
def panels() -> dict[str, tuple[str, int, str]]:
    """Metric name -> (dashboard uid, panel id, panel title): the first panel whose query reads it."""
    out: dict[str, tuple[str, int, str]] = {}
    for f in sorted(DASHBOARDS.glob("*.json")) if DASHBOARDS.is_dir() else []:
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        for p in doc.get("panels", []):
            for t in p.get("targets", []):
                for name in _METRIC.findall(str(t.get("expr", ""))):
                    out.setdefault(name, (str(doc.get("uid", "")), int(p.get("id", 0)), str(p.get("title", ""))))
    return out


def out_links(config: Any, row: dict[str, Any], rule_select: str = "", runbook_base: str = "") -> list[dict[str, str]]:
    """``[{"text", "href"}]`` for the alert page; ``rule_select``: the rule's series selector, if known;
    ``runbook_base``: the alerting config's ``runbook_base_url`` (a runbook given as a repository path)."""
    ann = row["annotations"]
    found = []
    for key in ("runbook_url", "runbook"):
        url = runbook_link(str(ann.get(key, "")), runbook_base)
        if url.startswith(("http://", "https://")):
            found.append({"text": "Runbook", "href": url})
            break
    metric = next(iter(_METRIC.findall(rule_select)), "")
    panel = panels().get(metric)
    if str(config.grafana_url or "").startswith(("http://", "https://")) and panel:
        uid, pid, title = panel
        params = {"viewPanel": pid}
        params.update({f"var-{k}": v for k, v in row["labels"].items() if k in ("job", "instance")})
        found.append({"text": f"Grafana: {title}", "href": f"{config.grafana_url}/d/{uid}?{urlencode(params)}"})
    if rule_select:
        if str(config.prometheus_url or "").startswith(("http://", "https://")):
            href = f"{config.prometheus_url}/graph?{urlencode({'g0.expr': rule_select, 'g0.tab': 0})}"
        else:
            href = f"/rules#rule-{quote(row['name'], safe='')}"
        found.append({"text": f"Query: {rule_select}", "href": href})
    return found
