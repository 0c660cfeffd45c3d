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

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from alerting.clock import Clock
from monitor.model import Sample, SourceBatch, with_node
from monitor.sources.base import DownLabels, Polled, Round

JOB = "ray_state"
SERIES = "verl_ray_death"
RECENT_S = 600.0  # a death is paged while it is this recent (the State API keeps dead actors for hours)
NOT_PAGED = frozenset({"ray_kill", "out_of_scope", "user_exit"})
_EXIT_CODE = re.compile(r"exit code (-?\d+)")


@dataclass(frozen=True)
class RayConfig:
    dashboard_url: str
    token: str | None = None
    token_env: str | None = None
    interval: float = 10.0
    timeout: float = 5.0


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


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:200]


@dataclass
class _Death:
    labels: dict[str, str]
    at: float  # when it died (the worker's end time, else when we first saw it dead)
    resolved: bool = False


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

    def __post_init__(self) -> None:
        self.interval = self.config.interval
        self.budget = max(self.config.interval, self.config.timeout)
        self.down = DownLabels(JOB, None, httpx.URL(self.config.dashboard_url).netloc.decode())

    async def _get(self, path: str) -> list[dict[str, Any]]:
        token, where = find_token(self.config)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        resp = await self.client.get(self.config.dashboard_url + path, headers=headers, timeout=self.config.timeout)
        if resp.status_code in (401, 403):
            found = f"the token from {where} was refused" if token else (
                f"no token was found (ray.token, $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH, {where})")
            raise RayAuthError(f"Ray dashboard {self.config.dashboard_url} answered {resp.status_code}: token "
                               f"authentication is on and {found}; set ray.token or ray.token_env in the monitor "
                               "config, or RAY_AUTH_TOKEN where the monitor runs")
        resp.raise_for_status()
        return resp.json()["data"]["result"]["result"]

    async def poll(self, clock: Clock) -> Round:
        started = time.perf_counter()
        actors = await self._get("/api/v0/actors?detail=1&limit=10000&filter_keys=state&filter_predicates=%3D"
                                 "&filter_values=DEAD")
        workers = await self._get("/api/v0/workers?detail=1&limit=10000&filter_keys=is_alive"
                                  "&filter_predicates=%3D&filter_values=False")
        now = clock.now()
        listed = self._learn(actors, workers, now)
        self.done &= listed  # what Ray no longer lists cannot come back: the memory stays bounded by Ray's
        self.polls += 1
        batch = SourceBatch(self.metric)
        for key, d in list(self.deaths.items()):
            if now - d.at <= RECENT_S:
                batch.samples.append(Sample(SERIES, d.labels, 1.0, now))
            elif not d.resolved:
                d.resolved = True
                batch.samples.append(Sample(SERIES, d.labels, 0.0, now))
            elif now - d.at > 2 * RECENT_S:
                del self.deaths[key]
                self.done.add(key)
        up = with_node({"job": JOB, "target": self.metric, "instance": self.down.instance or ""}, None)
        batch.samples.append(Sample("up", up, 1.0, now))  # the same series a failed round sets to 0
        return Round([Polled(batch, seen=now, source=self.metric)], duration=time.perf_counter() - started)

    def _learn(self, actors: list[dict[str, Any]], workers: list[dict[str, Any]], now: float) -> set[str]:
        """New deaths into ``deaths``; returns the keys of every death Ray lists now."""
        by_pid = {(w.get("node_id"), w.get("pid")): w for w in workers}
        seen_pids = set()
        listed: set[str] = set()
        for a in actors:
            key = f"actor:{a.get('actor_id')}"
            listed.add(key)
            worker = by_pid.get((a.get("node_id"), a.get("pid")))
            seen_pids.add((a.get("node_id"), a.get("pid")))
            if key not in self.deaths and key not in self.done:
                self._add(key, self._death("actor", a.get("class_name") or "?", a, worker, now), now)
        for w in workers:
            ident = (w.get("node_id"), w.get("pid"))
            if ident in seen_pids or w.get("worker_type") not in (None, "WORKER") or not w.get("pid"):
                continue  # an actor's worker is reported with its actor; drivers are not workers
            key = f"worker:{w.get('worker_id')}"
            listed.add(key)
            new = key not in self.deaths and key not in self.done
            if new and w.get("exit_type") in ("NODE_OUT_OF_MEMORY", "SYSTEM_ERROR"):
                self._add(key, self._death("worker", "task worker", {}, w, now), now)
        return listed

    def _add(self, key: str, death: _Death, now: float) -> None:
        if now - death.at > RECENT_S:  # died long before we looked: history, not news
            self.done.add(key)
        else:
            self.deaths[key] = death

    def _death(self, kind: str, cls: str, actor: dict[str, Any], worker: dict[str, Any] | None,
               now: float) -> _Death:
        cause, text = classify(actor, worker)
        ctx = (actor.get("death_cause") or {}).get("actor_died_error_context") or {}
        node = (worker or {}).get("ip") or ctx.get("node_ip_address") or actor.get("node_id") or "unknown"
        end_ms = (worker or {}).get("end_time_ms") or 0
        # no end time: "now" once we are watching; at the first look it may have died any time before
        at = min(now, end_ms / 1000) if end_ms else (now if self.polls else -float("inf"))
        labels = {"kind": kind, "actor_class": cls, "pid": str(actor.get("pid") or (worker or {}).get("pid") or "?"),
                  "node": str(node), "cause": cause, "reason": text, "ray_node_id": str(actor.get("node_id")
                  or (worker or {}).get("node_id") or "")[:16], "job": JOB}
        if actor.get("actor_id"):
            labels["actor_id"] = str(actor["actor_id"])
        return _Death(labels, at)

    async def close(self) -> None:
        pass  # the client is the daemon's
