"""``python -m verl.demo`` (what ``make demo`` runs until the full demo exists): train ppo_tiny for about a
minute with the metrics endpoint on, print its URL, then a summary.

    python -m verl.demo [--seconds 60] [--metrics-port 8000]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from verl.config import ConfigError, load_config
from verl.metrics.server import PortInUseError, check_port_free


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m verl.demo", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0, help="stop after this much training time")
    p.add_argument("--metrics-port", type=int, default=8000, help="endpoint port (0: any free port)")
    p.add_argument("--max-steps", type=int, default=2000, help="stop after this many steps")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config("ppo_tiny", [f"trainer.total_steps={args.max_steps}", f"metrics.port={args.metrics_port}"])
        check_port_free(config.metrics.host, args.metrics_port)
        import transformers

        from verl.trainer import RLTrainer

        transformers.logging.set_verbosity_error()
        trainer = RLTrainer(config)
        url = trainer.start_metrics_server()
    except (ConfigError, PortInUseError) as exc:
        print(f"verl.demo: error: {exc}", file=sys.stderr)
        return 2
    print(f"metrics: {url}   (try: curl -s {url} | grep rollout_buffer)", flush=True)
    rewards, tps = [], []
    start = time.monotonic()
    try:
        while time.monotonic() - start < args.seconds and trainer.global_step < args.max_steps:
            stats = trainer.step()
            rewards.append(stats.reward_mean)
            tps.append(stats.tokens_per_second)
            if stats.global_step % 10 == 0:
                print(f"step {stats.global_step:4d}  reward {stats.reward_mean:.3f}  kl {stats.kl:.4f}  "
                      f"{stats.tokens_per_second:,.0f} tok/s", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        trainer.close()
    first, last = rewards[:10], rewards[-10:]
    print(f"summary: steps={trainer.global_step} reward first10={sum(first) / max(1, len(first)):.3f} "
          f"last10={sum(last) / max(1, len(last)):.3f} tokens/s={sum(tps) / max(1, len(tps)):,.0f} "
          f"wall={time.monotonic() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
