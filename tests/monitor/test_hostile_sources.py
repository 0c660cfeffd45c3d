"""Issue 36: no source read may block the loop every source shares. A FIFO (or any non-regular file) as a
log path is refused and the source marked down by name on /healthz, while the other loops go on; a read
that blocks is cut by a deadline; a JSONL line without newline costs bounded memory and is counted."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

import httpx
import pytest

import monitor.sources.verl_jsonl as verl_jsonl
from alerting.clock import SimulatedClock
from monitor.sources.base import ReadDeadline, ThreadedRead
from monitor.sources.dmon import DmonFileSource
from monitor.sources.recorded import InputError, load_recording
from monitor.sources.verl_jsonl import JsonlTail
from tests.monitor.monitor_http import RunningDaemon, Targets, metric, wait_for
from tests.monitor.test_monitor_blind import config


def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


@pytest.mark.timeout(20)
def test_a_fifo_log_path_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    tail = JsonlTail(_fifo(tmp_path, "exp.jsonl"), "n")
    batch = tail.poll(1000.0)  # open() of a FIFO nobody writes used to wait here for ever
    assert batch.errors == {"not_regular_file": 1} and not batch.samples
    assert tail.problem and "FIFO" in tail.problem and "exp.jsonl" in tail.problem


@pytest.mark.timeout(20)
def test_a_fifo_dmon_log_and_replay_input_are_refused(tmp_path: Path) -> None:
    src = DmonFileSource(str(_fifo(tmp_path, "dmon.log")), None, 0)
    got = asyncio.run(src.poll(SimulatedClock(1000.0)))
    assert got.up is False and got.problem and "FIFO" in got.problem
    with pytest.raises(InputError, match="FIFO"):
        load_recording(_fifo(tmp_path, "export.json"))


def test_a_blocking_read_is_cut_by_its_deadline_and_collected_later() -> None:
    release = threading.Event()
    calls = []

    def blocking_read(x: int) -> int:
        calls.append(x)
        release.wait(10)
        return x

    async def scenario() -> tuple[int, int]:
        reader = ThreadedRead(0.2)
        with pytest.raises(ReadDeadline):
            await reader.run(blocking_read, 1)
        with pytest.raises(ReadDeadline):  # still the same read: no second thread piles up
            await reader.run(blocking_read, 2)
        release.set()
        late = await reader.run(blocking_read, 3)  # the read that blocked, once it returns
        fresh = await reader.run(blocking_read, 4)
        return late, fresh

    assert asyncio.run(scenario()) == (1, 4) and calls == [1, 4]


def test_a_line_without_newline_is_skipped_to_its_end_and_counted_once(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verl_jsonl, "MAX_LINE_BYTES", 1 << 20)
    log = tmp_path / "exp.jsonl"
    log.write_bytes(json.dumps({"step": 1, "data": {"actor/entropy": 0.5}}).encode() + b"\n")
    tail = JsonlTail(log, "n", read_limit=1 << 20)
    assert tail.poll(1000.0).samples
    with log.open("ab") as fh:
        fh.write(b'{"step": 2, "data": {"x": "' + b"a" * (5 << 20))  # a 5 MiB line, no newline yet
    errors: dict[str, int] = {}
    for t in range(6):
        for reason, n in tail.poll(1001.0 + t).errors.items():
            errors[reason] = errors.get(reason, 0) + n
        assert len(tail._partial) <= 1 << 20  # memory: at most one line limit held
    assert errors == {"line_too_long": 1}
    with log.open("ab") as fh:
        fh.write(b'"}}\n' + json.dumps({"step": 3, "data": {"actor/entropy": 0.4}}).encode() + b"\n")
    batch = tail.poll(1010.0)
    steps = [s.value for s in batch.samples if s.name == "verl_global_step"]
    assert steps == [3.0] and not batch.errors


@pytest.mark.slow
def test_a_fifo_source_is_down_by_name_on_healthz_and_the_other_loops_go_on(tmp_path: Path) -> None:
    targets = Targets()
    fifo, dmon = _fifo(tmp_path, "exp.jsonl"), _fifo(tmp_path, "dmon.log")
    cfg = config(tmp_path, [{"name": "trainer", "url": f"{targets.url}/good", "interval": "0.2s"}],
                 jsonl=[{"path": str(fifo)}], dmon=[{"path": str(dmon)}])
    d = RunningDaemon(cfg)
    try:
        def health() -> dict:
            return httpx.get(f"{d.url}/healthz", timeout=2).json()

        assert wait_for(lambda: len([r for r in health()["reasons"] if "FIFO" in r]) == 2)
        doc = health()
        assert any(r.startswith("jsonl:exp.jsonl: down") for r in doc["reasons"])
        assert any(r.startswith("dmon0: down") for r in doc["reasons"])
        assert {"jsonl:exp.jsonl", "dmon0"} <= set(doc["sources_down"])
        assert not any("no completed round" in r for r in doc["reasons"])  # every loop still completes
        hits = targets.hits.get("/good", 0)
        assert wait_for(lambda: targets.hits.get("/good", 0) >= hits + 3)  # scraping goes on
        assert metric(d.url, "verl_monitor_scrape_errors_total", target="jsonl:exp.jsonl",
                      reason="not_regular_file")
    finally:
        d.stop()
        targets.close()


@pytest.mark.timeout(20)
def test_a_fifo_as_the_runs_resolved_config_is_counted_not_waited_on(tmp_path: Path) -> None:
    log = tmp_path / "exp.jsonl"
    log.write_bytes(json.dumps({"step": 1, "data": {"actor/entropy": 0.5}}).encode() + b"\n")
    batch = JsonlTail(log, "n", resolved_config=_fifo(tmp_path, "config.yaml")).poll(1000.0)
    assert batch.errors == {"config_unreadable": 1} and batch.samples


@pytest.mark.timeout(20)
def test_a_fifo_as_the_checkpoint_tracker_or_a_file_sd_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    from monitor.sources.file_sd import FileSDConfig, FileSDSource
    from monitor.sources.verl_checkpoints import TRACKER, DirScan, _read_tracker

    _fifo(tmp_path, TRACKER)
    scan = DirScan()
    _read_tracker(str(tmp_path), scan)  # os.open of a FIFO without O_NONBLOCK waited for a writer here
    assert scan.tracker_bad and scan.errors == ["checkpoint_tracker_unreadable"]
    sd = _fifo(tmp_path, "sd.json")
    src = FileSDSource(FileSDConfig((str(sd),), job="ray"), None)  # type: ignore[arg-type]
    got = asyncio.run(src.poll(SimulatedClock(1000.0)))
    assert got.failures or any(p.batch.errors for p in got.polled)
