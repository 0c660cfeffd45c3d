"""How long does an async checkpoint block the training step, relative to a synchronous save?

    python benchmarks/checkpoint_stall.py [--params-mb 160] [--repeats 5] [--dir DIR] [--json]

Same run, same state, interleaved: a synchronous save (the call returns after COMPLETE) and an async
save (the call returns after staging into the reused CPU buffers; the background write is waited for
outside the timed region). One warm-up save of each kind first, so the async side measures the steady
state (buffers already allocated). Last line with --json: {"async_stall_over_sync_save": r} (median
stall / median synchronous save; target <= 0.1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py` from a checkout
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from verl.checkpoint import CheckpointManager  # noqa: E402


def build(params_mb: float) -> tuple[torch.nn.Module, torch.nn.Module]:
    """An actor of square Linear layers (~80 % of the bytes) and a smaller critic, fp32."""
    width = 1024
    per_layer_mb = width * (width + 1) * 4 / 2**20
    actor_layers = max(1, round(params_mb * 0.8 / per_layer_mb))
    critic_layers = max(1, round(params_mb * 0.2 / per_layer_mb))
    torch.manual_seed(0)
    actor = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(actor_layers)])
    critic = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(critic_layers)])
    return actor, critic


def perturb(models: tuple[torch.nn.Module, ...]) -> None:
    with torch.no_grad():  # a "training step": the state changes between saves
        for m in models:
            for p in m.parameters():
                p.add_(1e-3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--params-mb", type=float, default=160.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir, removed after)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.params_mb <= 0 or args.repeats < 1:
        print("error: --params-mb must be > 0 and --repeats >= 1", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    actor, critic = build(args.params_mb)
    nbytes = sum(p.numel() * p.element_size() for m in (actor, critic) for p in m.parameters())
    models = {"actor": actor, "critic": critic}
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        sync_mgr = CheckpointManager(Path(d) / "sync", keep_last=1, async_save=False)
        async_mgr = CheckpointManager(Path(d) / "async", keep_last=1, async_save=True)
        sync_s: list[float] = []
        stall_s: list[float] = []
        for i in range(args.repeats + 1):
            step = i + 1
            perturb((actor, critic))
            t0 = time.perf_counter()
            sync_mgr.save(step, models=models)
            t_sync = time.perf_counter() - t0
            perturb((actor, critic))
            t0 = time.perf_counter()
            async_mgr.save(step, models=models)
            t_stall = time.perf_counter() - t0
            async_mgr.wait()  # not timed: training would run on meanwhile
            if i > 0:  # i == 0 warms up both paths (first async save allocates its buffers)
                sync_s.append(t_sync)
                stall_s.append(t_stall)
            if not args.json:
                print(f"repeat {i}: sync save {t_sync:.3f}s, async stall {t_stall:.4f}s{' (warm-up)' if i == 0 else ''}")
    ratio = statistics.median(stall_s) / statistics.median(sync_s)
    detail = {
        "state_bytes": nbytes,
        "repeats": args.repeats,
        "sync_save_s_median": round(statistics.median(sync_s), 4),
        "async_stall_s_median": round(statistics.median(stall_s), 4),
        "sync_save_s": [round(x, 4) for x in sync_s],
        "async_stall_s": [round(x, 4) for x in stall_s],
    }
    print(json.dumps(detail))
    print(json.dumps({"async_stall_over_sync_save": round(ratio, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
