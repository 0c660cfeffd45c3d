"""Crash points of the alert path: kill the monitor right after each of its commits, restart it, and
check the promises of alerting/README.md ("Durability") on what a robot received.

One scenario on simulated time, resumable: the monitor's pipeline and alerting engine (the daemon's
own objects, delivering in line) on a state dir, a threshold rule, three nodes whose alerts fire and
resolve at different steps, pages to a local webhook stand-in (``harness.standin``) over real HTTP.
``run_scenario`` writes the step it is at to ``progress.json`` before doing it, so a restarted run
carries on where the killed one was (as the daemon carries on at wall time); after the last step it
ticks two simulated hours more, long past ``repeat_interval``, so an alert the engine still thinks
firing would page again.

The kill is ``alerting.durable``'s crash hook: the process leaves by ``os._exit`` right after its N-th
commit, as abruptly as SIGKILL (no finally, no flush, no close). ``crash_at`` forks a child per run, so
a run costs milliseconds rather than an interpreter start; ``check`` turns the robot's log into the
verdict per alert. ``python -m harness.crashpoint`` runs every crash point and prints the figures
(``--json``); tests/monitor/test_crash_points.py asserts them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alerting import durable
from alerting.clock import SimulatedClock
from alerting.config import parse_config
from alerting.engine import AlertEngine
from harness.standin import WebhookStandIn
from monitor.evaluation.rules import load_rules
from monitor.pipeline import Pipeline

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
STEP_S = 5.0
# node -> (first step over the threshold, first step back under it)
WINDOWS = {"n1": (2, 6), "n2": (4, 12), "n3": (9, 11)}
STEPS = 14
AFTER_S = 2 * 3600.0  # ticks after the last step: two repeat_intervals
RULES = """
rules:
  - alert: CrashPointHot
    severity: P1
    for: 0s
    select: crashpoint_temperature
    detector: {type: threshold, op: ">", value: 0.5}
    summary: "hot on {{ labels.node }}"
"""


def engine_config(url: str) -> Any:
    return parse_config({
        "receivers": [{"name": "hook", "type": "webhook", "url": url, "timeout": "2s"}],
        "route": {"receiver": "hook", "group_wait": "0s", "group_interval": "5s", "repeat_interval": "1h",
                  "group_by": ["alertname", "node"]},
        "outbox": {"backoff_initial": "1s", "backoff_max": "10s", "seed": 7}})


def run_scenario(state: Path, url: str) -> int:
    """Run (or resume) the scenario on ``state``; returns the number of commits this process made."""
    progress = state / "progress.json"
    step = json.loads(progress.read_text())["step"] if progress.exists() else 0
    clock = SimulatedClock(T0 + step * STEP_S)
    rules_file = state / "rules.yaml"
    rules_file.write_text(RULES)
    engine = AlertEngine(engine_config(url), state / "alerting.db", clock)
    pipe = Pipeline(load_rules(rules_file), clock, db_path=state / "state.db", engine=engine, restore_grace_s=0.0)
    for k in range(step, STEPS):
        progress.write_text(json.dumps({"step": k}))  # not a commit of the alert path: no crash point
        clock.set(T0 + k * STEP_S)
        for node, (hot, cool) in WINDOWS.items():
            series = pipe.series("crashpoint_temperature", {"node": node, "job": "crashpoint"})
            assert series is not None
            pipe.observe(series, clock.now(), 1.0 if hot <= k < cool else 0.0)
        pipe.tick()
        engine.tick()  # simulated time: whoever moves the clock runs the engine's timers
    progress.write_text(json.dumps({"step": STEPS}))
    end = T0 + STEPS * STEP_S + AFTER_S
    while clock.now() < end:
        clock.set(min(end, clock.now() + 60.0))
        engine.tick()
    engine.close()
    pipe.close()
    return durable.commit_count()


def _spawn(state: Path, url: str, crash_after: int) -> int:
    """Start the scenario in a child process; its pid."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller (a test runner) -- it leaves by os._exit
        code = 1
        try:
            durable._crash_after, durable._commits = crash_after, 0
            n = run_scenario(state, url)
            (state / "commits").write_text(str(n))
            code = 0
        finally:
            os._exit(code)
    return pid


def _fork(state: Path, url: str, crash_after: int) -> int:
    """Run the scenario in a child process; its exit status (137: killed at the crash point)."""
    return os.waitstatus_to_exitcode(os.waitpid(_spawn(state, url, crash_after), 0)[1])


