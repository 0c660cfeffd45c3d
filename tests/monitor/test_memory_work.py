"""Memory and stage times judged against the run itself: host RAM in verl's own ``perf/cpu_memory_used_gb``
growing far over its level after warm-up pages (HostMemoryExhaustion), a fast host-memory fall pages while
minutes remain, and one stage timer growing 3x its own median pages naming the stage (StageSlowdown) even
when the whole step moves less than 30 %; healthy look-alikes stay quiet."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from monitor.detectors.exhaustion import ExhaustionDetector
from monitor.detectors.reference import ReferenceRiseDetector
from monitor.evaluation.rules import load_rule_files
from tests.monitor.test_hang import T0, _fired, _live

GB = 1e9
PAGES = ("P0", "P1", "P2")


def record(step: int, step_s: float, cpu_gb: float, update_weights_s: float, testing_s: float | None) -> bytes:
    """One verl 0.9 ``file`` logger line (engine workers: ``actor/perf/*``, ``timing_s/update_weights``)."""
    data: dict[str, float] = {
        "timing_s/gen": 0.5 * step_s, "timing_s/update_actor": 0.2 * step_s, "timing_s/reward": 0.05 * step_s,
        "timing_s/update_weights": update_weights_s, "timing_s/step": 0.75 * step_s + update_weights_s,
        "timing_s/adv": 0.002 * step_s, "critic/score/mean": 0.5, "actor/entropy": 0.6, "actor/pg_loss": 0.01,
        "actor/perf/max_memory_allocated_gb": 40.0, "actor/perf/cpu_memory_used_gb": cpu_gb,
        "perf/total_num_tokens": 40000, "perf/throughput": 40000 / (0.75 * step_s + update_weights_s) / 8,
        "training/global_step": step}
    if testing_s is not None:
        data["timing_s/testing"] = testing_s
        data["val-core/openai/gsm8k/reward/mean@1"] = 0.5
    return json.dumps({"step": step, "data": data}).encode() + b"\n"


def run(steps: int, cpu_gb, update_weights_s, seed: int, step_s: float = 60.0) -> tuple[list[bytes], list[float]]:
    rng = random.Random(seed)
    lines, times, t = [], [], T0
    for step in range(1, steps + 1):
        s = step_s * rng.uniform(0.8, 1.2)
        line = record(step, s, cpu_gb(step, rng), update_weights_s(step, rng) * rng.uniform(0.7, 1.3),
                      testing_s=0.3 * step_s if step % 20 == 0 else None)
        data = json.loads(line)["data"]
        t += data["timing_s/step"] + data.get("timing_s/testing", 0.0)
        lines.append(line)
        times.append(t)
    return lines, times


def healthy_ram(step: int, rng: random.Random) -> float:
    return 210.0 + rng.uniform(-3.0, 3.0)


def steady_sync(step: int, rng: random.Random) -> float:
    return 2.7


def test_host_ram_from_verls_own_key_growing_to_the_kill_is_paged_and_healthy_runs_are_not(tmp_path: Path) -> None:
    # 189 GB, then +6 GB a step from step 20 to 731 GB at step ~110 (where Ray's memory monitor kills it)
    lines, times = run(110, lambda s, r: 189.0 + max(0, s - 20) * 6.0 + r.uniform(-2, 2), steady_sync, seed=1)
    (tmp_path / "a").mkdir()
    events = _live(tmp_path / "a", lines, times, total_steps=110, writer_closes=True, until=times[-1] + 300.0)
    host = _fired(events, "HostMemoryExhaustion")
    assert host and host[0][1] == "firing", [e[1]["labels"]["alertname"] for e in events]
    paged_step = sum(1 for t in times if t <= host[0][0])
    assert paged_step <= 36  # ~1.3x 189 GB: ~250 GB, long before 731
    assert "perf/cpu_memory_used_gb" in host[0][2]["annotations"]["summary"]
    assert [s for _, s, _ in host] == ["firing"]  # held to the end of the run

    lines, times = run(110, healthy_ram, steady_sync, seed=2)
    (tmp_path / "b").mkdir()
    events = _live(tmp_path / "b", lines, times, total_steps=110, writer_closes=True, until=times[-1] + 300.0)
    assert [e for e in events if e[1]["labels"]["severity"] in PAGES] == []


def test_reference_rise_takes_the_level_after_warm_up() -> None:
    det = ReferenceRiseDetector(ratio=1.3, min_delta=10.0, warmup=2, reference=3, recent=1)
    for i, v in enumerate([500.0, 400.0, 100.0, 100.0, 100.0]):  # warm-up spikes do not set the reference
        assert not det.update(float(i), v).active
    assert not det.update(5.0, 125.0).active
    f = det.update(6.0, 131.0)
    assert f.active and f.details["reference"] == 100.0


def _rule_params(alert: str, select: str) -> dict:
    rule = next(r for r in load_rule_files(None) if r.alert == alert and r.conditions[0].selectors[0].name == select)
    return dict(rule.conditions[0].params)


def _first_page(det: ExhaustionDetector, series: list[tuple[float, float]]) -> tuple[float, float] | None:
    for t, v in series:
        f = det.update(t, v)
        if f.active:
            return t, f.details["minutes_left"]
    return None


def test_a_fast_host_memory_fall_is_paged_while_minutes_remain() -> None:
    params = _rule_params("HostMemoryExhaustion", "node_memory_MemAvailable_bytes")
    rng = random.Random(5)
    start = 1800.0  # 30 min flat at 20 GB, then 50 MB/s: empty ~6.7 min later
    series = [(t, max(0.0, 20 * GB - 50e6 * max(0.0, t - start)) + rng.gauss(0, 0.05 * GB))
              for t in np.arange(0, start + 400.0, 15.0)]
    page = _first_page(ExhaustionDetector(**params), series)
    assert page is not None
    t, stated = page
    assert t - start <= 200.0, t - start
    truth = (start + 400.0 - t) / 60
    assert truth >= 3.0 and 0.5 <= stated / truth <= 2.0, (stated, truth)
    # without the raw fast-fall judgement the 10-min window and 4-min floor page nothing in those 200 s
    slow = {k: v for k, v in params.items() if not k.startswith("fast_")}
    late = _first_page(ExhaustionDetector(**slow), series)
    assert late is None or late[0] - start > 200.0


def test_cycling_and_flat_host_memory_stay_quiet_with_the_fast_judgement() -> None:
    params = _rule_params("HostMemoryExhaustion", "node_memory_MemAvailable_bytes")
    rng = random.Random(3)
    flat = [(t, 18 * GB + rng.gauss(0, 0.3 * GB)) for t in np.arange(0, 4 * 3600, 15.0)]
    cycle = [(t, 16 * GB - 4 * GB * min(1.0, (t % 180) / 150)) for t in np.arange(0, 4 * 3600, 15.0)]
    # a slower step whose rollout draws 8 GB of a 24 GB host over 4 min, then frees it
    slow_cycle = [(t, 24 * GB - 8 * GB * min(1.0, (t % 300) / 240)) for t in np.arange(0, 4 * 3600, 15.0)]
    for series in (flat, cycle, slow_cycle):
        assert _first_page(ExhaustionDetector(**params), series) is None


def test_a_weight_sync_slowing_8x_pages_naming_the_stage_though_throughput_falls_25_pct(tmp_path: Path) -> None:
    lines, times = run(120, healthy_ram, lambda s, r: 2.7 if s < 60 else 21.5, seed=7)
    first = sum(json.loads(line)["data"]["perf/throughput"] for line in lines[40:59])
    later = sum(json.loads(line)["data"]["perf/throughput"] for line in lines[60:79])
    assert 0.6 < later / first < 0.9  # the whole step moves less than ThroughputDrop's 30 %
    (tmp_path / "a").mkdir()
    events = _live(tmp_path / "a", lines, times, total_steps=120, writer_closes=True, until=times[-1] + 300.0)
    stage = _fired(events, "StageSlowdown")
    assert stage and stage[0][2]["labels"]["stage"] == "update_weights"
    assert sum(1 for t in times if t <= stage[0][0]) <= 60 + 5
    assert "update_weights" in stage[0][2]["annotations"]["summary"]
    assert {e[1]["labels"]["alertname"] for e in events if e[1]["labels"]["severity"] in PAGES} == {"StageSlowdown"}


def test_jittered_stages_with_validation_and_growing_generation_stay_quiet(tmp_path: Path) -> None:
    rng = random.Random(11)
    lines, times, t = [], [], T0
    for step in range(1, 151):
        s = 60.0 * (1.0 + step / 75.0) * rng.uniform(0.5, 1.5)  # responses grow: steps 60 -> 180 s, +-50 %
        line = record(step, s, healthy_ram(step, rng), 2.7 * rng.uniform(0.5, 1.5),
                      testing_s=240.0 if step % 20 == 0 else None)
        data = json.loads(line)["data"]
        t += data["timing_s/step"] + data.get("timing_s/testing", 0.0)
        lines.append(line)
        times.append(t)
    events = _live(tmp_path, lines, times, total_steps=150, writer_closes=True, until=times[-1] + 300.0)
    assert [e for e in events if e[1]["labels"]["severity"] in PAGES] == []


def peak_run(steps: int, peak_gb, lengths, seed: int) -> tuple[list[bytes], list[float]]:
    """60-s steps whose ``actor/perf/max_memory_allocated_gb`` is ``peak_gb(step)`` (a running maximum) and whose
    ``response_length/*`` are ``lengths(step)`` = (mean, max, clip_ratio) under a 4096-token cap."""
    rng = random.Random(seed)
    lines, times, t, top = [], [], T0, 0.0
    for step in range(1, steps + 1):
        s = 60.0 * rng.uniform(0.8, 1.2)
        top = max(top, peak_gb(step, rng))
        mean, longest, clip = lengths(step, rng)
        data = json.loads(record(step, s, healthy_ram(step, rng), 2.7, None))["data"]
        data |= {"actor/perf/max_memory_allocated_gb": top, "actor/perf/max_memory_reserved_gb": top + 4.0,
                 "response_length/mean": mean, "response_length/max": longest, "response_length/clip_ratio": clip,
                 "prompt_length/max": 512.0, "perf/total_num_tokens": 256 * (mean + 300.0)}
        t += data["timing_s/step"]
        lines.append(json.dumps({"step": step, "data": data}).encode() + b"\n")
        times.append(t)
    return lines, times


def flat_lengths(step: int, rng: random.Random) -> tuple[float, float, float]:
    return 900.0 + rng.uniform(-40, 40), 2000.0 + rng.uniform(-200, 0), 0.0


def test_a_peak_ratcheting_through_the_first_30_steps_is_no_leak_and_a_later_leak_still_pages(tmp_path: Path) -> None:
    # the allocator's peak climbs ~0.5 GiB a step through step 30 at steps whose work sets no new high
    ratchet = lambda s, r: 30.0 + 0.5 * min(s, 30) + r.uniform(0, 0.4)  # noqa: E731
    lines, times = peak_run(120, ratchet, flat_lengths, seed=3)
    (tmp_path / "a").mkdir()
    events = _live(tmp_path / "a", lines, times, total_steps=120, writer_closes=True, until=times[-1] + 300.0)
    assert [e for e in events if e[1]["labels"]["severity"] in PAGES] == []

    leak = lambda s, r: 30.0 + 0.5 * min(s, 30) + 0.3 * max(0, s - 60)  # noqa: E731  # 300 MB/step from step 60
    lines, times = peak_run(120, leak, flat_lengths, seed=4)
    (tmp_path / "b").mkdir()
    events = _live(tmp_path / "b", lines, times, total_steps=120, writer_closes=True, until=times[-1] + 300.0)
    leaks = _fired(events, "MemoryLeakSuspected")
    assert leaks and sum(1 for t in times if t <= leaks[0][0]) <= 60 + 30


def test_a_peak_following_responses_that_grow_to_the_cap_is_no_leak(tmp_path: Path) -> None:
    # responses grow to the 4096 cap by step 50; after it, more of them sit at the cap (clip ratio 0 -> 0.6)
    # and the peak keeps following the share at the cap, though no length sets a new high
    def lengths(s: int, r: random.Random) -> tuple[float, float, float]:
        grow = min(1.0, s / 50.0)
        clip = 0.0 if s < 50 else min(0.6, (s - 50) / 100.0) + r.uniform(0, 0.02)
        return 900.0 + 2400.0 * grow + 300.0 * clip + r.uniform(-20, 20), min(4096.0, 1500.0 + 2596.0 * grow), clip

    def peak(s: int, r: random.Random) -> float:
        mean, _, clip = lengths(s, random.Random(s))
        return 20.0 + mean / 200.0 + 25.0 * clip + r.uniform(0, 0.3)

    lines, times = peak_run(150, peak, lengths, seed=5)
    events = _live(tmp_path, lines, times, total_steps=150, writer_closes=True, until=times[-1] + 300.0)
    assert _fired(events, "MemoryLeakSuspected") == []  # (ResponseLengthAtCap pages, rightly)
