"""Prometheus' file-based service discovery (``file_sd_configs``) as one source.

The files hold a JSON or YAML list of target groups, ``[{targets: ["host:port", ...], labels: {...}}]``
(the format Ray writes to ``/tmp/ray/prom_metrics_service_discovery.json`` for every node, and what any
inventory script can write). Semantics follow Prometheus' ``discovery/file`` and its scrape relabelling:

- the format is chosen by the file's extension (``.json``, ``.yml``/``.yaml``), as Prometheus does;
- each target is scraped at ``<scheme>://<host:port><__metrics_path__>`` (defaults ``http`` and
  ``/metrics``; ``__scheme__``/``__metrics_path__`` and ``__param_<name>`` labels of the group set them);
- the group's labels are attached to every sample of its targets; a ``job`` label overrides the
  config's job, an ``instance`` label the address; labels starting with ``__`` are dropped after use;
- the files are re-read when their mtime, size or the glob's matches change (checked every round, a
  ``stat`` per file) and at least every ``refresh_interval``; new targets are scraped from the next
  round, removed ones are dropped with their series (``Round.gone``), so a target taken out of the
  file never looks like one that went silent (no TrainerDown, no absence alert); a target whose
  labels changed starts its series anew the same way;
- a file that does not exist holds no targets (Ray writes its file once it runs; a file deleted drops
  its targets), as a Prometheus glob matching nothing;
- a file that cannot be read or parsed is one logged line and a counted error
  (``verl_monitor_scrape_errors_total{target="file_sd:<name>",reason="file_sd_invalid"}``); the
  targets it held before are kept, as Prometheus keeps a file's last good groups;
- a file naming more than ``target_limit`` targets (default MAX_TARGETS_PER_FILE) keeps its first ones
  and counts the rest (``reason="file_sd_target_limit"``, one logged line): 100 000 targets under the
  size cap stopped every trainer scrape for a minute and took 1.15 GB;
- files are read and parsed in a thread, never on the shared event loop (a 14.8 MB YAML file took tens
  of seconds to parse there, every source and evaluation stopped meanwhile), within ``READ_DEADLINE_S``:
  a parse that takes longer is abandoned for this round (counted as ``file_sd_invalid``, the last good
  targets kept) and its result used once it is done. A YAML file over ``MAX_YAML_BYTES`` is refused
  (JSON is parsed in C; PyYAML's safe loader takes minutes on 15 MB).

Why our own reader: the format is a 10-line schema; Prometheus' Go implementation is the reference and
no Python package implements it.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import httpx
import yaml

from alerting.clock import Clock
from alerting.safe_config import UnsafeYAML, load_yaml_text
from monitor.model import SourceBatch
from monitor.sources.base import DownLabels, Polled, Round
from monitor.sources.prom_text import Target, scrape
from monitor.sources.relabel import relabel
from monitor.sources.tail_state import open_regular

MAX_FILE_BYTES = 16 << 20  # a target file larger than this is refused (Prometheus' own files are KB)
# PyYAML's safe loader is pure Python: 14.8 MB took minutes and its millions of objects made garbage
# collections that stalled the loop for seconds even with the parse in a thread; JSON (Ray's format) is
# read in C. 1 MiB is thousands of groups, past any target_limit.
MAX_YAML_BYTES = 1 << 20
MAX_TARGETS_PER_FILE = 1000  # Ray writes one target per node; 1000 GPUs are 125-250 targets
READ_DEADLINE_S = 2.0  # a round waits this long for the files' read and parse, then scrapes what it had
_ADDRESS_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}$")
_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class FileSDConfig:
    files: tuple[str, ...]     # paths or globs (``*`` in the last element, as Prometheus allows)
    job: str = "file_sd"
    interval: float = 5.0      # scrape interval of every discovered target
    timeout: float = 3.0
    refresh_interval: float = 300.0  # re-read even when nothing seems to have changed (Prometheus: 5m)
    node: str | None = None    # a fixed node for every target (default: the address's host)
    target_limit: int = MAX_TARGETS_PER_FILE  # targets kept per file, the first ones; the rest counted


class FileSDError(ValueError):
    """One line naming the file and what is wrong with it."""


def parse_groups(text: str, path: str, defaults: FileSDConfig) -> list[Target]:
    """The targets a file_sd file describes (raises FileSDError naming the file and the entry)."""
    try:  # YAML without aliases: the file is written by another program and may be hostile
        doc = json.loads(text) if path.endswith(".json") else load_yaml_text(text, path)
    except UnsafeYAML as exc:
        raise FileSDError(str(exc).splitlines()[0]) from None
    except (ValueError, RecursionError, yaml.YAMLError) as exc:
        raise FileSDError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'YAML'} "
                          f"({str(exc).splitlines()[0][:120]})") from None
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise FileSDError(f"{path}: expected a list of {{targets: [host:port], labels: {{...}}}} groups")
    out: list[Target] = []
    over = 0
    for i, group in enumerate(doc):
        if not isinstance(group, dict) or not isinstance(group.get("targets", []), list):
            raise FileSDError(f"{path}: group {i}: expected {{targets: [host:port, ...], labels: {{...}}}}")
        labels = group.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(k, str) and _LABEL_RE.match(k) and isinstance(v, str)
                                                   for k, v in labels.items()):
            raise FileSDError(f"{path}: group {i}: labels must map label names to string values")
        for address in group.get("targets") or []:
            if not isinstance(address, str) or not _ADDRESS_RE.match(address):
                raise FileSDError(f"{path}: group {i}: target {str(address)[:60]!r} is not host:port")
            if len(out) >= defaults.target_limit:
                over += 1  # still checked: a bad entry past the limit refuses the file as before
                continue
            out.append(_target(address, labels, defaults))
    if over:
        raise TooManyTargets(path, out, over, defaults.target_limit)
    return out


class TooManyTargets(Exception):
    """A file naming more targets than its limit: ``kept`` are the first ones, ``over`` were dropped."""

    def __init__(self, path: str, kept: list[Target], over: int, limit: int) -> None:
        super().__init__(f"{path}: {len(kept) + over} targets, over target_limit {limit}: the first {limit} "
                         f"are scraped, {over} dropped (raise file_sd[].target_limit, or split the file)")
        self.kept, self.over = kept, over


def _target(address: str, labels: dict[str, str], cfg: FileSDConfig) -> Target:
    scheme = labels.get("__scheme__", "http")
    metrics_path = labels.get("__metrics_path__", "/metrics")
    params = {k[len("__param_"):]: v for k, v in labels.items() if k.startswith("__param_")}
    url = f"{scheme}://{address}{metrics_path}" + (f"?{urlencode(params)}" if params else "")
    kept = {k: v for k, v in labels.items() if not k.startswith("__") and k != "job"}
    name = address if metrics_path == "/metrics" and not params else f"{address}{metrics_path}"
    return Target(name, url, cfg.node, labels.get("job", cfg.job), cfg.interval, cfg.timeout,
                  labels=tuple(sorted(kept.items())))


class FileSDSource:
    """The files' targets, scraped concurrently each round; the target set follows the files."""

    def __init__(self, config: FileSDConfig, client: httpx.AsyncClient, index: int = 0) -> None:
        self.config, self.client = config, client
        self.metric = f"file_sd:{Path(config.files[0]).name}" + (f"#{index}" if index else "")
        self.name = self.metric
        self.interval, self.wait_after = config.interval, False
        self.budget = max(config.interval, config.timeout)
        self.offset = 0.0
        self.down = DownLabels(config.job, config.node)
        self.targets: dict[str, Target] = {}  # target name -> target, in the files' order
        self._groups: dict[str, list[Target]] = {}  # file -> its last good targets
        self._stamps: dict[str, tuple[float, int]] = {}
        self._read_at = -float("inf")
        self.read_errors = 0
        self._reading: tuple[_Plan, asyncio.Future[dict[str, tuple[list[Target] | None, Exception | None]]]] \
            | None = None  # a read that outlived its round's deadline

    def paths(self) -> list[str]:
        found: list[str] = []
        for pattern in self.config.files:
            found += sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        return found

    def refresh(self) -> tuple[list[str], list[Exception]]:
        """Re-read changed files; returns the names of targets that left, and the files' errors."""
        plan = self._plan()
        if plan is None:
            return [], []
        return self._apply(plan, _read_files(plan.read, self.config))

    async def refresh_off_loop(self) -> tuple[list[str], list[Exception]]:
        """``refresh`` with the reading and parsing in a thread, waited for at most READ_DEADLINE_S; a
        read still running then is taken up by a later round, the targets of before scraped meanwhile."""
        if self._reading is not None:
            if not self._reading[1].done():
                return [], []
            (plan, task), self._reading = self._reading, None
            gone, errors = self._apply(plan, task.result())
            more_gone, more_errors = await self.refresh_off_loop()  # files may have changed meanwhile
            return gone + more_gone, errors + more_errors
        plan = self._plan()
        if plan is None:
            return [], []
        task = asyncio.ensure_future(asyncio.to_thread(_read_files, plan.read, self.config))
        try:
            results = await asyncio.wait_for(asyncio.shield(task), READ_DEADLINE_S)
        except asyncio.TimeoutError:
            self._reading = (plan, task)
            return [], [FileSDError(f"{', '.join(plan.read)[:200]}: still reading after {READ_DEADLINE_S:g}s; "
                                    "scraping the targets of before until it is done (a smaller file is faster)")]
        return self._apply(plan, results)

    def _plan(self) -> _Plan | None:
        """What changed: None when nothing did (a ``stat`` per file)."""
        paths = self.paths()
        due = time.monotonic() - self._read_at >= self.config.refresh_interval
        changed = due or set(paths) != set(self._stamps)
        stamps: dict[str, tuple[float, int]] = {}
        for p in paths:
            try:
                st = os.stat(p)
                stamps[p] = (st.st_mtime, st.st_size)
            except OSError:
                stamps[p] = (-1.0, -1)
            changed = changed or stamps[p] != self._stamps.get(p)
        if not changed:
            return None
        self._read_at = time.monotonic()
        keep = [p for p in paths if stamps[p] == self._stamps.get(p) and p in self._groups and not due]
        read = [p for p in paths if p not in keep and stamps[p][1] >= 0]
        return _Plan(paths, stamps, keep, read)

    def _apply(self, plan: _Plan, results: dict[str, tuple[list[Target] | None, Exception | None]]) \
            -> tuple[list[str], list[Exception]]:
        groups: dict[str, list[Target]] = {}
        errors: list[Exception] = []
        for p in plan.paths:
            if p in plan.keep:
                groups[p] = self._groups[p]
            elif p not in results:  # not there (yet): no targets, as Prometheus' glob matching no file
                groups[p] = []
            else:
                targets, error = results[p]
                if error is not None:
                    errors.append(error)
                if targets is not None:
                    groups[p] = targets
                elif p in self._groups:  # the last good groups stay (Prometheus keeps them too)
                    groups[p] = self._groups[p]
        self._stamps, self._groups = plan.stamps, groups
        new: dict[str, Target] = {}
        for targets in groups.values():
            for t in targets:
                new.setdefault(t.name, self.targets.get(t.name) if self.targets.get(t.name) == t else t)
        # a target that left, or whose labels changed (its old series would linger until stale)
        gone = [n for n, t in self.targets.items() if new.get(n) != t]
        self.targets = new
        return gone, errors

    async def poll(self, clock: Clock) -> Round:
        gone, errors = await self.refresh_off_loop()
        self.read_errors += len(errors)
        now = clock.now()
        targets = list(self.targets.values())
        results = await asyncio.gather(*(scrape(self.client, t, now) for t in targets))
        polled, verl_nodes, slowest = [], set(), 0.0
        for t, (batch, duration, _up) in zip(targets, results, strict=True):
            verl_nodes |= relabel(batch)
            polled.append(Polled(batch, seen=now, source=t.name))
            slowest = max(slowest, duration)
        if errors:  # counted under this source by the daemon, as any failed part of a round
            polled.append(Polled(_error_batch(self.metric, errors), source=self.metric))
        return Round(polled, up=not errors, duration=slowest, verl_nodes=verl_nodes, gone=gone)

    async def close(self) -> None:
        pass  # the client is the daemon's


