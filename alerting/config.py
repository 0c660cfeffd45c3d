"""Alerting configuration: Alertmanager-shaped YAML (receivers, route tree, inhibit_rules) plus our
correlation-rule file and outbox settings. Every error is a one-line ``AlertingConfigError`` naming the key."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alerting.durations import parse_duration, positive_duration
from alerting.errors import AlertingConfigError
from alerting.matchers import Matcher, parse_matcher
from alerting.safe_config import UnsafeYAML, load_yaml_file, number, short, unknown_key

RECEIVER_TYPES = ("dingtalk", "wecom", "feishu", "webhook", "alertmanager")
LANGS = ("en", "zh-CN")
DEFAULT_RULES = Path(__file__).parent / "rules" / "correlation.yaml"
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# allowed keys per section: anything else is an error with a did-you-mean (a typo such as `routes:`
# for `route:` would otherwise be ignored silently)
TOP_KEYS = {"receivers", "route", "inhibit_rules", "correlation", "outbox", "monitor_url", "runbook_base_url",
            "link_hosts"}
RECEIVER_KEYS = {"name", "type", "url", "secret", "secret_env", "mentions", "template", "lang", "timeout",
                 "send_resolved", "resend_interval"}
ROUTE_KEYS = {"receiver", "group_by", "group_wait", "group_interval", "repeat_interval", "matchers", "continue",
              "routes"}
INHIBIT_KEYS = {"source_matchers", "target_matchers", "equal"}
CORRELATION_KEYS = {"rules_files", "include_defaults"}
OUTBOX_KEYS = {"backoff_initial", "backoff_max", "jitter", "seed"}


def _mapping(value: Any, key: str, allowed: set[str], hint: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise AlertingConfigError(f"{key}: expected a mapping ({hint}), got {short(value)}")
    bad = unknown_key(value, allowed)
    if bad:
        raise AlertingConfigError(f"{key}.{bad[0]}: unknown key; {bad[1]}")
    return value


def _num(value: Any, key: str, **bounds: Any) -> float:
    try:
        return number(value, key, **bounds)
    except ValueError as exc:
        raise AlertingConfigError(str(exc)) from None


def expand_env(value: Any, key: str) -> Any:
    """``${NAME}`` in any string value, recursively; an unset variable is an error naming key and variable."""
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            if m.group(1) not in os.environ:
                raise AlertingConfigError(f"{key}: environment variable {m.group(1)} is not set; export it or edit the value")
            return os.environ[m.group(1)]
        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand_env(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, f"{key}[{i}]") for i, v in enumerate(value)]
    return value


@dataclass
class ReceiverConfig:
    name: str
    type: str
    url: str = field(repr=False)  # robot URLs carry their access token
    secret: str | None = field(default=None, repr=False)
    mentions: list[str] = field(default_factory=list)
    template: str | None = None  # path to a Jinja2 file, or inline template text
    lang: str = "en"
    timeout_s: float = 5.0
    send_resolved: bool = True
    # type alertmanager only: re-post firing alerts this often (Prometheus' resend_delay), each with
    # endsAt = now + 3 x this, so Alertmanager never times them out while they still fire
    resend_interval_s: float | None = None


@dataclass
class RouteConfig:
    receiver: str
    group_by: list[str]
    group_wait_s: float
    group_interval_s: float
    repeat_interval_s: float
    matchers: list[Matcher] = field(default_factory=list)
    continue_: bool = False
    routes: list[RouteConfig] = field(default_factory=list)
    path: str = "0"  # position in the tree, part of every group key


@dataclass
class InhibitRule:
    source_matchers: list[Matcher]
    target_matchers: list[Matcher]
    equal: list[str]


@dataclass
class OutboxConfig:
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 300.0
    jitter: float = 0.2  # +- fraction of each backoff, seeded for reproducible replays
    seed: int = 0


@dataclass
class AlertingConfig:
    receivers: dict[str, ReceiverConfig]
    route: RouteConfig
    inhibit_rules: list[InhibitRule] = field(default_factory=list)
    correlation_files: list[Path] = field(default_factory=lambda: [DEFAULT_RULES])
    outbox: OutboxConfig = field(default_factory=OutboxConfig)
    monitor_url: str = ""  # where "+N more" links point: the monitor's JSON API
    # Prometheus' rules name runbooks by repository path (prometheus/README.md#trainerdown): chat
    # messages join such paths to this base so they are links a phone can open
    runbook_base_url: str = ""
    # hosts whose URLs in labels/annotations render as links in chat (monitor_url's and
    # runbook_base_url's always do); any other URL is defanged (hxxps://host[.]example)
    link_hosts: tuple[str, ...] = ()


def _req(d: dict[str, Any], name: str, key: str) -> Any:
    if name not in d or d[name] in (None, ""):
        raise AlertingConfigError(f"{key}.{name}: required key is missing")
    return d[name]


def _str_list(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise AlertingConfigError(f"{key}: expected a list of strings, got {short(value)}")
    return [str(v) for v in value]


def _matchers(value: Any, key: str) -> list[Matcher]:
    out = []
    for i, text in enumerate(_str_list(value, key)):
        try:
            out.append(parse_matcher(text))
        except ValueError as exc:
            raise AlertingConfigError(f"{key}[{i}]: {short(str(exc), 120)}") from None
    return out


def _receiver(d: Any, key: str) -> ReceiverConfig:
    d = _mapping(d, key, RECEIVER_KEYS, "name, type and url")
    name, kind = str(_req(d, "name", key)), str(_req(d, "type", key))
    if kind not in RECEIVER_TYPES:
        raise AlertingConfigError(f"{key}.type: {short(kind)!r} is not one of {', '.join(RECEIVER_TYPES)}")
    url = str(_req(d, "url", key))
    if not url.startswith(("http://", "https://")):
        raise AlertingConfigError(f"{key}.url: must start with http:// or https://")
    secret = d.get("secret")
    if "secret" in d and (not isinstance(secret, str) or not secret.strip()):
        # an empty secret would silently turn signing off
        raise AlertingConfigError(f"{key}.secret: empty or not a string; give the robot's secret, or remove the key")
    if "secret_env" in d:
        env = str(d["secret_env"])
        if not os.environ.get(env, "").strip():
            raise AlertingConfigError(f"{key}.secret_env: environment variable {short(env, 60)} is unset or empty; export it")
        secret = os.environ[env]
    lang = str(d.get("lang", "en"))
    if lang not in LANGS:
        raise AlertingConfigError(f"{key}.lang: {short(lang)!r} is not one of {', '.join(LANGS)}")
    resend = None
    if kind == "alertmanager":
        resend = parse_duration(d.get("resend_interval", "1m"), f"{key}.resend_interval")
        if resend <= 0:
            raise AlertingConfigError(f"{key}.resend_interval: must be > 0 (Alertmanager resolves alerts that are "
                              "not re-posted); the default is 1m")
    elif "resend_interval" in d:
        raise AlertingConfigError(f"{key}.resend_interval: only for type alertmanager; chat receivers repeat "
                          "with route.repeat_interval")
    return ReceiverConfig(
        name=name, type=kind, url=url, secret=str(secret) if secret else None,
        mentions=_str_list(d.get("mentions"), f"{key}.mentions"),
        template=str(d["template"]) if d.get("template") else None, lang=lang,
        timeout_s=positive_duration(d.get("timeout", "5s"), f"{key}.timeout"),
        send_resolved=bool(d.get("send_resolved", True)), resend_interval_s=resend,
    )


def _route(d: Any, key: str, parent: RouteConfig | None, path: str) -> RouteConfig:
    d = _mapping(d, key, ROUTE_KEYS, "receiver, group_by, matchers, routes, ...")
    if parent is None and not d.get("receiver"):
        raise AlertingConfigError(f"{key}.receiver: the root route needs a receiver")

    def inherit(name: str, default: Any) -> Any:
        return d.get(name, getattr(parent, name, default) if parent else default)

    route = RouteConfig(
        receiver=str(d.get("receiver") or (parent.receiver if parent else "")),
        group_by=_str_list(d["group_by"], f"{key}.group_by") if "group_by" in d else
        (list(parent.group_by) if parent else ["alertname", "cluster", "node"]),
        group_wait_s=parse_duration(d["group_wait"], f"{key}.group_wait") if "group_wait" in d else
        inherit("group_wait_s", 30.0),
        group_interval_s=positive_duration(d["group_interval"], f"{key}.group_interval") if "group_interval" in d
        else inherit("group_interval_s", 300.0),
        repeat_interval_s=positive_duration(d["repeat_interval"], f"{key}.repeat_interval")
        if "repeat_interval" in d else inherit("repeat_interval_s", 4 * 3600.0),
        matchers=_matchers(d.get("matchers"), f"{key}.matchers"),
        continue_=bool(d.get("continue", False)),
        path=path,
    )
    children = d.get("routes") or []
    if not isinstance(children, list):
        raise AlertingConfigError(f"{key}.routes: expected a list of routes")
    route.routes = [_route(c, f"{key}.routes[{i}]", route, f"{path}.{i}") for i, c in enumerate(children)]
    return route


def _check_receivers(route: RouteConfig, receivers: dict[str, ReceiverConfig], key: str) -> None:
    if route.receiver not in receivers:
        raise AlertingConfigError(f"{key}.receiver: {route.receiver!r} is not a defined receiver "
                          f"(known: {', '.join(sorted(receivers)) or 'none'})")
    for i, child in enumerate(route.routes):
        _check_receivers(child, receivers, f"{key}.routes[{i}]")


def parse_config(raw: Any, source: str = "<config>", base_dir: Path | None = None) -> AlertingConfig:
    if not isinstance(raw, dict):
        raise AlertingConfigError(f"{source}: expected a YAML mapping with receivers and route")
    bad = unknown_key(raw, TOP_KEYS)
    if bad:
        raise AlertingConfigError(f"{source}: unknown key {bad[0]!r}; {bad[1]}")
    raw = expand_env(raw, "")
    recv_list = raw.get("receivers")
    if not isinstance(recv_list, list) or not recv_list:
        raise AlertingConfigError(f"{source}: receivers: define at least one receiver (name, type, url)")
    receivers: dict[str, ReceiverConfig] = {}
    for i, r in enumerate(recv_list):
        rc = _receiver(r, f"receivers[{i}]")
        if rc.name in receivers:
            raise AlertingConfigError(f"receivers[{i}].name: duplicate receiver name {short(rc.name)!r}")
        receivers[rc.name] = rc
    route = _route(raw.get("route") or {"receiver": next(iter(receivers))}, "route", None, "0")
    _check_receivers(route, receivers, "route")
    inhibit = []
    inhibit_raw = raw.get("inhibit_rules") or []
    if not isinstance(inhibit_raw, list):
        raise AlertingConfigError(f"inhibit_rules: expected a list of rules, got {short(inhibit_raw)}")
    for i, r in enumerate(inhibit_raw):
        key = f"inhibit_rules[{i}]"
        r = _mapping(r, key, INHIBIT_KEYS, "source_matchers, target_matchers, equal")
        inhibit.append(InhibitRule(_matchers(r.get("source_matchers"), f"{key}.source_matchers"),
                                   _matchers(r.get("target_matchers"), f"{key}.target_matchers"),
                                   _str_list(r.get("equal"), f"{key}.equal")))
    corr = _mapping(raw.get("correlation") or {}, "correlation", CORRELATION_KEYS, "rules_files, include_defaults")
    include_defaults = corr.get("include_defaults", True)
    if not isinstance(include_defaults, bool):
        raise AlertingConfigError(f"correlation.include_defaults: expected true or false, got {short(include_defaults)}")
    files = [DEFAULT_RULES] if include_defaults else []
    for i, f in enumerate(_str_list(corr.get("rules_files"), "correlation.rules_files")):
        p = Path(f) if Path(f).is_absolute() or base_dir is None else base_dir / f
        if not p.is_file():
            raise AlertingConfigError(f"correlation.rules_files[{i}]: file {short(str(p), 120)} not found")
        files.append(p)
    ob = _mapping(raw.get("outbox") or {}, "outbox", OUTBOX_KEYS, "backoff_initial, backoff_max, jitter, seed")
    outbox = OutboxConfig(
        backoff_initial_s=positive_duration(ob.get("backoff_initial", "1s"), "outbox.backoff_initial"),
        backoff_max_s=positive_duration(ob.get("backoff_max", "5m"), "outbox.backoff_max"),
        jitter=float(_num(ob.get("jitter", 0.2), "outbox.jitter", lo=0, hi=1)),
        seed=int(_num(ob.get("seed", 0), "outbox.seed", integer=True, lo=0)),
    )
    if outbox.backoff_max_s < outbox.backoff_initial_s:
        raise AlertingConfigError(f"outbox.backoff_max: {short(ob.get('backoff_max'))} is shorter than backoff_initial")
    monitor_url = raw.get("monitor_url", "")
    if not isinstance(monitor_url, str):
        raise AlertingConfigError(f"monitor_url: expected a URL string, got {short(monitor_url)}")
    runbook_base = raw.get("runbook_base_url") or ""
    if not isinstance(runbook_base, str) or runbook_base and not runbook_base.startswith(("http://", "https://")):
        raise AlertingConfigError(f"runbook_base_url: {short(runbook_base)!r} must start with http:// or https://, e.g. "
                          "https://github.com/ORG/verl-ops/blob/main/")
    hosts = tuple(h.lower() for h in _str_list(raw.get("link_hosts"), "link_hosts"))
    return AlertingConfig(receivers, route, inhibit, files, outbox, monitor_url.rstrip("/"), runbook_base, hosts)


def only_receiver(raw: Any, name: str) -> Any:
    """``raw`` cut down to the receiver ``name`` and a route to it: testing one receiver needs only its
    own secrets (another receiver's unset ``${TOKEN}`` or ``secret_env`` is not this one's problem)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("receivers"), list):
        return raw
    mine = [r for r in raw["receivers"] if isinstance(r, dict) and r.get("name") == name]
    if not mine:
        known = ", ".join(sorted(str(r.get("name")) for r in raw["receivers"] if isinstance(r, dict)))
        raise AlertingConfigError(f"--receiver: {name!r} is not in the config (known: {known or 'none'})")
    return dict(raw, receivers=mine, route={"receiver": name})


def load_config(path: str | Path, receiver: str | None = None) -> AlertingConfig:
    """``receiver``: load only that receiver (``only_receiver``)."""
    p = Path(path)
    try:
        raw = load_yaml_file(p, "config")
    except FileNotFoundError:
        raise AlertingConfigError(f"{p}: config file not found; pass an existing --config path") from None
    except OSError as exc:
        raise AlertingConfigError(f"{p}: cannot read ({exc.strerror}); check the --config path") from None
    except UnsafeYAML as exc:
        raise AlertingConfigError(str(exc)) from None
    try:
        return parse_config(only_receiver(raw, receiver) if receiver is not None else raw, str(p), p.parent)
    except AlertingConfigError as exc:
        raise AlertingConfigError(str(exc) if str(exc).startswith(str(p)) else f"{p}: {exc}") from None
