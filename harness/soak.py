"""``verl-ops soak --duration SECONDS --output FILE`` (``make soak``): fault-injection soak with effective
training time. The CLI is in ``harness/cli.py``.

    plan (seeded: about one fault per --fault-interval) -> supervisor: trainer incarnations, each with
    the faults due before its SIGKILL, restarted with --resume-or-start -> monitor + robot stand-in (harness.stack.Stack)
    -> accounting: ETTR, faults recovered, prompts, expected alerts delivered, detection delay -> JSON

Fault kinds: ``reward_hang`` (reward model hangs: timeouts, circuit breaker), ``worker_kill`` (SIGKILL of
a rollout worker), ``critic_oom`` (critic update OOM: degraded mode), ``trainer_kill`` (SIGKILL of the
whole trainer; the supervisor restarts it with ``--resume-or-start``). Faults are ``faults.*`` overrides at a
step; the step for a planned time comes from the measured step rate.

ETTR (Meta's definition): productive training time / wall time of the training job, from the first
trainer launch to the end (the monitor and robot stand-in start first, as a sidecar is up before the job
it watches; the trainer's own start-up counts as unproductive). A step is productive when its update
survives: steps completed after the checkpoint a restart resumes from are recomputed, so they and the
restart time (process start, model build, resume) are not productive. A step's time is the gap since the
previous step of the same incarnation (an incarnation's first step: that incarnation's median gap).

A fault counts as recovered when training completed ``RECOVERY_STEPS`` steps past it. Prompt accounting
comes from the trainer's ``verl_rollout_prompts_lost_total`` / ``verl_rollout_prompts_duplicated_total``
(its per-step check of rollouts against prompts), polled from every incarnation and summed; ``null``
with a note when an incarnation never exposed them -- the soak does not invent figures the trainer does
not report. Re-queued prompts come from the trainer's log (``N prompt(s) re-queued``).
"""

from __future__ import annotations

import argparse
import random
import re
import socket
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from harness.profile import free_port
from harness.stack import Stack, StackOptions, Trainer
from monitor.sources.prom_text import parse_exposition

KINDS = ("reward_hang", "worker_kill", "critic_oom")
# alerts an operator must receive for each kind; a SIGKILL + automatic resume is handled, not paged,
# unless the trainer stayed down longer than TrainerDown's `for: 1m` (see TRAINER_DOWN_AFTER_S)
EXPECTED: dict[str, tuple[str, ...]] = {
    "reward_hang": ("RewardModelTimeout", "RewardModelCircuitOpen"),
    "worker_kill": ("RolloutWorkerCrash",),
    "critic_oom": (),
    "trainer_kill": (),
}
RECOVERY_STEPS = 5
TRAINER_DOWN_AFTER_S = 65.0  # TrainerDown's `for: 1m` plus scrape and evaluation slack
# What the trainer logs when it acts on a fault (WARNING/ERROR lines): a fault without such a line was
# scheduled but not acted on, and is not counted as injected.
EVIDENCE: dict[str, re.Pattern[str]] = {
    "reward_hang": re.compile(r"reward.*(timed? ?out|circuit|hang)|circuit.*open", re.I),
    "worker_kill": re.compile(r"rollout worker \d+.*(died|killed|restart)", re.I),
    "critic_oom": re.compile(r"critic.*(oom|out of memory|degrad)", re.I),
    "trainer_kill": re.compile(r"SIGKILL trainer", re.I),
}
PROMPT_COUNTERS = ("verl_rollout_prompts_lost_total", "verl_rollout_prompts_duplicated_total")
COUNTER_POLL_S = 2.0
HANG_STEPS = 3  # a hang lasts this many steps' worth of reward calls (the breaker opens after 3 timeouts)


@dataclass
class Fault:
    kind: str
    at_s: float  # planned, seconds since the soak started
    step: int | None = None
    injected_at: float | None = None  # when the trainer reached the fault's step
    evidence: str | None = None  # the trainer's log line showing it acted on the fault
    recovered: bool = False


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


@dataclass
class Incarnation:
    trainer: Trainer
    started: float
    resumed_from: int = 0
    faults: list[Fault] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)  # the last scrape of PROMPT_COUNTERS


def productive_seconds(runs: list[dict[int, float]], resumed_from: list[int]) -> float:
    """Seconds of training whose updates survive. ``runs[i]``: step -> completion time of incarnation
    i; ``resumed_from[i]``: the checkpoint step incarnation i resumed from. Steps of run i after
    ``resumed_from[i + 1]`` were recomputed by run i + 1 and do not count. A step's time is the gap since
    the previous step of the same run; a run's first step (which includes start-up) gets the run's
    median gap, so start-up and restart time are never productive."""
    total = 0.0
    for i, steps in enumerate(runs):
        gaps, median = step_seconds(steps)
        survives = resumed_from[i + 1] if i + 1 < len(runs) else float("inf")
        total += sum(gaps.get(s, median) for s in steps if s <= survives)
    return total


