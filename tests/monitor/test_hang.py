"""Hangs (issue 32): a verl step running past max(4 min, 3x its own median) is paged (TrainingStalled, P0)
live from the JSONL tail on a simulated clock and in ``replay`` of a finished log, within 5 min of its start
at 60-s steps -- a step that may validate or save, before the run has shown when it does, within 9 min:
before NCCL's own 600 s timeout; a normal finish, a slow healthy run and the run's first steps page nothing."""

from __future__ import annotations

import io
import json
import math
import os
from datetime import datetime
from pathlib import Path

import pytest

from alerting.clock import SimulatedClock
from monitor.detectors.hang import StepOverrunDetector
from monitor.evaluation.rules import load_rule_files
from monitor.pipeline import Pipeline
from monitor.replay import replay
from monitor.sources.tail_state import OffsetStore
from monitor.sources.verl_jsonl import IN_PROGRESS, JsonlTail, RunLiveness, in_progress

T0 = 1_767_225_600.0
NCCL_TIMEOUT_S = 600.0  # actor_rollout_ref.nccl_timeout's default


def record(step: int, step_s: float, update_actor_s: float | None = None) -> bytes:
    """One verl ``file`` logger line (0.9 layout: save_checkpoint inside the step timer)."""
    actor = update_actor_s if update_actor_s is not None else 0.2 * step_s
    data = {"timing_s/gen": 0.5 * step_s, "timing_s/update_actor": actor, "timing_s/step": step_s - 0.2 * step_s + actor,
            "critic/score/mean": 0.5, "actor/entropy": 0.6, "actor/pg_loss": 0.01,
            "actor/perf/max_memory_allocated_gb": 40.0, "training/global_step": step}
    return json.dumps({"step": step, "data": data}).encode() + b"\n"


def test_detector_pages_past_max_floor_and_ratio_of_the_median_then_clears() -> None:
    det = StepOverrunDetector(ratio=3.0, min_s=300.0, min_steps=5)
    t = 0.0
    for _ in range(8):  # 60-s steps, sampled every 10 s
        for k in range(6):
            assert not det.update(t + 10.0 * k, 10.0 * k).active
        t += 60.0
    assert not det.update(t + 290.0, 290.0).active  # under the 5-min floor (3 x 60 s = 180 s is below it)
    f = det.update(t + 310.0, 310.0)
    assert f.active and f.details["median_s"] == 60.0 and f.details["threshold_s"] == 300.0
    assert round(f.details["ratio"], 1) == 5.2
    assert not det.update(t + 1800.0, 0.0).active  # the step ended: a new one began


def test_detector_scales_with_slow_steps_and_waits_for_the_run_to_have_steps() -> None:
    det = StepOverrunDetector(ratio=3.0, min_s=300.0, min_steps=5)
    assert not det.update(5000.0, 5000.0).active  # no step seen yet: not a hang it can judge
    det.reset()
    t = 0.0
    for _ in range(6):  # 20-min steps
        det.update(t, 0.0)
        t += 1200.0
    det.update(t, 0.0)
    assert not det.update(t + 3000.0, 3000.0).active  # 2.5 steps: a slow step, not a hang
    assert det.update(t + 3700.0, 3700.0).active       # past 3 median steps


