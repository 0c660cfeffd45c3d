"""volcengine verl's file-logger JSONL: key map per release, time reconstruction, and a tail that loses
nothing (issue 12.5, issue 14.1-14.2). Records come from benchmarks/verl_runs.py in each release's shape."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.verl_runs import VERSIONS, LiveWriter, RunSpec, encode, generate, write_finished
from monitor.model import SourceBatch
from monitor.sources.recorded import read_records
from monitor.sources.verl_jsonl import JsonlTail, MappedRecord, OffsetStore, RunLiveness
from monitor.sources.verl_keys import map_rl_insight


def _keyed(batch: SourceBatch) -> dict[tuple, list[float]]:
    out: dict[tuple, list[float]] = {}
    for s in batch.samples:
        out.setdefault((s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("node", "job")))),
                       []).append(s.value)
    return out


def _steps(batch: SourceBatch) -> list[tuple[float, float]]:
    return [(s.t, s.value) for s in batch.samples if s.name == "verl_global_step"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_each_release_key_set_maps_with_verl_meanings(version: str, algo: str) -> None:
    records, _ = generate(RunSpec(version=version, algo=algo, steps=12, step_s=60.0))
    batch = SourceBatch("t")
    for i, r in enumerate(records):
        one = SourceBatch("t")
        MappedRecord(json.loads(encode(r, version)), "n").samples(1000.0 + i, one)
        # one sample per series per record: no two verl keys collide on one series
        assert all(len(v) == 1 for v in _keyed(one).values()), [k for k, v in _keyed(one).items() if len(v) > 1]
        batch.samples += one.samples
    got = _keyed(batch)
    kl_source = "reward_kl_penalty" if algo == "ppo" else "kl_loss"
    assert ("verl_kl_divergence", (("source", kl_source),)) in got          # KL to the reference
    assert [k for k in got if k[0] == "verl_kl_divergence"] == [("verl_kl_divergence", (("source", kl_source),))]
    assert ("verl_jsonl_actor_ppo_kl", ()) in got                            # update size, kept apart
    assert [k for k in got if k[0] == "verl_kl_coef"] == [("verl_kl_coef", (("source", kl_source),))]
    assert got[("verl_kl_coef", (("source", kl_source),))][0] == 0.001
    peak = ("verl_gpu_memory_used_bytes", ((("component", "actor"),) if version in ("0.8", "0.9") else ())
            + (("gpu", "torch_max_allocated"), ("stat", "peak")))
    assert peak in got and min(got[peak]) > 30 * 2**30                       # GiB -> bytes, as a peak
    assert np.all(np.diff(got[peak]) >= 0)                                   # peaks only ratchet up
    assert ("verl_actor_tokens_per_second", (("scope", "per_gpu"),)) in got
    stages = {dict(k[1])["stage"] for k in got if k[0] == "verl_stage_seconds"}
    assert {"rollout", "actor_update", "step", "reward", "reference"} <= stages
    assert ({"critic", "critic_values"} <= stages) == (algo == "ppo")        # values and update_critic apart
    assert not any("agent_loop" in str(k) for k in got if k[0] == "verl_stage_seconds")  # counts are not seconds
    if version != "0.6":
        assert ("verl_jsonl_timing_s_agent_loop_generate_sequences_mean", ()) in got
    assert ("verl_reward_std", ()) not in got                                # verl never writes critic/score/std
    assert ("verl_reward_mean", ()) in got and ("verl_global_step", ()) in got
    assert ("verl_jsonl_critic_score_max", ()) in got                        # unknown keys are kept


@pytest.mark.parametrize("version", VERSIONS)
def test_finished_file_backlog_keeps_every_step_at_its_own_time(tmp_path: Path, version: str) -> None:
    f = tmp_path / "run.jsonl"
    _, times = write_finished(f, RunSpec(version=version, algo="grpo", steps=300, step_s=45.0))
    batch, errors = read_records(f)
    steps = _steps(batch)
    assert errors == 0 and [v for _, v in steps] == list(range(1, 301))
    assert np.max(np.abs(np.array([t for t, _ in steps]) - times)) < 1e-6  # the run's spacing, anchored at mtime


def test_bursts_of_records_in_one_poll_each_keep_a_sample(tmp_path: Path) -> None:
    f = tmp_path / "run.jsonl"
    records, times = generate(RunSpec(version="0.7", steps=60, step_s=30.0))
    tail = JsonlTail(f, "n")
    with f.open("wb") as fh:
        for burst in range(6):  # 10 records at a time, as a buffered writer delivers them
            chunk = records[burst * 10:(burst + 1) * 10]
            fh.write(b"".join(encode(r, "0.7") for r in chunk))
            fh.flush()
            t_end = times[burst * 10 + 9]
            os.utime(f, (t_end, t_end))
            tail.poll(t_end + 0.5)
    tail.close()
    tail = JsonlTail(f, "n")  # and once more, from scratch
    steps = _steps(tail.poll(times[-1] + 1))
    assert [v for _, v in steps] == list(range(1, 61))


def test_buffered_writer_live_keeps_all_steps_and_their_spacing(tmp_path: Path) -> None:
    f = tmp_path / "run.jsonl"
    records, times = generate(RunSpec(version="0.6", steps=80, step_s=20.0))
    writer = LiveWriter(f, "0.6")
    tail = JsonlTail(f, "n")
    got: list[tuple[float, float]] = []
    for r, t in zip(records, times, strict=True):
        writer.log(r, float(t))
        got += _steps(tail.poll(float(t) + 0.5))
    writer.close(float(times[-1]) + 1)
    got += _steps(tail.poll(float(times[-1]) + 2))
    assert [v for _, v in got] == list(range(1, 81))
    ts = np.array([t for t, _ in got])
    assert np.all(np.diff(ts) > 0)
    assert np.median(np.abs(ts - times)) < 20.0  # within about one step of the truth


def test_offset_survives_monitor_restart(tmp_path: Path) -> None:
    f, state = tmp_path / "run.jsonl", tmp_path / "jsonl-offsets.json"
    records, times = generate(RunSpec(version="0.8", steps=40, step_s=60.0))
    f.write_bytes(b"".join(encode(r, "0.8") for r in records[:25]))
    os.utime(f, (times[24], times[24]))
    first = JsonlTail(f, "n", offsets=OffsetStore(state))
    seen = _steps(first.poll(times[24] + 1))
    first.close()
    with f.open("ab") as fh:  # written while the monitor was down
        fh.write(b"".join(encode(r, "0.8") for r in records[25:]))
    os.utime(f, (times[-1], times[-1]))
    second = JsonlTail(f, "n", offsets=OffsetStore(state))
    after = _steps(second.poll(times[-1] + 600))
    # the records before the saved offset come again first (the detectors' history, issue 22), at the
    # times the first tail gave them; then the new ones, each at its true time
    assert [v for _, v in seen] == list(range(1, 26)) and [v for _, v in after] == list(range(1, 41))
    assert np.max(np.abs(np.array([t for t, _ in after[:25]]) - np.array([t for t, _ in seen]))) < 1e-6
    assert np.max(np.abs(np.array([t for t, _ in after[25:]]) - times[25:])) < 1e-6


def test_rotation_by_rename_drains_the_old_file_then_follows_the_new(tmp_path: Path) -> None:
    f = tmp_path / "run.jsonl"
    records, times = generate(RunSpec(version="0.8", steps=9, step_s=10.0))
    f.write_bytes(b"".join(encode(r, "0.8") for r in records[:3]))
    tail = JsonlTail(f, "n")
    got = _steps(tail.poll(times[2] + 1))
    with f.open("ab") as fh:  # appended after our last read, just before the rename
        fh.write(encode(records[3], "0.8"))
    f.rename(tmp_path / "run.jsonl.1")
    f.write_bytes(b"".join(encode(r, "0.8") for r in records[4:]))
    got += _steps(tail.poll(times[-1] + 1))
    assert [v for _, v in got] == list(range(1, 10))


def test_copytruncate_and_nul_padding_are_followed(tmp_path: Path) -> None:
    f = tmp_path / "run.jsonl"
    records, times = generate(RunSpec(version="0.7", steps=8, step_s=10.0))
    fh = f.open("wb")  # verl opens with "w": after copytruncate it keeps writing at its old offset
    fh.write(b"".join(encode(r, "0.7") for r in records[:4]))
    fh.flush()
    tail = JsonlTail(f, "n")
    got = _steps(tail.poll(times[3] + 1))
    shutil.copy(f, tmp_path / "run.jsonl.1")
    os.truncate(f, 0)
    fh.write(b"".join(encode(r, "0.7") for r in records[4:]))  # lands after a hole of NULs
    fh.close()
    batch = tail.poll(times[-1] + 1)
    got += _steps(batch)
    assert [v for _, v in got] == list(range(1, 9)) and batch.errors.get("truncated") == 1
    # an appending writer refilled past our offset before we looked: the changed head tells
    g = tmp_path / "other.jsonl"
    g.write_bytes(b"".join(encode(r, "0.7") for r in records[:2]))
    tail2 = JsonlTail(g, "n")
    tail2.poll(times[1] + 1)
    g.write_bytes(b"".join(encode(r, "0.7") for r in records[3:]))
    assert [v for _, v in _steps(tail2.poll(times[-1] + 1))] == list(range(4, 9))


def test_partial_line_waits_and_crash_fragment_does_not_swallow_the_next_line(tmp_path: Path) -> None:
    f = tmp_path / "run.jsonl"
    line = encode({"step": 1, "data": {"actor/pg_loss": 0.1, "timing_s/step": 30.0}}, "0.8")
    f.write_bytes(line[:20])
    tail = JsonlTail(f, "n")
    assert _steps(tail.poll(100.0)) == []
    with f.open("ab") as fh:  # the writer crashed mid-line; the next one appends a whole line
        fh.write(encode({"step": 2, "data": {"actor/pg_loss": 0.2, "timing_s/step": 30.0}}, "0.8"))
    batch = tail.poll(200.0)
    assert [v for _, v in _steps(batch)] == [2] and batch.errors == {"malformed_json": 1}


def test_own_time_fields_are_used_and_nonfinite_times_rejected(tmp_path: Path) -> None:
    f = tmp_path / "run.jsonl"
    f.write_text('{"step": 1, "timestamp": 1000.0, "data": {"actor/pg_loss": 1}}\n'
                 '{"step": 2, "timestamp": NaN, "data": {"actor/pg_loss": 1}}\n'
                 '{"step": 3, "timestamp": Infinity, "data": {"actor/pg_loss": 1}}\n'
                 '{"step": 4, "timestamp": 1e999, "data": {"actor/pg_loss": 1}}\n'
                 '{"step": 5, "timestamp": 1030.0, "data": {"actor/pg_loss": 1}}\n'
                 '{"step": 6, "data": {"actor/pg_loss": 1}}\n{"step": 7, "data": {"actor/pg_loss": 1}}\n')
    os.utime(f, (1060.0, 1060.0))
    batch = JsonlTail(f, "n").poll(2000.0)
    steps = _steps(batch)
    assert steps[:2] == [(1000.0, 1.0), (1030.0, 5.0)] and batch.errors == {"nonfinite_timestamp": 3}
    # no timers, no own time: spread in arrival order after the last known time, none colliding
    assert [v for _, v in steps[2:]] == [6, 7] and 1030.0 < steps[2][0] < steps[3][0] <= 1060.0


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_null_and_nan_values_are_counted_as_nonfinite_steps(tmp_path: Path, version: str) -> None:
    f = tmp_path / "run.jsonl"
    write_finished(f, RunSpec(version=version, steps=10, step_s=30.0, nan_at=6))
    assert (b"NaN" in f.read_bytes()) == (version == "0.7") and (b"null" in f.read_bytes()) == (version == "0.8")
    batch, errors = read_records(f)
    counter = [s.value for s in batch.samples if s.name == "verl_nonfinite_steps_total"]
    assert counter == [0] * 5 + [1] * 5 and batch.errors == {"nonfinite_value": 1} and errors == 1


def test_liveness_normal_finish_crash_and_hang() -> None:
    live = RunLiveness(total_steps=100, down_after_s=600.0, down_after_steps=3)
    live.observe(0.0, 99.0, [300.0] * 5)
    assert live.up(100.0) == 1.0 and live.up(899.0) == 1.0  # 3 x 300 s steps: still expected
    assert live.up(1000.0) == 0.0                            # step 99 of 100 and silent: down
    done = RunLiveness(total_steps=100)
    done.observe(0.0, 100.0, [60.0])
    assert done.up(10.0) == 1.0 and done.up(1e6) == 1.0 and done.state == "finished"
    writer = {"open": True}
    unknown = RunLiveness(writer_open=lambda: writer["open"], check_every_s=0.0)
    unknown.observe(0.0, 5.0, [60.0])
    assert unknown.up(10.0) == 1.0 and unknown.up(700.0) == 0.0   # writer alive but silent: hung
    writer["open"] = False
    assert unknown.up(760.0) == 1.0 and unknown.state == "finished"  # FileLogger.finish closed it
    stale = RunLiveness()
    stale.observe(0.0, None, [])
    assert stale.up(1e5) is None  # already idle when we started watching: not judged


def test_rl_insight_gauges_map_like_the_file_logger_keys() -> None:
    m = map_rl_insight("rl_insight_monitor_actor_kl_loss")
    assert m is not None and (m.name, m.labels) == ("verl_kl_divergence", {"source": "kl_loss"})
    m = map_rl_insight("rl_insight_monitor_actor_perf_max_memory_allocated_gb")
    assert m is not None and m.labels["stat"] == "peak" and m.factor == 2.0**30
    assert map_rl_insight("rl_insight_monitor_timing_s_gen").labels == {"stage": "rollout"}  # type: ignore[union-attr]
    assert map_rl_insight("verl_kl_divergence") is None


def test_records_without_timers_keep_order_and_perf_time_per_step_stands_in(tmp_path: Path) -> None:
    f = tmp_path / "run.jsonl"
    f.write_text("".join(json.dumps({"step": i, "data": {"actor/pg_loss": 0.1}}) + "\n" for i in range(1, 6)))
    os.utime(f, (5000.0, 5000.0))
    steps = _steps(read_records(f)[0])
    assert steps == [(4996.0, 1.0), (4997.0, 2.0), (4998.0, 3.0), (4999.0, 4.0), (5000.0, 5.0)]
    f.write_text("".join(json.dumps({"step": i, "data": {"perf/time_per_step": 60.0}}) + "\n" for i in range(1, 4)))
    os.utime(f, (5000.0, 5000.0))
    assert [t for t, _ in _steps(read_records(f)[0])] == [4880.0, 4940.0, 5000.0]


def test_a_read_error_costs_one_poll_not_the_tail(tmp_path: Path) -> None:
    f = tmp_path / "run.jsonl"
    records, times = generate(RunSpec(version="0.8", steps=6, step_s=60.0))
    f.write_bytes(b"".join(encode(r, "0.8") for r in records[:3]))
    tail = JsonlTail(f, "n")
    got = _steps(tail.poll(times[2] + 1))
    with f.open("ab") as fh:
        fh.write(b"".join(encode(r, "0.8") for r in records[3:]))

    class Broken:  # a stale NFS handle: every call fails
        def __getattr__(self, name: str) -> object:
            raise OSError(116, "Stale file handle")

    real, tail._fh = tail._fh, Broken()  # type: ignore[assignment]
    assert tail.poll(times[-1] + 1).errors == {"read_error": 1}
    real.close()  # type: ignore[union-attr]
    got += _steps(tail.poll(times[-1] + 2))  # reopened at the same offset
    assert [v for _, v in got] == list(range(1, 7))


def test_record_interval_follows_the_release_of_the_record() -> None:
    """0.6/0.7 run save_checkpoint after the step timer, 0.8+ inside it (read from the wheels); testing is
    outside in all of them."""
    from monitor.sources.verl_keys import record_interval

    legacy = {"timing_s/step": 60.0, "timing_s/save_checkpoint": 12.0, "timing_s/testing": 18.0,
              "perf/max_memory_allocated_gb": 40.0}
    engine = {"timing_s/step": 60.0, "timing_s/save_checkpoint": 12.0, "timing_s/testing": 18.0,
              "actor/perf/max_memory_allocated_gb": 40.0}
    assert record_interval(legacy) == pytest.approx(90.0)
    assert record_interval(engine) == pytest.approx(78.0)


@pytest.mark.parametrize("version", ["0.7", "0.9"])
def test_finished_file_times_hold_for_each_release(version: str, tmp_path: Path) -> None:
    f = tmp_path / "run.jsonl"
    _, times = write_finished(f, RunSpec(version=version, steps=120, step_s=60.0, save_freq=20))
    batch, _ = read_records(f)
    got = sorted({s.t for s in batch.samples if s.name == "verl_global_step"})
    assert np.max(np.abs(np.array(got) - times)) < 1e-3
