"""Ray's State API answers (recorded from a real Ray 2.60, tests/fixtures/ray-2.60-state-api-dead.json)
into death causes, the token found as Ray's clients find it, and the ray config section (issue 33)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from monitor.config import load_config
from monitor.errors import MonitorConfigError
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
    with pytest.raises(MonitorConfigError, match="ray.dashboard_url"):
        load({"dashboard_url": "127.0.0.1:8265"})
    with pytest.raises(MonitorConfigError, match="ray.token: empty"):
        load({"dashboard_url": "http://h:1", "token": " "})
    with pytest.raises(MonitorConfigError, match=r"ray\.tokn: unknown key"):
        load({"dashboard_url": "http://h:1", "tokn": "x"})


def _answer(records: list) -> bytes:
    return json.dumps({"result": True, "data": {"result": {"total": len(records), "result": records}}}).encode()


def _source(actors: bytes, workers: bytes, **kw: object) -> RayStateSource:
    import httpx

    def handle(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=actors if "/actors" in req.url.path else workers)

    src = RayStateSource(RayConfig("http://127.0.0.1:8265"), httpx.AsyncClient(transport=httpx.MockTransport(handle)))
    for k, v in kw.items():
        setattr(src, k, v)
    return src


def _poll(src: RayStateSource, now: float):  # noqa: ANN202
    import asyncio

    from alerting.clock import SimulatedClock

    return asyncio.run(src.poll(SimulatedClock(now)))


def test_a_malformed_record_is_skipped_and_counted_and_the_real_deaths_beside_it_are_read() -> None:
    died = max(w["end_time_ms"] for w in WORKERS) / 1000
    bad_worker = {**WORKERS[0], "worker_id": "w-bad", "pid": 4242, "end_time_ms": "abc", "exit_type": "SYSTEM_ERROR"}
    odd_actor = {**ACTORS[0], "actor_id": "odd", "pid": 777, "death_cause": "a string, not an object"}
    src = _source(_answer([None, *ACTORS, 17, odd_actor]), _answer([*WORKERS, None, bad_worker, ["x"]]))
    got = _poll(src, died + 5)
    deaths = [s for p in got.polled for s in p.batch.samples if s.name == "verl_ray_death"]
    assert sorted(s.labels["cause"] for s in deaths) == ["exit", "killed", "ray_oom"]  # the round is not lost
    errors = got.polled[0].batch.errors
    assert errors["bad_record"] == 6 and src.bad_records == 6  # 4 non-objects, 2 fields of the wrong type
    assert "end_time_ms 'abc' is not a number" in got.polled[0].batch.notes["bad_record"] or \
        "death_cause" in got.polled[0].batch.notes["bad_record"]


def test_an_answer_over_the_body_limit_is_refused_with_one_line_not_read_whole() -> None:
    from monitor.sources.ray_state import RayAnswerError

    huge = _answer([{**ACTORS[0], "actor_id": f"a{i}", "padding": "x" * 1000} for i in range(200)])
    src = _source(huge, _answer([]), body_limit=64 << 10)
    with pytest.raises(RayAnswerError, match=r"/api/v0/actors: answer over 65536 bytes; not read"):
        _poll(src, 1e9)
    assert len(_poll(_source(_answer(ACTORS), _answer(WORKERS), body_limit=64 << 10), 1e9).polled) == 1


def test_deaths_past_the_listed_limit_are_one_series_that_says_how_many(monkeypatch: pytest.MonkeyPatch) -> None:
    from monitor.sources import ray_state

    monkeypatch.setattr(ray_state, "MAX_LISTED", 50)
    now = 2e9
    actors = [{"actor_id": f"a{i}", "class_name": "RolloutWorker", "pid": 1000 + i, "node_id": f"n{i % 7}",
               "death_cause": {"actor_died_error_context": {"reason": "NODE_DIED"}}} for i in range(180)]
    src = _source(_answer([]), _answer([]))
    src.polls = 1  # watching already: deaths without an end time died now
    src._learn(actors, [], now)
    src.client = _source(_answer(actors), _answer([])).client
    got = _poll(src, now + 1)
    deaths = [s for s in got.polled[0].batch.samples if s.name == "verl_ray_death"]
    listed = [s for s in deaths if s.labels["kind"] == "actor"]
    unlisted = [s for s in deaths if s.labels["kind"] == "unlisted"]
    assert len(listed) == 50 and len(unlisted) == 1 and unlisted[0].value == 130.0
    assert unlisted[0].labels["listed"] == "50"

    from monitor_scenarios import firing, run, times

    t = times(600, 15.0)
    recs = run([("verl_ray_death", unlisted[0].labels, t, [130.0] * len(t))])
    summary = firing(recs, "RayActorDied")[0]["annotations"]["summary"]
    assert summary.startswith("180 Ray deaths at once, 50 listed: 130 more"), summary
