"""Time to diagnosis in replay: the four recorded fault scenarios of issue 15 (and their healthy twins)
through ``verl-monitor replay --input CSV --notify-config FILE`` with the production default rules.

    .venv/bin/python benchmarks/diagnosis_replay.py [--seeds 3] [--json]

Per scenario and seed: ``diagnose_s`` = simulated seconds from the fault's onset to the first incident
record (its ``firedAt``) whose root cause and suggestion match the scenario's cause and fix; for the
twins, ``claims`` lists any incident naming that cause anyway (must stay empty). A local webhook
receives the pages. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import emit, fail
from benchmarks.diagnosis_scenarios import (
    T0,
    buffer_scenario,
    kl_scenario,
    loader_scenario,
    reward_scenario,
    write_csv,
)
from monitor.cli import main as monitor_main

# name -> (generator, fault kwargs, twin kwargs, onset s after T0, cause regex, fix regex)
SCENARIOS = {
    "kl_coef_zeroed": (kl_scenario, {}, {"zeroed": False}, 90 * 60,
                       r"kl_coef = 0\.0 since step \d+ \(verl_kl_coef; config says 0\.2\)", r"Set kl_coef back to 0\.2"),
    "reward_model_broken": (reward_scenario, {}, {"broken": False}, 40 * 60,
                            r"reward model fails to load", r"load_reward_model\(.*\)\.score\(\[\.\.\.\]\)"),
    "unbounded_buffer": (buffer_scenario, {}, {"unbounded": False}, 0,
                         r"rollout_buffer_max_size = -1 \(unbounded", r"Set rollout_buffer_max_size: 50000 \(now -1\)"),
    "data_loading": (loader_scenario, {}, {"loader_bound": False}, 20 * 60,
                     r"dataloader time per step rose .*data loading starves", r"data\.num_workers: 8 \(now 2\)"),
}


class _Hook(BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def replay(columns: list, work: Path, hook_url: str) -> list[dict]:
    inp, out, cfg = work / "in.csv", work / "out.jsonl", work / "alerting.yaml"
    cfg.write_text(yaml.safe_dump({"receivers": [{"name": "hook", "type": "webhook", "url": hook_url}],
                                   "route": {"receiver": "hook", "group_wait": "0s"}}))
    write_csv(inp, columns)
    if monitor_main(["replay", "--input", str(inp), "--output", str(out), "--notify-config", str(cfg)]) != 0:
        raise RuntimeError("replay did not drain")
    return [json.loads(x) for x in out.read_text().splitlines()]


def first_match(recs: list[dict], cause: str, fix: str) -> float | None:
    for r in recs:
        if r["kind"] == "incident" and r["status"] == "firing" and re.search(cause, r.get("root_cause", "")) \
                and re.search(fix, r.get("suggestion", "")):
            return datetime.fromisoformat(r["firedAt"].replace("Z", "+00:00")).timestamp()
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="random seeds per scenario (default 3)")
    ap.add_argument("--json", action="store_true", help="per-run lines as JSON too")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        return fail(f"--seeds {args.seeds}: expected a count >= 1")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{srv.server_address[1]}/hook"
    results: dict[str, dict] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="verl-diag-") as tmp:
            for name, (gen, fault, twin, onset, cause, fix) in SCENARIOS.items():
                delays, claims = [], []
                for seed in range(args.seeds):
                    hit = first_match(replay(gen(np.random.default_rng(seed), **fault), Path(tmp), hook), cause, fix)
                    delays.append(None if hit is None else round(hit - (T0 + onset), 1))
                    twin_recs = replay(gen(np.random.default_rng(seed), **twin), Path(tmp), hook)
                    claims += [f"seed {seed}: {r['root_cause']}" for r in twin_recs
                               if r["kind"] == "incident" and re.search(cause, r.get("root_cause", ""))]
                    if args.json:
                        emit({"scenario": name, "seed": seed, "diagnose_s": delays[-1]})
                results[name] = {"diagnose_s": delays, "diagnosed": sum(d is not None for d in delays),
                                 "twin_claims": claims}
    finally:
        srv.shutdown()
        srv.server_close()
    for name, r in results.items():
        print(f"{name:22s} diagnosed {r['diagnosed']}/{args.seeds}  diagnose_s {r['diagnose_s']}  "
              f"twin claims {len(r['twin_claims'])}", file=sys.stderr)
    emit({"benchmark": "diagnosis_replay", "rules": "production defaults", "seeds": args.seeds,
          "scenarios": results,
          "all_diagnosed": all(r["diagnosed"] == args.seeds for r in results.values()),
          "twin_claims": sum(len(r["twin_claims"]) for r in results.values())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
