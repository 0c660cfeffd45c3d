"""Issue 24, monitor side: per-target limits with Prometheus semantics, the series budget shared fairly
between targets, stale-series eviction, and stamps from targets (bounds, honor_timestamps, liveness
from the scrape's success)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest
import yaml

import monitor.daemon as daemon_mod
from alerting.clock import SimulatedClock
from monitor.config import MonitorConfigError, load_config
from monitor.evaluation.rules import load_rule_files
from monitor.model import Sample
from monitor.pipeline import Pipeline
from monitor.series.store import Series, SeriesStore, StoreLimits
from monitor.sources.prom_text import Target, scrape

T0 = 1_700_000_000.0


def run_scrape(target: Target, text: str, now: float):  # noqa: ANN201
    async def go():  # noqa: ANN202
        transport = httpx.MockTransport(lambda req: httpx.Response(200, text=text))
        async with httpx.AsyncClient(transport=transport) as client:
            return await scrape(client, target, now)
    return asyncio.run(go())


# -- 1. budgets ------------------------------------------------------------------------------------

def test_a_churning_source_cannot_starve_a_healthy_one() -> None:
    store = SeriesStore(StoreLimits(capacity=4, max_series=100, max_series_per_metric=1000))
    for i in range(500):  # pod=<uuid> churn: fills the store alone, then keeps asking
        store.get_or_create("noise", {"pod": str(i)}, "noisy")
    assert len(store) == 100
    trainer = [store.get_or_create("verl_gpu_memory_used_bytes", {"gpu": str(g)}, "trainer") for g in range(8)]
    assert all(s is not None for s in trainer) and len(store) == 100
    assert store.held_by("noisy") == 92 and store.evicted == {"fair_share": 8}
    assert store.get_or_create("noise", {"pod": "new"}, "noisy") is None  # over its share: refused
    assert store.dropped_by_source[("noisy", "max_series")] >= 400


def test_the_per_metric_cap_is_per_source() -> None:
    store = SeriesStore(StoreLimits(capacity=4, max_series=10_000, max_series_per_metric=50))
    for i in range(200):
        store.get_or_create("verl_gpu_memory_used_bytes", {"pod": str(i)}, "noisy")
    assert store.held_by("noisy") == 50
    assert store.get_or_create("verl_gpu_memory_used_bytes", {"gpu": "0"}, "trainer") is not None
    assert store.get_or_create("verl_oom_events_total", {"component": "reward"}, "trainer") is not None


def test_unseen_series_are_evicted_but_pinned_ones_stay() -> None:
    pinned: set[str] = {"keep"}
    store = SeriesStore(StoreLimits(capacity=4, max_series=3, stale_after_s=300.0, evict_after_s=600.0),
                        pinned=lambda s: s.labels.get("id") in pinned)
    for i, name in enumerate(("a", "b", "keep")):
        s = store.get_or_create("m", {"id": name}, "x")
        assert s is not None
        s.append(T0 + i, 1.0)
    assert store.get_or_create("m", {"id": "d"}, "x") is None  # full
    assert store.evict_stale(T0 + 100) == 0
    assert store.evict_stale(T0 + 1000) == 2 and len(store) == 1  # "keep" is pinned
    assert store.get_or_create("m", {"id": "d"}, "x") is not None  # the budget came back


def test_evicted_series_leave_the_evaluator_and_come_back_fresh() -> None:
    clock = SimulatedClock(T0)
    pipe = Pipeline(load_rule_files(None), clock, limits=StoreLimits(stale_after_s=60.0, evict_after_s=300.0))
    labels = {"node": "n1", "gpu": "0", "job": "dcgm"}
    pipe.ingest([Sample("DCGM_FI_DEV_GPU_TEMP", labels, 50.0, T0)], "dcgm", T0)
    (s,) = list(pipe.store)
    assert pipe.evaluator.bindings(s)
    clock.set(T0 + 600)
    pipe.tick()
    assert len(pipe.store) == 0 and s.id not in pipe.evaluator._by_series
    pipe.ingest([Sample("DCGM_FI_DEV_GPU_TEMP", labels, 51.0, T0 + 600)], "dcgm", T0 + 600)
    (again,) = list(pipe.store)
    assert again.id != s.id and len(again) == 1
    pipe.close()


@pytest.mark.parametrize(("kw", "text", "reason"), [
    ({"sample_limit": 2}, "a 1\nb 2\nc 3\n", "sample_limit"),
    ({"label_limit": 2}, 'a{x="1",y="2",z="3"} 1\n', "label_limit"),
    ({"label_value_length_limit": 8}, 'a{x="0123456789"} 1\n', "label_value_length_limit"),
])
def test_over_a_target_limit_the_scrape_fails_as_a_whole(kw: dict, text: str, reason: str) -> None:
    batch, _, up = run_scrape(Target("t", "http://127.0.0.1:9/metrics", **kw), text, T0)
    assert not up and batch.errors == {reason: 1}
    assert [(s.name, s.value) for s in batch.samples] == [("up", 0.0)]
    ok, _, ok_up = run_scrape(Target("t", "http://127.0.0.1:9/metrics", **kw), "a 1\n", T0)
    assert ok_up and [s.name for s in ok.samples] == ["a", "up"]


def test_limits_and_honor_timestamps_are_configurable(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    target = {"url": "http://127.0.0.1:1/metrics", "label_limit": 30, "label_value_length_limit": 200,
              "honor_timestamps": False}
    path.write_text(yaml.safe_dump({"targets": [target], "state_db": str(tmp_path / "s.db")}))
    t = load_config(path).targets[0]
    assert (t.label_limit, t.label_value_length_limit, t.honor_timestamps) == (30, 200, False)
    path.write_text(yaml.safe_dump({"targets": [dict(target, label_limit=-1)]}))
    with pytest.raises(MonitorConfigError, match="label_limit"):
        load_config(path)


# -- 2. stamps from targets ------------------------------------------------------------------------

def test_stamps_out_of_bounds_are_refused_and_honor_timestamps_false_restamps() -> None:
    old, ahead = int((T0 - 3600) * 1000), int((T0 + 3600) * 1000)
    text = f"a 1 {old}\nb 2 {ahead}\nc 3 {int(T0 * 1000)}\n"
    batch, _, up = run_scrape(Target("t", "http://127.0.0.1:9/metrics"), text, T0)
    assert up and batch.errors == {"too_old_timestamp": 1, "future_timestamp": 1}
    assert [s.name for s in batch.samples] == ["c", "up"] and {s.name for s in batch.refused} == {"a", "b"}
    flat, _, _ = run_scrape(Target("t", "http://127.0.0.1:9/metrics", honor_timestamps=False), text, T0)
    assert not flat.errors and {s.t for s in flat.samples} == {T0}


def _daemon(tmp_path: Path, clock: SimulatedClock) -> daemon_mod.Daemon:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"listen": "127.0.0.1:0", "state_db": str(tmp_path / "state.db"),
                                    "reward_outliers": False, "targets": []}))
    return daemon_mod.Daemon(load_config(path), clock)


def test_an_answering_trainer_with_a_clock_an_hour_behind_is_not_down(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    clock = SimulatedClock(T0)
    d = _daemon(tmp_path, clock)
    target = Target("trainer", "http://127.0.0.1:9/metrics", node="gpu-01")
    try:
        with caplog.at_level(logging.WARNING, "monitor.daemon"):
            for i in range(40):  # 40 min: fresh stamps for 2 rounds, then the trainer's clock jumps back 1 h
                now = clock.now()
                stamp = now if i < 2 else now - 3600
                batch, _, up = run_scrape(target, f"verl_global_step {i} {int(stamp * 1000)}\n", now)
                assert up
                d.ingest(batch, target.name, now)
                d.pipeline.tick()
                clock.advance(60.0)
        names = {a.name for a in d.pipeline.book.firing()} | {a.name for a in d.pipeline.book.pending()}
        assert "TrainerDown" not in names
        assert d.metrics.scrape_errors.labels("trainer", "too_old_timestamp")._value.get() == 38
        assert sum("too_old_timestamp" in r.message for r in caplog.records) == 1  # once a minute, not per scrape
    finally:
        d.close()


def test_repeated_and_out_of_order_stamps_are_logged_per_target(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    clock = SimulatedClock(T0)
    d = _daemon(tmp_path, clock)
    try:
        with caplog.at_level(logging.WARNING, "monitor.daemon"):
            for stamp in (T0, T0 - 5, T0):
                batch, _, _ = run_scrape(Target("exp", "http://127.0.0.1:9/metrics"),
                                         f"x 1 {int(stamp * 1000)}\n", T0)
                d.ingest(batch, "exp", T0)
        text = "\n".join(r.message for r in caplog.records)
        assert "exp:" in text and "out_of_order" in text and "duplicate_timestamp" in text
    finally:
        d.close()


def test_a_for_rule_starts_when_the_monitor_saw_the_sample_not_at_its_stamp() -> None:
    rules = [r for r in load_rule_files(None) if r.alert == "TrainerDown" and r.for_s]
    clock = SimulatedClock(T0)
    pipe = Pipeline(rules, clock)
    pipe.ingest([Sample("up", {"job": "verl", "node": "n1"}, 0.0, T0 - 100)], "trainer", T0)
    (c,) = pipe.evaluator.tick(T0).candidates
    assert c.since == T0 and not c.ready
    pipe.close()


# -- end to end: a churning exporter beside a healthy trainer, over HTTP ---------------------------

def exposition(body):  # noqa: ANN001, ANN201
    """A loopback endpoint serving ``body()`` anew on every scrape."""
    from monitor_http import Peer

    def handle(h) -> None:  # noqa: ANN001
        data = body().encode()
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return Peer(handle)


@pytest.mark.slow
def test_a_churning_exporter_beside_the_trainer_end_to_end(tmp_path: Path) -> None:
    import itertools
    import time

    from monitor_http import RunningDaemon, wait_for

    uid = itertools.count()
    churn = exposition(lambda: "".join(f'verl_gpu_memory_used_bytes{{pod="{next(uid):x}"}} 1\n' for _ in range(100)))
    started = time.monotonic()
    trainer = exposition(lambda: "verl_global_step 5\n" + (
        'verl_gpu_memory_used_bytes{gpu="0"} 7e10\n' if time.monotonic() - started > 2 else ""))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"rules": [
        {"alert": "GPUMemoryHigh", "severity": "P1", "select": "verl_gpu_memory_used_bytes",
         "detector": {"type": "threshold", "op": ">", "value": 6e10}, "summary": "high"}]}))
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({
        "listen": "127.0.0.1:0", "state_db": str(tmp_path / "state" / "state.db"), "eval_interval": "0.1s",
        "rules": ["rules.yaml"], "reward_outliers": False, "limits": {"max_series": 300, "max_series_per_metric": 200},
        "targets": [{"name": "noisy", "url": churn.url, "interval": "0.2s", "node": "n2"},
                    {"name": "trainer", "url": trainer.url, "interval": "0.2s", "node": "n1"}]}))
    d = RunningDaemon(path)
    try:
        firing = lambda: [a for a in d.daemon.pipeline.book.firing() if a.labels.get("gpu") == "0"]  # noqa: E731
        assert wait_for(lambda: bool(firing()), timeout=15)
        assert d.daemon.pipeline.store.held_by("noisy") <= 201  # its metric cap, plus its `up`
        assert d.daemon.metrics.scrape_errors.labels("noisy", "series_limit")._value.get() > 0
    finally:
        d.stop()
        churn.close()
        trainer.close()


@pytest.mark.parametrize("late_s,refused", [(240.0, False), (330.0, True), (540.0, True)])
def test_samples_stamped_past_the_lookback_are_refused_and_counted_not_stored_inert(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, late_s: float, refused: bool) -> None:
    # issue 36: 5-10 min late used to be stored although no rule could ever judge it (its alert never fired)
    clock = SimulatedClock(T0)
    d = _daemon(tmp_path, clock)
    target = Target("trainer", "http://127.0.0.1:9/metrics", node="gpu-01")
    try:
        with caplog.at_level(logging.WARNING, "monitor.daemon"):
            batch, _, up = run_scrape(target, f"verl_gpu_temperature_celsius 97 {int((T0 - late_s) * 1000)}\n", T0)
            d.ingest(batch, target.name, T0)
        stored = [s for s in d.pipeline.store if s.name == "verl_gpu_temperature_celsius" and s.last_v == s.last_v]  # NaN: never stored
        counted = d.metrics.scrape_errors.labels("trainer", "too_old_timestamp")._value.get()
        assert up and counted == (1 if refused else 0)
        logged = [r.message for r in caplog.records if "too_old_timestamp" in r.message]
        assert len(logged) == (1 if refused else 0) and all("honor_timestamps: false" in m for m in logged)
        assert bool(stored) != refused
    finally:
        d.close()


def test_a_young_series_lives_as_long_as_its_sources_cadence_allows() -> None:
    """On a verl log at ~1-h steps a key first written a few steps in has no cadence of its own for hours; the
    hour's eviction dropped it (and its detector's memory) between its first samples. It now lives ten of its
    source's intervals; a young series of a source with no known cadence is still evicted after the hour."""
    store = SeriesStore(StoreLimits(capacity=64, max_series=10, stale_after_s=300.0, evict_after_s=3600.0))
    step = store.get_or_create("verl_jsonl_timing_s_step", {}, "verl_jsonl")
    assert step is not None
    for i in range(6):
        step.append(T0 + 3600.0 * i, 3600.0)
    young = store.get_or_create("verl_jsonl_response_length_mean", {}, "verl_jsonl")
    lone = store.get_or_create("m", {}, "elsewhere")
    assert young is not None and lone is not None
    young.append(T0 + 3600.0 * 5, 225.0)
    lone.append(T0 + 3600.0 * 5, 1.0)
    now = T0 + 3600.0 * 5 + 1.5 * 3600.0  # 1.5 h later: the next step is late, as jittered 1-h steps are

    def horizon(s: Series) -> float:  # the evaluator's: ten of the series' own intervals
        return 10 * s.interval()

    assert store.evict_stale(now, horizon) == 1  # the lone one only
    assert store.get_or_create("verl_jsonl_response_length_mean", {}, "verl_jsonl") is young
    assert store.evict_stale(T0 + 3600.0 * 5 + 10.5 * 3600.0, horizon) == 2  # ten steps unseen: the log is gone


