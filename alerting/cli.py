"""``verl-alert``: test a receiver, preview a message, manage silences.

  verl-alert test --config alerting.yaml --receiver ops-dingtalk
  verl-alert render --alert alert.json --receiver ops-dingtalk [--config alerting.yaml] [--lang zh-CN]
  verl-alert silence add --db state/alerting.db 'alertname="GPUOverTemperature"' --duration 2h --comment why
  verl-alert silence list --db state/alerting.db          (or --api http://127.0.0.1:9105 for a running monitor)
  verl-alert silence expire --db state/alerting.db ID
  verl-alert serve --config alerting.yaml --listen 127.0.0.1:9096   (Alertmanager's webhook -> our robots)

Bad input exits 2 with one line naming the problem; a failed test send exits 1 with the robot's
errcode and errmsg. Secrets and tokenised URLs are never printed."""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx

from alerting.clock import SystemClock
from alerting.config import AlertingConfig, ReceiverConfig, load_config
from alerting.durations import parse_duration
from alerting.errors import AlertingConfigError
from alerting.model import Alert, Notification, alert_from_json
from alerting.notifiers import KINDS, build_notifier, redact
from alerting.silence import SilenceStore
from alerting.store import open_db
from alerting.templates import render

_WALL = SystemClock()  # the CLI acts now, on wall time: the one clock interface, not time.time()


class UsageError(AlertingConfigError):
    """A bad command line: one line naming the option and the fix (a AlertingConfigError like every input error)."""



def _silences(db: str) -> SilenceStore:
    """The state DB's silences, with the snapshot the engine keeps next to it (alerting/silence.py)."""
    return SilenceStore(open_db(db), Path(db).with_name("silences.json"))


def _snapshot(store: SilenceStore) -> None:
    try:
        store.save_snapshot()
    except OSError as exc:  # the database has the change; the monitor rewrites the snapshot within a minute
        print(f"verl-alert: silence snapshot {store.snapshot} not written ({exc.strerror})", file=sys.stderr)

def _receiver(cfg: AlertingConfig, name: str) -> ReceiverConfig:
    if name not in cfg.receivers:
        raise UsageError(f"--receiver: {name!r} is not in the config (known: {', '.join(sorted(cfg.receivers))})")
    return cfg.receivers[name]


def _test_alert() -> Alert:
    return Alert(labels={"alertname": "VerlAlertTest", "severity": "P3", "cluster": "test", "node": "verl-alert"},
                 annotations={"summary": "Test message from verl-alert: this receiver works."},
                 starts_at=_WALL.now())


def cmd_test(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, receiver=args.receiver)
    rc = _receiver(cfg, args.receiver)
    notifier = build_notifier(rc)
    a = _test_alert()
    note = Notification(rc.name, "verl-alert-test", {}, "firing", [a], [a.fingerprint], _WALL.now())
    rendered = render([note], template=rc.template, lang=rc.lang, link=cfg.monitor_url, receiver=rc.name,
                      max_bytes=notifier.max_bytes)
    try:
        result = notifier.send(rendered, [note])
    finally:
        notifier.close()
    if result.ok:
        print(f"ok: test message delivered to receiver {rc.name} ({rc.type})")
        return 0
    print(f"error: receiver {rc.name}: {redact(result.error, rc.secret)}", file=sys.stderr)
    return 1


def _load_alerts(path: str) -> list[Alert]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--alert: file {path} not found") from None
    except ValueError as exc:
        raise UsageError(f"--alert: {path} is not JSON ({exc}); give an alert in Alertmanager's shape") from None
    if isinstance(data, dict) and "alerts" in data:  # a webhook payload
        data = data["alerts"]
    items = data if isinstance(data, list) else [data]
    try:
        return [alert_from_json(d) for d in items]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"--alert: {path}: {exc}; expected labels.alertname and labels.severity") from None


def cmd_render(args: argparse.Namespace) -> int:
    alerts = _load_alerts(args.alert)
    if args.config:
        cfg = load_config(args.config)
        rc = _receiver(cfg, args.receiver)
        template, lang, link = rc.template, args.lang or rc.lang, cfg.monitor_url
        max_bytes, runbook_base = KINDS[rc.type].max_bytes, cfg.runbook_base_url
    else:
        template, lang, link, max_bytes, runbook_base = None, args.lang or "en", "", 4096, ""
    status = "firing" if any(a.status == "firing" for a in alerts) else "resolved"
    note = Notification(args.receiver, "render", {}, status, alerts, [a.fingerprint for a in alerts], _WALL.now())
    out = render([note], template=template, lang=lang, link=link, receiver=args.receiver, max_bytes=max_bytes,
                 runbook_base=runbook_base)
    if out.fell_back:
        print(f"warning: the receiver's template failed ({out.error}); showing the built-in one", file=sys.stderr)
    print(out.text)
    return 0