def _live(tmp_path: Path, lines: list[bytes], times: list[float], total_steps: int | None,
          writer_closes: bool, until: float, resolved_config: Path | None = None) -> list[tuple[float, dict]]:
    """Write each line at its time (mtime = its time), poll every 30 s of simulated time into the default
    rules; the (time, record) of every alert transition."""
    path = tmp_path / "run.jsonl"
    clock = SimulatedClock(times[0] - 60.0)
    events: list[tuple[float, dict]] = []
    pipe = Pipeline(load_rule_files(None), clock,
                    on_record=lambda r: events.append((clock.now(), r)) if r.get("kind") == "alert" else None)
    closed = {"v": False}
    tail = JsonlTail(path, "gpu-1", offsets=OffsetStore(tmp_path / "offsets.json"),
                     liveness=RunLiveness(total_steps, writer_open=lambda: not closed["v"]),
                     resolved_config=resolved_config)
    fh = path.open("wb")

    def poll(now: float) -> None:
        clock.set(now)
        pipe.ingest(tail.poll(now).samples, "jsonl")
        pipe.tick()

    now = clock.now()
    for line, t in zip(lines, times, strict=True):
        while now + 30.0 < t:
            now += 30.0
            poll(now)
        fh.write(line)
        fh.flush()
        os.utime(path, (t, t))
        now = t
        poll(now)
    if writer_closes:
        fh.close()
        closed["v"] = True
    while now < until:
        now += 30.0
        poll(now)
    if not fh.closed:
        fh.close()
    tail.close()
    pipe.close()
    return events


def _fired(events: list[tuple[float, dict]], name: str) -> list[tuple[float, str, dict]]:
    return [(t, r["status"], r) for t, r in events if r["labels"]["alertname"] == name]


@pytest.mark.parametrize(("hang_at", "bound_s"), [(33, 240.0), (30, 540.0)])
def test_live_hang_in_update_actor_is_paged_before_the_nccl_timeout_and_resolves_when_the_step_ends(
        tmp_path: Path, hang_at: int, bound_s: float) -> None:
    # step 30 is a multiple of 5: it may be the run's first validation or checkpoint, whose length the run
    # has not shown yet (monitor/sources/verl_gaps.py): 5 min more, still under NCCL's timeout
    step_s = 60.0
    times, lines, t = [], [], T0
    for step in range(1, 41):
        actor = 1800.0 if step == hang_at else None  # a 30-min hang inside update_actor
        line = record(step, step_s, actor)
        t += json.loads(line)["data"]["timing_s/step"]
        times.append(t)
        lines.append(line)
    events = _live(tmp_path, lines, times, total_steps=40, writer_closes=True, until=times[-1] + 3600.0)
    stalls = _fired(events, "TrainingStalled")
    assert [s for _, s, _ in stalls] == ["firing", "resolved"], stalls
    began = times[hang_at - 2]  # the last record before the hung step
    fired_at, _, rec = stalls[0]
    assert began + bound_s < fired_at <= began + bound_s + 30.0 < began + NCCL_TIMEOUT_S
    summary = rec["annotations"]["summary"]
    assert f"running for {int(bound_s // 60)}" in summary and "its median step of 60 s" in summary, summary
    assert "actor_rollout_ref.nccl_timeout" in rec["annotations"]["runbook"]
    assert stalls[1][0] >= times[hang_at - 1]  # resolved once the hung step's record arrived
    # the log's liveness says the same 10+ min later (no new step for max(10 min, 3 steps))
    down = _fired(events, "TrainerDown")
    assert down and down[0][0] > max(fired_at, began + 600.0)
    assert not [e for e in events if e[1]["labels"]["severity"] in ("P0", "P1", "P2")
                and e[1]["labels"]["alertname"] not in ("TrainingStalled", "TrainerDown")]


def test_live_normal_finish_and_a_run_that_grows_its_step_time_page_no_hang(tmp_path: Path) -> None:
    times, lines, t = [], [], T0
    for step in range(1, 61):
        step_s = 60.0 * (1.0 + step / 30.0)  # steps grow 60 s -> 180 s with the responses
        line = record(step, step_s)
        t += json.loads(line)["data"]["timing_s/step"]
        times.append(t)
        lines.append(line)
    # total_steps unknown: the finish is known from the writer closing the file (verl's FileLogger.finish)
    events = _live(tmp_path, lines, times, total_steps=None, writer_closes=True, until=times[-1] + 7200.0)
    assert _fired(events, "TrainingStalled") == []
    assert [e for e in events if e[1]["labels"]["severity"] in ("P0", "P1", "P2")] == []


