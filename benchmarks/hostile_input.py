"""How fast is hostile input refused, and what does the safe loading cost on good input?

    python benchmarks/hostile_input.py [--repeats 20] [--json]

- a "billion laughs" YAML file (9 levels of 9 aliases: ~3.9e8 strings if expanded) through each CLI's
  config loader (verl, monitor, alerting): seconds until the one-line error, median of ``repeats``;
- the restricted DCP ``.metadata`` unpickler vs plain ``pickle.load`` on the real metadata of a checkpoint
  with ~100 tensors (the price of loading safely);
- ``verify`` of a whole 1-rank checkpoint without checksums (JSON-Schema shape checks + metadata reads).

Last line with --json: {"bomb_refused_max_s": s, "safe_metadata_over_pickle": r, "verify_no_checksums_s": s}.

    python benchmarks/hostile_input.py --round3 [--tree CHECKOUT] [--embed-mb 100] [--json]

issue 36's cases instead (a FIFO log path, a 300 MB JSONL line, a huge or dripping Prometheus answer, 3000
silences, a late stamp, a ``.lock`` symlink, a 100 MB prompt), each in a fresh interpreter against
``CHECKOUT`` (default: this one; an older checkout gives the "before" figures): see
``benchmarks/_hostile_round3.py``. Last line with --json: {case: {figures...}}.

    python benchmarks/hostile_input.py --round4 [--tree CHECKOUT] [--sd-targets 100000] [--sd-yaml-mb 14.8]
                                       [--ray-mb 500] [--json]

issue 45's cases the same way: the transition log and its cursor, file_sd, Ray's State API, the scrape
cache (``benchmarks/_hostile_round4_sources.py``) and, where present, the HTTP surface
(``benchmarks/_hostile_round4_http.py``, the same ``run(tree)`` interface).
"""

from __future__ import annotations

import argparse
import json
import pickle
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

from alerting.config import AlertingConfigError  # noqa: E402
from alerting.config import load_config as load_alerting  # noqa: E402
from monitor.config import MonitorConfigError  # noqa: E402
from monitor.config import load_config as load_monitor  # noqa: E402
from verl.checkpoint import CheckpointManager, verify  # noqa: E402
from verl.checkpoint.safe_load import load_metadata  # noqa: E402
from verl.config import TrainerConfigError, load_config  # noqa: E402

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))


def timed(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def refuse(loader, error: type[Exception], path: Path):
    def run() -> None:
        try:
            loader(path)
        except error:
            return
        raise AssertionError(f"{loader.__module__} accepted the bomb")

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--round3", action="store_true", help="issue 36's hostile sources/silences/lock/prompt cases")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout --round3 measures (default: this one)")
    ap.add_argument("--long-line-mb", type=int, default=300)
    ap.add_argument("--prom-body-mb", type=int, default=300)
    ap.add_argument("--embed-mb", type=int, default=100, help="0 skips the prompt case")
    ap.add_argument("--round4", action="store_true", help="issue 45's hostile log/source (and HTTP) cases")
    ap.add_argument("--sd-targets", type=int, default=100_000)
    ap.add_argument("--sd-yaml-mb", type=float, default=14.8)
    ap.add_argument("--ray-mb", type=int, default=500)
    args = ap.parse_args()
    if args.round4:
        from benchmarks._hostile_round4_sources import run as run_sources

        res = run_sources(args.tree.resolve(), args.sd_targets, args.sd_yaml_mb, args.ray_mb)
        try:
            from benchmarks._hostile_round4_http import run as run_http  # type: ignore[import-not-found]
        except ImportError:
            run_http = None
        if run_http is not None:
            res.update(run_http(args.tree.resolve()))
        for case, figures in res.items():
            print(f"{case}: {figures}")
        if args.json:
            print(json.dumps(res))
        return 0
    if args.round3:
        from benchmarks._hostile_round3 import run

        res = run(args.tree.resolve(), args.long_line_mb, args.prom_body_mb, args.embed_mb)
        for case, figures in res.items():
            print(f"{case}: {figures}")
        if args.json:
            print(json.dumps(res))
        return 0
    warnings.filterwarnings("ignore")
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        bomb = Path(d) / "bomb.yaml"
        bomb.write_text(BOMB)
        for name, loader, error in (("verl", load_config, TrainerConfigError), ("monitor", load_monitor, MonitorConfigError),
                                    ("alerting", load_alerting, AlertingConfigError)):
            out[f"bomb_refused_{name}_s"] = timed(refuse(loader, error, bomb), args.repeats)

        torch.manual_seed(0)
        actor = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(50)])
        critic = torch.nn.Linear(64, 1)
        CheckpointManager(Path(d) / "ck", async_save=False).save(1, models={"actor": actor, "critic": critic})
        ckpt = Path(d) / "ck" / "global_step_1"
        md = ckpt / "actor" / ".metadata"

        def plain() -> None:
            with open(md, "rb") as f:
                pickle.load(f)  # noqa: S301 - the baseline being compared against, on our own file

        out["pickle_metadata_s"] = timed(plain, args.repeats)
        out["safe_metadata_s"] = timed(lambda: load_metadata(md), args.repeats)
        out["verify_no_checksums_s"] = timed(lambda: verify(ckpt, check_checksums=False), args.repeats)
    for k, v in out.items():
        print(f"{k}: {v:.6f}")
    summary = {"bomb_refused_max_s": round(max(v for k, v in out.items() if k.startswith("bomb")), 6),
               "safe_metadata_over_pickle": round(out["safe_metadata_s"] / out["pickle_metadata_s"], 2),
               "verify_no_checksums_s": round(out["verify_no_checksums_s"], 6)}
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
