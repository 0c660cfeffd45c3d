"""``python -m harness.ha_pair``: the HA topology of README "Running two monitors", started locally from
the shipped example configs, every port on 127.0.0.1::

    trainer :8000  <--scrape--  verl-monitor a :9105 --+--> Alertmanager a :9093 --> verl-alert serve :9096 --+
                   <--scrape--  verl-monitor b :9106 --+--> Alertmanager b :9193 --> verl-alert serve :9196 --+--> robots
                                     (a, b scrape each other: MonitorPeerDown)  (cluster 9094 <-> 9194)
    Prometheus :9090 scrapes the monitors, endpoints and peers; rules/verl-monitor-health.yml -> both peers

Robots are the stand-ins (harness/standin.py): ops-wecom :9200, ops-fallback :9201, the dead man's
switch :9202. The trainer is a stand-in too unless ``--no-trainer`` (then run ``verl-train
--metrics-port 8000``): a /metrics page whose ``verl_reward_model_circuit_state`` the harness sets, which
the monitors' default rule RewardModelCircuitOpen pages after 30 s -- a fault injected and cleared at will.

``HAPair(ports=..., fast=True)`` is what the live tests use: free ports substituted into copies of the
example configs, and the documented timings shortened (Prometheus' scrape and `for`, Alertmanager's
intervals, the injected fault's `for`)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness.standin import WebhookStandIn, WeComStandIn

ROOT = Path(__file__).resolve().parents[1]
# the ports of the example configs; HAPair substitutes its own for each
PORTS = {"trainer": 8000, "monitor_a": 9105, "monitor_b": 9106, "am_a": 9093, "am_a_cluster": 9094,
         "am_b": 9193, "am_b_cluster": 9194, "serve_a": 9096, "serve_b": 9196, "prometheus": 9090,
         "robot": 9200, "fallback": 9201, "deadman": 9202}
CONFIGS = ("prometheus/ha/alertmanager-a.yml", "prometheus/ha/alertmanager-b.yml", "prometheus/ha/prometheus.yml",
           "prometheus/rules/verl-monitor-health.yml", "monitor/examples/ha-pair.yaml",
           "monitor/examples/ha-notify.yaml", "alerting/examples/ha-delivery.yaml")
# shortened timings for tests (fast=True): (file suffix, documented text, replacement), applied in order. They
# keep the shipped relations (tests/prometheus/test_ha_configs.py checks both): the peers' group_interval well
# above the monitors' lag (scrape + evaluation) plus their own group_interval, and 4x the peer timeout
FAST_GROUP_INTERVAL_S = 8.0
FAST = (("prometheus.yml", "scrape_interval: 15s", "scrape_interval: 2s"),
        ("prometheus.yml", "evaluation_interval: 15s", "evaluation_interval: 2s"),
        ("prometheus.yml", "scrape_timeout: 5s", "scrape_timeout: 1s"),
        # the pages' route (the others, e.g. the Watchdog's, repeat every 5 s below)
        *((f"alertmanager-{p}.yml", "group_interval: 1m\n  repeat_interval: 4h",
           f"group_interval: {FAST_GROUP_INTERVAL_S:g}s\n  repeat_interval: 4h") for p in "ab"),
        ("alertmanager-a.yml", "group_interval: 1m", "group_interval: 5s"),
        ("alertmanager-b.yml", "group_interval: 1m", "group_interval: 5s"),
        ("alertmanager-a.yml", "group_wait: 10s", "group_wait: 5s"),
        ("alertmanager-b.yml", "group_wait: 10s", "group_wait: 5s"),
        ("ha-notify.yaml", "resend_interval: 30s", "resend_interval: 5s"),
        ("ha-pair.yaml", "interval: 5s", "interval: 1s"),
        ("ha-pair.yaml", "console: false", "console: false\nrules: [fast-rules.yaml]"),
        ("verl-monitor-health.yml", "for: 1m", "for: 20s"))
# Alertmanager's --cluster.peer-timeout: the shipped commands (README) leave its default
PEER_TIMEOUT_S = {False: 15.0, True: 2.0}
FAST_CLUSTER = ("--cluster.gossip-interval=100ms", "--cluster.pushpull-interval=2s",
                f"--cluster.peer-timeout={PEER_TIMEOUT_S[True]:g}s", "--cluster.settle-timeout=2s",
                # a failing test's logs say which peer flushed and notified each group, and why
                "--log.level=debug")
FAST_RULE = ("alert: RewardModelCircuitOpen\n    severity: P1\n    for: 30s", "for: 30s", "for: 5s")


class GaugeTrainer:
    """A trainer's /metrics reduced to the one gauge a fault moves (the real trainer works too)."""

    def __init__(self, port: int) -> None:
        self.circuit_state = 0  # verl_reward_model_circuit_state: 0 closed, 2 open
        trainer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                body = ("# TYPE verl_reward_model_circuit_state gauge\n"
                        f'verl_reward_model_circuit_state{{component="reward"}} {trainer.circuit_state}\n').encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class HAPair:
    workdir: Path
    ports: dict[str, int] = field(default_factory=lambda: dict(PORTS))
    fast: bool = False
    trainer: bool = True
    prometheus: bool = True
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    # (wall time, what): starts, kills and injected faults, for a failing test's timeline
    events: list[tuple[float, str]] = field(default_factory=list)
    started_at: float = 0.0

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        self.robot = WeComStandIn(listen_port=self.ports["robot"])
        self.fallback = WeComStandIn(listen_port=self.ports["fallback"])
        self.deadman = WebhookStandIn(listen_port=self.ports["deadman"])
        self.gauges = GaugeTrainer(self.ports["trainer"]) if self.trainer else None
        write_configs(self.workdir, self.ports, self.fast)

    def path(self, rel: str) -> str:
        return str(self.workdir / rel)

    def _start(self, name: str, argv: list[str]) -> None:
        self.events.append((time.time(), f"start {name}"))
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 -- the child owns it until it exits
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                            env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)

    def start_monitor(self, replica: str) -> None:
        other = "b" if replica == "a" else "a"
        self._start(f"monitor-{replica}", [
            sys.executable, "-m", "monitor.cli", "run", "--config", self.path("monitor/examples/ha-pair.yaml"),
            "--replica", replica, "--listen", f"127.0.0.1:{self.ports[f'monitor_{replica}']}",
            "--state-db", self.path(f"monitor-{replica}/state.db"),
            "--peer", f"127.0.0.1:{self.ports[f'monitor_{other}']}"])

    def start_alertmanager(self, peer: str) -> None:
        other = "b" if peer == "a" else "a"
        fast = list(FAST_CLUSTER) if self.fast else []
        self._start(f"alertmanager-{peer}", [
            _binary("prometheus-alertmanager"), f"--config.file={self.path(f'prometheus/ha/alertmanager-{peer}.yml')}",
            f"--storage.path={self.path(f'am-{peer}')}", f"--web.listen-address=127.0.0.1:{self.ports[f'am_{peer}']}",
            f"--cluster.listen-address=127.0.0.1:{self.ports[f'am_{peer}_cluster']}",
            f"--cluster.advertise-address=127.0.0.1:{self.ports[f'am_{peer}_cluster']}",
            f"--cluster.peer=127.0.0.1:{self.ports[f'am_{other}_cluster']}", *fast])

    def start_delivery(self, peer: str) -> None:
        self._start(f"verl-alert-{peer}", [
            sys.executable, "-m", "alerting.cli", "serve", "--config", self.path("alerting/examples/ha-delivery.yaml"),
            "--listen", f"127.0.0.1:{self.ports[f'serve_{peer}']}"])

    def start(self) -> HAPair:
        self.started_at = time.time()
        for peer in ("a", "b"):
            self.start_delivery(peer)
            self.start_alertmanager(peer)
        if self.prometheus:
            self._start("prometheus", [
                _binary("prometheus"), f"--config.file={self.path('prometheus/ha/prometheus.yml')}",
                f"--web.listen-address=127.0.0.1:{self.ports['prometheus']}",
                f"--storage.tsdb.path={self.path('prometheus-data')}"])
        for replica in ("a", "b"):
            self.start_monitor(replica)
        return self

    def kill(self, name: str) -> None:
        """SIGKILL, as a host that dies: no shutdown, no last post."""
        proc = self.procs[name]
        self.events.append((time.time(), f"SIGKILL {name}"))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def url(self, key: str) -> str:
        return f"http://127.0.0.1:{self.ports[key]}"

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=8)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        for robot in (self.robot, self.fallback, self.deadman):
            robot.close()
        if self.gauges is not None:
            self.gauges.close()

    def __enter__(self) -> HAPair:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_configs(workdir: Path, ports: dict[str, int], fast: bool) -> None:
    """Copies of the example configs under ``workdir`` with ``ports`` (and, fast, the shortened timings)."""
    moved = {f"127.0.0.1:{PORTS[k]}": f"127.0.0.1:{v}" for k, v in ports.items()}
    pattern = re.compile("|".join(re.escape(k) + r"(?!\d)" for k in moved))
    for rel in CONFIGS:
        text = pattern.sub(lambda m: moved[m.group(0)], (ROOT / rel).read_text(encoding="utf-8"))
        for suffix, old, new in FAST if fast else ():
            if rel.endswith(suffix):
                assert old in text, f"{rel} no longer says {old!r}: update harness/ha_pair.py FAST"
                text = text.replace(old, new)
        out = workdir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    if fast:  # the default rules with the injected fault's `for` shortened
        rules, (where, old, new) = (ROOT / "monitor/rules/default.yaml").read_text(encoding="utf-8"), FAST_RULE
        assert where in rules, "monitor/rules/default.yaml changed RewardModelCircuitOpen: update FAST_RULE"
        (workdir / "monitor/examples/fast-rules.yaml").write_text(
            rules.replace(where, where.replace(old, new)), encoding="utf-8")


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"ha_pair: {name} not found; install Debian's prometheus and prometheus-alertmanager")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.ha_pair", description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", default="runs/ha", help="configs, state and logs (default runs/ha)")
    p.add_argument("--no-trainer", action="store_true", help="no trainer stand-in on :8000 (run verl-train)")
    args = p.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        pair = HAPair(work, trainer=not args.no_trainer)
    except OSError as exc:
        print(f"ha_pair: a port of the topology is taken ({exc.strerror}); stop what uses it", file=sys.stderr)
        return 2
    for robot, name in ((pair.robot, "ops-wecom"), (pair.fallback, "ops-fallback"), (pair.deadman, "switch")):
        robot.on_receive = lambda r, name=name: print(f"--- {name} received\n{r.text[:400]}\n", flush=True)
    with pair:
        print(f"HA pair up (logs in {work}/): monitors {pair.url('monitor_a')} {pair.url('monitor_b')}, "
              f"Alertmanager {pair.url('am_a')} {pair.url('am_b')}, Prometheus {pair.url('prometheus')}.",
              flush=True)
        if pair.gauges is not None:
            print("Enter toggles the injected fault (RewardModelCircuitOpen); Ctrl-C stops.", flush=True)
        try:
            while True:
                line = sys.stdin.readline()
                if not line:
                    threading.Event().wait()
                if pair.gauges is not None:
                    pair.gauges.circuit_state = 0 if pair.gauges.circuit_state else 2
                    print(f"fault {'injected' if pair.gauges.circuit_state else 'cleared'}", flush=True)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
