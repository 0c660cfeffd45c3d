"""The four diagnosis scenarios through exactly what the held-out check runs: ``verl-monitor replay
--input CSV --notify-config FILE``. Each page must name the right cause and fix with the live values of
the replayed series, and claim nothing the series do not show; each healthy twin must not claim it."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import yaml

from benchmarks.diagnosis_scenarios import (
    buffer_scenario,
    kl_scenario,
    loader_scenario,
    reward_scenario,
    write_csv,
)
from monitor.cli import main

CAUSE_WORDS = {  # what each path's root cause says; another path's words must not appear
    "reward_model": "reward model fails to load",
    "kl_coef": "kl_coef = ",
    "memory_growth": "rollout buffer",
    "data_loading": "data loading starves",
}


class Hook:
    """A webhook receiver on loopback that answers 200 and keeps the posted bodies."""

    def __init__(self) -> None:
        posts: list[dict] = []
        self.posts = posts

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:
                posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/hook"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def replay(tmp_path: Path):  # noqa: ANN201 - returns the runner
    hook = Hook()
    cfg = tmp_path / "alerting.yaml"
    cfg.write_text(yaml.safe_dump({"receivers": [{"name": "hook", "type": "webhook", "url": hook.url}],
                                   "route": {"receiver": "hook", "group_wait": "0s"}}))

    def run(columns: list) -> tuple[list[dict], list[dict]]:
        inp, out = tmp_path / "in.csv", tmp_path / "out.jsonl"
        write_csv(inp, columns)
        assert main(["replay", "--input", str(inp), "--output", str(out), "--notify-config", str(cfg)]) == 0
        return [json.loads(x) for x in out.read_text().splitlines()], list(hook.posts)

    yield run
    hook.close()


def incident(recs: list[dict], name: str) -> dict:
    found = [r for r in recs if r["kind"] == "incident" and r["labels"]["alertname"] == name
             and r["status"] == "firing"]
    assert found, f"no {name} incident; records: {sorted({r['labels']['alertname'] for r in recs if 'labels' in r})}"
    return found[-1]  # the last revision: what the incident says once all its members are in


def page_texts(posts: list[dict]) -> str:
    return json.dumps(posts)


def only_cause(root_cause: str, path: str) -> None:
    assert CAUSE_WORDS[path] in root_cause, root_cause
    for other, words in CAUSE_WORDS.items():
        if other != path:
            assert words not in root_cause, f"{path} incident also claims {other}: {root_cause}"


def test_kl_coef_zeroed_names_kl_coef_with_live_value_and_step(replay) -> None:  # noqa: ANN001
    recs, posts = replay(kl_scenario(np.random.default_rng(1)))
    inc = incident(recs, "TrainingDivergence")
    rc, fix = inc["root_cause"], inc["suggestion"]
    only_cause(rc, "kl_coef")
    # the gauge went 0.2 -> 0.0 at 90 min, i.e. step 1000 + 90*60/30 = 1180
    assert "kl_coef = 0.0 since step 1180 (verl_kl_coef; config says 0.2)" in rc
    assert "verl_kl_divergence" in rc and "Set kl_coef back to 0.2" in fix
    assert inc["firedAt"] >= inc["startsAt"] and inc["firedAt"].startswith("2026-01-01T")
    alerts = [r for r in recs if r["kind"] == "alert"]
    assert alerts and all("firedAt" in r for r in alerts)
    assert "kl_coef = 0.0" in page_texts(posts)  # the page itself carries it


def test_kl_drift_with_penalty_on_does_not_blame_kl_coef(replay) -> None:  # noqa: ANN001
    recs, _ = replay(kl_scenario(np.random.default_rng(1), zeroed=False))
    assert any(r["kind"] == "alert" and r["labels"]["alertname"] == "KLDriftDetected" for r in recs)
    assert not [r for r in recs if r["kind"] == "incident"]  # one alert, no measured cause: no incident


def test_reward_model_broken_names_loading_and_one_sample_check(replay) -> None:  # noqa: ANN001
    recs, posts = replay(reward_scenario(np.random.default_rng(2)))
    inc = incident(recs, "TrainingDivergence")
    rc, fix = inc["root_cause"], inc["suggestion"]
    only_cause(rc, "reward_model")
    assert "verl_reward_mean" in rc and ("NaN" in rc or "reward mean is 0" in rc or "reward mean is -0" in rc)
    assert "was 0.8" in rc  # the level before, measured
    assert "verl_nonfinite_steps_total" in rc
    assert "load_reward_model(reward.path).score([...])" in fix
    assert "load_reward_model" in page_texts(posts)


def test_reward_cliff_without_nan_is_caught_and_diagnosed(replay) -> None:  # noqa: ANN001
    recs, _ = replay(reward_scenario(np.random.default_rng(5), with_nan=False))
    inc = incident(recs, "TrainingDivergence")
    only_cause(inc["root_cause"], "reward_model")
    assert re.search(r"reward mean is -?0\.0\d* \(verl_reward_mean, was 0\.7\d* before", inc["root_cause"])
    assert "load_reward_model(reward.path).score([...])" in inc["suggestion"]


def test_reward_cliff_after_kl_coef_went_to_zero_does_not_blame_reward_model(replay) -> None:  # noqa: ANN001
    recs, _ = replay(reward_scenario(np.random.default_rng(5), with_nan=False, kl_off_at_min=20))
    assert any(r["kind"] == "alert" and r["labels"]["alertname"] == "RewardDistributionDrift" for r in recs)
    assert not any("reward model fails" in r.get("root_cause", "") for r in recs if r["kind"] == "incident")


def test_nonfinite_step_with_healthy_rewards_does_not_blame_reward_model(replay) -> None:  # noqa: ANN001
    recs, _ = replay(reward_scenario(np.random.default_rng(2), broken=False))
    assert any(r["kind"] == "alert" and r["labels"]["alertname"] == "NonFiniteGradients" for r in recs)
    assert not [r for r in recs if r["kind"] == "incident"]


def test_unbounded_buffer_names_rollout_buffer_max_size(replay) -> None:  # noqa: ANN001
    recs, posts = replay(buffer_scenario(np.random.default_rng(3)))
    inc = incident(recs, "MemoryGrowth")
    rc, fix = inc["root_cause"], inc["suggestion"]
    only_cause(rc, "memory_growth")
    assert "rollout_buffer_max_size = -1 (unbounded, verl_config_info)" in rc
    assert 'verl_rollout_buffer_size{stage="train"}' in rc and "MB/min" in rc
    assert "Set rollout_buffer_max_size: 50000 (now -1) and rollout_buffer_eviction_policy: fifo or priority " \
           "(now fifo)" in fix
    assert "rollout_buffer_max_size: 50000" in page_texts(posts)


def test_memory_growth_with_flat_bounded_buffer_is_a_leak(replay) -> None:  # noqa: ANN001
    recs, _ = replay(buffer_scenario(np.random.default_rng(3), unbounded=False))
    inc = incident(recs, "MemoryGrowth")
    assert "a leak" in inc["root_cause"] and "MB/min" in inc["root_cause"]
    assert "rollout_buffer_max_size: 50000" not in inc["suggestion"]
    assert "full in" in inc["suggestion"]  # time to full from the measured total and slope


def test_data_loading_bottleneck_quotes_live_loader_settings(replay) -> None:  # noqa: ANN001
    recs, posts = replay(loader_scenario(np.random.default_rng(4)))
    inc = incident(recs, "DataLoadingBottleneck")
    rc, fix = inc["root_cause"], inc["suggestion"]
    only_cause(rc, "data_loading")
    assert 'verl_stage_seconds{stage="dataloader"}' in rc and re.search(r"GPU utilisation 0\.[89]\d* \(verl_gpu_utilization_ratio, normal\)", rc)
    assert "data.num_workers = 2" in rc
    assert "data.num_workers: 8 (now 2), data.persistent_workers: true (now false), data.pin_memory: true " \
           "(now false)" in fix
    assert "data.num_workers: 8" in page_texts(posts)


def test_throughput_drop_with_steady_loader_does_not_blame_data_loading(replay) -> None:  # noqa: ANN001
    recs, _ = replay(loader_scenario(np.random.default_rng(4), loader_bound=False))
    assert any(r["kind"] == "alert" and r["labels"]["alertname"] == "ThroughputDrop" for r in recs)
    assert not [r for r in recs if r["kind"] == "incident"]