def test_in_progress_samples_fill_the_gaps_of_a_finished_log() -> None:
    samples = in_progress([0.0, 60.0, 200.0], "n")
    assert {s.name for s in samples} == {IN_PROGRESS}
    assert [(s.t, s.value) for s in samples] == [(0.0, 0.0), (30.0, 30.0), (60.0, 0.0), (90.0, 30.0), (120.0, 60.0),
                                                 (150.0, 90.0), (180.0, 120.0), (200.0, 0.0)]
    assert len(in_progress([0.0, 86400.0 * 3], None)) <= 242  # a days-long gap stays bounded


def _replay_alerts(path: Path) -> list[dict]:
    out = io.StringIO()
    replay(path, load_rule_files(None), out)
    return [r for r in map(json.loads, out.getvalue().splitlines()) if r.get("kind") == "alert"]


def test_replay_pages_a_gap_inside_a_finished_log_where_the_live_tail_would_have(tmp_path: Path) -> None:
    log = tmp_path / "hung.jsonl"
    lines = [record(step, 60.0, 1800.0 if step == 33 else None) for step in range(1, 41)]
    log.write_bytes(b"".join(lines))
    os.utime(log, (T0, T0))
    alerts = _replay_alerts(log)
    stalls = [r for r in alerts if r["labels"]["alertname"] == "TrainingStalled"]
    assert [r["status"] for r in stalls] == ["firing", "resolved"], stalls
    # records carry no time: replay times them back from the file's mtime by their timers, so the hung
    # step's record lies 1800 + 48 s after its predecessor and the page 4 min after that predecessor
    assert "x its median step of 60 s" in stalls[0]["annotations"]["summary"]
    began = T0 - 7 * 60.0 - (1800.0 + 0.8 * 60.0)  # steps 34-40 after the hung one, then the hung step
    fired = datetime.fromisoformat(stalls[0]["firedAt"].replace("Z", "+00:00")).timestamp()
    assert began + 240.0 < fired <= began + 270.0 + 5.0  # a tick at most every 30 s of the gap (and 5 s)
    assert not [r for r in alerts if r["labels"]["severity"] in ("P0", "P1", "P2")
                and r["labels"]["alertname"] != "TrainingStalled"]

    healthy = tmp_path / "healthy.jsonl"
    healthy.write_bytes(b"".join(record(step, 60.0) for step in range(1, 41)))
    assert [r for r in _replay_alerts(healthy) if r["labels"]["severity"] in ("P0", "P1", "P2")] == []


def test_running_is_none_once_the_run_finished_or_its_writer_closed() -> None:
    open_ = {"v": True}
    live = RunLiveness(None, writer_open=lambda: open_["v"], check_every_s=0.0)
    assert live.running(100.0, 50.0) is None  # nothing arrived yet
    live.observe(100.0, 1.0, [60.0])
    live.up(100.0)
    assert live.running(400.0, 100.0) == 300.0
    open_["v"] = False
    assert live.running(460.0, 100.0) is None  # verl's FileLogger.finish closed the file: a normal end
    done = RunLiveness(10, writer_open=lambda: True)
    done.observe(100.0, 10.0, [60.0])
    done.up(100.0)
    assert done.running(1000.0, 100.0) is None  # the last step was logged


def test_heartbeat_mode_judges_our_trainer_against_its_own_step_time() -> None:
    """Our trainer's TrainingStalled: the heartbeat is the time the last step ended; 5 min before steps are
    known (a trainer stuck in its first step), then max(5 min, 3x the median step) -- 20-min steps are not
    stalled 5 min into a step."""
    det = StepOverrunDetector(ratio=3.0, min_s=300.0, min_steps=5, value="timestamp", before_steps_s=300.0)
    assert not det.update(100.0, 0.0).active         # never beat yet: counted from the first sample
    assert det.update(401.0, 0.0).active              # stuck in the first step for 5 min
    det.reset()
    beat = 1000.0
    for _ in range(7):  # 20-min steps, scraped every minute
        for k in range(20):
            det.update(beat + 60.0 * k + 1.0, beat)
        beat += 1200.0
    assert not det.update(beat + 1800.0, beat).active  # 30 min into a 20-min-step run: 1.5 steps
    f = det.update(beat + 3700.0, beat)
    assert f.active and f.details["median_s"] == 1200.0
    with pytest.raises(ValueError, match="elapsed' or 'timestamp"):
        StepOverrunDetector(value="age")


