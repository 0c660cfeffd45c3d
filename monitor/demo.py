"""``make demo`` / ``python -m monitor.demo``: the whole loop on one machine, on embedded defaults.

    plan faults -> robot stand-in (WeCom) -> trainer subprocess (ppo_tiny + faults.* overrides)
                -> monitor daemon in this process (scrape -> detectors -> alerting engine) -> robot
                -> live log of alerts and chat messages -> summary (injected / detected / delivered)

``monitor`` never imports ``verl``: the trainer is ``python -m verl.cli.train`` in its own process
group, known only through its ``/metrics`` endpoint and its log lines (the time each step finished is
the injection time of a fault scheduled for that step).

Demo profile: the production rules need hours of history (drift over 1 h, leak over 30 min, 2-minute
correlation holds). The demo writes a *demo rules profile* into its work directory: the default rules
with short windows for the injected faults, and correlation holds of 30 s. It says so when it starts.

``monitor.soak`` and ``benchmarks/e2e_latency.py`` reuse ``Stack`` (stand-in + monitor + trainer).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.standin import STANDINS, Received, RobotStandIn

RULES_DIR = Path(__file__).parent / "rules"
CORRELATION_RULES = Path(__file__).parents[1] / "alerting" / "rules" / "correlation.yaml"
STEP_RE = re.compile(r"\bstep (\d+)/\d+ \|")
RESUMED_RE = re.compile(r"resumed from step (\d+)")
REQUEUED_RE = re.compile(r"(\d+) prompt\(s\) re-queued")
METRICS_RE = re.compile(r"^metrics: (http://\S+)")

# Short windows for the faults the demo injects; everything else keeps the production defaults.
DEMO_DETECTORS: dict[str, dict[str, Any]] = {
    "MemoryLeakSuspected": {"window": 45, "every": 5, "floor": 4, "min_buckets": 6, "persistence": 2},
    "KLDriftDetected": {"window": 60, "every": 3, "min_samples": 20, "persistence": 2},
    "RolloutBufferDrop": {"window": 60},
    # production: 5 min warm-up, 10 min baseline, 2 min confirmation
    "ThroughputDrop": {"warmup_s": 10, "baseline_s": 60, "confirm_s": 10},
}
DEMO_KEEP_FIRING = {"MemoryLeakSuspected": "30s", "KLDriftDetected": "30s"}
# Without a GPU the simulated leak is host memory (the trainer never invents GPU series). The demo then
# also exposes the trainer's resident set the way a process exporter would (prometheus_client's
# ProcessCollector reading /proc/<trainer pid>) and the demo profile watches it with the same leak rule.
HOST_LEAK_SELECTOR = 'process_resident_memory_bytes{job="verl-process"}'
DEMO_CORRELATION_WINDOW = "20s"


@dataclass(frozen=True)
class Injection:
    """One scheduled fault: the trainer overrides that cause it and the alerts it must produce."""

    key: str  # short name for --faults
    name: str
    overrides: tuple[str, ...]
    at_step: int | None  # None: active from the start
    expects: tuple[str, ...]
    # regexes a chat message must match to count as the diagnosis of this fault: (cause, fix)
    diagnosis: tuple[str, str] = ("", "")


DEMO_PLAN: tuple[Injection, ...] = (
    Injection("leak", "simulated GPU-memory leak (300 MB/min)", ("faults.gpu_leak_mb_per_min=300",), None,
              ("MemoryLeakSuspected",),
              # a simulated leak with the buffer bounded: the right page says "a leak" with its slope
              (r"memory rising [\d.]+ MB/min.*a leak", r"tensors kept across steps")),
    Injection("dataflow", "reward-model OOM + rollout-worker crash (buffer drains)",
              # a backlog of 4 batches in the rollout buffer: the reward OOM makes the trainer shed it
              ("rollout.prefetch_batches=4", "faults.reward_oom_at_step=60",
               "faults.kill_rollout_worker_at_steps=[60,61]"), 60,
              ("RewardModelOOM", "RolloutWorkerCrash", "RolloutBufferDrop"),
              (r"Reward Model OOM on node", r"reward_batch_size from \d+ to \d+")),
    Injection("kl", "KL drift (kl_coef forced to 0)", ("faults.kl_drift_at_step=120",), 120, ("KLDriftDetected",),
              (r"kl_coef = 0\.0 since step \d+ \(verl_kl_coef; config says 0\.2\)", r"Set kl_coef back to 0\.2")),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- config generation (the demo profile) ----------------------------------------------------------

def demo_rules(host_leak: bool) -> dict[str, Any]:
    doc = yaml.safe_load((RULES_DIR / "default.yaml").read_text(encoding="utf-8"))
    extra = []
    for rule in doc["rules"]:
        name = rule["alert"]
        if name in DEMO_DETECTORS:
            # the demo's windows are seconds on purpose: a `steps:` floor (windows of at least N samples,
            # for slow verl runs) would stretch the 60 s KL window past the demo's whole run
            rule["detector"] = {k: v for k, v in {**rule["detector"], **DEMO_DETECTORS[name]}.items() if k != "steps"}
        if name in DEMO_KEEP_FIRING:
            rule["keep_firing_for"] = DEMO_KEEP_FIRING[name]
        if name == "MemoryLeakSuspected" and host_leak:
            # a deep copy: a detector dict shared by two rules would be dumped as a YAML alias, which the
            # monitor's safe rules loader refuses
            host = dict(copy.deepcopy(rule), select=HOST_LEAK_SELECTOR, plot=True)
            host["summary"] = ("Trainer memory on {{ labels.node }} rising {{ (details.slope_per_min / 1e6) "
                               "| round(1) }} MB/min (no GPU here: host memory stands in for GPU memory)")
            extra.append(host)
    doc["rules"].extend(extra)
    return doc


def demo_correlation(window: str) -> dict[str, Any]:
    doc = yaml.safe_load(CORRELATION_RULES.read_text(encoding="utf-8"))
    for rule in doc["rules"]:
        rule["window"] = window
    return doc


def write_configs(workdir: Path, robot: RobotStandIn, kind: str, trainer_url: str, node: str,
                  cluster: str, scrape_interval: float, demo_profile: bool, process_url: str | None,
                  correlation_window: str | None = DEMO_CORRELATION_WINDOW) -> Path:
    """The alerting and monitor YAML for one run; returns the monitor config path."""
    workdir.mkdir(parents=True, exist_ok=True)
    monitor_port = free_port()  # known up front so "+N more" links in messages point at this monitor
    alerting: dict[str, Any] = {
        "monitor_url": f"http://127.0.0.1:{monitor_port}",
        "receivers": [{"name": f"demo-{kind}", "type": kind, "url": robot.url,
                       **({"secret": robot.secret} if getattr(robot, "secret", None) else {})}],
        "route": {"receiver": f"demo-{kind}", "group_by": ["alertname", "cluster", "node"],
                  "group_wait": "1s", "group_interval": "5s", "repeat_interval": "1h"},
        "outbox": {"backoff_initial": "0.5s", "backoff_max": "5s"},
    }
    if correlation_window:
        (workdir / "correlation.demo.yaml").write_text(yaml.safe_dump(demo_correlation(correlation_window),
                                                                         sort_keys=False))
        alerting["correlation"] = {"include_defaults": True, "rules_files": ["correlation.demo.yaml"]}
    if demo_profile:
        (workdir / "rules.demo.yaml").write_text(yaml.safe_dump(demo_rules(process_url is not None),
                                                                sort_keys=False))
    (workdir / "alerting.yaml").write_text(yaml.safe_dump(alerting, sort_keys=False))
    monitor: dict[str, Any] = {
        "cluster": cluster, "listen": f"127.0.0.1:{monitor_port}", "state_db": "state/state.db", "eval_interval": "1s",
        "notify_config": "alerting.yaml",
        "targets": [{"name": "trainer", "url": trainer_url, "node": node, "job": "verl",
                     "interval": f"{scrape_interval}s", "timeout": "2s"}],
    }
    if process_url:
        monitor["targets"].append({"name": "trainer-process", "url": process_url, "node": node,
                                   "job": "verl-process", "interval": f"{scrape_interval}s", "timeout": "2s"})
    if demo_profile:
        monitor["rules"] = ["rules.demo.yaml"]
    path = workdir / "monitor.yaml"
    path.write_text(yaml.safe_dump(monitor, sort_keys=False))
    return path


# Root-cause phrases of each diagnosis path (alerting/diagnose.py): a message of the demo may use one only
# when the fault behind it was injected; otherwise it names something that was not measured.
CLAIMS: dict[str, str] = {
    "reward model fails to load": "",  # the demo injects no reward-scoring fault
    "unbounded, verl_config_info": "",
    "data loading starves": "",
    "kl_coef = 0.0": "kl",
    "a leak": "leak",
    "Reward Model OOM": "dataflow",
}


def first_diagnosis(journal: Journal, inj: Injection, since: float | None) -> float | None:
    """Journal time of the first chat message naming this fault's cause and fix, or None."""
    cause, fix = inj.diagnosis
    if not cause or since is None:
        return None
    for ev in journal.of("message"):
        if ev["t"] >= since and re.search(cause, ev["text"], re.S) and re.search(fix, ev["text"], re.S):
            return float(ev["t"])
    return None


