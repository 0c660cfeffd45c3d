"""The monitor against the trainer's real exposition (verl.metrics.registry, imported by the test only:
monitor itself knows the trainer through names and HTTP). A freshly started trainer whose gauges still
hold their initial zeros must not page anyone; a stuck heartbeat must."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from alerting.clock import SimulatedClock
from monitor.evaluation.rules import load_rule_files
from monitor.pipeline import Pipeline
from monitor.sources.prom_text import parse_exposition
from verl.metrics.registry import MetricsRegistry

T0 = 1_767_225_600.0


def scrape_loop(reg: MetricsRegistry, minutes: int, beat: bool) -> list[dict]:
    clock, recs = SimulatedClock(T0), []
    pipe = Pipeline(load_rule_files(None), clock, on_record=recs.append)
    for k in range(0, minutes * 60, 10):
        if beat:
            reg.metrics["verl_heartbeat_timestamp_seconds"].set(T0 + k)
        text = generate_latest(reg.registry).decode()
        batch = parse_exposition(text, T0 + k, "trainer", "gpu-08", {"job": "verl", "target": "trainer"})
        assert batch.errors == {}
        clock.set(T0 + k)
        pipe.ingest(batch.samples, "trainer")
        pipe.tick()
    pipe.close()
    return recs


def test_fresh_trainer_registry_raises_nothing() -> None:
    recs = scrape_loop(MetricsRegistry(), 40, beat=True)
    assert recs == [], [r["labels"]["alertname"] for r in recs]


def test_trainer_that_never_beats_is_stalled_after_5_min() -> None:
    recs = scrape_loop(MetricsRegistry(), 10, beat=False)
    assert [r["labels"]["alertname"] for r in recs] == ["TrainingStalled"]
    assert recs[0]["startsAt"] == "2026-01-01T00:05:10Z"


def test_counter_created_families_are_not_ingested() -> None:
    reg = CollectorRegistry()
    Counter("jobs", "d", ["kind"], registry=reg).labels("a").inc()
    batch = parse_exposition(generate_latest(reg).decode(), 1.0, "t", None, {})
    assert [s.name for s in batch.samples] == ["jobs_total"]
