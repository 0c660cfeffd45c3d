"""The side-by-side benchmark's own arithmetic: the injected fault and the eval-lag breakdown."""

from __future__ import annotations

from benchmarks.monitor_scale import FAULT_LINE, Cluster, inject_fault
from benchmarks.monitor_vs_prometheus import lag_breakdown


def test_the_fault_steps_one_counter_of_one_node_and_nothing_else() -> None:
    cluster = Cluster(2, 2)
    before = {p: b.decode().splitlines() for p, b in cluster.bodies.items()}
    inject_fault(cluster, 0)
    cluster.rebuild()
    changed = {p: [(a, b) for a, b in zip(before[p], body.decode().splitlines(), strict=True)
                   if a.startswith(FAULT_LINE) or b.startswith(FAULT_LINE)]
               for p, body in cluster.bodies.items()}
    assert [float(b.rsplit(" ", 1)[1]) - float(a.rsplit(" ", 1)[1]) for a, b in changed["/gpu-000/trainer"]] == [1.0]
    assert [a for a, b in changed["/gpu-001/trainer"] if a != b] == []


def test_lag_breakdown_names_the_part_the_slowest_scrapes_spent_waiting() -> None:
    # 99 scrapes evaluated promptly, 1 that waited 0.5 s for its tick; one row outside the window
    rows = [[10.0 + i, 0.01, 0.001, 0.05, 0.002] for i in range(99)] + [[200.0, 0.01, 0.001, 0.5, 0.002]]
    stats = {"lag_parts": rows + [[999.0, 9.0, 9.0, 9.0, 9.0]], "loop_lags": [[50.0, 0.004], [60.0, 0.2]]}
    out = lag_breakdown(stats, 0.0, 500.0)
    assert out["eval_lag_worst_1pct_mean_parts"] == {"scrape": 0.01, "ingest": 0.001, "wait": 0.5, "tick": 0.002}
    assert out["eval_lag_parts_p99"]["wait"] == 0.05 and out["event_loop_lag_p99_seconds"] == 0.2
    assert lag_breakdown({"lag_parts": rows}, 1000.0, 2000.0) == {}


def test_victoria_metrics_scrapes_what_prometheus_scrapes_without_its_rule_settings(tmp_path) -> None:
    import yaml

    from benchmarks._victoria import scrape_config
    from benchmarks.monitor_vs_prometheus import prometheus_config

    prom = prometheus_config(9, 3, tmp_path, ("verl-alerts.yml",))
    vm = yaml.safe_load(scrape_config(prom, tmp_path).read_text())
    want = yaml.safe_load(prom.read_text())
    assert "rule_files" not in vm and "evaluation_interval" not in vm["global"]
    assert vm["scrape_configs"] == want["scrape_configs"] and vm["global"]["scrape_interval"] == "5s"