def step_seconds(steps: dict[int, float]) -> tuple[dict[int, float], float]:
    """Per-step durations of one run (gap since the previous step, where there is one) and their median,
    which stands in for a step with no predecessor (the run's first: its gap would include start-up)."""
    times = sorted(steps.items())
    gaps = {s: t - tp for (sp, tp), (s, t) in zip(times, times[1:], strict=False) if s == sp + 1}
    return gaps, statistics.median(gaps.values()) if gaps else 0.0


def _overrides(faults: list[Fault]) -> list[str]:
    out = []
    workers = [f.step for f in faults if f.kind == "worker_kill"]
    if workers:
        out.append(f"faults.kill_rollout_worker_at_steps=[{','.join(str(s) for s in workers)}]")
    for f in faults:
        if f.kind == "reward_hang":
            out.append(f"faults.reward_hang_at_step={f.step}")
        elif f.kind == "critic_oom":
            out.append(f"faults.critic_oom_at_step={f.step}")
        elif f.kind == "trainer_kill":
            out.append(f"faults.kill_trainer_at_step={f.step}")
    return out


class Soak:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.port = free_port()
        self.plan = plan_faults(args.duration, args.fault_interval, args.seed)
        self.incarnations: list[Incarnation] = []
        self.rate = 4.0  # steps/s until measured
        self.wall = 0.0  # seconds from the first trainer launch to the end (ETTR's denominator)
        self.end_t = 0.0  # journal time of the end
        self.port_wait: list[float] = []
        self.t0 = 0.0  # journal time of the first trainer launch: the training job's wall clock starts here
        self.stack = Stack(StackOptions(
            workdir=workdir, kind="wecom", cluster="soak", node="soak-node", demo_profile=False,
            correlation_window=args.correlation_window, echo=not args.quiet,
            trainer_url=f"http://127.0.0.1:{self.port}/metrics"))

    def _trainer_args(self, faults: list[Fault], resume: bool) -> tuple[str, ...]:
        return ("--config", "ppo_tiny", "--metrics-port", str(self.port), "--metrics-interval", "1",
                "--checkpoint-dir", str(self.workdir / "checkpoints"), *(["--resume-or-start"] if resume else []),
                "trainer.total_steps=1000000", "rollout_worker_num=2", f"checkpoint.interval={self.args.checkpoint_interval}",
                f"reward.timeout_s={self.args.reward_timeout}", *_overrides(faults))

    def _schedule(self, now: float, resume_step: int) -> list[Fault]:
        """The pending faults for the next incarnation, up to and including the next trainer kill."""
        chosen: list[Fault] = []
        startup = 10.0
        for f in self.plan:
            if f.step is not None:
                continue
            f.step = max(resume_step + 2, int(resume_step + (f.at_s - now - startup) * self.rate))
            if any(c.step == f.step for c in chosen):
                f.step += 1
            chosen.append(f)
            if f.kind == "trainer_kill":
                break
        return chosen

    def _launch(self, resume: bool) -> Incarnation:
        j = self.stack.journal
        if self.incarnations:
            self._wait_port()  # before scheduling: the wait shifts every later fault's step
        resume_step = self._last_step()
        if not self.incarnations:
            self.t0 = j.now()
        faults = self._schedule(j.now() - self.t0, resume_step)
        args = self._trainer_args(faults, resume)
        trainer = self.stack.start_trainer(args)
        inc = Incarnation(trainer, self.stack.trainer_started, resumed_from=self._newest_checkpoint() if resume else 0,
                          faults=faults)
        self.incarnations.append(inc)
        for f in faults:
            j.add("fault", f"planned {f.kind} at step {f.step} (~{f.at_s:.0f}s)", fault=f.kind, step=f.step)
        return inc

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
                time.sleep(0.5)
        self.port_wait.append(round(time.monotonic() - started, 1))

    def _newest_checkpoint(self) -> int:
        """Step of the newest complete checkpoint (its COMPLETE marker is written last)."""
        steps = [int(p.parent.name.rsplit("_", 1)[1]) for p in (self.workdir / "checkpoints").glob("global_step_*/COMPLETE")]
        return max(steps, default=0)

    def _last_step(self) -> int:
        return max((max(i.trainer.step_times, default=0) for i in self.incarnations), default=0)

    def run(self) -> dict[str, Any]:
        j = self.stack.journal
        try:
            self.stack.start()  # robot stand-in and monitor first: the sidecar is up before the job starts
            inc = self._launch(resume=False)
            end = self.t0 + self.args.duration
            polled = 0.0
            while j.now() < end:
                time.sleep(0.5)
                self._measure_rate(inc)
                if j.now() - polled >= COUNTER_POLL_S:
                    polled = j.now()
                    inc.counters.update(self._prompt_counters())
                if not inc.trainer.alive() and j.now() < end - 5:
                    code = inc.trainer.proc.returncode
                    j.add("trainer", f"trainer exited with code {code}; restarting with --resume-or-start")
                    inc.trainer.stop()
                    inc = self._launch(resume=True)
            inc.counters.update(self._prompt_counters())
            self.end_t = j.now()
            self.wall = self.end_t - self.t0
            inc.trainer.stop()  # steps after the measured wall time do not count (see _runs)
            drain_until = j.now() + self.args.drain
            while j.now() < drain_until and self._undelivered():
                time.sleep(1.0)
        finally:
            self.stack.close()
        return self._report()

    def _measure_rate(self, inc: Incarnation) -> None:
        # over the last 200 steps: short spans follow transients (a reward hang, cache-fast steps)
        times = sorted(inc.trainer.step_times.items())[-200:]
        if len(times) >= 20:
            (s0, t0), (s1, t1) = times[0], times[-1]
            if t1 > t0:
                self.rate = (s1 - s0) / (t1 - t0)

    def _prompt_counters(self) -> dict[str, float]:
        try:
            text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=2).text
        except httpx.HTTPError:
            return {}
        batch = parse_exposition(text, 0.0, "soak", None, {})
        return {x.name: x.value for x in batch.samples if x.name in PROMPT_COUNTERS}

    # -- accounting -------------------------------------------------------------------------------------
    def _fault_times(self) -> None:
        for i, inc in enumerate(self.incarnations):
            for f in inc.faults:
                f.injected_at = inc.trainer.step_times.get((f.step or 0) - 1)
                if f.injected_at is not None:
                    f.evidence = next((ln for t, ln in inc.trainer.warnings
                                       if t >= f.injected_at - 1 and EVIDENCE[f.kind].search(ln)), None)
                later = [s for x in self.incarnations[i:] for s in x.trainer.step_times if s >= (f.step or 0) + RECOVERY_STEPS]
                f.recovered = f.injected_at is not None and bool(later)

    def _alert_times(self) -> dict[str, list[tuple[float, str]]]:
        fired: dict[str, list[tuple[float, str]]] = {}
        for ev in self.stack.journal.of("alert"):
            if ev["status"] == "firing":
                fired.setdefault(ev["alertname"], []).append((ev["t"], ev["fingerprint"]))
        return fired

    def _firing_at(self, alertname: str, t: float) -> str | None:
        """Fingerprint of an ``alertname`` alert that was firing at time ``t``, if any."""
        state: dict[str, str] = {}
        for ev in self.stack.journal.of("alert"):
            if ev["t"] > t:
                break
            if ev["alertname"] == alertname:
                state[ev["fingerprint"]] = ev["status"]
        return next((fp for fp, st in state.items() if st == "firing"), None)

    def _delivered(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for ev in self.stack.journal.of("notification"):
            if ev["status"] == "delivered":
                for fp in ev["fingerprints"]:
                    out.setdefault(fp, ev["t"])
        return out

    def _undelivered(self) -> bool:
        delivered = self._delivered()
        return any(fp not in delivered for evs in self._alert_times().values() for _, fp in evs)

    def _restart_gaps(self) -> list[tuple[float, Incarnation]]:
        """(time the previous incarnation logged its last step, next incarnation) per restart."""
        out = []
        for prev, nxt in zip(self.incarnations, self.incarnations[1:], strict=False):
            out.append((max(prev.trainer.step_times.values(), default=prev.started), nxt))
        return out

    def _runs(self) -> list[dict[int, float]]:
        """Each incarnation's step completion times, up to the end of the measured wall time."""
        return [{s: t for s, t in inc.trainer.step_times.items() if t <= self.end_t} for inc in self.incarnations]

    def _ettr(self, wall: float) -> float:
        runs = self._runs()
        return productive_seconds(runs, [inc.resumed_from for inc in self.incarnations]) / wall if wall > 0 else 0.0

    def _ettr_from_first_step(self) -> float:
        if not self.incarnations or not self.incarnations[0].trainer.step_times:
            return 0.0
        steps = self.incarnations[0].trainer.step_times
        first_start = min(steps.values()) - step_seconds(steps)[1]  # the first step counts in full
        runs = self._runs()
        span = self.end_t - first_start
        return productive_seconds(runs, [inc.resumed_from for inc in self.incarnations]) / span if span > 0 else 0.0

    def _prompt_totals(self) -> dict[str, float | None]:
        """Counters restart with each process: sum every incarnation's last scrape. ``None`` when an
        incarnation never exposed a counter (then the soak cannot vouch for its prompts)."""
        return {name: (sum(i.counters[name] for i in self.incarnations)
                       if all(name in i.counters for i in self.incarnations) else None)
                for name in PROMPT_COUNTERS}

    def _report(self) -> dict[str, Any]:
        for inc in self.incarnations:  # the trainer's own "resumed from step N" wins when it logged one
            if inc.trainer.resumed_from is not None:
                inc.resumed_from = inc.trainer.resumed_from
        self._fault_times()
        reached = [f for inc in self.incarnations for f in inc.faults if f.injected_at is not None]
        injected = [f for f in reached if f.evidence is not None]
        fired, delivered = self._alert_times(), self._delivered()
        expected = delivered_n = 0
        delays: list[float] = []
        downtime = dict(zip([id(f) for inc in self.incarnations[:-1] for f in inc.faults if f.kind == "trainer_kill"],
                            [round(min(b.trainer.step_times.values(), default=self.end_t) - a, 1)
                             for a, b in self._restart_gaps()],
                            strict=False))
        for f in injected:
            names = EXPECTED[f.kind]
            if f.kind == "trainer_kill" and downtime.get(id(f), 0.0) > TRAINER_DOWN_AFTER_S:
                names = ("TrainerDown",)  # down longer than TrainerDown's `for: 1m`: the operator must hear
            for name in names:
                expected += 1
                at = f.injected_at or 0.0
                after = [(t, fp) for t, fp in fired.get(name, []) if t >= at]
                if after:
                    delays.append(after[0][0] - at)
                    if after[0][1] in delivered:
                        delivered_n += 1
                elif (fp := self._firing_at(name, at)) is not None and fp in delivered:
                    delivered_n += 1  # still firing (and notified) from an earlier fault: no new page
        wall = self.wall
        requeued = sum(inc.trainer.requeued for inc in self.incarnations)
        totals = self._prompt_totals()
        lost, dup = totals["verl_rollout_prompts_lost_total"], totals["verl_rollout_prompts_duplicated_total"]
        return {
            "ettr": round(self._ettr(wall), 4),
            # the initial start-up is the same with or without faults: this isolates what the faults cost
            "ettr_from_first_step": round(self._ettr_from_first_step(), 4),
            "faults_injected": len(injected),
            "faults_recovered": sum(f.recovered for f in injected),
            "prompts_lost": lost,
            "prompts_duplicated": dup,
            "alerts_expected": expected,
            "alerts_delivered": delivered_n,
            "mean_detect_seconds": round(statistics.mean(delays), 2) if delays else None,
            "faults": [{"kind": f.kind, "step": f.step, "planned_s": f.at_s,
                        "injected_s": None if f.injected_at is None else round(f.injected_at - self.t0, 1),
                        "evidence": f.evidence, "recovered": f.recovered}
                       for inc in self.incarnations for f in inc.faults],
            "faults_reached_without_trainer_evidence": [f.kind for f in reached if f.evidence is None],
            "faults_planned_not_reached": sum(1 for f in self.plan if f.injected_at is None),
            "restarts": len(self.incarnations) - 1,
            "restart_port_wait_seconds": self.port_wait,
            # last step before the kill -> first step after the resume
            "restart_seconds": [round(min(b.trainer.step_times.values(), default=self.end_t) - a_end, 1)
                                for a_end, b in self._restart_gaps()],
            "prompts_requeued": requeued,
            "alerts_fired": sorted(fired),
            # fired although no injected fault calls for them: the monitor's false alarms, or the trainer's
            # own trouble (e.g. the reward guard pausing a batch while the toy policy wobbles)
            "alerts_unexpected": sorted(set(fired) - {n for names in EXPECTED.values() for n in names} - {"TrainerDown"}),
            "final_step": self._last_step(),
            "duration_s": self.args.duration,
            "workdir": str(self.workdir),
            "notes": [
                "prompts_lost/prompts_duplicated: the trainer's per-step check of rollouts against prompts, summed "
                f"over incarnations from the last scrape of each (polled every {COUNTER_POLL_S:.0f} s); across a "
                "SIGKILL the resumed run re-draws the prompts after its checkpoint exactly (see the exact-resume "
                "tests), so the recomputed steps neither lose nor repeat prompts in the surviving run"]
            if lost is not None else [
                "prompts_lost/prompts_duplicated: an incarnation never exposed verl_rollout_prompts_lost_total / "
                "verl_rollout_prompts_duplicated_total, so they are reported as null"],
        }
