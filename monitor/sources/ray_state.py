"""Ray's State API (the dashboard's ``/api/v0/actors`` and ``/api/v0/workers``) as a source: every actor or
worker that died recently becomes one ``verl_ray_death`` series (value 1 while the death is recent, then
0 once, then nothing), labelled with what a page needs: the actor's class, its node and pid, and Ray's
death cause in our words (``cause``) and in Ray's (``reason``).

Causes, read from Ray 2.60's answers for real deaths (tests/monitor/test_ray_live.py):

- ``ray_oom``: Ray's memory monitor killed it (``death_cause.oom_context``; worker ``exit_type``
  ``NODE_OUT_OF_MEMORY``): the host, not the GPU, ran out of memory;
- ``killed``: the worker process ended without an exit status (Ray: "Worker unexpectedly exits with a
  connection error code 2"): SIGKILL -- the kernel OOM killer's signal --, a segfault, ``os._exit`` or
  ``ray stop --force`` all read the same in Ray; the diagnosis tells a kernel OOM kill by the host's
  memory at that time;
- ``exit``: the process exited with a code ("Worker exits with an exit code 3": ``sys.exit``, an
  uncaught exception ending the worker);
- ``node_lost``: its node died (``reason: NODE_DIED``);
- ``init_error``: an exception in ``__init__`` (``creation_task_failure_context``);
- ``ray_kill``, ``out_of_scope``, ``user_exit``: deliberate ends; reported, not paged by the default rules.

Authentication: Ray >= 2.5x turns token auth on by default for a new cluster; the token is read as Ray's
own clients read it (``AuthenticationTokenLoader``): ``ray.token``/``ray.token_env`` from our config,
else ``RAY_AUTH_TOKEN``, else the file named by ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``, and
sent as ``Authorization: Bearer``. A 401/403 fails the round with a line saying which of these was used
(or that none was found) -- counted, logged once a minute, ``up{job="ray_state"}`` 0.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from alerting.clock import Clock
from alerting.http_limits import BodyTooLarge, read_async
from monitor.model import Sample, SourceBatch, with_node
from monitor.sources.base import DownLabels, Polled, Round

JOB = "ray_state"
SERIES = "verl_ray_death"
RECENT_S = 600.0  # a death is paged while it is this recent (the State API keeps dead actors for hours)
NOT_PAGED = frozenset({"ray_kill", "out_of_scope", "user_exit"})
_EXIT_CODE = re.compile(r"exit code (-?\d+)")
# one answer's bytes: 10000 dead actors in detail are ~30 MB in Ray 2.60; a 500 MB answer cost 5.1 GB
BODY_LIMIT = 64 << 20
# deaths listed one series (one alert) each: the store's per-metric cap (2000 by default) would drop the
# rest unsaid; past it the storm is one series that says how many died and how many are listed
MAX_LISTED = 1000
INLINE_PARSE_BYTES = 256 << 10  # larger answers are parsed in a thread: the shared loop keeps scraping


@dataclass(frozen=True)
class RayConfig:
    dashboard_url: str
    token: str | None = None
    token_env: str | None = None
    interval: float = 10.0
    timeout: float = 5.0


class RayAnswerError(RuntimeError):
    """An answer the round cannot use (too large, not Ray's shape): one line naming the dashboard."""


class RayAuthError(RuntimeError):
    """The dashboard refused us: one line naming where the token came from, or that none was found."""


def find_token(cfg: RayConfig, env: dict[str, str] | None = None) -> tuple[str | None, str]:
    """(token, where it came from), in Ray's own order of precedence."""
    env = dict(os.environ) if env is None else env
    if cfg.token:
        return cfg.token, "ray.token"
    if cfg.token_env:
        return env.get(cfg.token_env, "").strip() or None, f"${cfg.token_env}"
    if env.get("RAY_AUTH_TOKEN", "").strip():
        return env["RAY_AUTH_TOKEN"].strip(), "$RAY_AUTH_TOKEN"
    path = env.get("RAY_AUTH_TOKEN_PATH") or str(Path(env.get("HOME", str(Path.home()))) / ".ray" / "auth_token")
    try:
        first = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None, path
    return (first[0].strip() or None) if first else None, path


def classify(actor: dict[str, Any], worker: dict[str, Any] | None) -> tuple[str, str]:
    """(cause, Ray's words shortened) for one dead actor (or, with ``actor`` empty, a dead worker)."""
    death = actor.get("death_cause") or {}
    exit_type = (worker or {}).get("exit_type") or ""
    if "oom_context" in death or exit_type == "NODE_OUT_OF_MEMORY":
        text = (death.get("oom_context") or {}).get("error_message") or (worker or {}).get("exit_detail") or ""
        return "ray_oom", _first_line(text)
    if "creation_task_failure_context" in death or exit_type == "USER_ERROR":
        ctx = death.get("creation_task_failure_context") or {}
        return "init_error", _first_line(ctx.get("formatted_exception_string") or (worker or {}).get("exit_detail")
                                         or "exception in the actor's __init__")
    ctx = death.get("actor_died_error_context") or {}
    reason = ctx.get("reason") or ""
    text = ctx.get("error_message") or (worker or {}).get("exit_detail") or ""
    if reason == "NODE_DIED":
        return "node_lost", _first_line(text or "its node died")
    if reason == "RAY_KILL" or exit_type == "INTENDED_SYSTEM_EXIT":
        return "ray_kill", _first_line(text)
    if reason in ("OUT_OF_SCOPE", "REF_DELETED"):
        return "out_of_scope", _first_line(text)
    if exit_type == "INTENDED_USER_EXIT":
        return "user_exit", _first_line(text)
    code = _EXIT_CODE.search(text)
    if code:
        return "exit", f"exited with code {code.group(1)}"
    # Ray cannot tell these apart (measured: os._exit, SIGKILL and SIGSEGV read the same); the diagnosis
    # tells a kernel OOM kill by the host's memory on that node (WorkerOOMKilled)
    return "killed", ("its process ended without an exit status: SIGKILL (e.g. the kernel OOM killer), a crash, "
                      "os._exit or ray stop --force")


def _first_line(text: Any) -> str:
    text = _text(text)
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:200]


