"""``make demo`` / ``python -m harness.demo`` / ``verl-ops demo``: the whole loop on one machine, on embedded defaults.

    plan faults -> robot stand-in (WeCom) -> trainer subprocess (ppo_tiny + faults.* overrides)
                -> monitor daemon in this process (scrape -> detectors -> alerting engine) -> robot
                -> live log of alerts and chat messages -> summary (injected / detected / delivered)

``monitor`` never imports ``verl``: the trainer is ``python -m verl.cli.train`` in its own process
group, known only through its ``/metrics`` endpoint and its log lines (the time each step finished is
the injection time of a fault scheduled for that step).

Demo profile: the production rules need hours of history (drift over 1 h, leak over 30 min, 2-minute
correlation holds). The demo writes a *demo rules profile* into its work directory: the default rules
with short windows for the injected faults, and correlation holds of 30 s. It says so when it starts.

``harness.soak`` and ``benchmarks/e2e_latency.py`` reuse ``harness.stack.Stack`` (stand-in + monitor + trainer).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.profile import DEMO_CORRELATION_WINDOW
from harness.stack import Journal, Stack, StackOptions
from harness.standin import STANDINS


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
    # alerts the fault may cause downstream, true when they fire after it was injected (not required)
    consequences: tuple[str, ...] = ()


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
              (r"kl_coef = 0\.0 since step \d+ \(verl_kl_coef; config says 0\.2\)", r"Set kl_coef back to 0\.2"),
              # with no KL penalty the toy policy runs away: its reward saturates at 1.0 and its entropy
              # collapses, then (~90 steps on) it jumps off and its scores fall to ~0.5 at once; the trainer's
              # reward guard pauses those batches (extreme_ratio) and RewardVarianceSpike reports the pauses --
              # a true alert the injected fault caused, seen whenever the demo runs long enough; the
              # jump off the collapsed policy is also a gradient-norm burst against the collapse's near-zero
              # median (x1308 in a 160 s run on a 16-core GPU machine, ~900 steps)
              consequences=("RewardVarianceSpike", "GradientNormBurst")),
)


# Root-cause phrases of each diagnosis path (alerting/procedures.py): a message of the demo may use one only
# when the fault behind it was injected; otherwise it names something that was not measured.
CLAIMS: dict[str, str] = {
    "reward model fails to load": "",  # the demo injects no reward-scoring fault
    "unbounded, verl_config_info": "",
    "data loading starves": "",
    "kl_coef = 0.0": "kl",
    "a leak": "leak",
    "Reward Model OOM": "dataflow",
}


def first_diagnosis(messages: list[dict[str, Any]], since: float | None, cause: str, fix: str) -> float | None:
    """Journal time of the first chat message from ``since`` on that matches both ``cause`` and ``fix``, or None
    (``benchmarks/e2e_latency.py`` times its diagnoses with it too)."""
    if not cause or since is None:
        return None
    return next((float(m["t"]) for m in messages if m["t"] >= since and re.search(cause, m["text"], re.S)
                 and re.search(fix, m["text"], re.S)), None)


def unmeasured_claims(journal: Journal, plan: Sequence[Injection]) -> list[str]:
    """Claims in the chat messages that no injected fault accounts for."""
    injected = {inj.key for inj in plan}
    return sorted({phrase for ev in journal.of("message") for phrase, key in CLAIMS.items()
                   if phrase in ev["text"] and key not in injected})


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
    firings: dict[str, list[tuple[float, str]]] = {}
    for ev in journal.of("alert"):
        if ev["status"] == "firing":
            firings.setdefault(ev["alertname"], []).append((ev["t"], ev["fingerprint"]))
    fired = {name: times[0] for name, times in firings.items()}
    incidents = [e for e in journal.of("incident") if e["status"] == "firing"]
    delivered_fp: dict[str, float] = {}
    deliveries: dict[str, int] = {}  # firing notifications that carried the alert: "delivered once"
    for ev in journal.of("notification"):
        if ev["status"] == "delivered" and ev.get("notification_status", "firing") == "firing":
            for fp in ev["fingerprints"]:
                delivered_fp.setdefault(fp, ev["t"])
                deliveries[fp] = deliveries.get(fp, 0) + 1
    outcomes = []
    caused: dict[str, str] = {}  # alertname -> the injection that caused it (a consequence, after it)
    false_pages: list[dict[str, Any]] = []  # an expected alert that fired before its fault: not a detection
    for inj in plan:
        # a fault at step N acts during step N: injected when step N-1 was logged; "from the start":
        # the trainer's first step
        at = step_times.get(1, trainer_started) if inj.at_step is None else step_times.get(inj.at_step - 1)
        alerts = {}
        for name in inj.expects:
            early = [f for f in firings.get(name, []) if at is None or f[0] < at]
            false_pages.extend({"alertname": name, "t": t, "before": inj.name} for t, _ in early[:1])
            det = next((f for f in firings.get(name, []) if at is not None and f[0] >= at), None)
            alerts[name] = {"detected": det[0] if det else None,
                            "delivered": delivered_fp.get(det[1]) if det else None,
                            "deliveries": deliveries.get(det[1], 0) if det else 0}
        outcomes.append(FaultOutcome(inj.name, at, alerts, first_diagnosis(journal.of("message"), at, *inj.diagnosis)))
        for name in inj.consequences:
            if name in fired and at is not None and fired[name][0] >= at:
                caused.setdefault(name, inj.name)
    expected = {n for inj in plan for n in inj.expects}
    return {
        "faults": [{"injection": o.injection, "injected_at": o.injected_at, "ok": o.ok,
                    "alerts": o.alerts, "diagnosed": o.diagnosed,
                    "time_to_diagnosis_s": None if o.diagnosed is None or o.injected_at is None
                    else round(o.diagnosed - o.injected_at, 1)} for o in outcomes],
        "all_diagnosed": all(o.diagnosed is not None for o in outcomes),
        "unmeasured_claims": unmeasured_claims(journal, plan),
        "unexpected_alerts": sorted(set(fired) - expected - set(caused)),
        "false_pages": false_pages,
        "caused_alerts": caused,
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
    for name, injection in sorted(summary.get("caused_alerts", {}).items()):
        print(f"also fired, caused by an injected fault: {name} (after: {injection})")
    if summary["unexpected_alerts"]:
        print("also fired (not injected): " + ", ".join(summary["unexpected_alerts"]))
    for fp in summary.get("false_pages", []):
        print(f"FALSE PAGE: {fp['alertname']} fired at {fp['t']:.1f}s, before its fault ({fp['before']}) was injected")
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
        assert stack.trainer is not None and stack.monitor is not None
        print(f"verl-ops demo: console on {stack.monitor.url}/ (open it while the demo runs"
              + ("; kept up after the summary until Ctrl-C)" if args.keep_open else "; --keep-open keeps it up after the summary)"),
              flush=True)
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
        if args.keep_open:  # the summary now; trainer, monitor and console go on until Ctrl-C
            print_summary(summary, summary["wall_seconds"])
            summary["printed"] = True
            print(f"verl-ops demo: console still on {stack.monitor.url}/; Ctrl-C stops it", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                threading.Event().wait()
    return summary


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so every ``with``/``finally`` of the stack runs."""