def unmeasured_claims(journal: Journal, plan: Sequence[Injection]) -> list[str]:
    """Claims in the chat messages that no injected fault accounts for."""
    injected = {inj.key for inj in plan}
    return sorted({phrase for ev in journal.of("message") for phrase, key in CLAIMS.items()
                   if phrase in ev["text"] and key not in injected})


# ---- the event journal --------------------------------------------------------------------------------

@dataclass
class Journal:
    """Everything that happened, stamped with seconds since the start; printed as it happens."""

    t0: float = field(default_factory=time.time)
    echo: bool = True
    events: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.time() - self.t0

    def add(self, kind: str, line: str | None, **data: Any) -> None:
        ev = {"t": round(self.now(), 2), "kind": kind, **data}
        with self.lock:
            self.events.append(ev)
        if self.echo and line:
            print(f"[{ev['t']:6.1f}s] {line}", flush=True)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["kind"] == kind]

    # monitor/alerting records -> journal
    def record(self, rec: dict[str, Any]) -> None:
        kind = rec.get("kind")
        labels = rec.get("labels", {})
        if kind == "alert":
            self.add("alert", f"alert {rec['status']:8s} {labels.get('severity')} {labels.get('alertname')} "
                     f"node={labels.get('node')} {rec.get('annotations', {}).get('summary', '')}",
                     status=rec["status"], alertname=labels.get("alertname"), fingerprint=rec.get("fingerprint"))
        elif kind == "incident":
            self.add("incident", f"incident {rec['status']} {labels.get('severity')} {labels.get('alertname')}: "
                     f"{rec.get('root_cause', '')}", status=rec["status"], alertname=labels.get("alertname"),
                     fingerprint=rec.get("fingerprint"), members=rec.get("members", []))
        elif kind == "notification":
            self.add("notification", f"notification {rec['status']} -> {rec['receiver']} "
                     f"({len(rec.get('fingerprints', []))} alert(s), attempt {rec.get('attempts')})"
                     + (f" error: {rec['error']}" if rec.get("error") else ""),
                     status=rec["status"], fingerprints=rec.get("fingerprints", []),
                     notification_status=rec.get("notification_status"))

    def message(self, msg: Received) -> None:
        body = msg.body
        if isinstance(body, dict) and body.get("msgtype") == "image":
            size = len(body.get("image", {}).get("base64", "")) * 3 // 4
            text = f"[image message: plot PNG, {size / 1024:.0f} KiB, md5 {body['image'].get('md5')}]"
        else:
            text = msg.text
        body = "\n".join("           | " + ln for ln in text.splitlines())
        self.add("message", f"chat robot received:\n{body}", text=text)


