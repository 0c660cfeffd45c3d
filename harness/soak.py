"""``verl-ops soak --duration SECONDS --output FILE`` (``make soak``): fault-injection soak with effective
training time. The CLI is in ``harness/cli.py``; the time accounting in ``harness/soak_accounting.py``.

    plan (seeded: about one fault per --fault-interval, each at a wall time) -> the soak injects each at
    its time into the trainer training then -> trainer restarted with --resume-or-start after a SIGKILL
    (or, with --hot-standby, its supervisor's standby takes over) -> monitor + robot stand-in
    (harness.stack.Stack) -> accounting: ETTR, seconds lost per fault, faults recovered, prompts,
    expected alerts delivered, detection delay -> JSON

Faults land on wall time, whatever the step rate (a fault due while no trainer is training, i.e.
during a restart, lands as soon as the next one has finished a step; ``late_s`` in the report):

- ``trainer_kill``: the soak SIGKILLs the training process itself (kill -9). Without ``--hot-standby`` it
  restarts the trainer with ``--resume-or-start``; with it, it SIGKILLs the active pid the supervisor
  announced (``hot-standby: active trainer pid N``) and restarts nothing unless the supervisor died;
- ``worker_kill``: the soak SIGKILLs one rollout worker process of the training process (a child of its
  forkserver); the trainer's worker supervisor restarts it and re-queues its prompts;
- ``reward_hang`` / ``critic_oom``: the soak appends ``{"fault": KIND}`` to the trainer's
  ``faults.trigger_file``; the trainer injects it at its next step's start through the circuit breaker /
  the OOM degrader (``verl/trainer/fault_injection.py``).

ETTR (Meta's definition): productive training time / wall time of the training job, from the first
trainer launch to the end (the monitor and robot stand-in start first, as a sidecar is up before the job
it watches; the trainer's own start-up counts as unproductive). The seconds ETTR does not count are split
into ``lost_seconds_startup`` and, per fault, ``restart`` and ``recomputed``; ``degraded`` seconds (slow
steps while a fault is active) are reported beside them (see ``harness/soak_accounting.py``).

The soak scrapes each trainer process's ``/metrics`` (prometheus_client's parser) every ``COUNTER_POLL_S``,
and every tick while an injected fault's counter has not moved yet, keeping every counter and the step
gauge (``Run.scrapes``). A fault counts as injected when the trainer shows it acted on it: the counter it
increments for that fault (``ACTED_ON``) rose after the injection -- or, for a SIGKILLed trainer, which
counts nothing, the process's exit -9 (or the standby's takeover). Its log lines are kept beside the verdict
for a person to read, never judged. A fault is recovered when training completed ``RECOVERY_STEPS`` steps
past it. Prompt accounting comes from the trainer's ``verl_rollout_prompts_lost_total`` /
``verl_rollout_prompts_duplicated_total`` (its per-step check of rollouts against prompts), summed over the
trainer processes; ``null`` with a note when one never exposed them -- the soak does not invent figures the
trainer does not report. Re-queued prompts come from the trainer's log (``N prompt(s) re-queued``).

The verdicts and the JSON are ``harness/soak_report.py``'s: it reads a finished ``Soak``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from harness import soak_accounting as acct
from harness.profile import free_port
from harness.stack import ActiveProcess, Stack, StackOptions, Trainer, rollout_worker_pids

KINDS = ("reward_hang", "worker_kill", "critic_oom")
RECOVERY_STEPS = 5
# The counter series (verl/metrics/catalog.py) the trainer increments when it acts on each in-process fault:
# the breaker's timed-out call, the worker supervisor's restart, the OOM degrader's critic event. The trigger
# line ("fault trigger: ...") is no evidence: the component it feeds must act.
ACTED_ON: dict[str, str] = {
    "reward_hang": 'verl_reward_model_calls_total{outcome="timeout"}',
    "worker_kill": "verl_rollout_worker_restarts_total",
    "critic_oom": 'verl_oom_events_total{component="critic"}',
}
STEP_GAUGE = "verl_global_step"  # the last step the trainer completed
COUNTER_POLL_S = 2.0
TICK_S = 0.1  # how late a fault may land after its planned time while a trainer is training
# how long after an injection the soak scrapes every tick for its counter (then every COUNTER_POLL_S), so the
# step by which the trainer acted is known to within a tick: a reward hang counts its first timeout after
# reward.timeout_s, a worker restart after the supervisor's check
ACTING_WITHIN_S = 20.0


@dataclass
class Fault:
    kind: str
    at_s: float  # planned, seconds since the first trainer launch
    step: int | None = None  # the step in flight when it was injected (a trigger acts from the next step's start)
    injected_at: float | None = None  # journal time the soak injected it
    run: int | None = None  # index of the run (trainer process) it hit
    target_pid: int | None = None  # the process SIGKILLed (trainer or rollout worker)
    evidence: str | None = None  # the counter that rose (or the exit, the takeover) showing it acted on the fault
    log: list[str] = field(default_factory=list)  # what the trainer logged meanwhile, for a person to read
    recovered: bool = False
    costs: dict[str, float] = field(default_factory=dict)  # restart / recomputed / degraded seconds


def plan_faults(duration: float, interval: float, seed: int) -> list[Fault]:
    """About one fault per ``interval``, jittered +-25 %; every fourth is a trainer SIGKILL, the others
    a seeded shuffle of the in-process kinds (each kind at most once per trainer incarnation, and a
    reward hang never directly before a SIGKILL)."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = interval * 0.5
    group: list[str] = []
    while t < duration - 20:
        if not group:
            group = rng.sample(KINDS, len(KINDS))
            if group[-1] == "reward_hang":
                # the breaker's alert needs the hang to last `for: 30s` past its start: a SIGKILL one
                # interval later would end the hang first (and restart the trainer with a closed circuit)
                group[-1], group[-2] = group[-2], group[-1]
            group.append("trainer_kill")
        faults.append(Fault(group.pop(0), round(t + rng.uniform(-0.25, 0.25) * interval, 1)))
        t += interval
    return faults


