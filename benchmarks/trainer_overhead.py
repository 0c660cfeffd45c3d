"""Trainer monitoring overhead: step time with metrics on over metrics off, interleaved in one run.

One ppo_tiny trainer with its live endpoint and sampler thread; blocks of steps alternate on/off in
ABBA order (so slow drift of a shared machine hits both sides alike), "on" blocks are scraped once
each like a Prometheus server would. "on" = every per-step metric update, layer KL, data-level
analysis (semantic with verl-ops[semantic] installed: model load and embeddings in the background
thread; ``--prompt-analysis lexical`` for the old measure); "off" = metrics.enabled=false (no metric
work in the step). Ratio of median step times.

    python benchmarks/trainer_overhead.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py`: make the repo's packages importable
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=24, help="ABBA rounds (each: on, off, off, on blocks)")
    p.add_argument("--block", type=int, default=2, help="steps per block")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--prompt-analysis", choices=("auto", "semantic", "lexical"), default="auto",
                   help="metrics.prompt_analysis of the run (auto: semantic when the extra is installed)")
    p.add_argument("--fresh-prompts", type=int, default=0, metavar="N",
                   help="train on N distinct generated prompts instead of ppo_tiny's 240, so every data report "
                        "embeds prompts the model's cache has not seen (the semantic worst case)")
    p.add_argument("--data-interval", type=int, default=50, help="metrics.data_interval_steps")
    p.add_argument("--json", action="store_true", help="last line: one JSON object")
    args = p.parse_args(argv)

    from verl.trainer import RLTrainer

    steps = args.warmup + args.rounds * 4 * args.block
    overrides = [f"trainer.total_steps={steps}", "metrics.port=0", f"metrics.data_interval_steps={args.data_interval}",
                 f"metrics.prompt_analysis={args.prompt_analysis}"]
    tmp = tempfile.TemporaryDirectory(prefix="verl-overhead-")
    if args.fresh_prompts:
        from benchmarks.prompt_embedding import distinct_prompts

        path = Path(tmp.name) / "prompts.jsonl"
        path.write_text("".join(json.dumps({"prompt": f"Q: {q} A:"}) + "\n" for q in distinct_prompts(args.fresh_prompts)))
        overrides.append(f"data.prompt_dataset={path}")
    trainer = RLTrainer("ppo_tiny", overrides=overrides)
    url = trainer.start_metrics_server()
    times: dict[bool, list[float]] = {True: [], False: []}

    def run_block(enabled: bool, n: int, record: bool) -> None:
        trainer.config.metrics.enabled = enabled
        trainer.metrics.enabled = enabled
        for _ in range(n):
            t0 = time.perf_counter()
            trainer.step()
            if record:
                times[enabled].append(time.perf_counter() - t0)
        if enabled and url:
            urllib.request.urlopen(url, timeout=10).read()  # noqa: S310 - loopback

    try:
        run_block(True, args.warmup, record=False)
        for _ in range(args.rounds):
            for enabled in (True, False, False, True):
                run_block(enabled, args.block, record=True)
    finally:
        trainer.close()
        tmp.cleanup()

    on, off = statistics.median(times[True]), statistics.median(times[False])
    ratio = on / off
    detail = {"median_step_seconds_on": round(on, 5), "median_step_seconds_off": round(off, 5),
              "steps_per_side": len(times[True]), "model": "ppo_tiny",
              # means too: a data report every N steps slows a few steps, which the medians do not see
              "mean_step_seconds_on": round(statistics.fmean(times[True]), 5),
              "mean_step_seconds_off": round(statistics.fmean(times[False]), 5),
              "prompt_analysis": trainer.metrics.data.method, "fresh_prompts": args.fresh_prompts,
              "data_interval_steps": args.data_interval}
    if args.json:
        print(json.dumps(detail))
        print(json.dumps({"metrics_overhead_ratio": round(ratio, 4)}))
    else:
        print(f"metrics on {on * 1000:.1f} ms/step, off {off * 1000:.1f} ms/step, ratio {ratio:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
