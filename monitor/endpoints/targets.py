"""What ``/targets`` shows: every source's health, last round, last error and series, like Prometheus'
targets page. The daemon files each round here as it files it into the pipeline (``Daemon._file_round``)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from monitor.sources.base import Round


def address(src: Any) -> str:
    """Where a source reads from: a scrape URL, a file, a Prometheus server, NVML."""
    target = getattr(src, "target", None)
    if target is not None and getattr(target, "url", None):
        return str(target.url)
    cfg = getattr(src, "cfg", None)
    if cfg is not None and getattr(cfg, "url", None):
        return str(cfg.url)
    path = getattr(src, "path", None)
    return str(path) if path is not None else src.metric


def kind(src: Any) -> str:
    name = type(src).__name__
    return {"ScrapeSource": "scrape", "PromQuerySource": "prometheus query", "NvmlSource": "NVML",
            "DmonFileSource": "dmon file", "DmonCommandSource": "dmon", "RewardOutlierSource": "reward outliers",
            }.get(name, "verl log" if "jsonl" in src.name or "Verl" in name else name)


@dataclass
class SourceState:
    name: str
    kind: str
    address: str
    metric: str
    health: str = "unknown"          # up / down / unknown (no round yet)
    last_round: float | None = None  # wall time
    duration: float | None = None
    error: str = ""
    samples: int = 0                 # samples the last round read
    batch_sources: set[str] = field(default_factory=set)  # whose series budget its samples use


class SourceBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.states: dict[str, SourceState] = {}

    def add(self, src: Any) -> None:
        with self._lock:
            self.states[src.name] = SourceState(src.name, kind(src), address(src), src.metric)

    def took(self, src: Any, got: Round) -> None:
        with self._lock:
            st = self.states.get(src.name)
            if st is None:
                return
            st.last_round, st.duration = time.time(), got.duration
            st.samples = sum(len(p.batch.samples) + (len(p.batch.known[0]) if p.batch.known else 0) for p in got.polled)
            st.batch_sources |= {p.source or p.batch.source for p in got.polled}
            if got.failures:
                st.health, st.error = "down", _one_line(got.failures[-1])
            elif got.up is not None:
                st.health = "up" if got.up else "down"
                rejected = sorted({r for p in got.polled for r in p.batch.errors})
                st.error = "" if got.up else (", ".join(rejected) or st.error)
            elif got.polled and st.health == "unknown":
                st.health = "up"

    def failed(self, src: Any, exc: BaseException) -> None:
        with self._lock:
            st = self.states.get(src.name)
            if st is not None:
                st.last_round, st.health, st.error = time.time(), "down", _one_line(exc)

    def rows(self, series_held: Any) -> list[dict[str, Any]]:
        """``series_held(source)``: the store's series count of a source (``SeriesStore.held_by``)."""
        with self._lock:
            states = list(self.states.values())
        return [{"name": s.name, "kind": s.kind, "address": s.address, "health": s.health,
                 "last_round": s.last_round, "duration": s.duration, "error": s.error, "samples": s.samples,
                 "series": sum(series_held(b) for b in (s.batch_sources or {s.metric})),
                 "sources": sorted(s.batch_sources or {s.metric})} for s in states]


def _one_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:300] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
