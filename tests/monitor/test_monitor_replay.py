"""`verl-monitor replay` end to end: CSV and query_range inputs, Alertmanager-shaped JSON lines with
RFC 3339 times from the data, plots next to the output, bad input, and --notify-config delivery."""

from __future__ import annotations

import csv
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import yaml
from monitor_scenarios import T0, times

from monitor.cli import main

STEP = 30.0


def dataflow_collapse_csv(path: Path) -> None:
    """Reward model OOM, then a rollout worker crash, then the buffer collapses, on gpu-08."""
    t = times(1800, STEP)
    rows = []
    for ts in t:
        k = ts - T0
        rows += [
            (ts, "verl_oom_events_total", 1.0 if k >= 600 else 0.0, "reward", "", "gpu-08", ""),
            (ts, "verl_rollout_worker_restarts_total", 1.0 if k >= 630 else 0.0, "", "", "gpu-08", ""),
            (ts, "verl_rollout_buffer_size", 1000.0 if k >= 660 else 5000.0, "", "train", "gpu-08", ""),
            (ts, "verl_config_info", 1.0, "", "", "gpu-08", "64"),
            (ts, "verl_kl_divergence", 0.02, "", "", "gpu-01", ""),
        ]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "name", "value", "component", "stage", "node", "reward_batch_size"])
        w.writerows(rows)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_csv_replay_writes_alertmanager_shaped_records(tmp_path: Path) -> None:
    inp, out = tmp_path / "in.csv", tmp_path / "out.jsonl"
    dataflow_collapse_csv(inp)
    assert main(["replay", "--input", str(inp), "--output", str(out), "--cluster", "llama3"]) == 0
    recs = read_jsonl(out)
    assert {r["kind"] for r in recs} == {"alert"}
    firing = {r["labels"]["alertname"]: r for r in recs if r["status"] == "firing"}
    assert set(firing) == {"RewardModelOOM", "RolloutWorkerCrash", "RolloutBufferDrop"}
    oom = firing["RewardModelOOM"]
    assert oom["labels"] == {"alertname": "RewardModelOOM", "severity": "P1", "cluster": "llama3",
                             "node": "gpu-08", "component": "reward"}
    assert oom["startsAt"] == "2026-01-01T00:10:00Z" and oom["endsAt"] == "0001-01-01T00:00:00Z"
    assert len(oom["fingerprint"]) == 16 and oom["annotations"]["runbook"]
    resolved = [r for r in recs if r["status"] == "resolved" and r["labels"]["alertname"] == "RewardModelOOM"]
    assert len(resolved) == 1 and resolved[0]["endsAt"] == "2026-01-01T00:15:00Z"  # 5 min window passed
    assert resolved[0]["fingerprint"] == oom["fingerprint"]


def test_query_range_replay_with_drift_plot(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    t = times(3 * 3600, 10.0)
    kl = 0.02 + 0.06 * np.clip((t - T0 - 3600) / 3600, 0, 1) + rng.normal(0, 0.01, len(t))
    vals = [[float(a), f"{b:.6f}"] for a, b in zip(t, kl, strict=True)]
    vals[50][1] = "NaN"
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "verl_kl_divergence", "instance": "gpu-01:8000", "job": "verl"}, "values": vals}]}}
    inp, out = tmp_path / "range.json", tmp_path / "out.jsonl"
    inp.write_text(json.dumps(doc))
    assert main(["replay", "--input", str(inp), "--output", str(out)]) == 0
    hits = [r for r in read_jsonl(out) if r["labels"]["alertname"] == "KLDriftDetected"]
    assert hits and hits[0]["labels"]["node"] == "gpu-01"
    plot = Path(hits[0]["annotations"]["plot"])
    assert plot.parent == tmp_path / "out-plots" and plot.read_bytes()[:4] == b"\x89PNG"


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--input", str(tmp_path / "missing.csv")]) == 2
    bad = tmp_path / "bad.csv"
    bad.write_text("time,metric,v\n1,x,2\n")
    assert main(["replay", "--input", str(bad)]) == 2
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - {alert: X, severity: P9, select: up, detector: {type: threshold}}\n")
    assert main(["replay", "--input", str(bad), "--rules", str(rules)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3
    assert "missing.csv" in err[0] and "timestamp,name,value" in err[1] and "severity" in err[2]


class Hook:
    def __init__(self) -> None:
        self.posts: list[dict] = []
        posts = self.posts

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:
                posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/hook"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.mark.slow
def test_notify_config_delivers_incident_and_drains(tmp_path: Path) -> None:
    hook = Hook()
    try:
        inp, out = tmp_path / "in.csv", tmp_path / "out.jsonl"
        dataflow_collapse_csv(inp)
        cfg = tmp_path / "alerting.yaml"
        cfg.write_text(yaml.safe_dump({"receivers": [{"name": "hook", "type": "webhook", "url": hook.url}],
                                       "route": {"receiver": "hook", "group_by": ["alertname", "node"],
                                                 "group_wait": "0s"}}))
        assert main(["replay", "--input", str(inp), "--output", str(out), "--notify-config", str(cfg)]) == 0
        recs = read_jsonl(out)
    finally:
        hook.close()
    incidents = [r for r in recs if r["kind"] == "incident"]
    assert [i["labels"]["alertname"] for i in incidents][:1] == ["DataflowCollapse"]
    assert incidents[0]["labels"]["node"] == "gpu-08"
    # the suggestion quotes the live reward_batch_size the replayed verl_config_info series carried
    assert "reward_batch_size from 64" in incidents[0]["annotations"]["suggestion"]
    notes = [r for r in recs if r["kind"] == "notification"]
    assert notes and all(n["status"] == "delivered" and n["receiver"] == "hook" for n in notes)
    delivered = {fp for n in notes for fp in n["fingerprints"]}
    assert incidents[0]["fingerprint"] in delivered
    assert hook.posts, "the webhook received nothing"


def test_notify_config_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = tmp_path / "in.csv"
    dataflow_collapse_csv(inp)
    cfg = tmp_path / "alerting.yaml"
    cfg.write_text("receivers: []\n")
    assert main(["replay", "--input", str(inp), "--notify-config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "alerting.yaml" in err
