"""Recorded history for replay: Prometheus ``query_range`` JSON (matrix), volcengine verl's ``file``
logger JSONL (``{"step": N, "data": {...}}`` per line; detected from the first line; record times
reconstructed as the live tail does, see ``monitor/sources/verl_jsonl.py``) or long CSV
``timestamp,name,value[,label columns...]``. Loaded column-wise into numpy for speed."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from monitor.model import SourceBatch, with_node
from monitor.sources.relabel import relabel_columns
from monitor.sources.tail_state import NotRegularFile, open_regular
from monitor.sources.verl_gaps import EXPECTED_EXTRA
from monitor.sources.verl_jsonl import IN_PROGRESS, JsonlTail, RunLiveness, in_progress
from monitor.sources.verl_liveness import STEPS_SHORT, WAITING_FIRST_STEP


class InputError(ValueError):
    """One line naming the file and what is wrong with it."""


@dataclass
class Recording:
    series: list[tuple[str, dict[str, str]]]  # (name, labels with node)
    t: np.ndarray        # all samples, time-sorted
    sid: np.ndarray      # index into ``series``
    value: np.ndarray
    malformed: int = 0

    def __len__(self) -> int:
        return len(self.t)


def _ts(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()


def _value(text: object) -> float:
    # Prometheus renders NaN/+Inf/-Inf as strings; float() understands all three.
    return float(text)  # type: ignore[arg-type]


def load_recording(path: str | Path, node: str | None = None) -> Recording:
    """``node``: the node label of every series (``replay --node``; a verl JSONL file names none)."""
    path = Path(path)
    try:  # non-blocking, a regular file only: a FIFO nobody writes would hang the replay
        with open_regular(path) as fh:
            head = fh.read(1)
    except NotRegularFile as exc:
        raise InputError(f"input {exc}") from None
    except OSError as exc:
        raise InputError(f"input {path}: cannot read ({exc.strerror}); check the path") from exc
    if head == b"{" and _is_verl_jsonl(path):
        rec = _from_verl_jsonl(path, node)
    elif head in (b"{", b"["):
        rec = _from_query_range(path)
    else:
        rec = _from_csv(path)
    if node:
        rec.series = [(name, {**labels, "node": node}) for name, labels in rec.series]
    return rec


def _is_verl_jsonl(path: Path) -> bool:
    """verl's file logger: the first line alone is a JSON object with ``step`` (or a flat metrics
    object, which a query_range response is not: that has ``status``/``data.resultType``)."""
    with path.open("rb") as fh:
        first = fh.readline(1 << 24)
    try:
        obj = json.loads(first)
    except ValueError:
        return False
    if not isinstance(obj, dict):
        return False
    if "step" in obj:
        return True
    data = obj.get("data")
    return "status" not in obj and not (isinstance(data, dict) and "resultType" in data) and "result" not in obj


def read_records(path: str | Path, node: str | None = None) -> tuple[SourceBatch, int]:
    """A whole finished verl JSONL file as one batch: times reconstructed back from its mtime."""
    tail = JsonlTail(path, node, liveness=RunLiveness(writer_open=lambda: False))
    batch = tail.poll(Path(path).stat().st_mtime)
    tail.close()
    batch.samples = [s for s in batch.samples if s.name not in ("up", IN_PROGRESS, EXPECTED_EXTRA, STEPS_SHORT,
                                                               WAITING_FIRST_STEP)]
    batch.samples.extend(in_progress([s.t for s in batch.samples if s.name == "verl_nonfinite_steps_total"], node,
                                     dict(tail.record_extras)))
    return batch, sum(batch.errors.values())


def _from_verl_jsonl(path: Path, node: str | None = None) -> Recording:
    try:
        batch, errors = read_records(path, node)
    except OSError as exc:
        raise InputError(f"input {path}: cannot read ({exc.strerror}); check the path") from exc
    index: dict[tuple, int] = {}
    columns: list[tuple[str, dict[str, str], list[float], list[float]]] = []
    for s in batch.samples:
        key = (s.name, tuple(sorted(s.labels.items())))
        i = index.get(key)
        if i is None:
            i = index[key] = len(columns)
            columns.append((s.name, dict(s.labels), [], []))
        columns[i][2].append(s.t)
        columns[i][3].append(s.value)
    return from_columns(columns, errors)


def from_columns(columns: list[tuple[str, dict[str, str], list[float], list[float]]], malformed: int) -> Recording:
    """Columns (name, labels, times, values) in our names and units (the source edge), time-sorted."""
    series, ts, sids, vals = [], [], [], []
    columns = relabel_columns(columns)
    for i, (name, labels, t, v) in enumerate(columns):
        series.append((name, with_node(labels)))
        ts.append(np.asarray(t, dtype=float))
        vals.append(np.asarray(v, dtype=float))
        sids.append(np.full(len(t), i, dtype=np.int64))
    if not series:
        return Recording([], np.empty(0), np.empty(0, dtype=np.int64), np.empty(0), malformed)
    t_all = np.concatenate(ts)
    order = np.argsort(t_all, kind="stable")
    return Recording(series, t_all[order], np.concatenate(sids)[order], np.concatenate(vals)[order], malformed)


def _from_query_range(path: Path) -> Recording:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"input {path}: not valid JSON ({exc}); expected a Prometheus query_range response") from exc
    result = doc
    if isinstance(doc, dict):
        data = doc.get("data", doc)
        if data.get("resultType", "matrix") != "matrix":
            raise InputError(f"input {path}: resultType {data.get('resultType')!r}; replay needs a query_range 'matrix'")
        result = data.get("result")
    if not isinstance(result, list):
        raise InputError(f"input {path}: no data.result list; expected a Prometheus query_range response")
    columns, malformed = [], 0
    for r in result:
        metric = dict(r.get("metric") or {})
        name = metric.pop("__name__", None)
        if not name:
            malformed += len(r.get("values") or [])
            continue
        t, v = [], []
        for pair in r.get("values") or []:
            try:
                t.append(float(pair[0]))
                v.append(_value(pair[1]))
            except (TypeError, ValueError, IndexError):
                malformed += 1
        columns.append((name, {str(k): str(x) for k, x in metric.items()}, t, v))
    return from_columns(columns, malformed)


def _from_csv(path: Path) -> Recording:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = csv.reader(line for line in fh if not line.startswith("#"))
        header = next(rows, None)
        if not header or [h.strip() for h in header[:3]] != ["timestamp", "name", "value"]:
            raise InputError(f"input {path}: CSV header must start with timestamp,name,value (then label columns)")
        label_cols = [h.strip() for h in header[3:]]
        index: dict[tuple, int] = {}
        columns: list[tuple[str, dict[str, str], list[float], list[float]]] = []
        malformed = 0
        for row in rows:
            if len(row) < 3:
                malformed += 1
                continue
            try:
                t, v = _ts(row[0]), _value(row[2])
            except ValueError:
                malformed += 1
                continue
            if not math.isfinite(t):
                malformed += 1
                continue
            labels = tuple((k, x) for k, x in zip(label_cols, row[3:], strict=False) if x != "")
            key = (row[1], labels)
            i = index.get(key)
            if i is None:
                i = index[key] = len(columns)
                columns.append((row[1], dict(labels), [], []))
            columns[i][2].append(t)
            columns[i][3].append(v)
    return from_columns(columns, malformed)
