"""The HA pair's example configs (README "Running two monitors") agree with each other and route as
documented: checked with Debian's amtool/promtool, so a held-out run of them finds what the README says."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alerting.config import load_config as load_alerting
from alerting.durations import parse_duration
from harness.ha_pair import PEER_TIMEOUT_S, PORTS, write_configs
from monitor.config import load_config as load_monitor

ROOT = Path(__file__).resolve().parents[2]
HA = ROOT / "prometheus/ha"
PEERS = {"a": HA / "alertmanager-a.yml", "b": HA / "alertmanager-b.yml"}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found; fix: `make promtool` (Debian's prometheus and prometheus-alertmanager)")
    return path


def route(peer: str, *labels: str) -> str:
    got = subprocess.run([tool("amtool"), "config", "routes", "test", f"--config.file={PEERS[peer]}", *labels],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


def test_peers_check_and_differ_only_in_their_delivery_endpoint() -> None:
    for path in PEERS.values():
        got = subprocess.run([tool("amtool"), "check-config", str(path)], capture_output=True, text=True, timeout=60)
        assert got.returncode == 0, got.stdout + got.stderr
    a, b = (yaml.safe_load(p.read_text()) for p in PEERS.values())
    assert re.sub(r"127\.0\.0\.1:9196", "127.0.0.1:9096", yaml.safe_dump(b)) == yaml.safe_dump(a)
    assert "replica" not in a["route"]["group_by"]  # both monitors' copies are one alert


@pytest.mark.parametrize("peer", ["a", "b"])
def test_routing_fallback_watchdog_and_pages(peer: str) -> None:
    assert route(peer, "alertname=ReceiverDeliveriesFailing", "receiver=ops-wecom", "severity=P1") == "fallback"
    # the fallback's own failure cannot go to itself
    assert route(peer, "alertname=ReceiverDeliveriesFailing", "receiver=ops-fallback", "severity=P1") == "chat"
    assert route(peer, "alertname=Watchdog", "severity=none") == "deadmans-switch"
    assert route(peer, "alertname=MonitorDown", "severity=P0") == "chat"
    assert route(peer, "alertname=RewardModelCircuitOpen", "severity=P1", "node=gpu-08") == "chat"


def test_fallback_is_another_robot_and_every_hook_names_a_delivery_receiver() -> None:
    delivery = load_alerting(ROOT / "alerting/examples/ha-delivery.yaml")
    am = yaml.safe_load(PEERS["a"].read_text())
    hooks = {r["name"]: r["webhook_configs"][0]["url"] for r in am["receivers"]}
    for name in ("chat", "fallback"):
        assert hooks[name].rsplit("/hook/", 1)[1] in delivery.receivers, hooks[name]
    chat, fallback = (delivery.receivers[hooks[n].rsplit("/", 1)[1]] for n in ("chat", "fallback"))
    assert chat.url != fallback.url


def test_monitors_post_to_every_peer_prometheus_knows() -> None:
    monitor = load_monitor(ROOT / "monitor/examples/ha-pair.yaml")
    assert monitor.notify_config is not None and not monitor.replica  # the replica comes from --replica
    notify = load_alerting(monitor.notify_config)
    posted = {r.url.removeprefix("http://") for r in notify.receivers.values() if r.type == "alertmanager"}
    prom = yaml.safe_load((HA / "prometheus.yml").read_text())
    assert posted == set(prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]) == \
        {"127.0.0.1:9093", "127.0.0.1:9193"}
    got = subprocess.run([tool("promtool"), "check", "config", str(HA / "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and "6 rules found" in got.stdout, got.stdout + got.stderr


def seconds(text: str) -> float:
    return parse_duration(text, "timing")


@pytest.mark.parametrize("fast", [False, True], ids=["shipped", "live-test"])
def test_timings_keep_the_relations_that_send_each_page_once(tmp_path: Path, fast: bool) -> None:
    """The relations alertmanager-*.yml states, for the shipped configs and the live test's shortened copy
    (harness/ha_pair.py FAST): a lagging replica's last "firing" re-post and its own resolve both fall
    inside one group_interval of the peers, and the position wait is a small part of it."""
    write_configs(tmp_path, dict(PORTS), fast)
    am = yaml.safe_load((tmp_path / "prometheus/ha/alertmanager-a.yml").read_text())["route"]
    pair = yaml.safe_load((tmp_path / "monitor/examples/ha-pair.yaml").read_text())
    notify = load_alerting(tmp_path / "monitor/examples/ha-notify.yaml")
    lag = max(seconds(t["interval"]) for t in pair["targets"]) + seconds(pair["eval_interval"])
    flush = min(notify.route.group_interval_s, *(r.resend_interval_s or 1e9 for r in notify.receivers.values()))
    group_interval, peer_timeout = seconds(am["group_interval"]), PEER_TIMEOUT_S[fast]
    assert group_interval >= 2 * (lag + flush), (group_interval, lag, flush)
    assert group_interval >= 4 * peer_timeout, (group_interval, peer_timeout)
    assert peer_timeout >= 2.0  # a notification through `verl-alert serve` and its gossip, under load
