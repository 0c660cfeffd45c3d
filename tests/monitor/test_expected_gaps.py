"""Expected gaps are not hangs: a verl step that validates (trainer.test_freq) or saves a checkpoint
(trainer.save_freq) is judged against the run's own validation/save durations, not its median training
step; a real hang in a training step still pages within 5 min at 30-s steps, and one in a validation step
within the run's validation time on top."""

from __future__ import annotations

import json
import random
from pathlib import Path

from monitor.sources.verl_gaps import ExpectedGaps, cadence_of
from tests.monitor.test_hang import T0, _fired, _live

PAGES = ("P0", "P1", "P2")


def record(step: int, step_s: float, *, testing_s: float | None = None, save_s: float | None = None,
           hang_s: float = 0.0) -> bytes:
    """One verl 0.9 ``file`` logger line: save_checkpoint inside ``timing_s/step``, testing outside it."""
    actor = 0.2 * step_s + hang_s
    data: dict[str, float] = {"timing_s/gen": 0.5 * step_s, "timing_s/update_actor": actor,
                              "timing_s/step": 0.8 * step_s + actor + (save_s or 0.0),
                              "critic/score/mean": 0.5, "actor/entropy": 0.6, "actor/pg_loss": 0.01,
                              "actor/perf/max_memory_allocated_gb": 40.0, "training/global_step": step}
    if save_s is not None:
        data["timing_s/save_checkpoint"] = save_s
    if testing_s is not None:
        data["timing_s/testing"] = testing_s
        data["val-core/openai/gsm8k/reward/mean@1"] = 0.5
    return json.dumps({"step": step, "data": data}).encode() + b"\n"


def run(steps: int, step_s: float, jitter: float, test_freq: int, testing_s: float, save_freq: int, save_s: float,
        hang_at: int | None = None, hang_s: float = 0.0, seed: int = 0) -> tuple[list[bytes], list[float]]:
    rng = random.Random(seed)
    lines, times, t = [], [], T0
    for step in range(1, steps + 1):
        s = step_s * (1.0 + rng.uniform(-jitter, jitter))
        line = record(step, s, testing_s=testing_s * rng.uniform(0.8, 1.25) if step % test_freq == 0 else None,
                      save_s=save_s * rng.uniform(0.8, 1.25) if step % save_freq == 0 else None,
                      hang_s=hang_s if step == hang_at else 0.0)
        data = json.loads(line)["data"]
        t += data["timing_s/step"] + data.get("timing_s/testing", 0.0)
        lines.append(line)
        times.append(t)
    return lines, times


def test_healthy_run_with_4_min_validations_and_checkpoints_pages_no_hang(tmp_path: Path) -> None:
    # 40 s +-50 % steps, a ~4-min validation every 20 steps, a checkpoint every 10: one false P0 per
    # validation when the bound was 3x the median training step
    lines, times = run(100, 40.0, 0.5, 20, 240.0, 10, 60.0, seed=3)
    events = _live(tmp_path, lines, times, total_steps=100, writer_closes=True, until=times[-1] + 600.0)
    assert [e for e in events if e[1]["labels"]["severity"] in PAGES] == []


def test_a_hang_in_a_training_step_still_pages_within_5_min_at_30_s_steps(tmp_path: Path) -> None:
    lines, times = run(60, 30.0, 0.3, 20, 240.0, 10, 60.0, hang_at=47, hang_s=1800.0, seed=4)
    events = _live(tmp_path, lines, times, total_steps=60, writer_closes=True, until=times[-1] + 600.0)
    stalls = _fired(events, "TrainingStalled")
    assert [s for _, s, _ in stalls] == ["firing", "resolved"], stalls
    hang_began = times[45] + 0.5 * 30.0  # inside update_actor, after gen
    assert stalls[0][0] - hang_began <= 300.0


def test_a_hang_in_a_validation_step_pages_within_its_validation_time_on_top(tmp_path: Path) -> None:
    lines, times = run(60, 30.0, 0.3, 20, 240.0, 10, 60.0, hang_at=40, hang_s=1800.0, seed=5)
    events = _live(tmp_path, lines, times, total_steps=60, writer_closes=True, until=times[-1] + 600.0)
    stalls = _fired(events, "TrainingStalled")
    assert stalls and stalls[0][1] == "firing"
    began = times[38]
    # max(4 min, 3 steps) + 1.5 x the longest validation (<= 300 s) + 1.5 x the longest save (<= 75 s) + a poll
    assert began + 240.0 + 240.0 < stalls[0][0] <= began + 240.0 + 1.5 * (300.0 + 75.0) + 30.0


def test_expected_gaps_learn_the_cadence_and_durations_from_the_records() -> None:
    gaps = ExpectedGaps(total_steps=100)
    assert gaps.extra_s() == 0.0  # nothing seen
    gaps.observe(9, {"timing_s/step": 40.0})
    assert gaps.extra_s() == 300.0  # step 10 may be a first validation or checkpoint: unknown length
    gaps.observe(10, {"timing_s/step": 90.0, "timing_s/save_checkpoint": 50.0})
    assert gaps.extra_s() == 0.0    # step 11: neither
    gaps.observe(19, {})
    assert gaps.extra_s() == 75.0 + 300.0  # step 20 saves (1.5 x 50 s) and may be the first validation
    gaps.observe(20, {"timing_s/testing": 200.0, "val-core/x/reward/mean@1": 0.5, "timing_s/save_checkpoint": 40.0})
    gaps.observe(29, {})
    assert gaps.extra_s() == 75.0   # step 30: a save only (validation every 20)
    gaps.observe(39, {})
    assert gaps.extra_s() == 75.0 + 300.0
    gaps.observe(99, {})
    assert gaps.extra_s() == 75.0 + 300.0  # the last step validates and saves
    gaps.observe(109, {})
    assert gaps.extra_s() == 75.0          # past the last step: no longer the last


def test_the_resolved_config_says_which_steps_validate_before_any_did() -> None:
    gaps = ExpectedGaps()
    gaps.configure(*cadence_of({"trainer": {"test_freq": 7, "save_freq": -1}}), None)
    gaps.observe(13, {})
    assert gaps.extra_s() == 300.0  # step 14 validates, length not yet known
    gaps.observe(15, {})
    assert gaps.extra_s() == 0.0    # step 16: no validation, and save_freq=-1 with 16 no multiple of 5
    assert cadence_of({"trainer": {"test_freq": True}}) == (None, None)


def test_a_long_validation_at_10_min_steps_is_neither_a_hang_nor_a_stopped_run(tmp_path: Path) -> None:
    # a 20-min validation every 10 steps of 10-min steps: the log is quiet 30 min, TrainerDown's 3 steps
    lines, times = run(40, 600.0, 0.2, 10, 1200.0, 20, 120.0, seed=8)
    events = _live(tmp_path, lines, times, total_steps=40, writer_closes=True, until=times[-1] + 600.0)
    assert [e for e in events if e[1]["labels"]["severity"] in PAGES] == []