def test_a_monitor_restarted_during_a_hang_still_pages_it_from_the_records_before_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    offsets = OffsetStore(tmp_path / "offsets.json")
    t, times = T0, []
    with path.open("wb") as fh:
        for step in range(1, 31):
            t += 60.0
            fh.write(record(step, 75.0))  # timing_s/step 60 s
            fh.flush()
            os.utime(path, (t, t))
            times.append(t)
        first = JsonlTail(path, "gpu-1", offsets=offsets, liveness=RunLiveness(100, writer_open=lambda: True))
        first.poll(t + 120.0)  # the first monitor saw the run 2 min into its hang, then stopped
        first.close()
        clock = SimulatedClock(t + 180.0)
        fired: list[float] = []
        pipe = Pipeline(load_rule_files(None), clock, on_record=lambda r: fired.append(clock.now()) if (
            r.get("kind") == "alert" and r["status"] == "firing" and r["labels"]["alertname"] == "TrainingStalled") else None)
        tail = JsonlTail(path, "gpu-1", offsets=offsets, liveness=RunLiveness(100, writer_open=lambda: True))
        for now in range(int(t + 180.0), int(t + 420.0), 30):
            clock.set(float(now))
            pipe.ingest(tail.poll(float(now)).samples, "jsonl")
            pipe.tick()
        tail.close()
        pipe.close()
    assert fired and t + 240.0 < fired[0] <= t + 270.0


def test_a_resumed_run_loading_its_checkpoint_is_not_hung(tmp_path: Path) -> None:
    """verl truncates its log on a restart ("w"): until the resumed run's first record nothing is judged,
    however long the model and checkpoint take to load."""
    path = tmp_path / "run.jsonl"
    tail = JsonlTail(path, "gpu-1", liveness=RunLiveness(None, writer_open=lambda: True))
    t = T0
    with path.open("wb") as fh:
        for step in range(1, 21):
            t += 60.0
            fh.write(record(step, 75.0))
            fh.flush()
            os.utime(path, (t, t))
            tail.poll(t)
    path.write_bytes(b"")  # the resumed trainer opened the log again
    os.utime(path, (t + 30.0, t + 30.0))
    polled = [tail.poll(t + 30.0 * k) for k in range(2, 40)]  # 20 min of model and checkpoint loading
    assert not [s for b in polled for s in b.samples if s.name == IN_PROGRESS]
    with path.open("ab") as fh:
        fh.write(record(15, 75.0))  # resumed from the step-15 checkpoint: steps repeat
    os.utime(path, (t + 1230.0, t + 1230.0))
    assert [s.value for s in tail.poll(t + 1240.0).samples if s.name == IN_PROGRESS] == [0.0, 10.0]
    tail.close()


def test_a_buffered_writer_quiet_between_its_bursts_is_not_hung(tmp_path: Path) -> None:
    """verl 0.6-0.7 write through an 8 KB buffer: four 100-s steps land at once every 400 s. The hang rule
    learns the gaps between writes, not the steps, so the quiet between bursts pages nothing; a real hang
    (no burst for 3 of those gaps) still does."""
    def record_07(step: int) -> bytes:
        data = {"timing_s/gen": 50.0, "timing_s/update_actor": 20.0, "timing_s/step": 100.0,
                "perf/max_memory_allocated_gb": 40.0, "critic/score/mean": 0.5, "training/global_step": step}
        return json.dumps({"step": step, "data": data}).encode() + b"\n"

    bursts, times, t = [], [], T0
    for first in range(1, 61, 4):
        t += 400.0
        bursts.append(b"".join(record_07(s) for s in range(first, first + 4)))
        times.append(t)
    events = _live(tmp_path, bursts, times, total_steps=100, writer_closes=False, until=times[-1] + 1500.0)
    stalls = _fired(events, "TrainingStalled")
    assert len(stalls) == 1 and stalls[0][1] == "firing"
    assert times[-1] + 1200.0 < stalls[0][0] <= times[-1] + 1260.0  # 3 write gaps after the last burst


