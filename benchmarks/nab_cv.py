"""Leave-one-folder-out cross-validation of the context_anomaly detector on the NAB files.

    .venv/bin/python benchmarks/nab_cv.py [--data DIR] [--cache DIR] [--json]

The hyper-parameters of `ContextAnomalyDetector` are chosen on one NAB folder (realKnownCause) and
scored on the other (realAWSCloudwatch), and the reverse; the CV score normalises the out-of-fold
detections of both folds together (all 24 files, 49 windows). One configuration per fold for all its
files; only the threshold differs per NAB profile, as NAB allows. The in-sample score (chosen and
scored on all 24 files) is printed next to it, and the in-sample choice is what
`monitor/rules/nab.yaml` should hold.

Speed (2 shared cores): the expensive part, each file's three feature p-values, is computed once per
feature setting by the detector's own `ContextFeatures` and cached (`--cache`, default
~/.cache/verl-ops/nab_cv); the cheap part - surprise, anomaly likelihood, threshold, hold - is
vectorised over a file with numpy, equal to `AnomalyLikelihood` and the detector's episode rule
(tests/benchmarks/test_bench_nab_cv.py checks it against the streaming detector). The final figures
of the chosen configuration come from `benchmarks/nab.py`, the real detector in the daemon's Pipeline.
Last line: {"cv": {profile: score}, "in_sample": {...}, "chosen": {...}, "folds": [...]}.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import log_ndtr

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import ROOT, data_dir, emit
from benchmarks._nab_scoring import (
    PreparedFile,
    load_profiles,
    load_windows,
    nab_files,
    normalised_raw,
    prepare,
    read_series,
    score_rows,
)
from benchmarks.nab import epoch
from monitor.detectors.context import ContextFeatures

FOLDERS = ("realKnownCause", "realAWSCloudwatch")
# The grid (kept small on purpose: 24 files cannot tell many settings apart without overfitting).
FEATURE_SETS = {"value,change,seasonal": (0, 1, 2)}
CAPS = (10.0, 30.0)
SHORTS = (10, 20)
HOLDS = (100, 150, 300)
THRESHOLDS = tuple(np.round(np.arange(2.0, 8.01, 0.25), 2))
HISTORY, MIN_HISTORY = 4000, 100


@dataclass
class CachedFile:
    name: str
    prep: PreparedFile
    p: np.ndarray  # (n, 3) feature p-values


def feature_p_values(times: list[float], values: list[float]) -> np.ndarray:
    feats = ContextFeatures(HISTORY, MIN_HISTORY)
    return np.array([feats.update(t, v) for t, v in zip(times, values, strict=True)], dtype=float)


def load_all(data: Path, cache: Path) -> list[CachedFile]:
    src = (ROOT / "monitor" / "detectors" / "context.py").read_bytes()
    key = hashlib.sha1(src + f"{HISTORY},{MIN_HISTORY}".encode()).hexdigest()[:12]
    cache.mkdir(parents=True, exist_ok=True)
    windows = load_windows(data)
    out = []
    for name in nab_files(data):
        stamps, values = read_series(data / name)
        f = cache / f"{name.replace('/', '__')}.{key}.npy"
        if f.exists():
            p = np.load(f)
        else:
            p = feature_p_values([epoch(s) for s in stamps], values)
            np.save(f, p)
        out.append(CachedFile(name, prepare(stamps, windows[name]), p))
    return out


def likelihood_tail(p: np.ndarray, features: tuple[int, ...], short: int, cap: float) -> np.ndarray:
    """Vectorised ContextAnomalyDetector up to the likelihood's -log10 tail, sample by sample."""
    pm = np.minimum(1.0, len(features) * p[:, list(features)].min(axis=1))
    with np.errstate(divide="ignore"):
        raw = np.minimum(cap, -np.log10(np.maximum(pm, 10.0 ** -cap)))
    raw = np.where(pm <= 10.0 ** -cap, cap, raw)
    full = np.zeros(len(raw))
    full[MIN_HISTORY:] = _tail(raw[MIN_HISTORY:], short)
    return full


def _tail(raw: np.ndarray, short: int) -> np.ndarray:
    n = len(raw)
    c = np.concatenate([[0.0], np.cumsum(raw)])
    idx = np.arange(n)
    lo = np.maximum(0, idx - short + 1)
    m = (c[idx + 1] - c[lo]) / (idx + 1 - lo)
    c1 = np.concatenate([[0.0], np.cumsum(m)])
    c2 = np.concatenate([[0.0], np.cumsum(m * m)])
    k = np.minimum(idx, HISTORY)
    s1 = c1[idx] - c1[idx - k]
    s2 = c2[idx] - c2[idx - k]
    kk = np.maximum(k, 1)
    mu = s1 / kk
    sd = np.maximum(np.sqrt(np.maximum(s2 / kk - mu * mu, 0.0)), 0.05)
    tail = -log_ndtr(-(m - mu) / sd) / np.log(10.0)
    tail[k < 2] = 0.0
    return np.minimum(tail, 300.0)


