"""How often the leak rule's detector fires on GPU memory that only wanders: the 1000-GPU load's own memory series
(benchmarks/monitor_scale.py: a bounded random walk, +-200 MB uniform every 5 s within 55-65 GB), no leak.

    python benchmarks/leak_random_walk.py [--walks 40] [--hours 3] [--json]

Reported: the walks on which ``LeakDetector`` (the default MemoryLeakSuspected parameters: 10 MB/min lower bound,
30-min window, judged every minute) fired, and when. Sen's interval assumes independent bucket minima; a walk's
are not, so a wandering series reads as a significant slope.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from monitor.detectors.leak import LeakDetector  # noqa: E402

PERIOD_S, LO_MB, HI_MB, STEP_MB = 5.0, 55000.0, 65000.0, 200.0  # monitor_scale's DCGM_FI_DEV_FB_USED


def first_fire_h(seed: int, hours: float) -> float | None:
    rng = random.Random(seed)
    detector = LeakDetector(min_slope_per_min=10e6, window=1800.0, every=60.0)
    mb = (LO_MB + HI_MB) / 2
    for i in range(int(hours * 3600 / PERIOD_S)):
        mb = min(HI_MB, max(LO_MB, mb + rng.uniform(-STEP_MB, STEP_MB)))
        if detector.update(i * PERIOD_S, mb * 1e6).active:
            return i * PERIOD_S / 3600
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--walks", type=int, default=40, help="random walks, one seed each (default 40)")
    ap.add_argument("--hours", type=float, default=3.0, help="length of each walk (default 3)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    if args.walks <= 0 or not args.hours > 0:
        print("error: --walks and --hours must be > 0", file=sys.stderr)
        return 2
    fired = [h for h in (first_fire_h(s, args.hours) for s in range(args.walks)) if h is not None]
    result = {"benchmark": "leak_random_walk", "walks": args.walks, "hours": args.hours, "fired": len(fired),
              "median_first_fire_h": sorted(fired)[len(fired) // 2] if fired else None}
    print(json.dumps(result) if args.json else
          f"{len(fired)} of {args.walks} walks paged as leaks within {args.hours} h"
          + (f" (median first page at {result['median_first_fire_h']:.2f} h)" if fired else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