def kill_in_flight(root: Path, robot: WebhookStandIn) -> Verdict:
    """A real SIGKILL while the first page is in flight: the robot has the message, the monitor dies
    before the answer (so before the outcome commit). After the restart that one message is sent
    again: the one duplicate the promise allows."""
    state = root / "in-flight"
    state.mkdir(parents=True)
    robot.received.clear()
    victim: dict[str, int] = {}

    def kill_first(_: Any) -> None:
        pid = victim.pop("pid", 0)
        if pid:
            os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # dead before the robot answers

    robot.on_receive = kill_first
    try:
        victim["pid"] = pid = _spawn(state, robot.url, 0)
        with contextlib.suppress(ChildProcessError):  # reaped by kill_first
            os.waitpid(pid, 0)
    finally:
        robot.on_receive = None
    killed = "pid" not in victim
    if _fork(state, robot.url, 0) != 0:
        raise RuntimeError("in-flight kill: restarted scenario failed")
    return check(list(robot.received), -1, killed)


@dataclass
class Verdict:
    crash_after: int
    killed: bool
    firing: dict[str, int] = field(default_factory=dict)   # node -> FIRING pages
    resolved: dict[str, int] = field(default_factory=dict)  # node -> RESOLVED pages
    repaged: list[str] = field(default_factory=list)        # nodes paged FIRING after their RESOLVED

    def problems(self, max_duplicates: int = 1) -> list[str]:
        out = []
        for node in WINDOWS:
            f, r = self.firing.get(node, 0), self.resolved.get(node, 0)
            if not 1 <= f <= 1 + max_duplicates:
                out.append(f"{node}: {f} FIRING page(s), want 1..{1 + max_duplicates}")
            if not 1 <= r <= 1 + max_duplicates:
                out.append(f"{node}: {r} RESOLVED page(s), want 1..{1 + max_duplicates}")
        out += [f"{node}: paged FIRING again after its RESOLVED" for node in self.repaged]
        return out


def check(received: list[Any], crash_after: int = 0, killed: bool = False) -> Verdict:
    v = Verdict(crash_after, killed)
    done: set[str] = set()
    for r in received:
        for a in r.body.get("alerts", []):
            node = a["labels"]["node"]
            if a["status"] == "firing":
                v.firing[node] = v.firing.get(node, 0) + 1
                if node in done:
                    v.repaged.append(node)
            else:
                v.resolved[node] = v.resolved.get(node, 0) + 1
                done.add(node)
    return v


def crash_at(root: Path, robot: WebhookStandIn, n: int) -> Verdict:
    """Kill after commit ``n`` (0: no kill), restart, finish; the verdict on what the robot got."""
    state = root / f"crash-{n}"
    state.mkdir(parents=True)
    robot.received.clear()
    killed = False
    if n:
        code = _fork(state, robot.url, n)
        killed = code == 137
        if code not in (0, 137):
            raise RuntimeError(f"crash point {n}: scenario exited {code}")
    if not (state / "commits").exists():  # killed (or no kill asked): restart and run to the end
        code = _fork(state, robot.url, 0)
        if code != 0:
            raise RuntimeError(f"crash point {n}: restarted scenario exited {code}")
    return check(list(robot.received), n, killed)


def run_all(root: Path) -> dict[str, Any]:
    """Every crash point of the clean run's commits; the figures for RESULTS.md."""
    robot = WebhookStandIn()
    try:
        clean = crash_at(root, robot, 0)
        total = int((root / "crash-0" / "commits").read_text())
        verdicts = [crash_at(root, robot, n) for n in range(1, total + 1)]
    finally:
        robot.close()
    killed = [v for v in verdicts if v.killed]
    pages = [sum(v.firing.values()) for v in killed]
    return {"commits_per_clean_run": total, "alerts": len(WINDOWS), "crash_points": len(killed),
            "clean_problems": clean.problems(0),
            "failed_points": {v.crash_after: v.problems() for v in verdicts if v.problems()},
            "firing_pages_per_alert_max": max((max(v.firing.values(), default=0) for v in killed), default=0),
            "duplicate_firing_pages_total": sum(p - len(WINDOWS) for p in pages),
            "duplicate_resolved_pages_total": sum(sum(v.resolved.values()) - len(WINDOWS) for v in killed),
            "repaged_after_resolve": sum(len(v.repaged) for v in killed),
            "lost_pages": sum(1 for v in killed for node in WINDOWS
                              if not v.firing.get(node) or not v.resolved.get(node))}


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.crashpoint [--json]``: kill the alert path at every commit and check the pages."""
    p = argparse.ArgumentParser(prog="python -m harness.crashpoint", description=main.__doc__)
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="verl-crashpoint-") as tmp:
        result = run_all(Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0 if not result["failed_points"] and not result["clean_problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
