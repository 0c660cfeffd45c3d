"""Rollout servers found through file_sd (issue 33): a stalled vLLM server is paged by its address within
3 min -- also one added to the file later --, a generating or an idle one is not; KV cache full with a
queue; SGLang's names; a target removed from the file is dropped without a TrainerDown.

Real HTTP on loopback, the real file_sd reader, config loader, rules and alert book; time simulated
(``deployment_fakes.SimulatedDaemon``), every 5 s a scrape round and an evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.deployment import (
    Exposition,
    SimulatedDaemon,
    VLLMServer,
    fixture,
    set_value,
    write_sd,
)
from monitor.detectors.events import CounterStallDetector
from monitor.sources.prom_text import parse_exposition
from monitor.sources.relabel import relabel

STALL_PAGE_S = 180.0  # the bound: paged within 3 min of the stall


@pytest.fixture
def servers():
    made: list[Exposition] = []

    def make(cls=VLLMServer):  # noqa: ANN001, ANN202
        made.append(cls())
        return made[-1]
    yield make
    for s in made:
        s.close()


def test_vllm_and_sglang_names_with_colons_parse_and_carry_the_server_address() -> None:
    for name in ("vllm-v1-metrics.prom", "sglang-metrics.prom"):
        batch = parse_exposition(fixture(name), 0.0, "t", None, {"instance": "10.0.0.5:8000", "job": "vllm"})
        relabel(batch)
        names = {s.name for s in batch.samples}
        assert not batch.errors, batch.errors
        rollout = [s for s in batch.samples if ":" in s.name]
        assert rollout and all(s.labels["server"] == "10.0.0.5:8000" for s in rollout)
        if name.startswith("vllm"):
            assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total",
                    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"} <= names
            assert "vllm:generation_tokens_created" not in names  # counters' creation stamps are plumbing
        else:
            assert {"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput",
                    "sglang:token_usage", "sglang:realtime_tokens_total"} <= names


def test_counter_stall_counts_flat_time_and_a_reset_as_movement() -> None:
    d = CounterStallDetector(window=90)
    assert not d.update(0, 10).active
    assert not d.update(85, 10).active
    assert d.update(90, 10).active
    assert not d.update(95, 3).active  # restarted: counts anew
    assert d.update(185, 3).details["stalled_s"] == 90


def test_stalled_vllm_server_paged_by_address_not_a_generating_or_idle_one_also_one_added_later(
        tmp_path: Path, servers) -> None:  # noqa: ANN001
    stalled, generating, idle, late = servers(), servers(), servers(), servers()
    sd = tmp_path / "rollout.json"
    write_sd(sd, [{"targets": [stalled.address, generating.address, idle.address],
                   "labels": {"job": "vllm", "cluster_role": "rollout"}}])
    mon = SimulatedDaemon(tmp_path, {"file_sd": [{"files": [str(sd)], "job": "vllm", "interval": "5s"}]})
    stall_at = {stalled.address: 60.0, late.address: 400.0}

    def move(t: float) -> None:
        for s in (stalled, generating, late):
            s.running, s.waiting = 32, 4
            if t < stall_at.get(s.address, float("inf")):
                s.tokens += 5000  # a generating server's counter moves every scrape
            s.render()
        idle.render()  # nothing running, nothing waiting, counter flat: idle, not stalled
        if t == 300.0:  # a new server is written into the file later; it stalls at 400 s
            write_sd(sd, [{"targets": [stalled.address, generating.address, idle.address, late.address],
                           "labels": {"job": "vllm", "cluster_role": "rollout"}}])

    try:
        mon.run(700, before=move)
        pages = mon.fired("RolloutServerStalled")
        by_server = {a.labels["server"]: a for a in pages}
        assert set(by_server) == {stalled.address, late.address}, by_server.keys()
        for address, alert in by_server.items():
            fired = mon.first_fired[("RolloutServerStalled", alert.fingerprint)]
            assert fired - stall_at[address] <= STALL_PAGE_S, (address, fired)
            assert address in alert.annotations["summary"], alert.annotations["summary"]
            assert "actor_rollout_ref.rollout.gpu_memory_utilization" in alert.annotations["runbook"]
            assert alert.labels.get("cluster_role") == "rollout"  # the file's labels travel with the target
        assert len(pages) == 2  # the rewrite that added a server did not restart the stalled one's alert
    finally:
        mon.close()


def test_kv_cache_full_with_a_queue_is_paged_deprecated_name_too(tmp_path: Path, servers) -> None:  # noqa: ANN001
    full, full_no_queue = servers(), servers()
    sd = tmp_path / "rollout.yaml"
    write_sd(sd, [{"targets": [full.address, full_no_queue.address]}])
    full.template = "\n".join(ln for ln in full.template.splitlines() if not ln.startswith("vllm:kv_cache_usage_perc"))

    def move(t: float) -> None:
        for s in (full, full_no_queue):
            s.running, s.kv, s.tokens = 64, 1.0, s.tokens + 4000
        full.waiting = 12
        full.render()
        full_no_queue.render()

    mon = SimulatedDaemon(tmp_path, {"file_sd": [{"files": [str(sd)], "job": "vllm"}]})
    try:
        mon.run(200, before=move)
        assert [a.labels["server"] for a in mon.fired("RolloutKVCacheFull")] == [full.address]
        assert "max_num_seqs" in mon.fired("RolloutKVCacheFull")[0].annotations["runbook"]
        assert not mon.fired("RolloutServerStalled")
    finally:
        mon.close()


def test_stalled_sglang_server_is_paged(tmp_path: Path, servers) -> None:  # noqa: ANN001
    sg = servers(Exposition)
    text = fixture("sglang-metrics.prom")
    sd = tmp_path / "sd.json"
    write_sd(sd, [{"targets": [sg.address], "labels": {"job": "sglang"}}])
    state = {"gen": 2400.0}

    def move(t: float) -> None:
        if t < 60:  # the scheduler rewrites its throughput every decode log interval, then hangs
            state["gen"] += 1.5
        sg.body = set_value(set_value(text, "sglang:gen_throughput", state["gen"]), "sglang:num_queue_reqs", 3)

    mon = SimulatedDaemon(tmp_path, {"file_sd": [{"files": [str(sd)]}]})
    try:
        mon.run(260, before=move)
        pages = mon.fired("RolloutServerStalled")
        assert [a.labels["server"] for a in pages] == [sg.address]
        assert mon.first_fired[("RolloutServerStalled", pages[0].fingerprint)] - 60 <= STALL_PAGE_S
    finally:
        mon.close()


def test_target_removed_from_the_file_is_dropped_without_trainer_down(tmp_path: Path, servers) -> None:  # noqa: ANN001
    trainer, other = servers(Exposition), servers(Exposition)
    trainer.body = other.body = "# TYPE verl_global_step gauge\nverl_global_step 7\n"
    sd = tmp_path / "sd.json"
    write_sd(sd, [{"targets": [trainer.address, other.address], "labels": {"job": "verl"}}])

    def move(t: float) -> None:
        if t == 60:
            write_sd(sd, [{"targets": [other.address], "labels": {"job": "verl"}}])
            trainer.close()  # gone from the file and from the network: neither is an outage

    mon = SimulatedDaemon(tmp_path, {"file_sd": [{"files": [str(sd)], "job": "verl"}],
                                     "limits": {"stale_after": "1m"}})
    try:
        mon.run(60 * 15, step=10, before=move)  # past TrainerDown's 10-min staleness
        assert not mon.fired("TrainerDown"), [a.labels for a in mon.fired("TrainerDown")]
        held = {s.labels.get("instance") for s in mon.daemon.pipeline.store}
        assert trainer.address not in held and other.address in held
    finally:
        mon.close()


def test_a_listed_server_that_stops_answering_is_paged_down_by_address_a_removed_one_is_not(
        tmp_path: Path, servers) -> None:  # noqa: ANN001
    dead, removed, generating = servers(), servers(), servers()
    sd = tmp_path / "rollout.json"
    write_sd(sd, [{"targets": [dead.address, removed.address, generating.address], "labels": {"job": "vllm"}}])
    died_at = 60.0

    def move(t: float) -> None:
        for s in (dead, removed, generating):
            s.running, s.tokens = 8, s.tokens + 4000
            s.render()
        if t == died_at:
            dead.close()  # the process is gone; its file_sd entry stays
            write_sd(sd, [{"targets": [dead.address, generating.address], "labels": {"job": "vllm"}}])
            removed.close()  # taken out of the file first: a planned removal, not an outage

    mon = SimulatedDaemon(tmp_path, {"file_sd": [{"files": [str(sd)], "job": "vllm", "interval": "5s"}]})
    try:
        mon.run(400, before=move)
        pages = mon.fired("RolloutServerDown")
        assert [a.labels["server"] for a in pages] == [dead.address]
        assert mon.first_fired[("RolloutServerDown", pages[0].fingerprint)] - died_at <= STALL_PAGE_S
        assert dead.address in pages[0].annotations["summary"], pages[0].annotations["summary"]
        assert not mon.fired("RolloutServerStalled")
    finally:
        mon.close()