def _text(value: Any) -> str:
    """A label value from a scalar field; a list or object where Ray writes a scalar is a bad record."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        raise BadRecord(f"a {type(value).__name__} where Ray writes a string")
    return str(value)


def _ident(record: dict[str, Any]) -> tuple[str, str]:
    """(node, pid) of a record as strings: a field of another type must not make it unhashable."""
    return str(record.get("node_id"))[:128], str(record.get("pid"))[:32]


def _millis(value: Any) -> float:
    """Ray's ``end_time_ms``: 0 when absent; anything but a finite non-negative number is a bad record."""
    if value in (None, "", 0):
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BadRecord(f"end_time_ms is a {type(value).__name__}")
    try:
        ms = float(value)
    except ValueError:
        raise BadRecord(f"end_time_ms {str(value)[:20]!r} is not a number") from None
    if not math.isfinite(ms) or ms < 0:
        raise BadRecord(f"end_time_ms {ms} is not a time")
    return ms


@dataclass
class _Death:
    labels: dict[str, str]
    at: float  # when it died (the worker's end time, else when we first saw it dead)
    resolved: bool = False
    listed: bool = True  # False: over MAX_LISTED when it came, counted in the unlisted series only


class BadRecord(ValueError):
    """One record of Ray's answer that is not what the State API writes: skipped and counted."""


