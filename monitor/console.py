"""Alert transitions as terminal lines, for ``verl-monitor run`` without a notify config: the operator
watching one trainer sees what would have paged, without setting up a receiver."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any, TextIO


def alert_line(rec: dict[str, Any]) -> str:
    labels = rec.get("labels", {})
    status = str(rec.get("status", "firing")).upper()
    when = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S")
    where = " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("alertname", "severity"))
    summary = rec.get("annotations", {}).get("summary", "")
    return f"{when} {status:8} {labels.get('severity', '?')} {labels.get('alertname', '?')} {where}" + \
        (f" -- {summary}" if summary else "")


class ConsolePrinter:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out

    def __call__(self, rec: dict[str, Any]) -> None:
        if rec.get("kind") != "alert":
            return
        out = self.out or sys.stdout
        print(alert_line(rec), file=out, flush=True)
