"""verl's checkpoint directory beside its JSONL log (issue 33.5): the layout verl 0.9.1 writes (finish
markers, the tracker), a bounded scan that never follows symlinks nor blocks the loop, and the three pages
on a live log tailed by the daemon: a stale tracker, a step gone back, a save far over its usual time."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from monitor_http import RunningDaemon, metric, wait_for

from benchmarks.verl_runs import LiveWriter, RunSpec, generate
from monitor.config import MonitorConfigError, load_config
from monitor.model import Sample, SourceBatch
from monitor.sources import verl_checkpoints as vc
from monitor.sources.verl_checkpoints import CheckpointWatch, finish_time, scan_dir


def save(root: Path, step: int, *, tracker: bool = True, finished: bool = True, megatron: bool = False,
         at: float | None = None) -> Path:
    """One save as verl 0.9.1 lays it out (FSDP shards, or Megatron's v2 layout with its manifest)."""
    d = root / f"global_step_{step}"
    actor = d / "actor"
    if megatron:
        for part in ("model", "optimizer", "extra"):
            (actor / part / "dist_ckpt").mkdir(parents=True, exist_ok=True)
    else:
        (actor / "huggingface").mkdir(parents=True, exist_ok=True)
        (actor / "model_world_size_2_rank_0.pt").write_bytes(b"x" * 64)
    if finished:
        (d / "data.pt").write_bytes(b"d")
        if megatron:
            (actor / "ckpt_contents.json").write_text("{}")
        if tracker:
            (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    if at is not None:
        for p in [d, *d.rglob("*")]:
            os.utime(p, (at, at), follow_symlinks=False)
    return d


def poll_until_scanned(w: CheckpointWatch, now: float) -> SourceBatch:
    """The series of a scan started after this call (a scan still running from before is waited out:
    it may have read the directory before the test changed it). A "hung" report is not a scan: a test's
    jump of ``now`` past the watch's hung_after_s, while that earlier scan still runs on a loaded machine,
    reports one, and the earlier scan's stale series would then come back as this call's."""
    def scanned(batch: SourceBatch) -> bool:
        return bool(batch.samples) or any(reason != "checkpoint_dir_hung" for reason in batch.errors)

    batch = SourceBatch("t")
    for _ in range(2):
        batch = SourceBatch("t")
        w.poll(now, batch)  # hands back a finished scan and starts the next one
        deadline = time.monotonic() + 5
        while not scanned(batch) and time.monotonic() < deadline:
            time.sleep(0.01)
            w.poll(now, batch)
    return batch


def values(batch: SourceBatch) -> dict[str, float]:
    return {s.name: s.value for s in batch.samples}


def test_finish_markers_follow_verl_layouts(tmp_path: Path) -> None:
    assert finish_time(str(save(tmp_path, 10))) is not None
    assert finish_time(str(save(tmp_path, 20, finished=False))) is None  # shards written, no data.pt yet
    meg = save(tmp_path, 30, megatron=True, finished=False)
    (meg / "data.pt").write_bytes(b"d")  # async Megatron: data.pt comes before the writes finish
    assert finish_time(str(meg)) is None
    (meg / "actor" / "ckpt_contents.json").write_text("{}")
    assert finish_time(str(meg)) is not None


def test_scan_is_bounded_and_never_follows_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    outside = tmp_path / "elsewhere"
    save(outside, 99)
    (root / "global_step_99").symlink_to(outside / "global_step_99")
    for s in range(1, 41):
        save(root, s, tracker=False, finished=s <= 2)
    scan = scan_dir(str(root), {})
    assert 99 not in scan.steps and len(scan.steps) == 40
    assert scan.finished == {}  # only the newest CANDIDATES_PER_SCAN are probed: 40..25 are unfinished
    assert max(scan_dir(str(root), {2: 1.0}).finished) == 2  # an earlier scan's knowledge ends the walk
    (root / "latest_checkpointed_iteration.txt").symlink_to(outside / "latest_checkpointed_iteration.txt")
    bad = scan_dir(str(root), {})
    assert bad.tracker is None and "checkpoint_tracker_symlink" in bad.errors


def test_stale_tracker_counts_the_steps_an_auto_resume_would_lose(tmp_path: Path) -> None:
    now = time.time()
    save(tmp_path, 10, at=now - 600)
    save(tmp_path, 20, tracker=False, at=now - 30)  # async_save: the tracker still says 10
    w = CheckpointWatch(tmp_path, "gpu-08", scan_every_s=0.0)
    v = values(poll_until_scanned(w, now))
    assert v["verl_checkpoint_latest_step"] == 20 and v["verl_checkpoint_resume_step"] == 10
    assert v["verl_checkpoint_resume_steps_lost"] == 0  # within the grace: the tracker may be the next write
    v = values(poll_until_scanned(w, now + vc.TRACKER_GRACE_S))
    assert v["verl_checkpoint_resume_steps_lost"] == 10
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("20")
    assert values(poll_until_scanned(w, now + 100))["verl_checkpoint_resume_steps_lost"] == 0
    # a tracker naming a directory that is gone, or garbage: verl trains from step 0
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("15")
    assert values(poll_until_scanned(w, now + 110))["verl_checkpoint_resume_steps_lost"] == 20
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10")
    assert values(poll_until_scanned(w, now + 112))["verl_checkpoint_resume_step"] == 10
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("")  # verl between open("w") and write()
    batch = poll_until_scanned(w, now + 115)
    assert values(batch)["verl_checkpoint_resume_step"] == 10 and not batch.errors  # the last value holds
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("twenty")
    batch = poll_until_scanned(w, now + 120)
    assert values(batch)["verl_checkpoint_resume_step"] == 0 and batch.errors["checkpoint_tracker_unreadable"] == 1


def test_a_run_below_a_checkpoint_from_before_it_started_is_behind(tmp_path: Path) -> None:
    now = time.time()
    save(tmp_path, 20, at=now - 5)
    w = CheckpointWatch(tmp_path, None, scan_every_s=0.0)
    # this run's own save of step 20, its log buffered (0.6-0.7: 8 KB flushes) six records behind
    w.observe_log([Sample("verl_global_step", {}, float(s), now - 100 + s) for s in range(1, 15)])
    assert values(poll_until_scanned(w, now))["verl_checkpoint_steps_ahead_of_run"] == 0
    w.observe_log([Sample("verl_global_step", {}, 2.0, now)])  # a relaunch that started over
    assert values(poll_until_scanned(w, now))["verl_checkpoint_steps_ahead_of_run"] == 17
    w.observe_log([Sample("verl_global_step", {}, 21.0, now + 1)])  # a relaunch that resumed
    assert values(poll_until_scanned(w, now))["verl_checkpoint_steps_ahead_of_run"] == 0


def test_a_save_far_over_its_usual_time_is_overdue_and_a_crashed_one_is_not(tmp_path: Path) -> None:
    now = time.time()
    save(tmp_path, 10, at=now - 900)
    save(tmp_path, 20, finished=False, at=now - 300)
    w = CheckpointWatch(tmp_path, None, scan_every_s=0.0)
    w.observe_log([Sample("verl_stage_seconds", {"stage": "checkpoint"}, v, 0.0) for v in (40.0, 50.0, 60.0)])
    w.observe_log([Sample("verl_global_step", {}, 19.0, 0.0)])
    v = values(poll_until_scanned(w, now))
    assert v["verl_checkpoint_save_seconds"] == pytest.approx(300, abs=2)
    assert v["verl_checkpoint_save_overdue_ratio"] == pytest.approx(6.0, abs=0.1)
    # what the save wrote so far (one 64-byte shard) and how long since its last write
    assert v["verl_checkpoint_save_bytes"] == 64 and v["verl_checkpoint_save_idle_seconds"] == pytest.approx(300, abs=2)
    w.observe_log([Sample("verl_global_step", {}, 11.0, 0.0)])  # relaunched from 10: step 20's dir was a crash
    assert values(poll_until_scanned(w, now))["verl_checkpoint_save_overdue_ratio"] == 0


def test_a_hung_file_system_never_blocks_the_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(vc, "scan_dir", lambda root, known: (release.wait(30), vc.DirScan())[1])
    w = CheckpointWatch(tmp_path, None, scan_every_s=0.0, hung_after_s=1.0)
    batch = SourceBatch("t")
    for now in (0.0, 0.5, 2.0, 3.0, 4.0):
        w.poll(now, batch)
    # five polls came back while the scan still hangs (a poll that waited for it would have consumed it)
    assert not release.is_set() and batch.samples == []
    assert batch.errors == {"checkpoint_dir_hung": 1}  # counted once, not every poll
    release.set()
    w.close()


def _config(tmp: Path, log: Path, ckpt: Path) -> Path:
    cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp / "state" / "state.db"), "eval_interval": "0.2s",
           "reward_outliers": False,
           "jsonl": [{"path": str(log), "node": "gpu-08", "checkpoint_dir": str(ckpt), "down_after": "1h",
                      "export": True}]}
    path = tmp / "monitor.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_checkpoint_dir_is_a_jsonl_option(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, tmp_path / "x.jsonl", tmp_path / "ckpt"))
    assert cfg.jsonl[0].checkpoint_dir == str(tmp_path / "ckpt")
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"jsonl": [{"path": "x.jsonl", "checkpoint_dir": 3}]}))
    with pytest.raises(MonitorConfigError, match=r"jsonl\[0\]\.checkpoint_dir"):
        load_config(tmp_path / "bad.yaml")