# ---- processes -------------------------------------------------------------------------------------

class Trainer:
    """``python -m verl.cli.train`` in its own process group (so Ctrl-C and stop() take its rollout
    workers too); its log goes to a file and each finished step is stamped in the journal."""

    def __init__(self, journal: Journal, log_path: Path, args: Sequence[str], env: dict[str, str] | None = None,
                 on_line: Callable[[str], None] | None = None) -> None:
        self.journal = journal
        self.url: str | None = None
        self.ready = threading.Event()
        self.step_times: dict[int, float] = {}
        self.resumed_from: int | None = None  # from the trainer's "resumed from step N" line
        self.requeued = 0  # prompts the rollout-worker supervisor re-queued after crashes
        self.warnings: list[tuple[float, str]] = []  # WARNING/ERROR log lines, journal time
        self.on_line = on_line
        cmd = [sys.executable, "-u", "-m", "verl.cli.train", *args]
        self.log = log_path.open("a", encoding="utf-8")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, env={**os.environ, **(env or {})})
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.write(line)
            m = STEP_RE.search(line)
            if m:
                self.step_times[int(m.group(1))] = self.journal.now()
            elif (u := METRICS_RE.match(line)) is not None:
                self.url = u.group(1)
                self.ready.set()
            elif (r := RESUMED_RE.search(line)) is not None:
                self.resumed_from = int(r.group(1))
            if (q := REQUEUED_RE.search(line)) is not None:
                self.requeued += int(q.group(1))
            if " WARNING " in line or " ERROR " in line:
                self.warnings.append((self.journal.now(), line.strip()))
            if self.on_line is not None:
                self.on_line(line)
        self.log.flush()
        self.ready.set()  # exited before serving: wait_ready() sees url None

    @property
    def step(self) -> int:
        return max(self.step_times, default=0)

    def wait_ready(self, timeout: float) -> str:
        if not self.ready.wait(timeout) or self.url is None:
            raise RuntimeError(f"trainer did not serve /metrics within {timeout:.0f}s (exit code "
                               f"{self.proc.poll()}); see {self.log.name}")
        return self.url

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # zombies still "exist" for killpg: reap the leader, ignore the others (their parent reaps them)
        self.proc.poll()
        import psutil

        return any(_status(p) != psutil.STATUS_ZOMBIE for p in _group_members(self.proc.pid))

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM the process group, SIGKILL what is left after ``grace_s``; returns once the whole
        group is gone (a SIGKILLed trainer's rollout workers may still hold its metrics port)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and self._group_alive():
                time.sleep(0.05)
            if not self._group_alive():
                break
        self.reader.join(2)
        self.log.close()
        return self.proc.returncode


def _status(p: Any) -> str:
    try:
        return str(p.status())
    except Exception:  # gone meanwhile
        return "zombie"


def _group_members(pgid: int) -> list[Any]:
    import psutil

    out = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) == pgid:
                out.append(p)
    return out


