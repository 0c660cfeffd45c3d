"""``verl-train``: run PPO from a bundled or YAML config with dotted overrides.

    verl-train --config ppo_tiny --metrics-port 8000 trainer.total_steps=40 kl_coef=0.2
    torchrun --nproc-per-node 2 -m verl.cli.train --config ppo_tiny
    verl-train --hot-standby --checkpoint-dir ck checkpoint.memory_interval=1   # sub-second crash recovery

Bad input (unknown key, wrong type, missing dataset, busy port, no checkpoint to ``--resume`` from) exits 2
with one line, no traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from verl.cli.hot_standby import STANDBY_FLAG, HotStandbySupervisor, wait_for_takeover
from verl.config import TrainerConfigError, TrainingStopped, load_config
from verl.metrics.server import PortInUseError, check_port_free

TAKEOVER_BIND_S = 5.0  # a standby taking over retries the port this long (the dead process's socket may linger)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verl-train", description="PPO post-training with a Prometheus endpoint.")
    p.add_argument("--config", default="ppo_tiny", help="bundled config name (ppo_tiny, ppo_llama3) or YAML path")
    p.add_argument("--metrics-port", type=int, default=None, help="serve /metrics here (0: any free port)")
    p.add_argument("--metrics-host", default=None, help="bind address of the endpoint (default 127.0.0.1)")
    p.add_argument("--metrics-interval", type=float, default=None, help="framework metrics period, seconds")
    p.add_argument("--checkpoint-dir", default=None, help="where checkpoints go")
    resume = p.add_mutually_exclusive_group()
    resume.add_argument("--resume", action="store_true",
                        help="resume from the newest complete checkpoint; exit 2 when there is none")
    resume.add_argument("--resume-or-start", action="store_true",
                        help="resume when a complete checkpoint exists, else start from step 0 (for supervisors)")
    p.add_argument("--hot-standby", action="store_true",
                   help="supervise: keep a warm standby trainer that takes over within a second when the active "
                        "one dies (needs --checkpoint-dir; pair with checkpoint.memory_interval=1)")
    p.add_argument(STANDBY_FLAG, action="store_true", help=argparse.SUPPRESS)  # a --hot-standby supervisor's child
    p.add_argument("--offload_reward_to_cpu", "--offload-reward-to-cpu", action="store_true",
                   help="place the reward model on CPU (same as offload_reward_to_cpu=true)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")
    return p


def _require_checkpoint(checkpoint_dir: str) -> None:
    """Fail in a second rather than after the model is built (the trainer checks again, fully). Globs by
    hand: importing verl.checkpoint.layout would import torch through the package."""
    steps = [d for d in Path(checkpoint_dir).glob("global_step_*") if d.is_dir()]
    if not any((d / "COMPLETE").is_file() for d in steps):
        hint = (f"{len(steps)} global_step_* dir(s) there lack the COMPLETE marker; check them with verl-ckpt list"
                if steps else "check --checkpoint-dir")
        raise TrainerConfigError(f"--resume: no complete checkpoint in '{checkpoint_dir}' ({hint}); "
                          "pass --resume-or-start to start from step 0 instead")


def _precheck_checkpoint(checkpoint_dir: str) -> None:
    """Structure, versions and DCP metadata of the checkpoint to resume, before the trainer's heavy
    imports and model build: a defective one fails in seconds. Checksums are left to the resume itself, so
    a large checkpoint is hashed once."""
    from verl.checkpoint import CheckpointError, latest_complete, verify

    newest = latest_complete(checkpoint_dir)
    if newest is not None:
        try:
            verify(newest, check_checksums=False)
        except CheckpointError as exc:
            raise TrainerConfigError(f"cannot resume from {checkpoint_dir}: {exc}") from None


def _start_metrics(trainer: object, standby: bool) -> str | None:
    deadline = time.monotonic() + (TAKEOVER_BIND_S if standby else 0.0)
    while True:
        try:
            return trainer.start_metrics_server()  # type: ignore[attr-defined]
        except PortInUseError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.hot_standby:
        if not args.checkpoint_dir:
            print("verl-train: error: --hot-standby needs --checkpoint-dir DIR (the standby resumes from it)",
                  file=sys.stderr)
            return 2
        if args.metrics_port == 0:
            print("verl-train: error: --hot-standby needs a fixed --metrics-port (the standby takes over the "
                  "same port; 0 would give it another one)", file=sys.stderr)
            return 2
        return HotStandbySupervisor(list(sys.argv[1:] if argv is None else argv)).run()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stdout)
    overrides = list(args.overrides)
    if args.metrics_port is not None:
        overrides.append(f"metrics.port={args.metrics_port}")
    if args.metrics_host is not None:
        overrides.append(f"metrics.host={args.metrics_host}")
    if args.metrics_interval is not None:
        overrides.append(f"metrics.interval_s={args.metrics_interval}")
    if args.offload_reward_to_cpu:
        overrides.append("offload_reward_to_cpu=true")
    trainer = None
    try:
        if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
            raise TrainerConfigError(f"--metrics-port {args.metrics_port} is not a port; use 0-65535")
        if (args.resume or args.resume_or_start) and not args.checkpoint_dir:
            raise TrainerConfigError("--resume needs --checkpoint-dir DIR (the directory holding global_step_<N>/)")
        config = load_config(args.config, overrides)
        if config.metrics.port is not None and not args.standby:  # a standby binds when it takes over
            check_port_free(config.metrics.host, config.metrics.port)
        if args.resume:
            _require_checkpoint(args.checkpoint_dir)
        if args.resume or args.resume_or_start:
            _precheck_checkpoint(args.checkpoint_dir)
        if config.rollout_worker_num > 0 and config.rollout.engine == "hf":
            from verl.models.preload import worker_preload
            from verl.workers import start_worker_server

            # the workers' server imports torch (and transformers for an HF model) while this process does the same
            start_worker_server(worker_preload(config.actor.model))
        from verl.trainer import RLTrainer  # heavy imports only after the config is known good

        trainer = RLTrainer(config, checkpoint_dir=args.checkpoint_dir)
        if args.standby and not wait_for_takeover():
            return 0  # dismissed: the run finished or the supervisor is gone
        resuming = args.resume or args.resume_or_start

        def serve() -> None:
            url = _start_metrics(trainer, args.standby)
            if url:
                print(f"metrics: {url}", flush=True)

        if not resuming:
            serve()
        # A resumed process serves /metrics only once its first step has set the step gauges: before that
        # they read 0 (reward mean 0, global_step 0), and a monitor scraping a restarted trainer in that
        # second saw a reward cliff and paged "reward model fails" (a hot-standby soak did). A second of
        # connection refused is the truth instead: the trainer was restarting.
        trainer.train(resume_from_checkpoint=resuming, resume_or_start=args.resume_or_start,
                      after_first_step=serve if resuming else None)
    except TrainerConfigError as exc:  # every bad input, a taken metrics port included
        print(f"verl-train: error: {exc}", file=sys.stderr)
        return 2
    except TrainingStopped as exc:
        print(f"verl-train: stopped: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("verl-train: interrupted", file=sys.stderr)
        return 130
    finally:
        if trainer is not None:
            trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
