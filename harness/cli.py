"""``verl-ops``: the harness commands that drive the whole stack from outside the product packages.

    verl-ops soak --duration 300 --seed 0 --output report.json   # `make soak`: fault-injection soak, ETTR
    verl-ops demo [--quick] [...]                                 # `make demo`: the whole loop, three faults

Bad input is one line and exit 2, as in the product CLIs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

PROG = "verl-ops"


def soak_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, required=True, help="seconds of training under faults (e.g. 300)")
    p.add_argument("--output", required=True, help="JSON report file")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault schedule")
    p.add_argument("--fault-interval", type=float, default=60.0, help="mean seconds between faults (default 60)")
    p.add_argument("--checkpoint-interval", type=int, default=10,
                   help="trainer checkpoint.interval in steps (default 10, ~1.5 s of ppo_tiny: a SIGKILL "
                        "recomputes half of that on average)")
    p.add_argument("--reward-timeout", type=float, default=1.0, help="trainer reward.timeout_s during the soak")
    p.add_argument("--correlation-window", default="20s", help="alert correlation holds (production: 2m)")
    p.add_argument("--drain", type=float, default=30.0, help="seconds to wait for pending deliveries at the end")
    p.add_argument("--workdir", help="keep configs, checkpoints, state and logs here (default: a temp dir)")
    p.add_argument("--quiet", action="store_true", help="do not print the live event log")
    p.add_argument("--memory-interval", type=int, default=1,
                   help="trainer checkpoint.memory_interval: in-memory snapshot every N steps (default 1; 0: off, "
                        "the trainer resumes from disk checkpoints only)")
    p.add_argument("--hot-standby", action=argparse.BooleanOptionalAction, default=True,
                   help="run `verl-train --hot-standby` (a supervisor with a warm standby; default on): the soak "
                        "SIGKILLs the active trainer pid it announces and restarts nothing unless the supervisor "
                        "dies. --no-hot-standby: the soak restarts a killed trainer itself with --resume-or-start")


def run_soak(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if args.duration <= 0:
        print(f"{PROG}: --duration {args.duration}: must be > 0 seconds", file=sys.stderr)
        return 2
    if not out.parent.is_dir():
        print(f"{PROG}: --output {out}: directory {out.parent} does not exist; create it first", file=sys.stderr)
        return 2
    from harness.soak import Soak  # heavy imports only once the arguments are known good
    from harness.soak_report import report as soak_report

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="verl-soak-"))
    try:
        soak = Soak(args, workdir)
        soak.run()
        report = soak_report(soak)
    except KeyboardInterrupt:
        print(f"{PROG}: soak interrupted; trainer and monitor stopped", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"{PROG}: soak: {exc}", file=sys.stderr)
        return 1
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("ettr", "faults_injected", "faults_recovered", "prompts_lost",
                                             "prompts_duplicated", "alerts_expected", "alerts_delivered",
                                             "mean_detect_seconds")}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"]:  # the demo keeps its own parser (python -m harness.demo takes the same flags)
        from harness.demo import main as demo_main

        return demo_main(argv[1:])
    if argv[:1] == ["robot"]:  # a chat-robot stand-in to point alerting.yaml at (harness/standin.py)
        from harness.standin import main as robot_main

        return robot_main(argv[1:])
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    soak = sub.add_parser("soak", help="fault-injection soak: ETTR, recovery, alert delivery")
    soak_args(soak)
    soak.set_defaults(func=run_soak)
    sub.add_parser("demo", help="the whole loop on one machine (see `verl-ops demo --help`)")
    sub.add_parser("robot", help="a local chat-robot stand-in (wecom, dingtalk, feishu, webhook) that prints "
                                 "what it receives (see `verl-ops robot --help`)")
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