def _firing(url: str, name: str) -> list[dict]:
    return [a for a in httpx.get(f"{url}/api/v1/alerts").json()["data"]
            if a["labels"]["alertname"] == name and a["state"] == "firing"]


@pytest.mark.slow
def test_live_log_pages_a_stale_tracker_and_a_step_gone_back(tmp_path: Path) -> None:
    """The daemon tails a verl 0.9 log being written while the run saves every 5 steps without updating the
    tracker (async_save), then is relaunched from step 1 over its checkpoints."""
    ckpt, log = tmp_path / "ckpt", tmp_path / "exp.jsonl"
    ckpt.mkdir()
    records, _ = generate(RunSpec(version="0.9", algo="grpo", steps=40, step_s=1.0))
    writer = LiveWriter(log, "0.9")
    d = RunningDaemon(_config(tmp_path, log, ckpt))
    try:
        for r in records[:12]:
            if r["step"] == 5:  # a save that did update the tracker
                save(ckpt, 5)
            writer.log(r, time.time())
            time.sleep(0.05)
        assert wait_for(lambda: metric(d.url, "verl_global_step", node="gpu-08") == 12, timeout=30)
        # global_step_10's async save finishes after the run moved on, its tracker never written; it finished
        # 2 minutes ago as far as the directory says (past the grace without waiting for it)
        save(ckpt, 10, tracker=False, at=time.time() - 2 * vc.TRACKER_GRACE_S)
        assert wait_for(lambda: bool(_firing(d.url, "CheckpointTrackerStale")), timeout=30)
        page = _firing(d.url, "CheckpointTrackerStale")[0]
        assert page["labels"]["node"] == "gpu-08" and "restart 5 steps back" in page["annotations"]["summary"]
        assert not _firing(d.url, "TrainingStepRegressed")
        relaunch = LiveWriter(log, "0.9")  # verl opens its log with "w": the relaunch truncates it
        for r in records[:3]:
            relaunch.log(r, time.time())
            time.sleep(0.05)
        assert wait_for(lambda: bool(_firing(d.url, "TrainingStepRegressed")), timeout=30)
        page = _firing(d.url, "TrainingStepRegressed")[0]
        assert "6 steps behind" in page["annotations"]["summary"]  # newest 10, record 3: 10 - 1 - 3
    finally:
        d.stop()


