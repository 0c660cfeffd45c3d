"""Sources: real fixtures (dcgm-exporter, nvidia-smi dmon), verl JSONL key map, Prometheus API
chunking against a loopback server, Alertmanager payloads, and the store's caps and units."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from monitor.model import Sample, SourceBatch, resolve_node
from monitor.series.store import SeriesStore, StoreLimits
from monitor.sources.alertmanager import PayloadError, parse_webhook
from monitor.sources.dmon import DmonParser
from monitor.sources.prom_api import chunks, query_range
from monitor.sources.prom_text import parse_exposition
from monitor.sources.relabel import relabel
from monitor.sources.verl_jsonl import JsonlTail

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_dcgm_fixture_parses_with_node_from_hostname_and_units_normalised() -> None:
    text = (FIX / "dcgm-exporter-sample.prom").read_text()
    batch = parse_exposition(text, 100.0, "dcgm", None, {"job": "dcgm"})
    assert not batch.errors
    by_name = {s.name: s for s in batch.samples}
    free = by_name["DCGM_FI_DEV_FB_FREE"]
    assert free.labels["node"] == "i-030791dc5a37cd257" and free.value == 22563
    relabel(batch)  # the source edge: MiB -> bytes, before the batch leaves the source
    assert {s.name: s for s in batch.samples}["DCGM_FI_DEV_FB_FREE"].value == 22563 * 1024 * 1024
    util = SourceBatch("dcgm", [Sample("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}, 87.0, 1.0)])
    relabel(util)
    assert util.samples[0].value == pytest.approx(0.87)  # percent -> ratio
    store = SeriesStore()
    s = store.get_or_create(free.name, free.labels)
    assert s is not None and s.append(free.t, 5.0) == 5.0  # the store keeps what the source gave it


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
    node, job = ("node", "gpu-08"), ("job", "verl_jsonl")
    # actor/ppo_kl is the size of one policy update, not the KL to the reference (issue 14)
    assert got[("verl_jsonl_actor_ppo_kl", (job, node))] == 0.03
    assert ("verl_kl_divergence", (job, node)) not in got
    assert got[("verl_reward_mean", (job, node))] == 0.4
    assert got[("verl_actor_tokens_per_second", (job, node, ("scope", "per_gpu")))] == 11000.0
    assert got[("verl_stage_seconds", (job, node, ("stage", "rollout")))] == 12.5
    assert got[("verl_stage_seconds", (job, node, ("stage", "actor_update")))] == 3.0
    assert got[("verl_grad_norm", (job, ("model", "actor"), node))] == 1.5
    assert got[("verl_global_step", (job, node))] == 7
    assert got[("verl_jsonl_response_length_mean", (job, node))] == 210.0
    assert b.errors == {"malformed_json": 1}
    with f.open("a") as fh:  # the half-written line completes
        fh.write('kl": 0.05}}\n')
    b2 = tail.poll(1010.0)
    assert [s.value for s in b2.samples if s.name == "verl_jsonl_actor_ppo_kl"] == [0.05]


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
        async def run() -> SourceBatch:
            async with httpx.AsyncClient() as c:
                return await query_range(c, f"http://127.0.0.1:{srv.server_address[1]}", "verl_kl_divergence",
                                         0, 10800, 15, 3600)

        b = asyncio.run(run())
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


# -- fast exposition parser vs prometheus_client's ------------------------------------------------------

EDGE_EXPOSITION = "\n".join([
    "# HELP x_total A counter with a creation time.",
    "# TYPE x_total counter",
    'x_total{a="1"} 3',
    'x_created{a="1"} 1.7e9',
    "# TYPE plain counter",
    "plain 4",
    "plain_created 5",
    "# TYPE h histogram",
    'h_bucket{le="0.5"} 1',
    'h_bucket{le="+Inf"} 2',
    "h_count 2",
    "h_sum 0.7",
    "# TYPE s summary",
    's{quantile="0.5"} 1.5',
    "s_count 3",
    "s_sum 4",
    "# a free comment",
    r'esc{path="C:\\dir\\x",q="say \"hi\"",nl="a\nb",other="x\ty"} 1',
    'spaced {a="b"}   2  ',
    "   leading_ws 2",
    "nolabels 7 1700000000000",
    "tabbed\t8",
    "big 18446744073709551615",
    "sci 1.5e+06",
    "neg -0.25",
    "nan_val NaN",
    "inf_val +Inf",
    "ninf -Inf",
    'braces{a="x}y",b="c,d"} 1',
    'trailing_comma{a="1",} 2',
    "empty{} 3",
    "\r",
    "# TYPE g gauge",
    "g 1",
    "untyped_after 4",
    "",
])


def _flat(batch: object) -> list[tuple[str, tuple[tuple[str, str], ...], float, float]]:
    return [(s.name, tuple(sorted(s.labels.items())), s.value, s.t) for s in batch.samples]  # type: ignore[attr-defined]


def _reference(text: str) -> object:
    """The previous path: prometheus_client's parser over the whole body (what OpenMetrics still takes)."""
    return parse_exposition(text + "# EOF\n", 100.0, "t", "n1", {"job": "j"})


