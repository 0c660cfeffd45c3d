"""Rules judged in steps on a verl log (issue 22): per_step windows, keep_firing_for_steps, a window that
can never fill says so, replay --node, verl's words in a verl run's texts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import yaml

from alerting.clock import SimulatedClock
from alerting.vocabulary import Vocabulary
from benchmarks.verl_runs import RunSpec, write_finished
from monitor.cli import main
from monitor.evaluation.rules import load_rule_files, load_rules
from monitor.pipeline import Pipeline

T0 = 1_767_225_600.0


def _rules(tmp_path: Path, rule: dict) -> list:
    p = tmp_path / "rules.yaml"
    p.write_text(yaml.safe_dump({"rules": [rule]}))
    return load_rules(p)


def _collapse(step_s: np.ndarray, at: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    t = T0 + np.cumsum(step_s)
    v = np.where(np.arange(len(t)) >= at, 0.01, 0.6) + rng.normal(0, 0.03, len(t))
    return t, v


@pytest.mark.parametrize("step_s", [1.0, 180.0, 900.0])
def test_per_step_level_shift_pages_a_collapse_within_ten_steps_at_any_step_time(step_s: float, tmp_path: Path) -> None:
    rule = {"alert": "RewardDistributionDrift", "severity": "P2", "select": 'verl_reward_mean{job="verl_jsonl"}',
            "detector": {"type": "level_shift", "direction": "down", "min_relative_shift": 0.5, "min_z": 2,
                         "per_step": True, "steps": {"baseline_s": 30, "confirm_s": 4, "warmup_s": 2}}}
    growth = np.linspace(1.0, 1.7, 200)  # verl's step time grows with the response length
    t, v = _collapse(step_s * growth, at=150)
    fired: list[float] = []
    clock = SimulatedClock(t[0])
    pipe = Pipeline(_rules(tmp_path, rule), clock,
                    on_record=lambda r: fired.append(clock.now()) if r.get("status") == "firing" else None)
    s = pipe.series("verl_reward_mean", {"job": "verl_jsonl", "node": "n"})
    for a, b in zip(t.tolist(), v.tolist(), strict=True):
        pipe.observe(s, a, b)
        clock.set(a)
        pipe.tick()
    assert fired, "never paged"
    assert int(np.searchsorted(t, fired[0], side="right")) - 150 <= 10


def test_keep_firing_for_steps_holds_a_cleared_condition_that_many_intervals(tmp_path: Path) -> None:
    rule = {"alert": "X", "severity": "P2", "select": "m", "keep_firing_for_steps": 3,
            "detector": {"type": "threshold", "op": ">", "value": 1}}
    clock = SimulatedClock(T0)
    states: list[tuple[float, str]] = []
    pipe = Pipeline(_rules(tmp_path, rule), clock, on_record=lambda r: states.append((clock.now(), r["status"])))
    s = pipe.series("m", {"node": "n"})
    values = [0] * 10 + [2] + [0] * 10
    for i, v in enumerate(values):
        t = T0 + 600.0 * i  # one sample per 10-min step
        pipe.observe(s, t, float(v))
        clock.set(t)
        pipe.tick()
    assert states[0] == (T0 + 6000.0, "firing")
    assert states[1][1] == "resolved" and states[1][0] > T0 + 6000.0 + 3 * 600.0


def test_a_window_that_cannot_fill_says_so_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # 600 s of baseline at 3-min steps holds 3.3 samples; the test needs 8: it would never run
    rule = {"alert": "RewardDistributionDrift", "severity": "P2", "select": "verl_reward_mean",
            "detector": {"type": "level_shift", "direction": "down", "min_relative_shift": 0.5}}
    pipe = Pipeline(_rules(tmp_path, rule), SimulatedClock(T0))
    s = pipe.series("verl_reward_mean", {"node": "n"})
    with caplog.at_level(logging.WARNING, logger="monitor.pipeline"):
        for i in range(300):
            pipe.observe(s, T0 + 180.0 * i, 0.5)
    said = [r for r in caplog.records if "can never test" in r.getMessage()]
    assert len(said) == 1 and "baseline_s 600 s holds 3.3 samples" in said[0].getMessage()
    assert pipe.metrics.registry.get_sample_value(
        "verl_monitor_rule_window_unfillable", {"alertname": "RewardDistributionDrift", "detector": "level_shift"}) == 1
    # the shipped rules for a verl log fill at any step time
    quiet = Pipeline(load_rule_files(None), SimulatedClock(T0))
    q = quiet.series("verl_reward_mean", {"node": "n", "job": "verl_jsonl"})
    with caplog.at_level(logging.WARNING, logger="monitor.pipeline"):
        caplog.clear()
        for i in range(300):
            quiet.observe(q, T0 + 720.0 * i, 0.5)
    assert not [r for r in caplog.records if "can never test" in r.getMessage()]


def test_replay_node_names_the_node_of_a_verl_log(tmp_path: Path) -> None:
    log = tmp_path / "exp.jsonl"
    write_finished(log, RunSpec(version="0.9", steps=60, step_s=30.0, nan_at=40))
    out = tmp_path / "out.jsonl"
    assert main(["replay", "--input", str(log), "--output", str(out), "--node", "gpu-08"]) == 0
    alerts = [json.loads(x) for x in out.read_text().splitlines()]
    nan = [a for a in alerts if a["labels"]["alertname"] == "NonFiniteGradients"]
    assert nan and all(a["labels"]["node"] == "gpu-08" for a in alerts)
    assert "gpu-08" in nan[0]["annotations"]["summary"]
    # a verl run: verl clips gradients by default, so the runbook does not say "enable grad clipping"
    assert "actor_rollout_ref.actor.grad_clip" in nan[0]["annotations"]["runbook"]
    assert "enable grad clipping" not in nan[0]["annotations"]["runbook"]


def test_verl_words_in_trainer_down_and_the_reward_cliff() -> None:
    rules = load_rule_files(None)
    down = next(r for r in rules if r.alert == "TrainerDown" and "up" in str(r.conditions[0].selectors[0]))
    ctx = {"labels": {"node": "gpu-08"}, "value": 0.0, "details": {}, "vocab": Vocabulary("verl")}
    text = down.render({**ctx, "series": {"target": "jsonl:exp.jsonl"}})
    assert "exp.jsonl" in text["summary"] and "(?)" not in text["summary"]
    assert "trainer.resume_mode" in text["runbook"] and "--metrics-port" not in text["runbook"]
    ours = down.render({**ctx, "vocab": Vocabulary(), "series": {"target": "http://h:9100/metrics", "instance": "h:9100"}})
    assert "--metrics-port" in ours["runbook"]
    cliffs = [r for r in rules if r.alert == "RewardDistributionDrift" and r.conditions[0].detector_type == "level_shift"]
    details = {"relative_change": -0.9, "before": 0.6, "after": 0.05}
    for r in cliffs:
        verl = r.render({**ctx, "details": details})["runbook"]
        assert "load_reward_model" not in verl and "custom_reward_function" in verl
        assert "kl_coef" not in verl  # whether KL rose is the diagnosis' to say
        assert "load_reward_model" in r.render({**ctx, "details": details, "vocab": Vocabulary()})["runbook"]


def test_a_per_step_series_is_not_evicted_between_buffered_bursts() -> None:
    """verl 0.6/0.7 write through an 8 KB buffer: at 24-min steps four records arrive every ~1.6 h. The store's
    stale-series eviction must not drop the series (and its detectors' windows) between two bursts."""
    clock = SimulatedClock(T0)
    pipe = Pipeline(load_rule_files(None), clock)
    step = 1440.0
    s = pipe.series("verl_actor_tokens_per_second", {"job": "verl_jsonl", "node": "n", "scope": "per_gpu"})
    gone = pipe.series("verl_host_cpu_utilization_ratio", {"node": "n"})  # a scraped series that went away
    for i in range(8):
        pipe.observe(s, T0 + step * i, 1000.0)
        pipe.observe(gone, T0 + 5.0 * i, 0.5)
    clock.set(T0 + step * 7 + 4 * step)  # 96 min of silence: the next burst is on its way
    pipe.tick()
    names = {x.name for x in pipe.store._series.values()}
    assert "verl_actor_tokens_per_second" in names
    assert "verl_host_cpu_utilization_ratio" not in names
