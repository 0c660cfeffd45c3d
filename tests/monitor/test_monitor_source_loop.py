"""The daemon's one source loop: the never-blind rules for any ``Source``, and the sources that are not
covered end to end elsewhere (the dmon command stream)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

import monitor.sources.dmon as dmon_mod
from alerting.clock import Clock
from monitor.config import load_config
from monitor.daemon import Daemon
from monitor.model import Sample, SourceBatch
from monitor.sources.base import DownLabels, Polled, Round, TopPrompts
from monitor.sources.dmon import DmonCommandSource

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def _daemon(tmp_path: Path) -> Daemon:
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"listen": "127.0.0.1:0", "state_db": str(tmp_path / "s.db"),
                                                    "reward_outliers": False}))
    return Daemon(load_config(tmp_path / "m.yaml"))


def _run(d: Daemon, src: object, seconds: float, until: Callable[[], bool] | None = None) -> None:
    """Run ``src``'s loop for ``seconds``, and on past them (up to a minute) until ``until()`` holds: on a
    loaded machine 0.5 s held only two of a 10-ms source's rounds (2026-12-06, load ~10)."""
    async def go() -> None:
        d._stop = asyncio.Event()
        task = asyncio.create_task(d._run_source(src))  # type: ignore[arg-type]
        await asyncio.sleep(seconds)
        for _ in range(1200):
            if until is None or until():
                break
            await asyncio.sleep(0.05)
        d._stop.set()
        task.cancel()  # as run() does at shutdown
        await asyncio.gather(task, return_exceptions=True)
    asyncio.run(go())


class Flaky:
    """Raises in its first round, fails one of two parts in its second, then reads cleanly."""

    name, metric, interval, budget, offset, wait_after = "flaky", "flaky", 0.01, 1.0, 0.0, False
    down = DownLabels("verl", "gpu-01", "127.0.0.1:9")

    def __init__(self) -> None:
        self.rounds = 0
        self.closed = False

    async def poll(self, clock: Clock) -> Round:
        self.rounds += 1
        if self.rounds == 1:
            raise OverflowError("int too large to convert to float")
        batch = SourceBatch("flaky", [Sample("x", {"node": "gpu-01"}, float(self.rounds), clock.now())])
        prompts = [TopPrompts("trainer", None, ("9.5: p1",), clock.now())]
        failures: list[BaseException] = [TimeoutError("part")] if self.rounds == 2 else []
        return Round([Polled(batch)], up=not failures or None, failures=failures, top_prompts=prompts)

    async def close(self) -> None:
        self.closed = True


def test_one_loop_counts_a_failed_round_marks_it_down_and_goes_on(tmp_path: Path) -> None:
    d, src = _daemon(tmp_path), Flaky()
    try:
        _run(d, src, 0.5, until=lambda: src.rounds > 3)
        assert src.rounds > 3 and src.closed
        errors = d.metrics.scrape_errors
        assert errors.labels("flaky", "overflowerror")._value.get() == 1
        assert errors.labels("flaky", "timeouterror")._value.get() == 1  # a failed part, the rest ingested
        (up,) = [s for s in d.pipeline.store if s.name == "up"]
        assert up.labels["instance"] == "127.0.0.1:9" and 0.0 in list(up.window()[1])
        (x,) = [s for s in d.pipeline.store if s.name == "x"]
        # every round after the first stored its x, the one with a failed part too, besides the two `up`
        # marks (x is read by no rule: its ring keeps only its last 20 samples, so count what was ingested)
        ingested = d.metrics.samples_ingested.labels("flaky")._value.get()
        assert ingested == (src.rounds - 1) + len(up) and len(up) == 2 and x.last_v == src.rounds
        assert d.metrics.target_up.labels("flaky")._value.get() == 1  # up again after clean rounds
        assert d._outliers == {"trainer": ["9.5: p1"]}  # the round's records filed for the alerts
        assert "flaky" in d.progress.marks and d.health()["reasons"] == []
    finally:
        d.close()


def test_dmon_command_is_read_line_by_line_restarted_when_it_ends_and_stopped_at_shutdown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dmon_mod, "RESTART_S", 0.05)
    rows = (FIX / "nvidia-smi-dmon-sample.txt").read_text()
    script = tmp_path / "dmon.py"
    runs = tmp_path / "runs"
    script.write_text(f"import sys, time\nopen({str(runs)!r}, 'a').write('run\\n')\n"
                      f"sys.stdout.write({rows!r})\nsys.stdout.flush()\ntime.sleep(0.2 if len(sys.argv) > 1 else 60)\n")
    d = _daemon(tmp_path)
    try:
        ending = DmonCommandSource([sys.executable, str(script), "end"], "gpu-08", 0)
        _run(d, ending, 2.5)
        assert d.metrics.samples_ingested.labels("dmon0")._value.get() == 30  # the fixture's 30 values
        assert runs.read_text().count("run") >= 2 and ending.proc is None  # ended, started again
        hanging = DmonCommandSource([sys.executable, str(script)], "gpu-09", 1)
        _run(d, hanging, 1.5)
        assert d.metrics.samples_ingested.labels("dmon1")._value.get() == 30  # the fixture's 30 values
        assert hanging.proc is None  # terminated at shutdown, not left running
        missing = DmonCommandSource([str(tmp_path / "no-such-binary")], None, 2)
        _run(d, missing, 0.3)
        assert d.metrics.scrape_errors.labels("dmon2", "command_failed")._value.get() == 1
    finally:
        d.close()


def test_dcgm_units_are_converted_on_the_cached_path_too(tmp_path: Path) -> None:
    """A known line skips parsing, not the source edge: its MiB still arrive as bytes."""
    from monitor.sources.prom_text import parse_exposition
    from monitor.sources.relabel import KnownUnits, relabel
    from monitor.sources.scrape_cache import ScrapeCache

    d, cache, units = _daemon(tmp_path), ScrapeCache(), KnownUnits()
    d.intake.caches["dcgm"] = cache
    text = ('# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{{gpu="0"}} {mib}\n'
            '# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{{gpu="0"}} 40\n')
    try:
        now, hits = d.clock.now(), []
        for i, mib in enumerate((100, 200, 300, 400)):
            batch = parse_exposition(text.format(mib=mib), now + i, "dcgm", "n1", {"job": "dcgm"}, cache=cache)
            hits.append(len(batch.known[0]) if batch.known else 0)
            relabel(batch, units)
            d.ingest(batch, "dcgm", now + i)
        assert hits[0] == 0 and hits[-1] == 2  # learnt, then known
        by_name = {s.name: list(s.window()[1]) for s in d.pipeline.store}
        assert by_name["DCGM_FI_DEV_FB_USED"] == [m * 2.0**20 for m in (100, 200, 300, 400)]
        assert by_name["DCGM_FI_DEV_GPU_TEMP"] == [40.0] * 4
    finally:
        d.close()