class Monitor:
    """The monitor daemon in this process, its alert and alerting records routed to the journal."""

    def __init__(self, config_path: Path, journal: Journal) -> None:
        import asyncio

        from monitor.config import load_config
        from monitor.daemon import Daemon

        self.daemon = Daemon(load_config(config_path))
        self.daemon.pipeline.on_record = journal.record
        if self.daemon.engine is not None:
            self.daemon.engine.on_record = journal.record
        ready = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self.daemon.run(ready)), daemon=True)
        self.thread.start()
        if not ready.wait(30):
            raise RuntimeError("monitor daemon did not start within 30 s")
        assert self.daemon.api is not None
        self.url = f"http://127.0.0.1:{self.daemon.api.port}"

    def stop(self) -> None:
        self.daemon.stop()
        self.thread.join(15)


@dataclass
class StackOptions:
    workdir: Path
    kind: str = "wecom"
    cluster: str = "demo"
    node: str = "demo-node"
    scrape_interval: float = 1.0
    demo_profile: bool = True
    correlation_window: str | None = DEMO_CORRELATION_WINDOW  # None: production holds (2m)
    echo: bool = True
    trainer_args: tuple[str, ...] = ()
    trainer_url: str | None = None
    """Where the trainer will serve /metrics, when known up front: ``start()`` then brings up only the
    robot stand-in and the monitor, as a sidecar is up before the job it watches, and the caller
    starts the trainer (``start_trainer``)."""