@dataclass(frozen=True)
class _Plan:
    paths: list[str]
    stamps: dict[str, tuple[float, int]]
    keep: list[str]  # unchanged: their last good targets stay
    read: list[str]  # changed and there: read and parsed


def _read_files(paths: list[str], config: FileSDConfig) -> dict[str, tuple[list[Target] | None, Exception | None]]:
    """Each file's targets (None when it could not be read) and its error; runs in a thread."""
    out: dict[str, tuple[list[Target] | None, Exception | None]] = {}
    for p in paths:
        try:
            with open_regular(p) as fh:  # never a FIFO's blocking read
                text = fh.read(MAX_FILE_BYTES + 1)
            if len(text) > MAX_FILE_BYTES:
                raise FileSDError(f"{p}: over {MAX_FILE_BYTES >> 20} MiB; split it")
            if not p.endswith(".json") and len(text) > MAX_YAML_BYTES:
                raise FileSDError(f"{p}: a YAML file over {MAX_YAML_BYTES >> 20} MiB (minutes to parse); "
                                  "write it as JSON (.json), or split it")
            out[p] = parse_groups(text.decode("utf-8"), p, config), None
        except TooManyTargets as exc:
            out[p] = exc.kept, exc
        except (OSError, UnicodeDecodeError, FileSDError) as exc:
            out[p] = None, exc if isinstance(exc, FileSDError) else FileSDError(f"{p}: cannot read ({exc})")
    return out


def _error_batch(source: str, errors: list[Exception]) -> SourceBatch:
    """The files' errors as a batch: counted and logged (one line a minute) by the intake, like any
    rejected input; the line names the file and what is wrong."""
    batch = SourceBatch(source)
    over = [e for e in errors if isinstance(e, TooManyTargets)]
    invalid = [e for e in errors if not isinstance(e, TooManyTargets)]
    if invalid:
        batch.error("file_sd_invalid", len(invalid))
        batch.notes["file_sd_invalid"] = f"{invalid[-1]}; keeping the targets it held before"
    if over:
        batch.error("file_sd_target_limit", sum(e.over for e in over))
        batch.notes["file_sd_target_limit"] = str(over[-1])
    return batch