def test_a_log_whose_every_step_key_is_young_keeps_them_through_a_late_step() -> None:
    """At ~1-h steps every per-step key of a verl log is young together: the source's only mature series are
    its liveness ones, sampled at each poll. A late step (1.5 h) evicted them all, each time, so no key ever
    reached the four samples of a cadence and a response-length collapse was never judged. The gaps between
    a young series' first samples count for its source's cadence."""
    store = SeriesStore(StoreLimits(capacity=64, max_series=10, stale_after_s=300.0, evict_after_s=3600.0))
    poll = store.get_or_create("verl_step_in_progress_seconds", {}, "verl_jsonl")
    length = store.get_or_create("verl_jsonl_response_length_mean", {}, "verl_jsonl")
    entropy = store.get_or_create("verl_jsonl_actor_entropy", {}, "verl_jsonl")
    assert poll is not None and length is not None and entropy is not None
    for i in range(31):  # polled every 5 min through the late step
        poll.append(T0 + 300.0 * i, 300.0 * i)
    length.append(T0, 225.0)
    length.append(T0 + 3600.0, 220.0)
    entropy.append(T0 + 3600.0, 0.6)  # first written a step later: one sample so far
    now = T0 + 3600.0 + 1.5 * 3600.0

    def horizon(s: Series) -> float:
        return 10 * s.interval()

    assert store.evict_stale(now, horizon) == 0
    assert store.get_or_create("verl_jsonl_response_length_mean", {}, "verl_jsonl") is length
    assert store.get_or_create("verl_jsonl_actor_entropy", {}, "verl_jsonl") is entropy
    assert store.evict_stale(T0 + 3600.0 + 10.5 * 3600.0, horizon) == 3  # ten steps unseen: the log is gone
