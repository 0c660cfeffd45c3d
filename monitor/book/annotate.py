"""Annotate stage, between the evaluator and the alert book: for each alert that starts firing, the
rule's templates, its plot (rendered off the evaluation tick; the link and the PNG's path are final at
once) and, for RewardDistributionDrift, the trainer's most anomalous prompts. Everything it adds
travels forward on the alert; nothing later calls back here."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alerting.clock import Clock
from alerting.vocabulary import Vocabulary
from monitor.book.plot_worker import PlotWorker
from monitor.book.plots import render_fit, write_png
from monitor.evaluation.instances import Annotated, Candidate

log = logging.getLogger("monitor.annotate")
# Plots in an alert storm: a PNG costs ~0.1-0.3 CPU s of matplotlib, and a fleet-wide event (a random walk
# of GPU memory read as a leak on hundreds of GPUs, a shared file system slowing every node) starts
# hundreds of alerts within minutes: a token bucket renders the first PLOT_BURST at once, then one per
# PLOT_REFILL_S of monitor time; an alert past the budget carries no plot (its text, value and runbook
# as always), and ``plots_skipped`` counts them. One alert, or a few, always gets its plot.
PLOT_BURST = 10
PLOT_REFILL_S = 30.0


@dataclass
class RewardOutliers:
    """The trainers' top anomalous prompts, as last fetched: ``lines`` is target name -> prompt lines
    (the daemon's fetch writes it), ``targets`` the verl targets as (name, node or None = any node)."""

    targets: list[tuple[str, str | None]] = field(default_factory=list)
    lines: dict[str, list[str]] = field(default_factory=dict)

    def for_node(self, node: str | None) -> list[str]:
        for name, tg_node in self.targets:
            if tg_node and tg_node != node:
                continue
            if self.lines.get(name):
                return self.lines[name]
        return []


class Annotator:
    def __init__(self, clock: Clock, vocabulary: Callable[[str], Vocabulary], plots_dir: Path | None = None,
                 outliers: RewardOutliers | None = None) -> None:
        self.clock = clock
        self.vocabulary = vocabulary
        self.plots_dir = plots_dir
        self.outliers = outliers
        self.plot_prefix: str | None = None
        self.plot_executor: Any = None  # set by the daemon: PNGs render in a worker thread
        self.plot_worker: PlotWorker | None = None  # set by the daemon: matplotlib runs in a child process
        self.plot_links: Any = None  # monitor.book.plotlinks.PlotLinks: signed links when the API has a token
        self._plot_tokens = float(PLOT_BURST)
        self._plot_at: float | None = None
        self.plots_skipped = 0

    def annotate(self, starting: list[Candidate]) -> Mapping[str, Annotated]:
        return {c.fp: self._one(c) for c in starting}

    def _one(self, c: Candidate) -> Annotated:
        ctx = {"labels": c.labels, "value": c.value if c.value is not None else float("nan"),
               "details": c.details, "alertname": c.rule.alert, "severity": c.rule.severity,
               "series": c.binding.series.labels,  # all source labels, incl. instance/target
               "joined": c.joined,  # the when: conditions' series, name, value and details (evaluator)
               "vocab": self.vocabulary(c.labels.get("node", "unknown"))}
        ann = c.rule.render(ctx)
        if c.value is not None:
            ann["value"] = f"{c.value:.6g}"
        if not ann.get("description"):  # Alertmanager's UIs and receivers show `description`
            ann["description"] = " ".join(x.rstrip(".") + "." for x in (ann.get("summary"), ann.get("runbook")) if x)
        plot_file = ""
        if c.rule.plot and self.plots_dir is not None and self._may_plot():
            plot = self._plot(c)
            if plot:
                ann["plot"], plot_file = plot
        if c.rule.alert == "RewardDistributionDrift" and self.outliers is not None:
            lines = self.outliers.for_node(c.labels.get("node"))
            if lines:
                ann["top_prompts"] = "\n".join(lines)
                ann["description"] = (ann.get("description", "") + "\nTop anomalous prompts:\n"
                                      + "\n".join(f"{i + 1}. {x}" for i, x in enumerate(lines))).strip()
        return Annotated(ann, plot_file)

    def _may_plot(self) -> bool:
        now = self.clock.now()
        if self._plot_at is not None:
            self._plot_tokens = min(float(PLOT_BURST), self._plot_tokens + (now - self._plot_at) / PLOT_REFILL_S)
        self._plot_at = now
        if self._plot_tokens < 1.0:
            self.plots_skipped += 1
            return False
        self._plot_tokens -= 1.0
        return True

    def _plot(self, c: Candidate) -> tuple[str, str] | None:
        """(link, PNG path) of the alert's plot."""
        assert self.plots_dir is not None
        t, v = c.binding.series.window()
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{c.rule.alert}-{c.fp}-{int(self.clock.now())}") + ".png"
        if len(t) == 0:
            return None
        path = self.plots_dir / name
        args = (path, t, v, dict(c.details, onset=c.since),
                f"{c.rule.alert} {c.binding.series.name} node={c.labels.get('node')}", c.rule.alert,
                c.binding.series.name, self.plot_worker)
        if self.plot_executor is not None:
            self.plot_executor.submit(_render_quietly, *args)
        elif _render_quietly(*args) is None:
            return None
        if self.plot_links is not None:
            return str(self.plot_links.url(name)), str(path)
        return (f"{self.plot_prefix.rstrip('/')}/{name}" if self.plot_prefix else str(path)), str(path)


def _render_quietly(path: Path, t: Any, v: Any, details: dict[str, float], title: str, alert: str,
                    ylabel: str = "", worker: PlotWorker | None = None) -> Path | None:
    try:
        if worker is None:
            return render_fit(path, t, v, details, title, ylabel)
        png = worker.render(t, v, details, title, ylabel)  # logs and counts its own failures
        return None if png is None else write_png(path, png)
    except Exception as exc:  # a plot failure must not lose the alert
        log.warning("plot for %s failed: %s", alert, exc)
        return None