def series_key(name: str, labels: dict[str, str]) -> str:
    """A sample's series as the exposition spells it: ``name{label="value",...}``, labels sorted."""
    return name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")


@dataclass(frozen=True)
class Scrape:
    """One scrape of a trainer process's ``/metrics``: journal time, its step gauge, every counter series."""

    t: float
    step: int
    counters: dict[str, float]


def parse_scrape(text: str, t: float) -> Scrape:
    """Raises ``ValueError`` on text that is no exposition."""
    step, counters = 0, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == STEP_GAUGE:
                step = int(sample.value)
            elif family.type == "counter" and sample.name.endswith("_total"):
                counters[series_key(sample.name, sample.labels)] = sample.value
    return Scrape(t, step, counters)


@dataclass(frozen=True)
class Acted:
    """A counter's first rise after an injection: its value before and after, and the scrape that saw it.
    The scrape's step is no bound on the step the fault hit: a reward call counts its timeout only when it
    times out, steps later if the step went on on cached scores."""

    before: float
    after: float
    seen: Scrape


@dataclass
class Run:
    """One trainer process while it trained (``ActiveProcess``), with what the soak knows about it."""

    active: ActiveProcess
    trainer: Trainer
    resume_fallback: int = 0  # newest complete checkpoint when it started, if it never logs its resume
    killed_at: float | None = None  # when the soak SIGKILLed it
    exit_code: int | None = None
    scrapes: list[Scrape] = field(default_factory=list)  # of its /metrics, in time order

    @property
    def steps(self) -> dict[int, float]:
        return self.active.step_times

    @property
    def resumed_from(self) -> int:
        return self.active.resumed_from if self.active.resumed_from is not None else self.resume_fallback

    @property
    def counters(self) -> dict[str, float]:
        """The last scrape's counters."""
        return self.scrapes[-1].counters if self.scrapes else {}

    def acted(self, series: str, after: float) -> Acted | None:
        """The first rise of ``series`` over its value at the last scrape up to ``after``, or None. A
        process scraped first after ``after`` counts from zero (counters start at zero in each process)."""
        earlier = [s for s in self.scrapes if s.t <= after]
        base = earlier[-1].counters.get(series, 0.0) if earlier else 0.0
        seen = next((s for s in self.scrapes[len(earlier):] if s.counters.get(series, 0.0) > base), None)
        return None if seen is None else Acted(base, seen.counters[series], seen)


