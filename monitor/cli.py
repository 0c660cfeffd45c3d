"""``verl-monitor``: subcommands ``run`` (daemon) and ``replay`` (backtest). Bad input exits 2 with one
line naming the file/key and the fix. New subcommands register in ``SUBCOMMANDS``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path


def _fail(msg: str) -> int:
    print(f"verl-monitor: {msg}", file=sys.stderr)
    return 2


def cmd_replay(args: argparse.Namespace) -> int:
    from monitor.replay import NotifyUnavailable, replay
    from monitor.rules import RuleError, load_rule_files
    from monitor.sources.recorded import InputError

    try:
        rules = load_rule_files(args.rules)
    except RuleError as exc:
        return _fail(str(exc))
    if args.notify_config and not Path(args.notify_config).is_file():
        return _fail(f"--notify-config {args.notify_config}: no such file; pass an alerting YAML config")
    plots_dir = Path(args.plots_dir) if args.plots_dir else None
    try:
        if args.output:
            out_path = Path(args.output)
            if not out_path.parent.is_dir():
                return _fail(f"--output {out_path}: directory {out_path.parent} does not exist; create it first")
            plots_dir = plots_dir or out_path.parent / f"{out_path.stem}-plots"
            with out_path.open("w", encoding="utf-8") as out:
                res = replay(args.input, rules, out, plots_dir=plots_dir, notify_config=args.notify_config,
                             cluster=args.cluster)
        else:
            res = replay(args.input, rules, sys.stdout, plots_dir=plots_dir, notify_config=args.notify_config,
                         cluster=args.cluster)
    except (InputError, NotifyUnavailable) as exc:
        return _fail(str(exc))
    except Exception as exc:  # the notify config is validated by alerting: surface its one-line error
        if type(exc).__name__ == "ConfigError":
            return _fail(f"--notify-config {args.notify_config}: {exc}")
        raise
    print(f"replayed {res.samples} samples of {res.series} series: {res.alerts} alert records, "
          f"{res.records} records in total, {res.malformed} malformed samples skipped"
          + ("" if res.drained else "; WARNING: outbox not drained"), file=sys.stderr)
    return 0 if res.drained else 1


def cmd_run(args: argparse.Namespace) -> int:
    from monitor.config import ConfigError, load_config

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        return _fail(str(exc))
    from monitor.daemon import serve  # heavy imports only once the config is known to be good

    return serve(cfg)


SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def _replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", required=True, help="query_range JSON (matrix) or CSV timestamp,name,value[,labels...]")
    p.add_argument("--rules", action="append", help="rules YAML (repeatable; default: the shipped default rules)")
    p.add_argument("--notify-config", help="alerting YAML: deliver for real and wait until the outbox drains")
    p.add_argument("--output", help="JSON lines output file (default stdout); plots go next to it")
    p.add_argument("--plots-dir", help="where to write drift/leak PNGs (default: <output>-plots/)")
    p.add_argument("--cluster", default="default", help="cluster label on every alert")


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="monitor YAML config (see monitor/README.md)")


SUBCOMMANDS["run"] = ("run the monitoring daemon", _run_args, cmd_run)
SUBCOMMANDS["replay"] = ("backtest rules over recorded series", _replay_args, cmd_replay)

# Subcommands living in their own module (``add_args(parser)`` and ``main(args) -> int``), imported only
# when chosen, so a heavy or broken one never slows down or breaks the others.
LAZY_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "soak": ("fault-injection soak: ETTR, recovery, alert delivery", "monitor.soak"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="verl-monitor", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_args, func) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        add_args(p)
        p.set_defaults(func=func)
    for name, (help_text, module) in LAZY_SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if argv[:1] == [name]:
            mod = importlib.import_module(module)
            mod.add_args(p)
            p.set_defaults(func=mod.main)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
