"""Stack control: the chat-robot stand-in, the trainer subprocess (``python -m verl.cli.train`` in its own
process group, known only through ``/metrics`` and its log lines) and the monitor daemon in this process,
as one context manager that stops everything on exit or Ctrl-C. Used by the demo, the soak
(``harness/soak.py``) and ``benchmarks/e2e_latency.py``."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.profile import DEMO_CORRELATION_WINDOW, write_configs
from harness.standin import STANDINS, Received, RobotStandIn

STEP_RE = re.compile(r"\bstep (\d+)/\d+ \|")
RESUMED_RE = re.compile(r"resumed from step (\d+)")
REQUEUED_RE = re.compile(r"(\d+) prompt\(s\) re-queued")
METRICS_RE = re.compile(r"^metrics: (http://\S+)")
# `verl-train --hot-standby`: its supervisor prints this each time a (new) trainer process becomes active
ACTIVE_RE = re.compile(r"hot-standby: active trainer pid (\d+)")


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


@dataclass
class ActiveProcess:
    """One trainer process while it trained: its pid and its steps as the journal saw them. Without
    ``--hot-standby`` a ``Trainer`` has one, its own process; with it, one per process the supervisor
    made active (``hot-standby: active trainer pid N``)."""

    pid: int | None
    since: float  # journal time: launched, or made active by the hot-standby supervisor
    step_times: dict[int, float] = field(default_factory=dict)
    resumed_from: int | None = None  # from its "resumed from step N" line


class Trainer:
    """``python -m verl.cli.train`` in its own process group (so Ctrl-C and stop() take its rollout
    workers too); its log goes to a file and each finished step is stamped in the journal.
    ``hot_standby``: the process is ``verl-train --hot-standby``'s supervisor; the pid of the process
    training now is ``active.pid``, and it is ready once one is active (or it printed ``metrics:``)."""

    def __init__(self, journal: Journal, log_path: Path, args: Sequence[str], env: dict[str, str] | None = None,
                 on_line: Callable[[str], None] | None = None, hot_standby: bool = False,
                 module: str = "verl.cli.train") -> None:
        self.journal = journal
        self.url: str | None = None
        self.ready = threading.Event()
        self.step_times: dict[int, float] = {}  # of every process of this Trainer, the newest per step
        self.resumed_from: int | None = None  # from the trainer's "resumed from step N" line
        self.hot_standby = hot_standby
        self.actives: list[ActiveProcess] = []
        self.requeued = 0  # prompts the rollout-worker supervisor re-queued after crashes
        self.warnings: list[tuple[float, str]] = []  # WARNING/ERROR log lines, journal time
        self.on_line = on_line
        cmd = [sys.executable, "-u", "-m", module, *args]  # module: a stand-in trainer in tests
        self.log = log_path.open("a", encoding="utf-8")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, env={**os.environ, **(env or {})})
        if not hot_standby:
            self.actives.append(ActiveProcess(self.proc.pid, journal.now()))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    @property
    def active(self) -> ActiveProcess | None:
        """The process training now (the newest made active), None before the supervisor named one."""
        return self.actives[-1] if self.actives else None

    def _active(self) -> ActiveProcess:
        if not self.actives:  # a step before any "active" line: a supervisor that does not announce
            self.actives.append(ActiveProcess(None, self.journal.now()))
        return self.actives[-1]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.write(line)
            m = STEP_RE.search(line)
            if m:
                t = self.journal.now()
                self.step_times[int(m.group(1))] = t
                self._active().step_times[int(m.group(1))] = t
            elif (u := METRICS_RE.match(line)) is not None:
                self.url = u.group(1)
                self.ready.set()
            elif (r := RESUMED_RE.search(line)) is not None:
                self.resumed_from = int(r.group(1))
                self._active().resumed_from = int(r.group(1))
            elif self.hot_standby and (a := ACTIVE_RE.search(line)) is not None:
                self.actives.append(ActiveProcess(int(a.group(1)), self.journal.now()))
                self.ready.set()
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

    def wait_ready(self, timeout: float, url: str | None = None) -> str:
        """The /metrics URL once the trainer serves it (``url``: where it will, when known up front)."""
        if self.ready.wait(timeout) and self.url is None and self.alive():
            self.url = url
        if not self.ready.is_set() or self.url is None:
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


def rollout_worker_pids(trainer_pid: int) -> list[int]:
    """The rollout worker processes of the trainer ``trainer_pid``: ``verl.workers.RolloutWorkerPool``
    forks them from the trainer's forkserver (a child running ``multiprocessing.forkserver``), so they
    are that process's live children. Empty when the trainer has none (or is gone)."""
    import psutil

    out = []
    try:
        children = psutil.Process(trainer_pid).children()
    except psutil.Error:
        return []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if any("multiprocessing.forkserver" in arg for arg in child.cmdline()):
                out += [w.pid for w in child.children() if _status(w) != psutil.STATUS_ZOMBIE]
    return sorted(out)


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
        from monitor.config import load_config
        from monitor.daemon import Daemon
        from monitor.serve import run_event_loop

        self.daemon = Daemon(load_config(config_path))
        self.daemon.pipeline.on_record = journal.record
        if self.daemon.engine is not None:
            self.daemon.engine.on_record = journal.record
        ready = threading.Event()
        self.thread = threading.Thread(target=lambda: run_event_loop(self.daemon.run(ready)), daemon=True)
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
        # the monitor's imports (scipy, ruptures, matplotlib) take seconds: overlap them
        # with the trainer's start-up
        threading.Thread(target=lambda: __import__("monitor.daemon"), daemon=True).start()
        self.robot = STANDINS[o.kind](on_receive=self.journal.message)
        self.journal.add("start", f"{o.kind} robot stand-in on {self.robot.base}")
        if o.trainer_url is not None:
            self.trainer_url = o.trainer_url
        else:
            self.start_trainer(o.trainer_args)
        process_url = None
        if o.demo_profile and not _leak_on_gpu(o.trainer_args if o.trainer_url is None else None):
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

    def start_trainer(self, args: Sequence[str], hot_standby: bool = False) -> Trainer:
        """``hot_standby``: ``args`` start ``verl-train --hot-standby`` (see ``Trainer``)."""
        self.trainer_started = self.journal.now()
        self.trainer = Trainer(self.journal, self.opts.workdir / "trainer.log", args, hot_standby=hot_standby)
        url = self.trainer.wait_ready(120, self.opts.trainer_url if hot_standby else None)
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


def _leak_on_gpu(trainer_args: Sequence[str] | None) -> bool:
    """Whether the trainer's injected leak lands in GPU memory (NVML sees it) or in host memory (its RSS).
    It is allocated on the actor's device, so that decides, not whether the machine has a GPU: ppo_tiny
    pins its models to the CPU, and on an H200 machine the demo's rule watched the idle GPU and missed
    the leak. A trainer started elsewhere (``trainer_args`` None): a GPU that NVML sees is taken as its."""
    if trainer_args is None:
        return _has_gpu()
    from verl.cli.train import build_parser
    from verl.config import TrainerConfigError, load_config

    args, _ = build_parser().parse_known_args(list(trainer_args))  # verl-train's own reading, default config too
    try:
        device = load_config(args.config, args.overrides).actor.device
    except TrainerConfigError:
        return _has_gpu()  # the trainer itself says what is wrong with its arguments
    if device == "auto":  # the trainer's own answer (torch's CUDA, not NVML: a CPU wheel on a GPU box is cpu)
        from verl.trainer.distributed import DistContext, resolve_device

        return resolve_device(device, DistContext(), "actor.device").type == "cuda"
    return device.startswith("cuda")


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:  # no driver / library: CPU machine
        return False
