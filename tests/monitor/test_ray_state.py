"""Ray's State API answers (recorded from a real Ray 2.60, tests/fixtures/ray-2.60-state-api-dead.json)
into death causes, the token found as Ray's clients find it, and the ray config section (issue 33)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from monitor.config import load_config
from monitor.errors import ConfigError
from monitor.sources.ray_state import RECENT_S, RayConfig, RayStateSource, classify, find_token

FIX = json.loads((Path(__file__).resolve().parents[1] / "fixtures/ray-2.60-state-api-dead.json").read_text())
ACTORS = FIX["actors"]["data"]["result"]["result"]
WORKERS = FIX["workers"]["data"]["result"]["result"]


def _worker(actor: dict) -> dict:
    return next(w for w in WORKERS if w["pid"] == actor["pid"])


def test_real_deaths_classified_exit_ray_oom_and_killed() -> None:
    causes = sorted(classify(a, _worker(a))[0] for a in ACTORS)
    assert causes == ["exit", "killed", "ray_oom"]
    for a in ACTORS:
        cause, text = classify(a, _worker(a))
        if cause == "exit":
            assert text == "exited with code 3"
        if cause == "ray_oom":
            assert "killed due to the node running low on memory" in text and "\n" not in text
        if cause == "killed":
            assert "kernel OOM killer" in text
        assert classify(a, None)[0] == cause  # the actor's own death cause suffices


@pytest.mark.parametrize("death, exit_type, cause", [
    ({"actor_died_error_context": {"reason": "NODE_DIED", "error_message": "node died"}}, "", "node_lost"),
    ({"actor_died_error_context": {"reason": "RAY_KILL"}}, "INTENDED_SYSTEM_EXIT", "ray_kill"),
    ({"actor_died_error_context": {"reason": "OUT_OF_SCOPE"}}, "", "out_of_scope"),
    ({"creation_task_failure_context": {"formatted_exception_string": "RuntimeError: bad init"}}, "USER_ERROR",
     "init_error"),
    ({}, "NODE_OUT_OF_MEMORY", "ray_oom"),
])
def test_other_causes(death: dict, exit_type: str, cause: str) -> None:
    assert classify({"death_cause": death}, {"exit_type": exit_type})[0] == cause


def test_token_found_in_rays_order(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("from-home\n")
    (tmp_path / "tok").write_text("  from-path \nsecond line\n")
    cfg = RayConfig("http://127.0.0.1:8265")
    assert find_token(cfg, {"HOME": str(home)}) == ("from-home", str(home / ".ray" / "auth_token"))
    assert find_token(cfg, {"HOME": str(home), "RAY_AUTH_TOKEN_PATH": str(tmp_path / "tok")})[0] == "from-path"
    assert find_token(cfg, {"HOME": str(home), "RAY_AUTH_TOKEN": "env"})[0] == "env"
    assert find_token(RayConfig("u", token="cfg"), {"RAY_AUTH_TOKEN": "env"})[0] == "cfg"
    assert find_token(RayConfig("u", token_env="MINE"), {"MINE": "m", "RAY_AUTH_TOKEN": "env"})[0] == "m"
    assert find_token(cfg, {"HOME": str(tmp_path / "nobody")})[0] is None


def test_recent_deaths_paged_then_resolved_old_ones_never() -> None:
    src = RayStateSource(RayConfig("http://127.0.0.1:8265"), None)  # type: ignore[arg-type]
    died = max(w["end_time_ms"] for w in WORKERS) / 1000
    src._learn(ACTORS, WORKERS, died + 5)
    assert len(src.deaths) == 3
    labels = {d.labels["cause"]: d.labels for d in src.deaths.values()}
    assert labels["exit"]["actor_class"] == "RolloutWorker" and labels["exit"]["node"] == "127.0.0.1"
    late = RayStateSource(RayConfig("http://127.0.0.1:8265"), None)  # type: ignore[arg-type]
    late._learn(ACTORS, WORKERS, died + RECENT_S + 60)  # a monitor started long after: history, not news
    assert not late.deaths and len(late.done) == 3


def test_ray_config_section(tmp_path: Path) -> None:
    def load(section: object) -> object:
        (tmp_path / "m.yaml").write_text(yaml.safe_dump({"ray": section}))
        return load_config(tmp_path / "m.yaml")

    assert load({"dashboard_url": "http://127.0.0.1:8265/", "interval": "30s"}).ray == RayConfig(  # type: ignore[attr-defined]
        "http://127.0.0.1:8265", None, None, 30.0, 5.0)
    with pytest.raises(ConfigError, match="ray.dashboard_url"):
        load({"dashboard_url": "127.0.0.1:8265"})
    with pytest.raises(ConfigError, match="ray.token: empty"):
        load({"dashboard_url": "http://h:1", "token": " "})
    with pytest.raises(ConfigError, match=r"ray\.tokn: unknown key"):
        load({"dashboard_url": "http://h:1", "tokn": "x"})