class Soak:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.hot_standby = bool(args.hot_standby)
        self.port = free_port()
        self.plan = plan_faults(args.duration, args.fault_interval, args.seed)
        self.rng = random.Random(args.seed)  # which rollout worker a worker_kill takes
        self.trigger = workdir / "fault-trigger.jsonl"
        # the trainer's in-memory checkpoint tier: tmpfs when there is one, removed when the soak ends
        # (a stopped trainer keeps its tier for a successor; the soak has none)
        shm = Path("/dev/shm")
        self.memory_dir = (shm / f"verl-ops-soak-{os.getpid()}" if shm.is_dir() and os.access(shm, os.W_OK)
                           else workdir / "memory-tier")
        self.trainers: list[Trainer] = []
        self.runs: list[Run] = []
        self.wall = 0.0  # seconds from the first trainer launch to the end (ETTR's denominator)
        self.end_t = 0.0  # journal time of the end
        self.port_wait: list[float] = []
        self.scrape_failures = 0  # scrapes of the trainer's /metrics that failed (it restarts, it is busy)
        self.t0 = 0.0  # journal time of the first trainer launch: the training job's wall clock starts here
        self.stack = Stack(StackOptions(
            workdir=workdir, kind="wecom", cluster="soak", node="soak-node", demo_profile=False,
            correlation_window=args.correlation_window, echo=not args.quiet,
            trainer_url=f"http://127.0.0.1:{self.port}/metrics"))

    def _trainer_args(self, resume: bool) -> tuple[str, ...]:
        return (*(["--hot-standby"] if self.hot_standby else []),
                "--config", "ppo_tiny", "--metrics-port", str(self.port), "--metrics-interval", "1",
                "--checkpoint-dir", str(self.workdir / "checkpoints"), *(["--resume-or-start"] if resume else []),
                "trainer.total_steps=1000000", "rollout_worker_num=2", f"checkpoint.interval={self.args.checkpoint_interval}",
                f"reward.timeout_s={self.args.reward_timeout}", f"faults.trigger_file={self.trigger}",
                *([f"checkpoint.memory_interval={mi}", f"checkpoint.memory_dir={self.memory_dir}"]
                  if (mi := self.args.memory_interval) else []))

    def _launch(self, resume: bool) -> None:
        j = self.stack.journal
        if self.trainers:
            self._wait_port()  # a dead trainer's socket may linger a moment
        if not self.trainers:
            self.t0 = j.now()
        self.trainers.append(self.stack.start_trainer(self._trainer_args(resume), hot_standby=self.hot_standby))
        self._sync_runs()

    def _sync_runs(self) -> None:
        """A ``Run`` for each trainer process that became active since the last call."""
        known = {id(r.active) for r in self.runs}
        for trainer in self.trainers:
            for active in list(trainer.actives):
                if id(active) not in known:
                    self.runs.append(Run(active, trainer, self._newest_checkpoint() if self.runs else 0))
                    if self.hot_standby:
                        self.stack.journal.add("trainer", f"trainer pid {active.pid} is active")

    def _wait_port(self) -> None:
        """Wait until no process listens on the trainer's port any more (the killed trainer's socket
        may linger a moment), probing as verl's own port check does: with SO_REUSEADDR, so connections in
        TIME_WAIT don't count. The wait is restart time (not productive), reported as
        ``restart_port_wait_seconds``."""
        started = time.monotonic()
        while time.monotonic() - started < 120:
            try:
                with socket.socket() as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    probe.bind(("127.0.0.1", self.port))
                break
            except OSError:
                time.sleep(0.05)
        self.port_wait.append(round(time.monotonic() - started, 2))

    def _newest_checkpoint(self) -> int:
        """Step of the newest complete checkpoint (its COMPLETE marker is written last)."""
        steps = [int(p.parent.name.rsplit("_", 1)[1]) for p in (self.workdir / "checkpoints").glob("global_step_*/COMPLETE")]
        return max(steps, default=0)

    def _last_step(self) -> int:
        return max((max(r.steps, default=0) for r in self.runs), default=0)

    def run(self) -> None:
        """Train under the planned faults for ``--duration``, then drain the deliveries; the report reads
        the finished soak (``harness.soak_report.report``)."""
        j = self.stack.journal
        try:
            self.stack.start()  # robot stand-in and monitor first: the sidecar is up before the job starts
            self._launch(resume=False)
            end = self.t0 + self.args.duration
            pending = list(self.plan)
            polled = 0.0
            while j.now() < end:
                time.sleep(TICK_S)
                self._sync_runs()
                trainer = self.trainers[-1]
                if not trainer.alive():
                    if j.now() < end - 5:
                        self._restart(trainer)
                    continue
                while pending and pending[0].at_s <= j.now() - self.t0 and self._training():
                    self._inject(pending.pop(0))
                # after the faults: a slow scrape delays no fault
                if j.now() - polled >= (TICK_S if self._awaiting_counter() else COUNTER_POLL_S):
                    polled = j.now()
                    self._scrape()
            self.end_t = j.now()
            self.wall = self.end_t - self.t0
            self._scrape()
            last = self.trainers[-1]
            if not self.hot_standby and not last.alive() and self.runs and self.runs[-1].trainer is last:
                self.runs[-1].exit_code = last.proc.returncode  # killed in the last seconds: not restarted
            self.trainers[-1].stop()  # steps after the measured wall time do not count (see step_runs)
            drain_until = j.now() + self.args.drain
            while j.now() < drain_until and self._undelivered():
                time.sleep(1.0)
        finally:
            self.stack.close()
            shutil.rmtree(self.memory_dir, ignore_errors=True)

    def _restart(self, trainer: Trainer) -> None:
        code = trainer.proc.returncode
        what = "hot-standby supervisor" if self.hot_standby else "trainer"
        self.stack.journal.add("trainer", f"{what} exited with code {code}; restarting with --resume-or-start")
        if not self.hot_standby and self.runs and self.runs[-1].trainer is trainer:
            self.runs[-1].exit_code = code
        trainer.stop()
        self._launch(resume=True)

    def _training(self) -> bool:
        """A trainer process is training: it finished a step and the soak has not killed it."""
        if not self.runs:
            return False
        run = self.runs[-1]
        return run.killed_at is None and bool(run.steps) and run.active.pid is not None and run.trainer.alive()

    def _inject(self, f: Fault) -> None:
        j = self.stack.journal
        run = self.runs[-1]
        pid = run.active.pid
        assert pid is not None  # _training() checked it
        f.injected_at, f.run, f.step = j.now(), len(self.runs) - 1, max(run.steps) + 1
        late = f"{f.injected_at - self.t0 - f.at_s:+.1f}s vs plan"
        if f.kind == "trainer_kill":
            f.target_pid = pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            run.killed_at = j.now()
            j.add("fault", f"soak: SIGKILL trainer pid {pid} (step ~{f.step}, {late})", fault=f.kind, pid=pid)
        elif f.kind == "worker_kill":
            workers = rollout_worker_pids(pid)
            if not workers:
                j.add("fault", f"soak: no rollout worker process under trainer pid {pid}: worker_kill not injected",
                      fault=f.kind)
                return
            f.target_pid = self.rng.choice(workers)
            with contextlib.suppress(ProcessLookupError):
                os.kill(f.target_pid, signal.SIGKILL)
            j.add("fault", f"soak: SIGKILL rollout worker pid {f.target_pid} of trainer pid {pid} ({late})",
                  fault=f.kind, pid=f.target_pid)
        else:
            with self.trigger.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"fault": f.kind, "planned_s": f.at_s}) + "\n")
            j.add("fault", f"soak: trigger {f.kind} in trainer pid {pid} ({late})", fault=f.kind)

    def _awaiting_counter(self) -> bool:
        """An in-process fault was injected into the training process lately and its counter has not
        risen yet: scrape every tick."""
        run = len(self.runs) - 1
        return any(f.run == run and f.kind in ACTED_ON and f.injected_at is not None
                   and self.stack.journal.now() - f.injected_at < ACTING_WITHIN_S
                   and self.runs[run].acted(ACTED_ON[f.kind], f.injected_at) is None for f in self.plan)

    def _scrape(self) -> None:
        """Scrape the training process's counters into its run. Counters restart with each process: a
        scrape that went back (another process answered on the port) is not this run's."""
        if not self.runs or self.runs[-1].killed_at is not None:
            return
        run = self.runs[-1]
        try:
            text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=2).text
            scrape = parse_scrape(text, self.stack.journal.now())
        except (httpx.HTTPError, ValueError):
            self.scrape_failures += 1  # a trainer between processes, or a half-written answer: the next one
            return
        if all(v >= run.counters.get(k, 0.0) for k, v in scrape.counters.items()):
            run.scrapes.append(scrape)

    # -- the journal's alerts and notifications -------------------------------------------------------------
    def alert_times(self) -> dict[str, list[tuple[float, str]]]:
        fired: dict[str, list[tuple[float, str]]] = {}
        for ev in self.stack.journal.of("alert"):
            if ev["status"] == "firing":
                fired.setdefault(ev["alertname"], []).append((ev["t"], ev["fingerprint"]))
        return fired

    def firing_at(self, alertname: str, t: float) -> str | None:
        """Fingerprint of an ``alertname`` alert that was firing at time ``t``, if any."""
        state: dict[str, str] = {}
        for ev in self.stack.journal.of("alert"):
            if ev["t"] > t:
                break
            if ev["alertname"] == alertname:
                state[ev["fingerprint"]] = ev["status"]
        return next((fp for fp, st in state.items() if st == "firing"), None)

    def delivered(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for ev in self.stack.journal.of("notification"):
            if ev["status"] == "delivered":
                for fp in ev["fingerprints"]:
                    out.setdefault(fp, ev["t"])
        return out

    def _undelivered(self) -> bool:
        delivered = self.delivered()
        return any(fp not in delivered for evs in self.alert_times().values() for _, fp in evs)

    # -- accounting inputs ----------------------------------------------------------------------------------
    def step_runs(self) -> list[dict[int, float]]:
        """Each run's step completion times, up to the end of the measured wall time."""
        return [{s: t for s, t in r.steps.items() if t <= self.end_t} for r in self.runs]

    def resumed(self) -> list[int]:
        return [r.resumed_from for r in self.runs]

    def ettr(self) -> float:
        productive = acct.productive_seconds(self.step_runs(), self.resumed())
        return productive / self.wall if self.wall > 0 else 0.0

    def ettr_from_first_step(self) -> float:
        runs = self.step_runs()
        start = acct.first_step_start(runs[0]) if runs else None
        if start is None:
            return 0.0
        span = self.end_t - start
        return acct.productive_seconds(runs, self.resumed()) / span if span > 0 else 0.0