def _api(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    try:
        resp = httpx.request(method, args.api.rstrip("/") + path, json=body, timeout=10.0,
                             headers={"Authorization": f"Bearer {args.token}"} if args.token else None)
    except httpx.HTTPError as exc:
        raise UsageError(f"--api: cannot reach {args.api} ({type(exc).__name__}); is verl-monitor running?") from None
    if resp.status_code >= 400:
        raise UsageError(f"--api: {method} {path} answered HTTP {resp.status_code}: {resp.text[:200]}")
    data = resp.json() if resp.content else None
    return data["data"] if isinstance(data, dict) and "data" in data else data  # the monitor wraps lists


def cmd_silence(args: argparse.Namespace) -> int:
    if bool(args.db) == bool(args.api):
        raise UsageError("silence: give exactly one of --db STATE.db or --api MONITOR_URL")
    now = _WALL.now()
    if args.action == "add":
        if not args.matchers:
            raise UsageError('silence add: give at least one matcher, e.g. \'alertname="GPUOverTemperature"\'')
        try:
            duration = parse_duration(args.duration, "--duration")
        except AlertingConfigError as exc:
            raise UsageError(str(exc)) from None
        if args.api:
            from alerting.matchers import parse_matcher
            try:
                matchers = [parse_matcher(m).to_json() for m in args.matchers]
            except ValueError as exc:
                raise UsageError(f"silence add: {exc}") from None
            res = _api(args, "POST", "/api/v1/silences", {
                "matchers": matchers, "startsAt": _iso(now), "endsAt": _iso(now + duration),
                "createdBy": args.author, "comment": args.comment})
            print((res or {}).get("silenceID") or (res or {}).get("id") or json.dumps(res))
            return 0
        try:
            store = _silences(args.db)
            sid = store.add(args.matchers, now, now + duration, args.author, args.comment)
            _snapshot(store)
        except ValueError as exc:
            raise UsageError(f"silence add: {exc}") from None
        print(sid)
        return 0
    if args.action == "list":
        items = _api(args, "GET", "/api/v1/silences") if args.api else \
            [s.to_json(now) for s in _silences(args.db).all()]
        for s in items or []:
            matchers = ",".join(f'{m["name"]}{"=" if m.get("isEqual", True) else "!"}{"~" if m.get("isRegex") else ""}'
                                f'"{m["value"]}"' for m in s["matchers"])
            print(f'{s["id"]}  {s["status"]["state"]:8}  {s["endsAt"]}  {matchers}  {s.get("comment", "")}')
        return 0
    if not args.matchers:
        raise UsageError("silence expire: give the silence ID")
    for sid in args.matchers:
        if args.api:
            _api(args, "DELETE", f"/api/v1/silences/{sid}")
        elif not (store := _silences(args.db)).expire(sid, now):
            raise UsageError(f"silence expire: no active silence with id {sid}")
        else:
            _snapshot(store)
        print(f"expired {sid}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """The delivery endpoint beside an Alertmanager peer (alerting/delivery_endpoint.py) until SIGINT/TERM."""
    import signal
    import threading

    from alerting.delivery_endpoint import DeliveryEndpoint, DeliveryServer
    from alerting.logsafe import setup_logging

    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen: expected host:port like 127.0.0.1:9096, got {args.listen!r}")
    cfg = load_config(args.config)
    setup_logging(logging.INFO)
    try:
        server = DeliveryServer(DeliveryEndpoint(cfg), host.strip("[]"), int(port))
    except OSError as exc:
        raise UsageError(f"--listen: cannot listen on {args.listen} ({exc.strerror}); pick a free port") from None
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    server.start()
    print(f"verl-alert: delivery endpoint on http://{host}:{server.port}/hook/<receiver> "
          f"(receivers: {', '.join(sorted(cfg.receivers))})", file=sys.stderr, flush=True)
    done.wait()
    server.stop()
    return 0


def _iso(ts: float) -> str:
    from alerting.model import rfc3339
    return rfc3339(ts)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verl-alert", description="verl-ops alerting: test, render, silence, serve")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("test", help="send a test message to one receiver")
    t.add_argument("--config", required=True)
    t.add_argument("--receiver", required=True)
    r = sub.add_parser("render", help="print the message a receiver would get for an alert file")
    r.add_argument("--alert", required=True, help="JSON: one alert, a list, or a webhook payload")
    r.add_argument("--receiver", required=True)
    r.add_argument("--config")
    r.add_argument("--lang", choices=["en", "zh-CN"])
    v = sub.add_parser("serve", help="deliver Alertmanager's webhooks to the config's robots (HA pair)")
    v.add_argument("--config", required=True)
    v.add_argument("--listen", default="127.0.0.1:9096", help="host:port (default 127.0.0.1:9096)")
    s = sub.add_parser("silence", help="add, list or expire silences")
    _silence_args(s)
    return p


def _silence_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("action", choices=["add", "list", "expire"])
    s.add_argument("matchers", nargs="*", help='add: matchers like alertname="X"; expire: silence ids')
    s.add_argument("--db", help="the alerting state database (the monitor's state dir)")
    s.add_argument("--api", help="a running verl-monitor, e.g. http://127.0.0.1:9105")
    s.add_argument("--token", help="bearer token for --api")
    s.add_argument("--duration", default="1h")
    s.add_argument("--author", default="verl-alert")
    s.add_argument("--comment", default="")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["silence"]:  # matchers and options may interleave
        sp = argparse.ArgumentParser(prog="verl-alert silence")
        _silence_args(sp)
        args = sp.parse_intermixed_args(argv[1:])
        args.cmd = "silence"
    else:
        args = parser().parse_args(argv)
    try:
        return {"test": cmd_test, "render": cmd_render, "silence": cmd_silence,
                "serve": cmd_serve}[args.cmd](args)
    except (AlertingConfigError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except sqlite3.Error as exc:
        print(f"error: --db: {args.db}: {exc}; pass the alerting state database of the monitor", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
