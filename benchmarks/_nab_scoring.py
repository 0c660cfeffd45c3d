"""The Numenta Anomaly Benchmark scorer, reimplemented from its definition (NAB v1.1).

Rules (Lavin & Ahmad 2015; Ahmad et al. 2017):
- the first min(floor(0.15 n), 0.15 * 5000) rows are probation: never scored;
- inside a labelled window, the *earliest* detection counts once, worth
  tpWeight * sigma(y) / sigma(-1) where y in [-1, 0) is the detection's position relative to the
  window's right end and sigma(y) = 2 / (1 + e^{5y}) - 1 (so a detection on the window's first row
  is worth exactly tpWeight); later detections in the same window count nothing;
- every detection outside windows is a false positive worth fpWeight * sigma(y) (negative), y the
  distance past the preceding window's right end in window widths (-1 when no window precedes);
- every window without a detection costs fnWeight;
- a corpus score is 100 (S - S_null) / (S_perfect - S_null) with S_null = -fnWeight * windows and
  S_perfect = tpWeight * windows, summed over the files scored.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROFILE_KEYS = {"standard": "standard", "reward_low_FP": "reward_low_FP_rate", "reward_low_FN": "reward_low_FN_rate"}


@dataclass(frozen=True)
class CostMatrix:
    tp: float
    fp: float
    fn: float


@dataclass(frozen=True)
class FileScore:
    score: float
    tp: int  # detections (rows) inside windows
    tn: int
    fp: int  # detections (rows) outside windows
    fn: int  # window rows without a detection
    total: int  # all rows, probation included
    windows: int


def load_profiles(data: Path) -> dict[str, CostMatrix]:
    raw = json.loads((data / "labels" / "profiles.json").read_text())
    out = {}
    for short, key in PROFILE_KEYS.items():
        m = raw[key]["CostMatrix"]
        out[short] = CostMatrix(tp=m["tpWeight"], fp=m["fpWeight"], fn=m["fnWeight"])
    return out


def load_windows(data: Path) -> dict[str, list[tuple[str, str]]]:
    raw = json.loads((data / "labels" / "combined_windows.json").read_text())
    # NAB's windows carry microseconds; the data files do not.
    return {k: [(a[:19], b[:19]) for a, b in v] for k, v in raw.items()}


def read_series(path: Path) -> tuple[list[str], list[float]]:
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    return [r["timestamp"][:19] for r in rows], [float(r["value"]) for r in rows]


def probation_rows(n: int, fraction: float = 0.15) -> int:
    return int(min(math.floor(fraction * n), fraction * 5000))


def scaled_sigmoid(position: float) -> float:
    if position > 3.0:  # far behind a window: a plain false positive
        return -1.0
    return 2.0 / (1.0 + math.exp(5.0 * position)) - 1.0


MAX_TP = scaled_sigmoid(-1.0)


def row_weights(timestamps: Sequence[str], windows: Sequence[tuple[str, str]]) -> tuple[list[float], list[int]]:
    """Unweighted NAB value of a detection at each row, and each row's window index (-1 outside)."""
    index = {ts: i for i, ts in enumerate(timestamps)}
    spans = sorted((index[a], index[b]) for a, b in windows)
    values: list[float] = []
    window_of: list[int] = []
    prev: tuple[int, int] | None = None
    w = 0
    for i in range(len(timestamps)):
        while w < len(spans) and i > spans[w][1]:
            prev = spans[w]
            w += 1
        if w < len(spans) and spans[w][0] <= i <= spans[w][1]:
            left, right = spans[w]
            values.append(scaled_sigmoid(-(right - i + 1) / (right - left + 1)) / MAX_TP)
            window_of.append(w)
        else:
            if prev is None:
                values.append(-1.0)
            else:
                width = prev[1] - prev[0] + 1
                values.append(scaled_sigmoid(abs(prev[1] - i) / (width - 1)))
            window_of.append(-1)
    return values, window_of


def score_file(
    timestamps: Sequence[str], detections: Sequence[bool], windows: Sequence[tuple[str, str]], cost: CostMatrix
) -> FileScore:
    values, window_of = row_weights(timestamps, windows)
    start = probation_rows(len(timestamps))
    best: dict[int, float] = {}
    fp_score = 0.0
    tp = tn = fp = fn = 0
    for i in range(start, len(timestamps)):
        w = window_of[i]
        if detections[i]:
            if w < 0:
                fp += 1
                fp_score += values[i] * cost.fp
            else:
                tp += 1
                best[w] = max(best.get(w, -math.inf), values[i] * cost.tp)
        elif w < 0:
            tn += 1
        else:
            fn += 1
    scored = {window_of[i] for i in range(start, len(timestamps)) if window_of[i] >= 0}
    missed = len(scored) - len(best)
    score = sum(best.values()) + fp_score - cost.fn * missed
    return FileScore(score, tp, tn, fp, fn, len(timestamps), len(scored))


def normalised(scores: Sequence[FileScore], cost: CostMatrix) -> float:
    windows = sum(s.windows for s in scores)
    null, perfect = -cost.fn * windows, cost.tp * windows
    return 100.0 * (sum(s.score for s in scores) - null) / (perfect - null)


def nab_files(data: Path) -> list[str]:
    """The scored files present under ``data``, as NAB window keys (``folder/file.csv``)."""
    windows = load_windows(data)
    return sorted(k for k in windows if (data / k).exists())


@dataclass(frozen=True)
class PreparedFile:
    """One file's row values and windows, computed once so a grid of detectors scores fast."""

    values: list[float]
    window_of: list[int]
    start: int
    windows: int  # windows with at least one scored row


def prepare(timestamps: Sequence[str], windows: Sequence[tuple[str, str]]) -> PreparedFile:
    values, window_of = row_weights(timestamps, windows)
    start = probation_rows(len(timestamps))
    scored = {w for w in window_of[start:] if w >= 0}
    return PreparedFile(values, window_of, start, len(scored))


def score_rows(prep: PreparedFile, rows: Sequence[int], cost: CostMatrix) -> float:
    """The file's raw NAB score for detections at ``rows`` (same rules as ``score_file``)."""
    best: dict[int, float] = {}
    fp_score = 0.0
    for i in rows:
        if i < prep.start:
            continue
        w = prep.window_of[i]
        if w < 0:
            fp_score += prep.values[i] * cost.fp
        else:
            v = prep.values[i] * cost.tp
            if v > best.get(w, -math.inf):
                best[w] = v
    return sum(best.values()) + fp_score - cost.fn * (prep.windows - len(best))


def normalised_raw(total: float, windows: int, cost: CostMatrix) -> float:
    null, perfect = -cost.fn * windows, cost.tp * windows
    return 100.0 * (total - null) / (perfect - null)