def _terminated(signum: int, frame: Any) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.demo", description=__doc__.splitlines()[0],
                                epilog="Exit status: 0 when every injected fault was detected, delivered and "
                                       "diagnosed; 1 when one was MISSED, an expected alert paged before its fault "
                                       "(a false page), or the stack did not start; 2 on bad "
                                       "arguments; 130 on Ctrl-C; 143 on SIGTERM (the stack stopped either way).")
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
    p.add_argument("--keep-open", action="store_true",
                   help="after the summary keep the trainer, the monitor and its console up until Ctrl-C")
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
    # SIGTERM (timeout(1), a CI job's cancel, kill) stops the stack as Ctrl-C does: the trainer runs in a session
    # of its own, so a demo that died on the default action left it training (trainer.total_steps=100000)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        summary = run_demo(args)
    except _Terminated:
        print("\ndemo: terminated; trainer, monitor and robot stand-in stopped", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("\ndemo: interrupted; trainer, monitor and robot stand-in stopped", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    if not summary.get("printed"):
        print_summary(summary, summary["wall_seconds"])
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=2))
    return 0 if every_fault_caught(summary) else 1


def every_fault_caught(summary: dict[str, Any]) -> bool:
    """No injected fault MISSED: each was detected, delivered and diagnosed before the demo ended, and none
    of its alerts paged before it was injected (a healthy run, with no fault planned, misses nothing)."""
    return not summary["faults"] or (summary["all_detected_and_delivered"] and summary["all_diagnosed"]
                                     and not summary.get("false_pages"))


if __name__ == "__main__":
    sys.exit(main())
