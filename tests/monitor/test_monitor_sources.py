"""Sources: real fixtures (dcgm-exporter, nvidia-smi dmon), verl JSONL key map, Prometheus API
chunking against a loopback server, Alertmanager payloads, and the store's caps and units."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from monitor.model import Sample, resolve_node
from monitor.sources.alertmanager import PayloadError, parse_webhook
from monitor.sources.dmon import DmonParser
from monitor.sources.prom_api import chunks, query_range
from monitor.sources.prom_text import parse_exposition
from monitor.sources.verl_jsonl import JsonlTail
from monitor.store import SeriesStore, StoreLimits

FIX = Path(__file__).parent / "fixtures"


def test_dcgm_fixture_parses_with_node_from_hostname_and_units_normalised() -> None:
    text = (FIX / "dcgm-exporter-sample.prom").read_text()
    batch = parse_exposition(text, 100.0, "dcgm", None, {"job": "dcgm"})
    assert not batch.errors
    by_name = {s.name: s for s in batch.samples}
    free = by_name["DCGM_FI_DEV_FB_FREE"]
    assert free.labels["node"] == "i-030791dc5a37cd257" and free.value == 22563
    store = SeriesStore()
    s = store.get_or_create(free.name, free.labels)
    assert s is not None and s.append(free.t, free.value) == 22563 * 1024 * 1024  # MiB -> bytes
    util = store.get_or_create("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"})
    assert util is not None and util.append(1, 87.0) == pytest.approx(0.87)


def test_node_resolution_order() -> None:
    assert resolve_node({"Hostname": "h", "instance": "i:1"}, "cfg") == "cfg"
    assert resolve_node({"hostname": "h", "instance": "i:1"}) == "h"
    assert resolve_node({"instance": "gpu-08:9400"}) == "gpu-08"
    assert resolve_node({}) == "unknown"


@pytest.mark.parametrize("name,rows,cols", [("nvidia-smi-dmon-pucvmet-sample.txt", 4, 7),
                                            ("nvidia-smi-dmon-sample.txt", 6, 5)])
def test_dmon_fixtures(name: str, rows: int, cols: int) -> None:
    batch = DmonParser("gpu-08").feed((FIX / name).read_text().splitlines(), 0.0)
    assert batch.errors == {}
    assert len(batch.samples) == rows * cols
    fb = [s for s in batch.samples if s.name == "verl_gpu_memory_used_bytes"]
    assert len({s.t for s in fb}) == rows and fb[0].labels == {"gpu": "0", "node": "gpu-08"}
    if name == "nvidia-smi-dmon-sample.txt":
        assert fb[0].value == 239 * 1024 * 1024
        assert [s.value for s in batch.samples if s.name == "verl_gpu_utilization_ratio"][0] == pytest.approx(0.06)


def test_dmon_rows_without_header_or_wrong_width_are_counted() -> None:
    p = DmonParser()
    assert p.feed(["   0  1  2"], 0).errors == {"no_header": 1}
    b = p.feed(["# gpu    sm   fb", "  0  50", "  0  50  1000"], 0)
    assert b.errors == {"malformed_row": 1} and len(b.samples) == 2


def test_verl_jsonl_tail_maps_keys_and_survives_garbage(tmp_path: Path) -> None:
    f = tmp_path / "exp.jsonl"
    lines = [
        {"step": 7, "data": {"actor/ppo_kl": 0.03, "critic/score/mean": 0.4, "perf/throughput": 11000.0,
                             "timing_s/gen": 12.5, "timing_s/update_actor": 3.0, "actor/grad_norm": 1.5,
                             "response_length/mean": 210.0, "note": "text is skipped"}},
    ]
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n{broken json\n" + '{"step": 8, "data": {"actor/ppo_')
    tail = JsonlTail(f, node="gpu-08")
    b = tail.poll(1000.0)
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in b.samples}
    node = ("node", "gpu-08")
    assert got[("verl_kl_divergence", (node,))] == 0.03
    assert got[("verl_reward_mean", (node,))] == 0.4
    assert got[("verl_actor_tokens_per_second", (node,))] == 11000.0
    assert got[("verl_stage_seconds", (node, ("stage", "rollout")))] == 12.5
    assert got[("verl_stage_seconds", (node, ("stage", "actor_update")))] == 3.0
    assert got[("verl_grad_norm", (("model", "actor"), node))] == 1.5
    assert got[("verl_global_step", (node,))] == 7
    assert got[("verl_jsonl_response_length_mean", (node,))] == 210.0
    assert b.errors == {"malformed_json": 1}
    with f.open("a") as fh:  # the half-written line completes
        fh.write('kl": 0.05}}\n')
    b2 = tail.poll(1010.0)
    assert [s.value for s in b2.samples if s.name == "verl_kl_divergence"] == [0.05]


def test_query_range_is_chunked_and_counts_bad_responses() -> None:
    assert chunks(0, 7200, 15, 3600) == [(0, 3600), (3615, 7200)]
    calls: list[dict] = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            q = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
            calls.append(q)
            start = float(q["start"])
            if start > 5000:
                self.send_response(503)
                self.end_headers()
                return
            doc = {"status": "success", "data": {"resultType": "matrix", "result": [
                {"metric": {"__name__": "verl_kl_divergence", "instance": "gpu-01:8000"},
                 "values": [[start, "0.02"], [start + 15, "NaN"]]}]}}
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with httpx.Client() as c:
            b = query_range(c, f"http://127.0.0.1:{srv.server_address[1]}", "verl_kl_divergence", 0, 10800, 15, 3600)
    finally:
        srv.shutdown()
        srv.server_close()
    assert len(calls) == 3 and all(float(c["end"]) - float(c["start"]) <= 3600 for c in calls)
    assert [s.value for s in b.samples] == [0.02, 0.02]
    assert b.samples[0].labels["node"] == "gpu-01"
    assert b.errors == {"nonfinite_value": 2, "http_503": 1}


def test_alertmanager_payload() -> None:
    alerts = parse_webhook({"version": "4", "alerts": [
        {"status": "resolved", "labels": {"alertname": "Custom", "severity": "warning", "Hostname": "n1"},
         "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2026-01-01T00:05:00.5Z"}]}, "c1")
    a = alerts[0]
    assert a.status == "resolved" and a.labels["severity"] == "P2" and a.labels["node"] == "n1"
    assert a.labels["cluster"] == "c1" and a.ends_at - a.starts_at == pytest.approx(300.5)
    with pytest.raises(PayloadError, match="alertname"):
        parse_webhook({"alerts": [{"labels": {}}]}, "c")


def test_store_cardinality_caps_are_counted() -> None:
    dropped: list[str] = []
    store = SeriesStore(StoreLimits(capacity=8, max_series=5, max_series_per_metric=3), on_drop=dropped.append)
    made = [store.get_or_create("m", {"id": str(i)}) for i in range(4)]
    assert made[3] is None and dropped == ["max_series_per_metric"]
    others = [store.get_or_create(f"x{i}", {}) for i in range(3)]
    assert others[2] is None and dropped[-1] == "max_series" and len(store) == 5
    s = made[0]
    assert s is not None
    for i in range(20):
        s.append(float(i), float(i))
    t, v = s.window()
    assert list(t) == [float(i) for i in range(12, 20)]  # ring keeps the newest 8
    assert list(s.window(since=18)[1]) == [18.0, 19.0]


def test_exposition_sample_timestamps_are_kept() -> None:
    b = parse_exposition("verl_global_step 5 1767225600000\n", 1.0, "t", None, {})
    assert b.samples == [Sample("verl_global_step", {"node": "unknown"}, 5.0, 1767225600.0)]


def test_nvml_sampler_maps_device_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: a stand-in for pynvml's calls (names and shapes as nvidia-ml-py documents them)."""
    import types

    class Mem:
        used, total = 30 * 2**30, 80 * 2**30

    class Util:
        gpu = 87

    fake = types.SimpleNamespace(
        NVMLError=RuntimeError, NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda h: Mem(), nvmlDeviceGetUtilizationRates=lambda h: Util(),
        nvmlDeviceGetTemperature=lambda h, kind: 71 if h == 0 else (_ for _ in ()).throw(RuntimeError("lost")))
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    from monitor.sources.nvml import NvmlSampler

    assert NvmlSampler.available()
    batch = NvmlSampler(node="gpu-08").poll(5.0)
    got = {s.name: s.value for s in batch.samples}
    assert got == {"verl_gpu_memory_used_bytes": 30 * 2**30, "verl_gpu_memory_total_bytes": 80 * 2**30,
                   "verl_gpu_utilization_ratio": 0.87, "verl_gpu_temperature_celsius": 71.0}
    assert {s.labels["gpu"] for s in batch.samples} == {"0"} and batch.errors == {"nvml_error": 1}