@pytest.mark.parametrize("text", [EDGE_EXPOSITION, (FIX / "dcgm-exporter-sample.prom").read_text()],
                         ids=["edge-cases", "dcgm-fixture"])
def test_fast_parser_yields_the_same_samples_as_prometheus_client(text: str) -> None:
    fast, ref = parse_exposition(text, 100.0, "t", "n1", {"job": "j"}), _reference(text)
    assert _flat(fast) == _flat(ref)
    assert fast.errors == ref.errors  # type: ignore[attr-defined]
    assert len(fast.samples) > 20


def test_fast_parser_details() -> None:
    got = {s.name: s for s in parse_exposition(EDGE_EXPOSITION, 100.0, "t", None, {}).samples}
    assert got["esc"].labels["path"] == "C:\\dir\\x" and got["esc"].labels["q"] == 'say "hi"'
    assert got["esc"].labels["nl"] == "a\nb" and got["esc"].labels["other"] == "x\\ty"
    assert got["plain_total"].value == 4 and "plain" not in got and "plain_created" not in got
    assert "x_created" not in got and got["x_total"].value == 3
    assert got["nolabels"].t == 1700000000.0 and got["g"].t == 100.0
    assert "nan_val" not in got and "inf_val" not in got
    assert got["braces"].labels["a"] == "x}y"


def test_fast_parser_handles_the_dcgm_fixture_without_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    import monitor.sources.prom_text as pt

    def no_fallback(line: str) -> None:
        raise AssertionError(f"fell back to prometheus_client on {line!r}")

    monkeypatch.setattr(pt, "_parse_line_prometheus_client", no_fallback)
    batch = parse_exposition((FIX / "dcgm-exporter-sample.prom").read_text(), 1.0, "dcgm", None, {})
    assert not batch.errors and len(batch.samples) > 20


def test_fast_parser_counts_malformed_lines_and_keeps_the_rest() -> None:
    text = "\n".join(['good{a="1"} 1', 'bad{a="1" 3', "novalue", "under 1_000", 'dup{a="1",a="2"} 1',
                      "# TYPE c counter", "c 2", "# TYPE c bogus", "after 5", ""])
    batch = parse_exposition(text, 10.0, "t", "n", {})
    assert batch.errors == {"malformed_line": 5}
    assert [(s.name, s.value) for s in batch.samples] == [("good", 1.0), ("c_total", 2.0), ("after", 5.0)]
    assert batch.errors.get("nonfinite_value") is None
    assert parse_exposition("nan_val NaN\n", 1.0, "t", "n", {}).errors == {"nonfinite_value": 1}


def test_scrape_offsets_are_deterministic_and_spread_over_the_interval() -> None:
    from monitor.sources.scrape import scrape_offset

    urls = [f"http://127.0.0.1:9400/gpu-{n:03d}/{k}/metrics" for n in range(125) for k in ("dcgm", "trainer")]
    offsets = [scrape_offset(u, 5.0) for u in urls]
    assert offsets == [scrape_offset(u, 5.0) for u in urls]
    assert all(0.0 <= o < 5.0 for o in offsets)
    per_second = [sum(1 for o in offsets if s <= o < s + 1) for s in range(5)]
    assert min(per_second) >= 30, per_second  # about 50 each: no burst of all 250 at one instant
