"""Backtest: the daemon's pipeline over recorded series on simulated time (the data's timestamps)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from alerting.clock import SimulatedClock
from alerting.model import rfc3339
from monitor.evaluation.rules import Rule
from monitor.pipeline import Pipeline
from monitor.sources.recorded import Recording, load_recording

if TYPE_CHECKING:
    from alerting.engine import AlertEngine


@dataclass
class ReplayResult:
    samples: int
    series: int
    alerts: int
    records: int
    malformed: int
    drained: bool = True


def open_engine(notify_config: str | Path, db_path: Path, clock: SimulatedClock,
                on_record: Callable[[dict[str, Any]], None]) -> AlertEngine:
    from alerting.engine import AlertEngine  # only when notifying: the engine's imports are not small

    return AlertEngine.from_file(notify_config, db_path, clock, on_record=on_record)


def feed(pipe: Pipeline, rec: Recording, clock: SimulatedClock, tick_s: float = 5.0,
         engine: AlertEngine | None = None) -> None:
    """Push every sample through ``pipe`` in time order, ticking the simulated clock every ``tick_s`` of
    data time (as the daemon ticks on wall time), and run one last tick at the end of the data.
    ``engine``: the pipeline's, whose timers run as the simulated clock moves."""
    handles = [pipe.series(name, labels) for name, labels in rec.series]
    next_tick = current = float(rec.t[0]) if len(rec) else clock.now()
    for t, sid, v in zip(rec.t.tolist(), rec.sid.tolist(), rec.value.tolist(), strict=True):
        if t > current:
            if current >= next_tick:
                clock.set(current)
                _tick(pipe, engine)
                next_tick = current + tick_s
            current = t
        if handles[sid] is not None:
            pipe.observe(handles[sid], t, v)
    clock.set(max(current, clock.now()))
    _tick(pipe, engine)


def _tick(pipe: Pipeline, engine: AlertEngine | None) -> None:
    pipe.tick()
    if engine is not None:  # simulated time: the replay moves the clock, so it runs the engine's timers
        engine.tick()


def stamp(record: dict[str, Any], now: float, fired_at: dict[str, str]) -> dict[str, Any]:
    """Add when the record happened on the replayed clock: ``firedAt`` on alerts and incidents (when it
    would have fired; ``startsAt`` follows Prometheus and is when the condition began, before any
    ``for``/window), kept on its resolved record; ``at`` on notifications (when it would have paged)."""
    kind, fp = record.get("kind"), str(record.get("fingerprint", ""))
    if kind in ("alert", "incident"):
        if record.get("status") == "firing":
            fired_at.setdefault(fp, rfc3339(now))
            return {**record, "firedAt": fired_at[fp]}
        return {**record, "firedAt": fired_at.pop(fp, rfc3339(None))}
    if kind == "notification":
        return {**record, "at": rfc3339(now)}
    return record


def replay(input_path: str | Path, rules: list[Rule], out: IO[str], node: str | None = None,
           **kwargs: Any) -> ReplayResult:
    return run_recording(load_recording(input_path, node), rules, out, **kwargs)


def run_recording(rec: Recording, rules: list[Rule], out: IO[str], *, plots_dir: Path | None = None,
                  notify_config: str | Path | None = None, cluster: str = "default", tick_s: float = 5.0,
                  drain_s: float = 6 * 3600.0) -> ReplayResult:
    start = float(rec.t[0]) if len(rec) else 0.0
    clock = SimulatedClock(start)
    counts = {"records": 0, "alerts": 0}
    fired_at: dict[str, str] = {}

    def write(record: dict[str, Any]) -> None:
        record = stamp(record, clock.now(), fired_at)
        counts["records"] += 1
        counts["alerts"] += record.get("kind") == "alert"
        out.write(json.dumps(record, ensure_ascii=False) + "\n")

    with tempfile.TemporaryDirectory(prefix="verl-replay-") as tmp:
        engine = open_engine(notify_config, Path(tmp) / "alerting.db", clock, write) if notify_config else None
        pipe = Pipeline(rules, clock, cluster=cluster, plots_dir=plots_dir, engine=engine, on_record=write)
        feed(pipe, rec, clock, tick_s, engine)
        drained = True
        if engine is not None:
            drained = bool(engine.drain(drain_s))
            engine.close()
        pipe.close()
    return ReplayResult(len(rec), len(rec.series), counts["alerts"], counts["records"], rec.malformed, drained)