def test_save_slow_rule_pages_an_overdue_save_only() -> None:
    from monitor_scenarios import firing, run

    t = np.arange(0.0, 900.0, 5.0) + 1.7e9
    labels = {"job": "verl_jsonl", "node": "gpu-08"}
    overdue = np.where(t - t[0] >= 300, (t - t[0] - 200) / 30.0, 0.0)  # a save running on, 30 s usual
    hits = firing(run([("verl_checkpoint_save_overdue_ratio", labels, t, overdue)]), "CheckpointSaveSlow")
    assert len(hits) == 1 and hits[0]["labels"]["node"] == "gpu-08"
    usual = np.where((t - t[0]) % 300 < 60, 2.0, 0.0)  # saves that end within 2x their usual time
    assert firing(run([("verl_checkpoint_save_overdue_ratio", labels, t, usual)]), "CheckpointSaveSlow") == []


def test_only_a_save_watched_from_its_start_teaches_the_usual_time(tmp_path: Path) -> None:
    now = time.time()
    save(tmp_path, 10, at=now - 50)  # finished before the monitor looked: its duration is unknown
    w = CheckpointWatch(tmp_path, None, scan_every_s=0.0)
    poll_until_scanned(w, now)
    assert w.usual_save_s() is None
    save(tmp_path / "staging", 20, finished=False, at=now - 100)  # appears at once, as a scan may run now
    os.rename(tmp_path / "staging" / "global_step_20", tmp_path / "global_step_20")
    w.observe_log([Sample("verl_global_step", {}, 19.0, 0.0)])
    poll_until_scanned(w, now)
    # the last file lands whole, already stamped (the poll above started a scan that may run meanwhile: a
    # file written, then re-stamped, could be seen with the wrong time)
    (tmp_path / "staging" / "data.tmp").write_bytes(b"d")
    os.utime(tmp_path / "staging" / "data.tmp", (now - 10, now - 10))
    os.rename(tmp_path / "staging" / "data.tmp", tmp_path / "global_step_20" / "data.pt")
    poll_until_scanned(w, now)
    assert w.usual_save_s() == pytest.approx(90, abs=1)


