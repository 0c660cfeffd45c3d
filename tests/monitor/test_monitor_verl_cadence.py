"""Cadence-aware rules on verl-shaped runs (issue 14.3-14.5): windows in steps, a normal finish is not
TrainerDown, KL-to-reference drift and a memory climb found in PPO and GRPO runs, healthy runs quiet,
``verl-monitor replay --input run.jsonl``, verl's vocabulary in runbooks, verl spellings in verl-train."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from alerting import vocabulary
from benchmarks.verl_cadence import simulate
from benchmarks.verl_runs import RunSpec, write_finished
from monitor import cli
from monitor.detectors.cadence import CadenceScaled
from monitor.detectors.staleness import StalenessDetector
from monitor.evaluation.rules import RuleError, load_rule_files, load_rules
from monitor.replay import replay
from verl.config import TrainerConfigError, load_config

RULES = load_rule_files(None)


def _alerts(out: str) -> list[dict]:
    return [json.loads(x) for x in out.splitlines() if json.loads(x).get("status") == "firing"]


def test_step_windows_follow_the_series_interval() -> None:
    det = CadenceScaled(lambda p: StalenessDetector(**p), {"max_gap": 600.0}, {"max_gap": 3}, ticks=True)
    for i in range(8):  # one sample per 12-min step
        det.update(i * 720.0, float(i))
    assert det.used["max_gap"] == pytest.approx(2160.0)
    assert not det.tick(7 * 720.0 + 1500.0).active   # two steps late is not down yet (10 min would be)
    assert det.tick(7 * 720.0 + 2200.0).active
    fast = CadenceScaled(lambda p: StalenessDetector(**p), {"max_gap": 600.0}, {"max_gap": 3}, ticks=True)
    for i in range(8):  # at a 5 s scrape the seconds win
        fast.update(i * 5.0, 1.0)
    assert fast.used["max_gap"] == 600.0


def test_rules_validate_steps_and_for_steps(tmp_path: Path) -> None:
    def rule(detector: str, extra: str = "") -> Path:
        p = tmp_path / "r.yaml"
        p.write_text(f"rules:\n  - alert: X\n    severity: P2\n    select: verl_kl_coef\n{extra}"
                     f"    detector: {detector}\n")
        return p

    r = load_rules(rule("{type: staleness, max_gap: 10m, steps: {max_gap: 3}}", "    for_steps: 2\n"))[0]
    assert r.for_steps == 2 and r.conditions[0].steps == {"max_gap": 3.0}
    with pytest.raises(RuleError, match=r"steps\.op: not a duration parameter"):
        load_rules(rule('{type: threshold, op: ">", value: 1, steps: {op: 3}}'))
    with pytest.raises(RuleError, match=r"steps\.window: expected a sample count"):
        load_rules(rule("{type: leak, steps: {window: -1}}"))
    with pytest.raises(RuleError, match="warmup_steps"):
        load_rules(rule("{type: leak, warmup_steps: x}"))
    with pytest.raises(RuleError, match="for_steps"):
        load_rules(rule("{type: leak}", "    for_steps: -2\n"))


@pytest.mark.parametrize(("algo", "step_s"), [("ppo", 360.0), ("grpo", 90.0)])
def test_kl_to_reference_drift_is_found_and_healthy_finish_is_quiet(tmp_path: Path, algo: str, step_s: float) -> None:
    version = "0.7" if algo == "ppo" else "0.8"
    drift = RunSpec(version=version, algo=algo, steps=170, step_s=step_s, kl_drift_at=100)
    fired, times = simulate(drift, RULES, tmp_path, 170 if algo == "ppo" else None, after_s=4 * step_s)
    names = [(t, lab["alertname"]) for t, lab in fired]
    hits = [t for t, n in names if n == "KLDriftDetected"]
    assert hits and times[99] < hits[0] < times[99] + 40 * step_s, names
    assert {n for _, n in names} == {"KLDriftDetected"}
    healthy = RunSpec(version=version, algo=algo, steps=150, step_s=step_s, seed=3)
    fired, _ = simulate(healthy, RULES, tmp_path, 150 if algo == "ppo" else None)  # ends normally, then 2 h idle
    assert fired == []


@pytest.mark.parametrize(("version", "algo", "step_s"), [("0.6", "ppo", 720.0), ("0.9", "grpo", 90.0)])
def test_memory_climb_in_peak_gauges_is_found(tmp_path: Path, version: str, algo: str, step_s: float) -> None:
    spec = RunSpec(version=version, algo=algo, steps=170, step_s=step_s, leak_at=100, leak_mb_per_min=20.0)
    f = tmp_path / "run.jsonl"
    _, times = write_finished(f, spec)
    out = io.StringIO()
    replay(f, RULES, out)
    fired = _alerts(out.getvalue())
    assert {a["labels"]["alertname"] for a in fired} == {"MemoryLeakSuspected"}, fired
    assert all(a["labels"]["gpu"].startswith("torch_max") for a in fired)
    # one alert per peak series, no flapping while the climb goes on
    assert len(fired) == len({a["fingerprint"] for a in fired})


def test_trainer_down_when_the_run_stops_early_not_when_it_finishes(tmp_path: Path) -> None:
    spec = RunSpec(version="0.8", algo="ppo", steps=60, step_s=600.0)
    assert simulate(spec, RULES, tmp_path, 60)[0] == []      # last step = trainer.total_training_steps
    assert simulate(spec, RULES, tmp_path, None)[0] == []    # total unknown: the writer closed the file
    # the same run dying at step 60 of 100: TrainerDown once it is 3 steps (30 min) overdue, once
    fired, times = simulate(spec, RULES, tmp_path, 100, after_s=3 * 3600.0)
    down = [t for t, lab in fired if lab["alertname"] == "TrainerDown"]
    assert len(down) == 1 and times[-1] + 1800 < down[0] < times[-1] + 1800 + 300, (down, times[-1])
    # ... and TrainingEndedEarly as long after: the writer closed the log 40 steps short of the total
    ended = [t for t, lab in fired if lab["alertname"] == "TrainingEndedEarly"]
    assert len(ended) == 1 and times[-1] + 1800 <= ended[0] < times[-1] + 1800 + 300
    assert {lab["alertname"] for _, lab in fired} == {"TrainerDown", "TrainingEndedEarly"}


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_nan_in_a_record_fires_nonfinite_gradients(tmp_path: Path, version: str) -> None:
    f = tmp_path / "run.jsonl"
    write_finished(f, RunSpec(version=version, steps=40, step_s=300.0, nan_at=30))
    out = io.StringIO()
    replay(f, RULES, out)
    assert [a["labels"]["alertname"] for a in _alerts(out.getvalue())] == ["NonFiniteGradients"]


def test_verl_monitor_replay_accepts_verl_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "run.jsonl"
    write_finished(f, RunSpec(version="0.8", algo="grpo", steps=150, step_s=60.0, kl_drift_at=90))
    assert cli.main(["replay", "--input", str(f), "--output", str(tmp_path / "out.jsonl")]) == 0
    fired = _alerts((tmp_path / "out.jsonl").read_text())
    assert [a["labels"]["alertname"] for a in fired] == ["KLDriftDetected"]
    assert fired[0]["labels"]["source"] == "kl_loss"
    # verl's vocabulary in the runbook: its KL keys and its default, not "expected 0.1-0.5"
    runbook = fired[0]["annotations"]["runbook"]
    assert "algorithm.kl_ctrl.kl_coef" in runbook and "verl default 0.001" in runbook and "0.1-0.5" not in runbook


def test_vocabulary_names_verl_keys_and_defaults() -> None:
    assert vocabulary.key("reward_batch_size", "verl") == "reward_model.micro_batch_size_per_gpu"
    assert vocabulary.key("data.num_workers", "verl") == "data.dataloader_num_workers"
    assert vocabulary.default("data.num_workers", "verl") == "8"
    assert vocabulary.describe("kl_coef", "verl", {"kl_coef": "0.0"}).endswith("(verl default 0.001, now 0.0)")
    assert "no rollout buffer" in vocabulary.key("rollout_buffer_max_size", "verl")
    assert vocabulary.setting("offload_reward_to_cpu", "true", "verl") == "reward_model.model.fsdp_config.param_offload=true"
    assert vocabulary.describe("kl_coef") == "kl_coef (expected 0.1-0.5, 0.0 disables the penalty)"
    assert vocabulary.key("data_num_workers") == "data_num_workers" and vocabulary.key("unknown", "verl") == "unknown"


def test_verl_train_accepts_verl_spellings(tmp_path: Path) -> None:
    c = load_config(None, ["data.train_batch_size=8", "algorithm.kl_ctrl.kl_coef=0.05",
                           "actor_rollout_ref.actor.optim.lr=1e-4", "trainer.total_training_steps=7"])
    assert (c.data.batch_size, c.kl_coef, c.actor.lr, c.trainer.total_steps) == (8, 0.05, 1e-4, 7)
    y = tmp_path / "verl.yaml"
    y.write_text("algorithm:\n  kl_ctrl:\n    type: adaptive\n    kl_coef: 0.02\ndata:\n  dataloader_num_workers: 2\n")
    c = load_config(y)
    assert (c.algorithm.kl_ctrl, c.kl_coef, c.data.num_workers) == ("adaptive", 0.02, 2)
    y.write_text("kl_coef: 0.1\nalgorithm:\n  kl_ctrl:\n    kl_coef: 0.02\n")
    with pytest.raises(TrainerConfigError, match="algorithm.kl_ctrl.kl_coef.*kl_coef.*disagree"):
        load_config(y)


def test_for_steps_and_freshness_follow_a_slow_series(tmp_path: Path) -> None:
    from alerting.clock import SimulatedClock
    from monitor.model import Sample
    from monitor.pipeline import Pipeline

    p = tmp_path / "r.yaml"
    p.write_text("rules:\n  - alert: KLCoefHigh\n    severity: P2\n    for: 1m\n    for_steps: 3\n"
                 "    select: verl_kl_coef\n    detector: {type: threshold, op: \">\", value: 1}\n")
    clock = SimulatedClock(0.0)
    fired: list[float] = []
    pipe = Pipeline(load_rules(p), clock, on_record=lambda r: fired.append(clock.now()) if r["status"] == "firing"
                    else fired.append(-clock.now()))
    for i in range(12):  # one sample per 10-min step, above the threshold from step 6 (t = 3000 s)
        clock.set(i * 600.0)
        pipe.ingest([Sample("verl_kl_coef", {"node": "n"}, 2.0 if i >= 5 else 0.5, i * 600.0)])
        for k in range(20):  # ticks between two steps: the 10-min-old finding stays fresh
            clock.set(i * 600.0 + k * 30.0)
            pipe.tick()
    # for = max(1 min, 3 x 10 min): fires 30 min after the condition began, and never resolves between steps
    assert fired == [3000.0 + 1800.0]
    pipe.close()
