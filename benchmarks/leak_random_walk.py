"""How often the leak rule's detector fires on GPU memory that only wanders: the 1000-GPU load's own memory series
(benchmarks/monitor_scale.py: a bounded random walk, +-200 MB uniform every 5 s within 55-65 GB), no leak.

    python benchmarks/leak_random_walk.py [--walks 40] [--hours 3] [--json]

Reported: the walks on which ``LeakDetector`` (the default MemoryLeakSuspected parameters: 10 MB/min lower bound,
30-min window, judged every minute) fired, and when; the pages each walk gives as the rule's alert (it fires at
the detector's first firing and resolves once the detector has been quiet for the rule's ``keep_firing_for``,
10 min) and the share of the walk that alert fires. Sen's interval assumes independent bucket minima; a walk's
are not, and over 30 min a walk of this step moves ~2.2 GB (one sd), against the 300 MB a 10 MB/min bound needs:
a wandering series reads as a significant slope.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from monitor.detectors.leak import LeakDetector  # noqa: E402

PERIOD_S, LO_MB, HI_MB, STEP_MB = 5.0, 55000.0, 65000.0, 200.0  # monitor_scale's DCGM_FI_DEV_FB_USED


KEEP_FIRING_FOR_S = 600.0  # MemoryLeakSuspected's keep_firing_for (monitor/rules/default.yaml)


@dataclass(frozen=True)
class Walk:
    first_fire_h: float | None  # when the detector first fired, None: never
    pages: int  # the alert's firings: a new one only after it resolved (quiet for KEEP_FIRING_FOR_S)
    firing_share: float  # of the walk's time, the alert fired


def judge(seed: int, hours: float) -> Walk:
    rng = random.Random(seed)
    detector = LeakDetector(min_slope_per_min=10e6, window=1800.0, every=60.0)
    mb = (LO_MB + HI_MB) / 2
    first, pages, firing_rounds, quiet_since = None, 0, 0, None
    firing = False
    rounds = int(hours * 3600 / PERIOD_S)
    for i in range(rounds):
        t = i * PERIOD_S
        mb = min(HI_MB, max(LO_MB, mb + rng.uniform(-STEP_MB, STEP_MB)))
        if detector.update(t, mb * 1e6).active:
            quiet_since = None
            if first is None:
                first = t / 3600
            if not firing:
                firing, pages = True, pages + 1
        elif firing:
            quiet_since = t if quiet_since is None else quiet_since
            firing = t - quiet_since < KEEP_FIRING_FOR_S
        firing_rounds += firing
    return Walk(first, pages, firing_rounds / max(1, rounds))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--walks", type=int, default=40, help="random walks, one seed each (default 40)")
    ap.add_argument("--hours", type=float, default=3.0, help="length of each walk (default 3)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    if args.walks <= 0 or not args.hours > 0:
        print("error: --walks and --hours must be > 0", file=sys.stderr)
        return 2
    walks = [judge(seed, args.hours) for seed in range(args.walks)]
    fired = sorted(w.first_fire_h for w in walks if w.first_fire_h is not None)
    result = {"benchmark": "leak_random_walk", "walks": args.walks, "hours": args.hours, "fired": len(fired),
              "median_first_fire_h": fired[len(fired) // 2] if fired else None,
              "pages_per_walk": round(sum(w.pages for w in walks) / len(walks), 2),
              "firing_share": round(sum(w.firing_share for w in walks) / len(walks), 3)}
    print(json.dumps(result) if args.json else
          f"{len(fired)} of {args.walks} walks paged as leaks within {args.hours} h"
          + (f" (median first page at {result['median_first_fire_h']:.2f} h)" if fired else "")
          + f"; {result['pages_per_walk']} pages a walk, firing {result['firing_share']:.0%} of the time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
