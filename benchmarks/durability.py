"""Issue 23: the alert path under crashes and storage faults, and what commit-then-act costs.

    .venv/bin/python benchmarks/durability.py --json

Three parts, one JSON object:

- ``crash_points``: ``harness.crashpoint.run_all`` -- the three-alert scenario killed (os._exit, as
  abrupt as SIGKILL) right after each commit of its clean run, restarted, run to the end; pages per
  alert, duplicates, lost pages, re-pages after a resolve, over all crash points. Plus one real SIGKILL
  with the first page in flight (the robot has it, the outcome is not committed).
- ``outage``: ``--alerts`` alerts fire (on their own nodes) while every write of both databases fails
  (fault injector: "database or disk is full"), half of them resolve before the disk returns; then
  writes land again. Pages delivered during the outage, FIRING/RESOLVED per alert after it, duplicates.
- ``cost``: ``--deliveries`` notifications through the engine's delivery step with the attempt
  committed before each send (the notification log) and, in the same run, with that claim commit
  skipped: ms per delivery (fastest of 7 interleaved rounds each) and the ratio (the price of
  "nothing sent that is not recorded").
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from alerting.clock import SimulatedClock  # noqa: E402
from alerting.durable import StorageHealth  # noqa: E402
from alerting.engine import AlertEngine  # noqa: E402
from alerting.model import Alert  # noqa: E402
from harness.crashpoint import RULES, T0, engine_config, kill_in_flight, run_all  # noqa: E402
from harness.standin import WebhookStandIn  # noqa: E402
from harness.storagefault import FULL, inject  # noqa: E402
from monitor.evaluation.rules import load_rules  # noqa: E402
from monitor.pipeline import Pipeline  # noqa: E402


def outage(tmp: Path, n: int) -> dict[str, Any]:
    robot, clock = WebhookStandIn(), SimulatedClock(T0)
    (tmp / "rules.yaml").write_text(RULES)
    health = StorageHealth()
    engine = AlertEngine(engine_config(robot.url), tmp / "alerting.db", clock, health=health)
    pipe = Pipeline(load_rules(tmp / "rules.yaml"), clock, db_path=tmp / "state.db", engine=engine,
                    restore_grace_s=0.0, health=health)
    book, eng = inject(pipe, engine)

    def step(hot: set[str], k: int = 1) -> None:
        for _ in range(k):
            clock.advance(5.0)
            for i in range(n):
                s = pipe.series("crashpoint_temperature", {"node": f"n{i}", "job": "crashpoint"})
                assert s is not None
                pipe.observe(s, clock.now(), 1.0 if f"n{i}" in hot else 0.0)
            pipe.tick()
            engine.tick()  # simulated time: the engine's timers run when the clock moves

    everyone = {f"n{i}" for i in range(n)}
    try:
        book.error = eng.error = FULL
        step(everyone, 6)
        step({f"n{i}" for i in range(n // 2, n)}, 6)  # the first half resolves during the outage
        during = len(robot.received)
        reasons = health.reasons()
        book.error = eng.error = None
        back = clock.now()
        step({f"n{i}" for i in range(n // 2, n)}, 12)
        step(set(), 12)
        firing: dict[str, int] = {}
        resolved: dict[str, int] = {}
        for r in robot.received:
            for a in r.body["alerts"]:
                d = firing if a["status"] == "firing" else resolved
                d[a["labels"]["node"]] = d.get(a["labels"]["node"], 0) + 1
        return {"alerts": n, "pages_during_outage": during,
                "alerts_paged_firing_once": sum(1 for v in firing.values() if v == 1),
                "alerts_resolved_once": sum(1 for v in resolved.values() if v == 1),
                "duplicates": sum(v - 1 for v in firing.values()) + sum(v - 1 for v in resolved.values()),
                "lost": n - len(firing) + n - len(resolved),
                "healthz_reasons_during_outage": reasons,
                "outage_sim_s": back - T0}
    finally:
        engine.close()
        pipe.close()
        robot.close()


def cost(tmp: Path, n: int) -> dict[str, Any]:
    out: dict[str, list[float]] = {"claimed": [], "unclaimed": []}
    for rnd in range(7):  # interleaved rounds; the fastest of each mode (least disturbed by other load)
        for mode in ("claimed", "unclaimed"):
            robot, clock = WebhookStandIn(), SimulatedClock(T0)
            engine = AlertEngine(engine_config(robot.url), tmp / f"cost-{mode}-{rnd}.db", clock)
            if mode == "unclaimed":
                engine.outbox.claim = lambda rows: None  # type: ignore[method-assign]
            alerts = [Alert(labels={"alertname": "Bench", "severity": "P2", "node": f"n{i}"}, annotations={},
                            starts_at=T0) for i in range(n)]
            engine.submit(alerts)
            clock.advance(1.0)
            t0 = time.perf_counter()
            engine.tick()
            while len(robot.received) < n:
                clock.advance(1.0)
                engine.tick()
            out[mode].append((time.perf_counter() - t0) / n * 1000)
            engine.close()
            robot.close()
    claimed, unclaimed = min(out["claimed"]), min(out["unclaimed"])
    return {"deliveries": n, "ms_per_delivery_with_claim": round(claimed, 3),
            "ms_per_delivery_without_claim": round(unclaimed, 3), "ratio": round(claimed / unclaimed, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--alerts", type=int, default=20, help="alerts firing during the outage (default 20)")
    p.add_argument("--deliveries", type=int, default=200, help="notifications for the cost part (default 200)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = p.parse_args(argv)
    if args.alerts < 2 or args.deliveries < 1:
        print("error: --alerts must be >= 2 and --deliveries >= 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="verl-durability-") as tmp:
        started = time.perf_counter()
        crash = run_all(Path(tmp) / "crash")
        crash["wall_s"] = round(time.perf_counter() - started, 2)
        robot = WebhookStandIn()
        try:
            v = kill_in_flight(Path(tmp) / "crash", robot)
        finally:
            robot.close()
        crash["sigkill_in_flight"] = {"firing_pages": v.firing, "resolved_pages": v.resolved,
                                      "problems": v.problems()}
        (Path(tmp) / "outage").mkdir()
        result = {"crash_points": crash, "outage": outage(Path(tmp) / "outage", args.alerts),
                  "cost": cost(Path(tmp), args.deliveries)}
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
