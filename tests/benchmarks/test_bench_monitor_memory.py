"""The long-run memory benchmark drives the daemon's ingest path on simulated time: every series of the
load is stored, each scrape lands as a new sample, and the rings never hold more than their capacities."""

from __future__ import annotations

from benchmarks.monitor_memory import run


def test_rounds_of_simulated_scrapes_fill_the_store_and_stay_within_the_ring_capacities() -> None:
    reports: list[dict] = []
    result = run(1, 2, [0.01, 0.02], reports.append)
    first, second = result["points"]
    assert (first["rounds"], second["rounds"]) == (8, 15) and len(reports) == 2
    assert first["series"] == second["series"] > 100  # a node's dcgm and trainer series, all stored
    assert first["ring_samples_held"] < second["ring_samples_held"] <= second["ring_samples_allowed"]
    # 15 rounds: a series nothing reads holds them all (20 samples of room), so the rings hold every sample
    assert second["ring_samples_held"] == 15 * second["series"]
    # the tick's cost is also given apart from its transitions: every tick is one or the other
    for p, rounds in ((first, 8), (second, 7)):
        assert 0 <= p["ticks_no_transition"] <= rounds and p["transitions_per_tick"] >= 0 and p["firing"] >= 0
        assert p["tick_cpu_ms_no_transition"] <= p["tick_cpu_ms"] * rounds / max(1, p["ticks_no_transition"])
        # ... and, of the quiet ones, those without the minutely housekeeping: the first tick evicts and trims
        assert p["ticks_evaluation_only"] <= p["ticks_no_transition"] - (p is first)
    # the steady figures are the same measure over the last 144 rounds: here every round of the point
    assert second["steady"] == {k: second[k] for k in second["steady"]}
    fast = run(1, 2, [0.21], lambda r: None)["points"][0]
    assert fast["steady"]["ticks_no_transition"] <= 144 < fast["ticks_no_transition"]


def test_a_fast_forwarded_store_holds_what_the_real_rounds_would_have() -> None:
    real = run(1, 2, [0.01, 0.2], lambda r: None)["points"][-1]
    fast = run(1, 2, [0.01, 0.2], lambda r: None, refill_h=0.02)["points"][-1]
    assert fast["rounds"] == real["rounds"] == 144
    assert fast["rounds_filled"] == 144 - 8 - 15 and real["rounds_filled"] == 0  # then 15 real rounds
    assert fast["series"] == real["series"]
    assert fast["ring_samples_held"] == real["ring_samples_held"]  # every ring as full, at the same times