class Stack:
    """Robot stand-in + trainer + monitor. Use as a context manager: everything stops on exit,
    including on Ctrl-C."""

    def __init__(self, opts: StackOptions) -> None:
        self.opts = opts
        self.journal = Journal(echo=opts.echo)
        self.robot: RobotStandIn | None = None
        self.trainer: Trainer | None = None
        self.monitor: Monitor | None = None
        self._process_server: Any = None
        self.trainer_started = 0.0

    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        o = self.opts
        o.workdir.mkdir(parents=True, exist_ok=True)
        # the monitor's imports (scipy, statsmodels, ruptures, matplotlib) take seconds: overlap them
        # with the trainer's start-up
        threading.Thread(target=lambda: __import__("monitor.daemon"), daemon=True).start()
        self.robot = STANDINS[o.kind](on_receive=self.journal.message)
        self.journal.add("start", f"{o.kind} robot stand-in on {self.robot.base}")
        if o.trainer_url is not None:
            self.trainer_url = o.trainer_url
        else:
            self.start_trainer(o.trainer_args)
        process_url = None
        if o.demo_profile and not _has_gpu():
            process_url = self._serve_trainer_process()
        cfg = write_configs(o.workdir, self.robot, o.kind, self.trainer_url, o.node, o.cluster,
                            o.scrape_interval, o.demo_profile, process_url, o.correlation_window)
        self.monitor = Monitor(cfg, self.journal)
        self.journal.add("start", f"monitor on {self.monitor.url} scraping {self.trainer_url} every "
                         f"{o.scrape_interval:g}s (config {cfg})")

    def _serve_trainer_process(self) -> str:
        """/metrics with the trainer's process_* series (RSS, CPU), like a process exporter beside it."""
        from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

        reg = CollectorRegistry()
        ProcessCollector(pid=lambda: self.trainer.proc.pid if self.trainer else "self", registry=reg)
        self._process_server, _ = start_http_server(0, addr="127.0.0.1", registry=reg)
        return f"http://127.0.0.1:{self._process_server.server_port}/metrics"

    def start_trainer(self, args: Sequence[str]) -> Trainer:
        self.trainer_started = self.journal.now()
        self.trainer = Trainer(self.journal, self.opts.workdir / "trainer.log", args)
        url = self.trainer.wait_ready(120)
        self.trainer_url = url
        self.journal.add("trainer", f"trainer pid {self.trainer.proc.pid} serving {url}")
        return self.trainer

    def close(self) -> None:
        if self.trainer is not None:
            self.trainer.stop()
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        if self.robot is not None:
            self.robot.close()
            self.robot = None
        if self._process_server is not None:
            self._process_server.shutdown()
            self._process_server.server_close()
            self._process_server = None


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:  # no driver / library: CPU machine
        return False


# ---- summary ----------------------------------------------------------------------------------------

@dataclass
class FaultOutcome:
    injection: str
    injected_at: float | None
    alerts: dict[str, dict[str, Any]]  # alertname -> {detected, delivered (s since start), deliveries}
    diagnosed: float | None = None  # first message naming the right cause and fix (s since start)

    @property
    def ok(self) -> bool:
        return all(v["detected"] is not None and v["delivered"] is not None for v in self.alerts.values())