def detections(tail: np.ndarray, threshold: float, hold: int) -> list[int]:
    """Rising edges of the detector's episodes: a trigger more than ``hold`` samples after the last."""
    trig = np.flatnonzero(tail >= threshold)
    trig = trig[trig >= 2 * MIN_HISTORY]
    out, last = [], -10**9
    for j in trig.tolist():
        if j - last > max(hold, 1):
            out.append(j)
        last = j
    return out


def grid_scores(files: list[CachedFile], costs: dict) -> dict[tuple, dict[str, np.ndarray]]:
    """(feature set, cap, short, hold) -> profile -> per-file raw scores for every threshold."""
    out: dict[tuple, dict[str, np.ndarray]] = {}
    for fs, cap, short in itertools.product(FEATURE_SETS, CAPS, SHORTS):
        tails = [likelihood_tail(f.p, FEATURE_SETS[fs], short, cap) for f in files]
        for hold in HOLDS:
            table = {prof: np.zeros((len(THRESHOLDS), len(files))) for prof in costs}
            for ti, thr in enumerate(THRESHOLDS):
                for fi, (f, tail) in enumerate(zip(files, tails, strict=True)):
                    rows = detections(tail, thr, hold)
                    for prof, cost in costs.items():
                        table[prof][ti, fi] = score_rows(f.prep, rows, cost)
            out[(fs, cap, short, hold)] = table
    return out


def choose(scores: dict, files: list[CachedFile], mask: np.ndarray, costs: dict) -> tuple[tuple, dict[str, float]]:
    """Best (features, short, hold) on the masked files by the standard profile, and each profile's
    best threshold for it."""
    windows = sum(f.prep.windows for f, m in zip(files, mask, strict=True) if m)

    def best_threshold(table: np.ndarray, cost) -> tuple[float, float]:
        totals = table[:, mask].sum(axis=1)
        # the middle of a plateau, not a lucky peak: each threshold judged with two neighbours on each side
        smooth = np.convolve(np.pad(totals, 2, mode="edge"), np.ones(5) / 5, mode="valid")
        i = int(np.argmax(smooth))
        return normalised_raw(totals[i], windows, cost), float(THRESHOLDS[i])

    key = max(scores, key=lambda k: best_threshold(scores[k]["standard"], costs["standard"])[0])
    return key, {prof: best_threshold(scores[key][prof], cost)[1] for prof, cost in costs.items()}


def evaluate(scores: dict, files: list[CachedFile], mask: np.ndarray, key: tuple, thr: dict, costs: dict) -> dict:
    windows = sum(f.prep.windows for f, m in zip(files, mask, strict=True) if m)
    out = {}
    for prof, cost in costs.items():
        ti = THRESHOLDS.index(thr[prof])
        out[prof] = normalised_raw(scores[key][prof][ti, mask].sum(), windows, cost)
    return out


def setting(key: tuple) -> dict:
    return {"features": key[0], "surprise_cap": key[1], "short": key[2], "hold_samples": key[3]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="datasets folder holding nab/ (default $VERL_OPS_DATASETS or ../shared/datasets; benchmarks/DATASETS.md)")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "verl-ops" / "nab_cv"))
    ap.add_argument("--json", action="store_true", help="every grid point's in-sample score as JSON too")
    args = ap.parse_args(argv)
    data = data_dir(args.data, "nab")
    costs = load_profiles(data)
    files = load_all(data, Path(args.cache))
    scores = grid_scores(files, costs)
    folder = np.array([f.name.split("/")[0] for f in files])
    everything = np.ones(len(files), bool)
    if args.json:
        for key in scores:
            k, thr = choose({key: scores[key]}, files, everything, costs)
            emit({**setting(key), "thresholds": thr,
                  **{p: round(v, 1) for p, v in evaluate(scores, files, everything, key, thr, costs).items()}})
    folds, total = [], {p: 0.0 for p in costs}
    for train in FOLDERS:
        tr, te = folder == train, folder != train
        key, thr = choose(scores, files, tr, costs)
        for prof in costs:
            ti = THRESHOLDS.index(thr[prof])
            total[prof] += scores[key][prof][ti, te].sum()
        folds.append({"tuned_on": train, **setting(key), "thresholds": thr,
                      "train": {p: round(v, 1) for p, v in evaluate(scores, files, tr, key, thr, costs).items()},
                      "test": {p: round(v, 1) for p, v in evaluate(scores, files, te, key, thr, costs).items()}})
    windows = sum(f.prep.windows for f in files)
    cv = {p: round(normalised_raw(total[p], windows, costs[p]), 1) for p in costs}
    key, thr = choose(scores, files, everything, costs)
    inside = {p: round(v, 1) for p, v in evaluate(scores, files, everything, key, thr, costs).items()}
    emit({"cv": cv, "in_sample": inside,
          "chosen": {**setting(key), "thresholds": thr}, "folds": folds})
    return 0


if __name__ == "__main__":
    sys.exit(main())