def test_a_run_whose_steps_slow_down_is_judged_by_its_new_pace() -> None:
    """A healthy cadence change (steps 60 s -> 150 s: longer responses, a slower node) pages nothing: after
    5 of the new steps the bound is 3 x 150 s, not 3 x the 60 s that 32 older steps still say."""
    det = StepOverrunDetector(ratio=3.0, min_s=300.0, min_steps=5)
    t = 0.0
    for step_s in [60.0] * 32 + [150.0] * 6:
        det.update(t, 0.0)
        t += step_s
    det.update(t, 0.0)
    assert not det.update(t + 420.0, 420.0).active  # 2.8 of the new steps
    assert det.update(t + 460.0, 460.0).active


def _run_of(step_s: float, steps: int, hang_at: int | None, jitter: float) -> tuple[list[bytes], list[float]]:
    times, lines, t = [], [], T0
    for step in range(1, steps + 1):
        own = step_s * (1.0 + jitter * math.sin(1.7 * step))  # deterministic +-jitter
        line = record(step, own, 1800.0 if step == hang_at else None)
        t += json.loads(line)["data"]["timing_s/step"]
        times.append(t)
        lines.append(line)
    return lines, times


@pytest.mark.parametrize("config", [True, False])
def test_a_hang_at_200_s_steps_pages_before_the_nccl_timeout_the_resolved_config_gives(
        tmp_path: Path, config: bool) -> None:
    """3 median steps of a 200-s run is 600 s: NCCL's default timeout, when a hung collective has already
    aborted the job. With actor_rollout_ref.nccl_timeout from the run's resolved config, the page comes
    90 s before it (the run's longest step x 1.25 ends well before); without it, at 3 steps."""
    lines, times = _run_of(200.0, 30, hang_at=23, jitter=0.2)
    cfg = tmp_path / "config.yaml"
    cfg.write_text("trainer: {total_training_steps: 30}\nactor_rollout_ref: {nccl_timeout: 600}\n")
    events = _live(tmp_path, lines, times, total_steps=30, writer_closes=True, until=times[-1] + 600.0,
                   resolved_config=cfg if config else None)
    stalls = [(t, r) for t, s, r in _fired(events, "TrainingStalled") if s == "firing"]
    began = times[21]  # the last record before the hung step
    assert stalls
    if config:
        assert began + 510.0 < stalls[0][0] <= began + 540.0 < began + NCCL_TIMEOUT_S
        assert "aborted by NCCL in" in stalls[0][1]["annotations"]["summary"]
    else:
        assert stalls[0][0] > began + NCCL_TIMEOUT_S - 30.0  # 3 median steps: when NCCL aborts the job


@pytest.mark.parametrize(("step_s", "jitter"), [(200.0, 0.5), (450.0, 0.3)])
def test_healthy_runs_with_the_nccl_timeout_known_page_no_hang(tmp_path: Path, step_s: float, jitter: float) -> None:
    """+-50 % jittered 200-s steps stay clear of the timeout; 450-s steps x 1.3 (585 s) come within 90 s of
    it, so the rule is off for them and 3 median steps judge alone."""
    lines, times = _run_of(step_s, 40, hang_at=None, jitter=jitter)
    cfg = tmp_path / "config.yaml"
    cfg.write_text("actor_rollout_ref: {nccl_timeout: 600}\n")
    events = _live(tmp_path, lines, times, total_steps=40, writer_closes=True, until=times[-1] + 600.0,
                   resolved_config=cfg)
    assert [e for e in events if e[1]["labels"]["severity"] in ("P0", "P1", "P2")] == []