def test_a_failing_scan_is_counted_and_the_batch_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(root: str, known: dict) -> vc.DirScan:
        raise RuntimeError("boom")

    monkeypatch.setattr(vc, "scan_dir", broken)
    w = CheckpointWatch(tmp_path, None, scan_every_s=0.0)
    batch = SourceBatch("t", [Sample("verl_global_step", {}, 3.0, 1.0)])
    w.poll(0.0, batch)
    deadline = time.monotonic() + 5
    while not batch.errors and time.monotonic() < deadline:
        time.sleep(0.01)
        w.poll(0.0, batch)
    assert batch.errors == {"checkpoint_dir_error": 1} and len(batch.samples) == 1


def test_a_finished_save_far_over_the_run_s_median_pages_from_the_log_alone() -> None:
    from monitor_scenarios import firing, run

    t = np.arange(0.0, 12 * 1200.0, 1200.0) + 1.7e9  # one save every 20 min (save_freq)
    labels = {"job": "verl_jsonl", "node": "gpu-08", "stage": "checkpoint"}
    rng = np.random.default_rng(1)
    saves = 60.0 + rng.normal(0, 5, len(t))
    slow = saves.copy()
    slow[9] = 400.0
    hits = firing(run([("verl_stage_seconds", labels, t, slow)]), "CheckpointSaveSlow")
    assert len(hits) == 1 and "took 400 s" in hits[0]["annotations"]["summary"]
    assert firing(run([("verl_stage_seconds", labels, t, saves)]), "CheckpointSaveSlow") == []
    trainer = {"job": "verl", "node": "gpu-08", "stage": "checkpoint"}  # our trainer's: not this rule's
    assert firing(run([("verl_stage_seconds", trainer, t, slow)]), "CheckpointSaveSlow") == []
    # short saves jitter widely on a shared file system: 19 s at ~3.4x a 6-s median is no page (under 60 s more)
    short = np.array([5.2, 4.5, 7.5, 5.7, 9.2, 15.2, 3.8, 19.3, 19.2, 12.9, 17.2, 4.5])  # a healthy corpus run's
    assert firing(run([("verl_stage_seconds", labels, t, short)]), "CheckpointSaveSlow") == []


def test_a_directory_not_there_yet_is_said_once(tmp_path: Path) -> None:
    w = CheckpointWatch(tmp_path / "not-yet", None, scan_every_s=0.0)
    batch = SourceBatch("t")
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # dozens of scans find it missing; one batch collects their reports
        w.poll(0.0, batch)
        time.sleep(0.02)
    assert batch.errors == {"checkpoint_dir_missing": 1}
    save(tmp_path / "not-yet", 5)
    assert values(poll_until_scanned(w, 0.0))["verl_checkpoint_latest_step"] == 5


def test_the_example_config_names_the_checkpoint_dir() -> None:
    cfg = load_config(Path(__file__).resolve().parents[2] / "monitor/examples/verl-run.yaml")
    assert cfg.jsonl[0].checkpoint_dir == "/shared/checkpoints/my_project/exp"
