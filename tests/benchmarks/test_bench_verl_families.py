"""The failure families of issue 32 on runs written by verl 0.9.1's own code (benchmarks/data/verl_real2),
replayed live with the default rules and scored as benchmarks/verl_families.py scores them."""

from __future__ import annotations

import json

import pytest

from benchmarks.verl_families import DATA, main, replay, score


@pytest.mark.parametrize("name", [
    "grpo-entropy_collapse-20s",     # 10x in 20 steps: was only a P3 after ~17 h of 5-min means
    "rloo-entropy_collapse-3600s",   # the same rule at 1-h steps
    "ppo-grad_burst-60s",            # finite grad norm x50, then critic/vf_loss x75: nobody was paged
    "ppo-reward_hack-300s",          # score up, val-core down, validation every 10 steps
    "grpo-kl_blowup_early-90s",      # accelerating KL on GRPO from inside the warm-up: once, held, early
    "grpo-healthy_v1bug-60s",        # verl V1's clip_ratio never 0: not "at the cap"
    "ppo-healthy_v1bug-300s",
    "grpo-healthy_cadence-20s",      # 20 s -> 60 s steps with a 3x batch: no page
    "ppo-healthy_resume-60s",        # crash at 130, resume from 100: log truncated, steps repeated
    "grpo-healthy_ratchet-20s",      # peak memory ratchets 31 -> 44 GB in 25 steps, then flat: no leak page
    "grpo-healthy_growth-60s",       # responses grow x1.9 and the peak with them: no leak page
    "ppo-hang-20s",                  # 30 min in update_actor: TrainingStalled within max(5 min, 3 steps)
])
def test_family_run_comes_out_right(name: str) -> None:
    truth = json.loads((DATA / f"{name}.truth.json").read_text())
    r = score(truth, replay(DATA, truth))
    assert r["ok"], r


def test_page_quotes_the_evidence_and_names_both_series() -> None:
    truth = json.loads((DATA / "grpo-reward_hack-60s.truth.json").read_text())
    r = score(truth, replay(DATA, truth))
    assert r["paged_by"] == "RewardHackingSuspected", r
    assert "critic/score/mean pulling away from validation val-" in r["evidence"], r
    metric = r["evidence"].split("from validation ")[1].split(" on ")[0]
    assert f"while validation {metric} fell" in r["evidence"], r  # the same pair, both numbers


def test_json_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--only", "grpo-healthy_v1bug-60s", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[-1]["benchmark"] == "verl_families" and lines[-1]["runs"] == 1 and lines[-1]["false_pages"] == 0


def test_a_buffered_ppo_log_pages_its_kl_rise_once(tmp_path) -> None:
    """verl 0.7 writes through an 8 KB buffer: ~3 PPO records arrive at once, and the KL alert (held in steps)
    resolved and paged again at every burst at 90-s and 12-min steps (41 pages in one run)."""
    from benchmarks.verl_cadence import simulate as cadence_run
    from benchmarks.verl_runs import RunSpec
    from monitor.evaluation.rules import load_rule_files

    spec = RunSpec(version="0.7", algo="ppo", steps=240, step_s=720.0, seed=0, kl_drift_at=100)
    fired, _ = cadence_run(spec, load_rule_files(None), tmp_path, total_steps=240)
    assert [lab["alertname"] for _, lab in fired] == ["KLDriftDetected"]
