"""End-to-end latency: fault injected in a live trainer -> chat message received by the robot stand-in.

    python benchmarks/e2e_latency.py [--json] [--scrape-interval 1] [--correlation-window 20s]

One real trainer (``python -m verl.cli.train --config ppo_tiny``, CPU) runs a staggered fault schedule;
the monitor daemon scrapes it and delivers through the alerting engine to a WeCom stand-in on loopback
(``harness.stack.Stack``). Per alert type: ``detect_s`` = first firing - injection, ``deliver_s`` = first
delivered notification carrying that alert (alone or inside its incident) - injection. The injection
time of a fault at step N is when the trainer logged step N-1 (the fault acts during step N); of the
leak (active from the start) the trainer's first step.

Settings that dominate the figures and are reported with them: the scrape interval, the demo rules
profile for the detectors that need hours of history in production (leak 30 min -> 2 min window, KL
drift 1 h -> 60 s; see harness/profile.py), the correlation hold (production 2 min) and group_wait 1 s.
Faults that the trainer does not act on yet simply show ``null``.

Time to diagnosis (issue 15): for the faults whose page must name a measured root cause and its fix,
``diagnose_s`` = the first chat message naming the right cause *and* fix (the regexes in ``DIAGNOSES``, the
demo's own for the faults it shares) - injection.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.demo import DEMO_PLAN, first_diagnosis  # noqa: E402
from harness.stack import Stack, StackOptions  # noqa: E402

# (alert, overrides, injection step; None = from the start). kill_trainer last: it ends the run.
SCHEDULE: list[tuple[str, tuple[str, ...], int | None]] = [
    ("MemoryLeakSuspected", ("faults.gpu_leak_mb_per_min=300",), None),
    ("RewardModelOOM", ("faults.reward_oom_at_step=40", "rollout.prefetch_batches=4"), 40),
    ("RolloutBufferDrop", (), 40),
    ("RolloutWorkerCrash", ("faults.kill_rollout_worker_at_steps=[60]",), 60),
    ("KLDriftDetected", ("faults.kl_drift_at_step=100",), 100),
    ("ThroughputDrop", ("faults.throughput_drop_at_step=140",), 140),
    ("RewardModelTimeout", ("faults.reward_hang_at_step=260", "reward.timeout_s=1"), 260),
    ("RewardModelCircuitOpen", (), 260),
    ("TrainerDown", ("faults.kill_trainer_at_step=700",), 700),  # KL drift needs ~80 s at ppo_tiny lr
]


# fault (its schedule alert) -> (cause, fix) a chat message must both match to count as its diagnosis: the
# demo's leak, reward-OOM and KL faults, and the throughput drop the demo does not inject
DIAGNOSES: dict[str, tuple[str, str]] = {
    **{inj.expects[0]: inj.diagnosis for inj in DEMO_PLAN},
    "ThroughputDrop": (r"dataloader time per step rose .*data loading starves", r"data\.num_workers: 8"),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scrape-interval", type=float, default=1.0, help="monitor scrape interval, seconds")
    p.add_argument("--correlation-window", default="20s", help="correlation hold (production 2m)")
    p.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    p.add_argument("--json", action="store_true", help="print only the JSON result line")
    args = p.parse_args(argv)
    if args.scrape_interval <= 0 or args.timeout <= 0:
        print("error: --scrape-interval and --timeout must be > 0", file=sys.stderr)
        return 2
    overrides = [o for _, ov, _ in SCHEDULE for o in ov]
    work = Path(tempfile.mkdtemp(prefix="verl-e2e-latency-"))
    opts = StackOptions(workdir=work, kind="wecom", scrape_interval=args.scrape_interval,
                        correlation_window=args.correlation_window, echo=not args.json,
                        trainer_args=("--config", "ppo_tiny", "--metrics-port", "0", "--metrics-interval", "1",
                                      "trainer.total_steps=100000", "kl_coef=0.2", "rollout_worker_num=2",
                                      *overrides))
    started = time.monotonic()
    with Stack(opts) as stack:
        assert stack.trainer is not None
        j, trainer = stack.journal, stack.trainer
        while time.monotonic() - started < args.timeout:
            time.sleep(1.0)
            if _all_delivered(stack) and _all_diagnosed(stack, dict(trainer.step_times), stack.trainer_started):
                break
        step_times = dict(trainer.step_times)
        t_start = stack.trainer_started
    fired: dict[str, tuple[float, str]] = {}
    for ev in j.of("alert"):
        if ev["status"] == "firing":
            fired.setdefault(ev["alertname"], (ev["t"], ev["fingerprint"]))
    delivered: dict[str, float] = {}
    for ev in j.of("notification"):
        if ev["status"] == "delivered":
            for fp in ev["fingerprints"]:
                delivered.setdefault(fp, ev["t"])
    alerts = {}
    for name, _, step in SCHEDULE:
        at = step_times.get(1, t_start) if step is None else step_times.get(step - 1)
        f = fired.get(name)
        d = delivered.get(f[1]) if f else None
        alerts[name] = {"injected_s": at, "detect_s": round(f[0] - at, 2) if f and at is not None else None,
                        "deliver_s": round(d - at, 2) if d is not None and at is not None else None}
    messages = j.of("message")
    for name, (cause, fix) in DIAGNOSES.items():
        at = alerts[name]["injected_s"]
        d = first_diagnosis(messages, at, cause, fix)
        alerts[name]["diagnose_s"] = round(d - at, 2) if d is not None and at is not None else None
    measured = [a["deliver_s"] for a in alerts.values() if a["deliver_s"] is not None]
    diagnosed = [alerts[n]["diagnose_s"] for n in DIAGNOSES if alerts[n]["diagnose_s"] is not None]
    result = {"benchmark": "e2e_latency", "scrape_interval_s": args.scrape_interval,
              "correlation_window": args.correlation_window, "group_wait": "1s", "rules": "demo profile",
              "alerts": alerts, "delivered_types": len(measured), "types": len(alerts),
              "max_deliver_s": max(measured) if measured else None,
              "diagnosed_faults": len(diagnosed), "diagnosis_faults": len(DIAGNOSES),
              "max_diagnose_s": max(diagnosed) if diagnosed else None,
              "unexpected": sorted(set(fired) - {n for n, _, _ in SCHEDULE}),
              "wall_seconds": round(time.monotonic() - started, 1)}
    if not args.json:
        for name, a in alerts.items():
            print(f"{name:24s} detect {a['detect_s']!s:>8}s  deliver {a['deliver_s']!s:>8}s"
                  + (f"  diagnose {a['diagnose_s']!s:>8}s" if name in DIAGNOSES else ""))
    print(json.dumps(result), flush=True)
    return 0


def _all_diagnosed(stack: Stack, step_times: dict[int, float], t_start: float) -> bool:
    messages = stack.journal.of("message")
    steps = {n: s for n, _, s in SCHEDULE}
    for name, (cause, fix) in DIAGNOSES.items():
        step = steps[name]
        at = step_times.get(1, t_start) if step is None else step_times.get(step - 1)
        if first_diagnosis(messages, at, cause, fix) is None:
            return False
    return True


def _all_delivered(stack: Stack) -> bool:
    names = {n for n, _, _ in SCHEDULE}
    fps = {ev["fingerprint"]: ev["alertname"] for ev in stack.journal.of("alert") if ev["status"] == "firing"}
    got = {fps[fp] for ev in stack.journal.of("notification") if ev["status"] == "delivered"
           for fp in ev["fingerprints"] if fp in fps}
    return names <= got


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Stack's exit already stopped the trainer, monitor and stand-in
        print("interrupted", file=sys.stderr)
        sys.exit(130)