@dataclass
class RayStateSource:
    config: RayConfig
    client: httpx.AsyncClient
    name: str = "ray_state"
    metric: str = "ray_state"
    offset: float = 0.0
    wait_after: bool = True
    deaths: dict[str, _Death] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)  # deaths paged and resolved, or older than RECENT_S when seen
    polls: int = 0
    body_limit: int = BODY_LIMIT
    bad_records: int = 0  # records skipped since start: not an object, or a field of the wrong type
    bad_record: str = ""  # the newest of them, in words
    _open: int = 0  # listed deaths not resolved yet
    _unlisted_firing: bool = False

    def __post_init__(self) -> None:
        self.interval = self.config.interval
        self.budget = max(self.config.interval, self.config.timeout)
        self.down = DownLabels(JOB, None, httpx.URL(self.config.dashboard_url).netloc.decode())

    async def _get(self, path: str) -> list[dict[str, Any]]:
        """The records of one State API answer; raises RayAuthError, RayAnswerError or httpx's errors."""
        token, where = find_token(self.config)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        url = self.config.dashboard_url + path
        async with self.client.stream("GET", url, headers=headers, timeout=self.config.timeout) as resp:
            if resp.status_code in (401, 403):
                found = f"the token from {where} was refused" if token else (
                    f"no token was found (ray.token, $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH, {where})")
                raise RayAuthError(f"Ray dashboard {self.config.dashboard_url} answered {resp.status_code}: token "
                                   f"authentication is on and {found}; set ray.token or ray.token_env in the "
                                   "monitor config, or RAY_AUTH_TOKEN where the monitor runs")
            resp.raise_for_status()
            try:
                body = await asyncio.wait_for(read_async(resp, self.body_limit), self.config.timeout)
            except BodyTooLarge as exc:
                raise RayAnswerError(f"Ray dashboard {self.config.dashboard_url}{path.split('?')[0]}: {exc}; "
                                     "not read (fewer dead actors, or a Ray that prunes its State API)") from None
        try:
            doc = json.loads(body) if len(body) <= INLINE_PARSE_BYTES else await asyncio.to_thread(json.loads, body)
            records = doc["data"]["result"]["result"]
        except (ValueError, RecursionError, TypeError, KeyError) as exc:
            raise RayAnswerError(f"Ray dashboard {self.config.dashboard_url}{path.split('?')[0]}: not a State "
                                 f"API answer ({type(exc).__name__})") from None
        if not isinstance(records, list):
            raise RayAnswerError(f"Ray dashboard {self.config.dashboard_url}{path.split('?')[0]}: not a State "
                                 "API answer (no result list)")
        good = [r for r in records if isinstance(r, dict)]
        if len(good) < len(records):
            self.bad_records += len(records) - len(good)
            odd = next(r for r in records if not isinstance(r, dict))
            self.bad_record = f"{path.split('?')[0]}: a record that is {type(odd).__name__}, not an object"
        return good

    async def poll(self, clock: Clock) -> Round:
        started = time.perf_counter()
        bad_before = self.bad_records
        actors = await self._get("/api/v0/actors?detail=1&limit=10000&filter_keys=state&filter_predicates=%3D"
                                 "&filter_values=DEAD")
        workers = await self._get("/api/v0/workers?detail=1&limit=10000&filter_keys=is_alive"
                                  "&filter_predicates=%3D&filter_values=False")
        now = clock.now()
        listed = self._learn(actors, workers, now)
        self.done &= listed  # what Ray no longer lists cannot come back: the memory stays bounded by Ray's
        self.polls += 1
        batch = SourceBatch(self.metric)
        unlisted = 0
        for key, d in list(self.deaths.items()):
            if now - d.at <= RECENT_S:
                if d.listed:
                    batch.samples.append(Sample(SERIES, d.labels, 1.0, now))
                else:
                    unlisted += 1
            elif not d.resolved:
                d.resolved = True
                self._open -= d.listed
                if d.listed:
                    batch.samples.append(Sample(SERIES, d.labels, 0.0, now))
            elif now - d.at > 2 * RECENT_S:
                del self.deaths[key]
                self.done.add(key)
        if unlisted or self._unlisted_firing:  # 0 once after the storm: its alert resolves
            batch.samples.append(Sample(SERIES, self._unlisted_labels(), float(unlisted), now))
            self._unlisted_firing = bool(unlisted)
        if self.bad_records > bad_before:
            batch.error("bad_record", self.bad_records - bad_before)
            batch.notes["bad_record"] = (f"{self.bad_records - bad_before} record(s) of Ray's State API answer "
                                         f"skipped ({self.bad_record}); the others were read")
        up = with_node({"job": JOB, "target": self.metric, "instance": self.down.instance or ""}, None)
        batch.samples.append(Sample("up", up, 1.0, now))  # the same series a failed round sets to 0
        return Round([Polled(batch, seen=now, source=self.metric)], duration=time.perf_counter() - started)

    def _unlisted_labels(self) -> dict[str, str]:
        return {"kind": "unlisted", "actor_class": "", "pid": "-", "node": "several", "cause": "unlisted",
                "reason": "", "ray_node_id": "", "job": JOB, "listed": str(MAX_LISTED)}

    def _learn(self, actors: list[dict[str, Any]], workers: list[dict[str, Any]], now: float) -> set[str]:
        """New deaths into ``deaths``; returns the keys of every death Ray lists now. A record that is not
        what Ray writes (a field of the wrong type) is skipped and counted; the others are read."""
        by_pid = {_ident(w): w for w in workers}
        seen_pids = set()
        listed: set[str] = set()
        new: list[tuple[str, _Death]] = []
        for a in actors:
            key = f"actor:{a.get('actor_id')}"
            listed.add(key)
            worker = by_pid.get(_ident(a))
            seen_pids.add(_ident(a))
            if key not in self.deaths and key not in self.done:
                self._try(new, key, "actor", a, worker, now)
        for w in workers:
            ident = _ident(w)
            if ident in seen_pids or w.get("worker_type") not in (None, "WORKER") or not w.get("pid"):
                continue  # an actor's worker is reported with its actor; drivers are not workers
            key = f"worker:{w.get('worker_id')}"
            listed.add(key)
            fresh = key not in self.deaths and key not in self.done
            if fresh and w.get("exit_type") in ("NODE_OUT_OF_MEMORY", "SYSTEM_ERROR"):
                self._try(new, key, "worker", {}, w, now)
        for key, death in new:
            self._add(key, death, now)
        return listed

    def _try(self, new: list[tuple[str, _Death]], key: str, kind: str, actor: dict[str, Any],
             worker: dict[str, Any] | None, now: float) -> None:
        try:
            cls = (_text(actor.get("class_name")) or "?") if kind == "actor" else "task worker"
            new.append((key, self._death(kind, cls, actor, worker, now)))
        except (BadRecord, TypeError, ValueError, AttributeError, IndexError) as exc:
            self.bad_records += 1
            self.bad_record = f"{key[:80]}: {str(exc)[:80] or type(exc).__name__}"

    def _add(self, key: str, death: _Death, now: float) -> None:
        if now - death.at > RECENT_S:  # died long before we looked: history, not news
            self.done.add(key)
            return
        death.listed = self._open < MAX_LISTED
        self._open += death.listed
        self.deaths[key] = death

    def _death(self, kind: str, cls: str, actor: dict[str, Any], worker: dict[str, Any] | None,
               now: float) -> _Death:
        for name, part in (("death_cause", actor.get("death_cause")), ("worker", worker)):
            if part is not None and not isinstance(part, dict):
                raise BadRecord(f"{name} is a {type(part).__name__}")
        cause, text = classify(actor, worker)
        ctx = (actor.get("death_cause") or {}).get("actor_died_error_context") or {}
        node = (worker or {}).get("ip") or ctx.get("node_ip_address") or actor.get("node_id") or "unknown"
        end_ms = _millis((worker or {}).get("end_time_ms"))
        # no end time: "now" once we are watching; at the first look it may have died any time before
        at = min(now, end_ms / 1000) if end_ms else (now if self.polls else -float("inf"))
        labels = {"kind": kind, "actor_class": cls[:200], "pid": _text(actor.get("pid") or (worker or {}).get("pid"))
                  or "?", "node": _text(node)[:200], "cause": cause, "reason": text,
                  "ray_node_id": _text(actor.get("node_id") or (worker or {}).get("node_id"))[:16], "job": JOB}
        if actor.get("actor_id"):
            labels["actor_id"] = _text(actor["actor_id"])[:64]
        return _Death(labels, at)

    async def close(self) -> None:
        pass  # the client is the daemon's