def summarize(journal: Journal, plan: Sequence[Injection], step_times: dict[int, float],
              trainer_started: float) -> dict[str, Any]:
    fired: dict[str, tuple[float, str]] = {}
    for ev in journal.of("alert"):
        if ev["status"] == "firing" and ev["alertname"] not in fired:
            fired[ev["alertname"]] = (ev["t"], ev["fingerprint"])
    incidents = [e for e in journal.of("incident") if e["status"] == "firing"]
    delivered_fp: dict[str, float] = {}
    deliveries: dict[str, int] = {}  # firing notifications that carried the alert: "delivered once"
    for ev in journal.of("notification"):
        if ev["status"] == "delivered" and ev.get("notification_status", "firing") == "firing":
            for fp in ev["fingerprints"]:
                delivered_fp.setdefault(fp, ev["t"])
                deliveries[fp] = deliveries.get(fp, 0) + 1
    outcomes = []
    for inj in plan:
        # a fault at step N acts during step N: injected when step N-1 was logged; "from the start":
        # the trainer's first step
        at = step_times.get(1, trainer_started) if inj.at_step is None else step_times.get(inj.at_step - 1)
        alerts = {}
        for name in inj.expects:
            det = fired.get(name)
            alerts[name] = {"detected": det[0] if det else None,
                            "delivered": delivered_fp.get(det[1]) if det else None,
                            "deliveries": deliveries.get(det[1], 0) if det else 0}
        outcomes.append(FaultOutcome(inj.name, at, alerts, first_diagnosis(journal, inj, at)))
    expected = {n for inj in plan for n in inj.expects}
    return {
        "faults": [{"injection": o.injection, "injected_at": o.injected_at, "ok": o.ok,
                    "alerts": o.alerts, "diagnosed": o.diagnosed,
                    "time_to_diagnosis_s": None if o.diagnosed is None or o.injected_at is None
                    else round(o.diagnosed - o.injected_at, 1)} for o in outcomes],
        "all_diagnosed": all(o.diagnosed is not None for o in outcomes),
        "unmeasured_claims": unmeasured_claims(journal, plan),
        "unexpected_alerts": sorted(set(fired) - expected),
        "incidents": [{"alertname": e["alertname"], "t": e["t"]} for e in incidents],
        "messages_received": len(journal.of("message")),
        "all_detected_and_delivered": all(o.ok for o in outcomes),
    }


def print_summary(summary: dict[str, Any], wall_s: float) -> None:
    def at(v: float | None, ref: float | None) -> str:
        if v is None:
            return "MISSED"
        return f"{v:6.1f}s" + (f" (+{v - ref:5.1f}s)" if ref is not None else "")

    print("\n==== demo summary " + "=" * 60)
    for f in summary["faults"]:
        ref = f["injected_at"]
        print(f"injected  {f['injection']}  at {'not reached' if ref is None else f'{ref:.1f}s'}")
        for name, v in f["alerts"].items():
            times = "" if v["deliveries"] in (0, 1) else f"  ({v['deliveries']} deliveries)"
            print(f"   {name:22s} detected {at(v['detected'], ref):18s} delivered {at(v['delivered'], ref)}{times}")
        print(f"   {'diagnosed (cause+fix)':22s} {at(f['diagnosed'], ref)}"
              + ("" if f["time_to_diagnosis_s"] is None else f"  time to diagnosis {f['time_to_diagnosis_s']:.1f}s"))
    for inc in summary["incidents"]:
        print(f"incident  {inc['alertname']} at {inc['t']:.1f}s")
    if summary["unexpected_alerts"]:
        print("also fired (not injected): " + ", ".join(summary["unexpected_alerts"]))
    print(f"chat messages received by the stand-in: {summary['messages_received']}")
    claims = summary.get("unmeasured_claims") or []
    print("messages name only measured causes" if not claims else
          "MESSAGES CLAIM CAUSES NO INJECTED FAULT EXPLAINS: " + ", ".join(claims))
    verdict = "every injected fault detected and delivered" if summary["all_detected_and_delivered"] \
        else "SOME INJECTED FAULTS WERE NOT DETECTED/DELIVERED (see MISSED above)"
    verdict += ", and diagnosed (a page named its cause and fix)" if summary.get("all_diagnosed") \
        else "; SOME WERE NOT DIAGNOSED (no page named the cause and fix)"
    if not summary["faults"]:  # --faults none
        verdict = ("healthy run: no fault injected, no alert fired" if not summary["unexpected_alerts"]
                   else "healthy run: ALERTS FIRED WITHOUT AN INJECTED FAULT (see above)")
    print(f"{verdict}; wall time {wall_s:.0f}s")


# ---- main -------------------------------------------------------------------------------------------

