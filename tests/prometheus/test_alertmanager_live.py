"""A real Prometheus and a real Alertmanager on either side of the monitor, all on loopback:

    verl-train --metrics-port P  <--scrape--  Prometheus --> Alertmanager "front" --webhook+token--> monitor
                                 <--scrape--  monitor (no node: configured) --> chat receiver (stand-in)
                                                                            --> Alertmanager "behind"

The trainer is SIGKILLed once. Both the monitor's own TrainerDown and Prometheus' reach the monitor;
the chat receiver gets exactly one page, with node = the target's host. Alertmanager behind keeps the
alert active long past its resolve_timeout, because the monitor re-posts it with a future endsAt.
Durations (`for`, resend_interval, resolve_timeout) are shrunk from the shipped files to seconds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from harness.ports import free_port
from harness.standin import WebhookStandIn
from tests.live_poll import poll
from tests.test_docs_commands import all_commands

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-monitor-token"
# `for` spans several scrapes (the monitor scrapes every 5 s, a flag target's default): a trainer busy on a
# loaded machine may miss one scrape, which must not page. The monitor pages first, Prometheus later.
MONITOR_FOR, PROMETHEUS_FOR = "12s", "30s"
RESEND, BEHIND_RESOLVE_TIMEOUT = "2s", "5s"

pytestmark = pytest.mark.slow


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found; fix: `make promtool` (installs Debian's prometheus and "
                    "prometheus-alertmanager packages)")
    return path


def wait_for(what: str, check: Callable[[], Any], timeout: float, procs: dict[str, subprocess.Popen],
             tmp: Path) -> Any:
    def alive_and_checked() -> Any:
        for name, proc in procs.items():
            if name != "trainer" and proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{(tmp / f'{name}.log').read_text()[-3000:]}")
        return check()

    got = poll(alive_and_checked, timeout)
    if got:
        return got
    logs = "\n".join(f"--- {n}\n{(tmp / f'{n}.log').read_text(errors='replace')[-2000:]}" for n in procs)
    pytest.fail(f"timed out waiting for {what}\n{logs}")


def shortened(rules_file: Path, key: str, alert: str, value: str, where: Callable[[dict], bool]) -> Any:
    doc = yaml.safe_load(rules_file.read_text())
    rules = doc["rules"] if "rules" in doc else [r for g in doc["groups"] for r in g["rules"]]
    hits = [r for r in rules if r.get("alert") == alert and where(r)]
    assert len(hits) == 1, f"{rules_file}: expected one {alert} rule to shorten"
    hits[0][key] = value
    return doc


class Stack:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ports = {k: free_port() for k in ("trainer", "monitor", "prometheus", "front", "behind")}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.chat = WebhookStandIn()
        self.http = httpx.Client(timeout=5)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def spawn(self, name: str, argv: list[str]) -> None:
        log = (self.tmp / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(argv, cwd=self.tmp, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=15)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill(name)
        self.chat.close()
        self.http.close()

    def am_alerts(self, which: str, name: str = "TrainerDown") -> list[dict[str, Any]]:
        resp = self.http.get(f"{self.url(which)}/api/v2/alerts", params={"active": "true"})
        resp.raise_for_status()
        return [a for a in resp.json() if a["labels"].get("alertname") == name]

    def am_metric(self, which: str, name: str) -> float:
        text = self.http.get(f"{self.url(which)}/metrics").text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") and 'integration="webhook"' in line)

    def pages(self, name: str = "TrainerDown") -> list[dict[str, Any]]:
        return [a for r in self.chat.received if r.body.get("status") == "firing"
                for a in r.body["alerts"] if a["labels"]["alertname"] == name and a["status"] == "firing"]


def write_configs(st: Stack) -> None:
    tmp = st.tmp
    (tmp / "token").write_text(TOKEN)
    # Prometheus: the shipped scrape config and rules, trainer job only, 1 s intervals, Alertmanager front
    prom = yaml.safe_load((ROOT / "prometheus/prometheus.yml").read_text())
    prom["global"].update(scrape_interval="1s", evaluation_interval="1s", scrape_timeout="1s")
    prom["scrape_configs"] = [j for j in prom["scrape_configs"] if j["job_name"] == "verl-trainer"]
    prom["scrape_configs"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{st.ports['trainer']}"]}]
    prom["scrape_configs"][0]["scrape_interval"] = "1s"
    prom["alerting"]["alertmanagers"] = [{"static_configs": [{"targets": [f"127.0.0.1:{st.ports['front']}"]}]}]
    rules = shortened(ROOT / "prometheus/rules/verl-alerts.yml", "for", "TrainerDown", PROMETHEUS_FOR,
                      lambda r: r["expr"].startswith("up{"))
    (tmp / "verl-alerts.yml").write_text(yaml.safe_dump(rules))
    prom["rule_files"] = [str(tmp / "verl-alerts.yml")]
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(prom))
    # Alertmanager in front: the shipped routing, the monitor's port, the token wiring its comment shows
    front = yaml.safe_load((ROOT / "prometheus/alertmanager.yml").read_text())
    hook = front["receivers"][0]["webhook_configs"][0]
    hook["url"] = hook["url"].replace("127.0.0.1:9105", f"127.0.0.1:{st.ports['monitor']}")
    hook["http_config"] = {"authorization": {"type": "Bearer", "credentials_file": str(tmp / "token")}}
    (tmp / "front.yml").write_text(yaml.safe_dump(front))
    # Alertmanager behind: resolves alerts not re-posted within 5 s (endsAt unset) -- the failure mode
    (tmp / "behind.yml").write_text(yaml.safe_dump({
        "global": {"resolve_timeout": BEHIND_RESOLVE_TIMEOUT},
        "route": {"receiver": "null"}, "receivers": [{"name": "null"}]}))
    # the monitor: default rules with a short TrainerDown `for`, no node on its target
    own = shortened(ROOT / "monitor/rules/default.yaml", "for", "TrainerDown", MONITOR_FOR,
                    lambda r: r["select"].startswith("up"))
    (tmp / "rules.yaml").write_text(yaml.safe_dump(own))
    (tmp / "alerting.yaml").write_text(yaml.safe_dump({
        "monitor_url": st.url("monitor"),
        "receivers": [{"name": "chat", "type": "webhook", "url": st.chat.url},
                      {"name": "am", "type": "alertmanager", "url": st.url("behind"), "resend_interval": RESEND}],
        "route": {"receiver": "chat", "group_wait": "1s", "group_interval": "5s", "routes": [
            {"matchers": ['alertname=~".+"'], "receiver": "am", "continue": True},
            {"matchers": ['alertname=~".+"'], "receiver": "chat"}]},
    }))
    (tmp / "monitor.yaml").write_text(yaml.safe_dump({
        "listen": f"127.0.0.1:{st.ports['monitor']}", "bearer_token": TOKEN, "eval_interval": "500ms",
        "state_db": str(tmp / "monitor/state.db"), "rules": [str(tmp / "rules.yaml")],
        "notify_config": str(tmp / "alerting.yaml"),
    }))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus, alertmanager = binary("prometheus"), binary("prometheus-alertmanager")
    st = Stack(tmp_path_factory.mktemp("am-live"))
    write_configs(st)
    try:
        st.spawn("trainer", [sys.executable, "-m", "verl.cli.train", "--config", "ppo_tiny",
                             "--metrics-port", str(st.ports["trainer"]), "--metrics-interval", "1",
                             "--checkpoint-dir", str(st.tmp / "ckpt"), "trainer.total_steps=100000"])
        # watchers start once the trainer answers: a trainer still starting up is down, and would page
        wait_for("the trainer's /metrics", lambda: st.http.get(f"{st.url('trainer')}/metrics").status_code == 200,
                 180, st.procs, st.tmp)
        # the target comes from the flag: no node: configured anywhere
        st.spawn("monitor", [sys.executable, "-m", "monitor.cli", "run", "--config", str(st.tmp / "monitor.yaml"),
                             "--target", f"127.0.0.1:{st.ports['trainer']}"])
        for side in ("front", "behind"):
            st.spawn(side, [alertmanager, f"--config.file={st.tmp / f'{side}.yml'}",
                            f"--web.listen-address=127.0.0.1:{st.ports[side]}", "--cluster.listen-address=",
                            f"--storage.path={st.tmp / side}"])
        st.spawn("prometheus", [prometheus, f"--config.file={st.tmp / 'prometheus.yml'}",
                                f"--storage.tsdb.path={st.tmp / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{st.ports['prometheus']}"])
        yield st
    finally:
        st.stop()


def test_one_page_per_trainer_sigkill_with_alertmanager_on_both_sides(stack: Stack) -> None:
    st, tmp = stack, stack.tmp
    prom = f"{st.url('prometheus')}/api/v1/query"
    wait_for("Prometheus and the monitor both scraping the trainer", lambda: (
        st.http.get(prom, params={"query": 'up{job="verl-trainer"} == 1'}).json()["data"]["result"]
        and f'verl_monitor_target_up{{target="{st.url("trainer")}/metrics"}} 1.0'
        in st.http.get(f"{st.url('monitor')}/metrics").text), 60, st.procs, tmp)
    assert st.pages() == []
    # the top-level README's check of a running trainer, as written but for the port
    (curl,) = [raw for norm, raw in all_commands().items() if norm.startswith("curl ")]
    res = subprocess.run(["bash", "-c", curl.replace("127.0.0.1:8000", f"127.0.0.1:{st.ports['trainer']}")],
                         capture_output=True, text=True, timeout=30)
    assert 'verl_rollout_buffer_size{stage="train"}' in res.stdout, (curl, res.stdout, res.stderr)
    st.kill("trainer")
    killed = time.time()

    # the monitor's own TrainerDown pages first ...
    (page,) = wait_for("the monitor's page", st.pages, 60, st.procs, tmp)
    assert page["labels"]["node"] == "127.0.0.1"  # the target's host: no node: was configured
    assert set(page["labels"]) == {"alertname", "severity", "cluster", "node"}
    # ... then Prometheus' TrainerDown for the same outage reaches the monitor through Alertmanager
    (front,) = wait_for("TrainerDown active in the front Alertmanager", lambda: st.am_alerts("front"), 60,
                        st.procs, tmp)
    assert front["labels"]["node"] == "127.0.0.1" and front["labels"]["job"] == "verl-trainer"
    wait_for("the front Alertmanager's webhook delivery", lambda: st.am_metric(
        "front", "alertmanager_notifications_total") >= 1, 60, st.procs, tmp)
    assert st.am_metric("front", "alertmanager_notifications_failed_total") == 0  # the token was accepted
    time.sleep(8)  # group_interval + correlation: time for a second page, if there were one
    assert len(st.pages()) == 1, "\n".join(f"{r.at}: {r.body}" for r in st.chat.received)

    # behind: the monitor's alert stays active for several resolve_timeouts, pointing at the monitor
    (behind,) = st.am_alerts("behind")
    assert behind["labels"]["node"] == "127.0.0.1" and behind["annotations"]["description"]
    fp_url = behind["generatorURL"]
    assert fp_url.startswith(f"{st.url('monitor')}/api/v1/alerts/")
    first_seen = time.time()
    while time.time() - first_seen < 15:  # 3 x resolve_timeout, 7 x resend_interval
        assert [a["status"]["state"] for a in st.am_alerts("behind")] == ["active"]
        time.sleep(1)
    doc = st.http.get(fp_url, headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert doc["data"]["labels"]["alertname"] == "TrainerDown" and doc["data"]["state"] == "firing"
    assert time.time() - killed < 120
