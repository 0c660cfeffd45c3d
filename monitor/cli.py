"""``verl-monitor``: subcommands ``run`` (daemon) and ``replay`` (backtest); the soak drives the trainer
too, so it is ``verl-ops soak`` in the harness. Bad input exits 2 with one line naming the file/key and the
fix. Subcommands register in ``SUBCOMMANDS``; ``--help`` text is written for users."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _fail(msg: str) -> int:
    print(f"verl-monitor: {msg}", file=sys.stderr)
    return 2


def cmd_replay(args: argparse.Namespace) -> int:
    from alerting.config import AlertingConfigError
    from monitor.evaluation.rules import RuleError, load_rule_files
    from monitor.replay import replay
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
                             cluster=args.cluster, node=args.node)
        else:
            res = replay(args.input, rules, sys.stdout, plots_dir=plots_dir, notify_config=args.notify_config,
                         cluster=args.cluster, node=args.node)
    except InputError as exc:
        return _fail(str(exc))
    except AlertingConfigError as exc:  # the notify config is validated by alerting: its one-line error
        return _fail(f"--notify-config {args.notify_config}: {exc}")
    print(f"replayed {res.samples} samples of {res.series} series: {res.alerts} alert records, "
          f"{res.records} records in total, {res.malformed} malformed samples skipped"
          + ("" if res.drained else "; WARNING: outbox not drained"), file=sys.stderr)
    return 0 if res.drained else 1


DESCRIPTION = """\
Watch a verl training run and alert on what thresholds miss: a dead or stalled trainer, OOMs, crashed
rollout workers, KL drift, memory leaks, reward distribution shifts, throughput drops, GPU errors.

  verl-monitor run                              watch the trainer on 127.0.0.1:8000 (verl-train
                                                --metrics-port 8000), print alerts here
  verl-monitor run --target gpu-08:8000 --notify-config alerting.yaml
  verl-monitor run --config monitor.yaml        everything else (see monitor/README.md)
  verl-monitor replay --input export.json       backtest the rules over recorded metrics
"""


def cmd_run(args: argparse.Namespace) -> int:
    from monitor.config import MonitorConfigError, load_config, parse_listen
    from monitor.ha import add_peer
    from monitor.run_flags import default_config, label_and_rules, target_from_url

    try:
        if args.config:
            cfg = load_config(args.config)
            cfg.targets += [target_from_url(t) for t in args.target or []]
            if args.notify_config:
                cfg.notify_config = default_config([], args.notify_config).notify_config
            if args.listen:
                cfg.host, cfg.port = parse_listen(args.listen, "--listen")
            if args.node or args.cluster or args.rules:
                return _fail("--node/--cluster/--rules: with --config, set node: per target, cluster: and rules: "
                             "in the config file")
        else:
            cfg = label_and_rules(default_config(args.target, args.notify_config, args.listen), args.node, args.cluster,
                                  args.rules)
        if args.replica is not None:  # one config file for both monitors of an HA pair
            if not args.replica.strip():
                raise MonitorConfigError("--replica: give a name like a or b (empty given)")
            cfg.replica = args.replica.strip()
        if args.state_db:
            cfg.state_db = Path(args.state_db)
        for raw in args.peer or []:
            cfg.rules = add_peer(cfg.targets, cfg.rules, target_from_url(raw, "--peer").url)
    except MonitorConfigError as exc:
        return _fail(str(exc))
    print(first_line(cfg, bool(args.config)), file=sys.stderr)
    from monitor.serve import serve  # heavy imports only once the config is known to be good

    return serve(cfg)


def first_line(cfg: Any, from_file: bool) -> str:
    """What a newcomer reads first: where the console is, what is watched and labelled how, where alerts go."""
    console = f"console on http://{cfg.host}:{cfg.port}/"
    if from_file:
        return f"verl-monitor: {console} · {len(cfg.targets)} target(s) from {cfg.path} (Ctrl-C stops)"
    where = ", ".join(f"{t.url} as node={t.node or '(its host)'}" for t in cfg.targets)
    rules = ", ".join(str(r) for r in cfg.rules) or "the default rules"
    return (f"verl-monitor: {console} · watching {where}, cluster={cfg.cluster} (--node NAME / --cluster NAME "
            f"to name them) with {rules}; "
            + ("alerts print here" if cfg.prints_alerts else f"alerts go to {cfg.notify_config}") + " (Ctrl-C stops)")


SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def _replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", required=True, help="query_range JSON (matrix) or CSV timestamp,name,value[,labels...]")
    p.add_argument("--rules", action="append", help="rules YAML (repeatable; default: the shipped default rules)")
    p.add_argument("--notify-config", help="alerting YAML: deliver for real and wait until the outbox drains")
    p.add_argument("--output", help="JSON lines output file (default stdout); plots go next to it")
    p.add_argument("--plots-dir", help="where to write drift/leak PNGs (default: <output>-plots/)")
    p.add_argument("--cluster", default="default", help="cluster label on every alert")
    p.add_argument("--node", help="node label of every series (a verl JSONL log names no node of its own)")


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", action="append", metavar="URL",
                   help="a /metrics endpoint to watch, e.g. http://gpu-08:8000/metrics or gpu-08:8000 "
                        "(repeatable; default: the local trainer, 127.0.0.1:8000)")
    p.add_argument("--notify-config", metavar="FILE",
                   help="alerting YAML with your chat robots and routing (alerting/examples/alerting.yaml); "
                        "without it alerts are printed here")
    p.add_argument("--listen", metavar="HOST:PORT", help="address of the monitor's API and /metrics "
                   "(default 127.0.0.1:9105)")
    p.add_argument("--node", metavar="NAME", help="node label of the targets' alerts (default: this machine's "
                   "host name for a local trainer, the host part of a remote one)")
    p.add_argument("--cluster", metavar="NAME", help='cluster label of every alert (default "default")')
    p.add_argument("--rules", action="append", metavar="FILE",
                   help="rules YAML instead of the default rules (repeatable); 'demo': the demo's short-window "
                        "profile (monitor/rules/demo.yaml), to see alerts within minutes")
    p.add_argument("--replica", metavar="NAME", help="this monitor's name in an HA pair (verl_monitor_info{replica}); "
                   "overrides 'replica' in the config")
    p.add_argument("--state-db", metavar="FILE", help="state database (overrides 'state_db'): two monitors on one "
                   "host need one each")
    p.add_argument("--peer", action="append", metavar="URL", help="the other monitor of an HA pair, e.g. "
                   "127.0.0.1:9106: scraped, and MonitorPeerDown pages when it stops answering (repeatable)")
    p.add_argument("--config", metavar="FILE", help="monitor YAML for everything else: several targets, your "
                   "own rules, a Prometheus server, bearer token (monitor/README.md); the flags above add to or override it")


SUBCOMMANDS["run"] = ("watch a training run and send alerts (works without a config)", _run_args, cmd_run)
SUBCOMMANDS["replay"] = ("backtest the alert rules over recorded metrics", _replay_args, cmd_replay)

def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="verl-monitor", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_args, func) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        add_args(p)
        p.set_defaults(func=func)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