def run_demo(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="verl-demo-"))
    plan = [inj for inj in DEMO_PLAN if inj.key in args.faults.split(",")]
    overrides = [o for inj in plan for o in inj.overrides]
    trainer_args = ("--config", "ppo_tiny", "--metrics-port", "0", "--metrics-interval", "1",
                    f"trainer.total_steps={args.max_steps}", "kl_coef=0.2", "rollout_worker_num=2",
                    # ppo_tiny's own lr (1e-3) moves the policy so slowly that KL, once kl_coef is zeroed,
                    # may not drift visibly within the demo's 160 s (a fresh-clone run missed it); 2e-3
                    # is the rate the demo was built and measured at
                    "actor.lr=0.002", "critic.lr=0.002", *overrides)
    opts = StackOptions(workdir=workdir, kind=args.robot, echo=not args.quiet, trainer_args=trainer_args,
                        correlation_window=args.correlation_window)
    started = time.monotonic()
    print(f"verl-ops demo: work dir {workdir}; demo rules profile (short windows, {args.correlation_window} "
          "correlation holds) "
          f"in {workdir}/rules.demo.yaml -- production defaults need hours of history", flush=True)
    for inj in plan:
        print(f"  fault plan: {inj.name} {'from the start' if inj.at_step is None else f'at step {inj.at_step}'}"
              f" -> expect {', '.join(inj.expects)}", flush=True)
    with Stack(opts) as stack:
        assert stack.trainer is not None
        trainer_started = stack.trainer_started
        expected = {n for inj in plan for n in inj.expects}
        deadline = started + args.duration
        while time.monotonic() < deadline:
            time.sleep(1.0)
            s = summarize(stack.journal, plan, stack.trainer.step_times, trainer_started)
            if plan and s["all_detected_and_delivered"] and s["all_diagnosed"]:
                break  # (with no fault planned, a healthy run: watch it for the whole --duration)
            if not stack.trainer.alive():
                stack.journal.add("trainer", f"trainer exited with code {stack.trainer.proc.returncode}")
                # let in-flight detections and deliveries finish, then stop
                deadline = min(deadline, time.monotonic() + args.linger)
        summary = summarize(stack.journal, plan, stack.trainer.step_times, trainer_started)
        summary["expected_alerts"] = sorted(expected)
        summary["last_step"] = stack.trainer.step
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    summary["workdir"] = str(workdir)
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m monitor.demo", description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=160.0, help="stop after this many seconds (default 160)")
    p.add_argument("--linger", type=float, default=15.0, help="seconds to wait for deliveries after the trainer exits")
    p.add_argument("--max-steps", type=int, default=100000, help="trainer.total_steps")
    p.add_argument("--faults", default=",".join(i.key for i in DEMO_PLAN),
                   help="comma-separated subset of the fault plan: " + ", ".join(i.key for i in DEMO_PLAN)
                   + "; 'none' runs a healthy trainer for --duration (every alert is then unexpected)")
    p.add_argument("--correlation-window", default=DEMO_CORRELATION_WINDOW,
                   help="how long alerts wait for their incident partners (production: 2m)")
    p.add_argument("--robot", choices=sorted(STANDINS), default="wecom", help="which robot stand-in receives")
    p.add_argument("--workdir", help="keep configs, state and the trainer log here (default: a temp dir)")
    p.add_argument("--summary-json", help="also write the summary as JSON to this file")
    p.add_argument("--quiet", action="store_true", help="only print the summary")
    args = p.parse_args(argv)
    if args.duration <= 0:
        print(f"demo: --duration {args.duration}: must be > 0 seconds", file=sys.stderr)
        return 2
    unknown = set(args.faults.split(",")) - {i.key for i in DEMO_PLAN} - {"none"}
    if unknown:
        print(f"demo: --faults {args.faults}: unknown fault {sorted(unknown)[0]!r}; choose from "
              + ", ".join(i.key for i in DEMO_PLAN), file=sys.stderr)
        return 2
    if args.summary_json and not Path(args.summary_json).parent.is_dir():
        print(f"demo: --summary-json {args.summary_json}: directory does not exist; create it first", file=sys.stderr)
        return 2
    try:
        summary = run_demo(args)
    except KeyboardInterrupt:
        print("\ndemo: interrupted; trainer, monitor and robot stand-in stopped", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    print_summary(summary, summary["wall_seconds"])
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
