"""One noisy exporter, long and hostile alert text, many silences, slow clients (issue 24).

    python benchmarks/noisy_exporter.py [--json] [--slowloris 50] [--hold 30]

Each part measures the old behaviour and the new one in the same run:

1. **label churn beside a healthy trainer**: an exporter adds 4000 new ``pod=<uuid>`` series of
   ``verl_gpu_memory_used_bytes`` (``same_metric``) or of its own 20 metrics (``other_metric``) per 5 s
   scrape for 2 min (default limits: 20 000 series, 2000 per metric);
   at 60 s the trainer's new ``verl_gpu_memory_used_bytes{gpu="0"}`` reads 70 GB under a threshold rule.
   *before*: one shared pool (every series in one budget, as the store was); *after*: budgets per
   source (fair share, per-metric cap per source, eviction). Reports whether the trainer's series was
   stored and alerted, and the churn's ingest cost per scrape.
2. **a trainer whose clock is 1 h behind** answering every scrape for 30 min: TrainerDown alerts raised.
   *before*: stamps honoured as they come; *after*: the scrape path (stamps out of bounds refused,
   liveness from the scrape).
3. **message sizes per robot**: digests of hostile alerts (1000 one-line alerts; 60 alerts full of quotes
   and backslashes) rendered for DingTalk / Feishu / WeCom: largest encoded size against the documented
   limit (DingTalk 20 000 B text, Feishu 20 KB body, WeCom 4096 B content). *before*: budget on the
   text; *after*: fitted on the encoded request. (Forged lines and markup are asserted by
   tests/alerting/test_message_fit.py.)
4. **8000 silences**: cost of one flush's silence matching (40 alerts). *before*: re-read and re-parse all,
   scan each; *after*: the index.
5. **slowloris**: ``--slowloris`` connections dripping the request line (a byte every 2 s) against the
   old listener (per-read timeout only) and the new one, both at once: connections still held after
   ``--hold`` s, and /healthz latency meanwhile.

Last line with --json: one JSON object with all figures.
"""

from __future__ import annotations

import argparse
import json
import socket
import sqlite3
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from alerting.clock import SimulatedClock  # noqa: E402
from alerting.config import parse_config  # noqa: E402
from alerting.matchers import all_match  # noqa: E402
from alerting.model import Alert, Notification  # noqa: E402
from alerting.notifiers import build_notifier  # noqa: E402
from alerting.notifiers.base import encode  # noqa: E402
from alerting.silence import SilenceStore  # noqa: E402
from alerting.templates import render  # noqa: E402
from monitor.endpoints.api import READ_DEADLINE_S, MonitorAPI  # noqa: E402
from monitor.evaluation.rules import load_rule_files, load_rules  # noqa: E402
from monitor.model import Sample, SourceBatch  # noqa: E402
from monitor.pipeline import Pipeline  # noqa: E402
from monitor.sources.prom_text import refuse_out_of_bounds  # noqa: E402

T0 = 1_700_000_000.0
GB = 1e9


# -- 1. label churn ------------------------------------------------------------------------------------
def churn(shared_pool: bool, tmp: Path, metric: str) -> dict[str, Any]:
    rule = tmp / "mem.yaml"
    rule.write_text("rules:\n  - alert: GPUMemoryHigh\n    severity: P1\n    select: verl_gpu_memory_used_bytes\n"
                    "    detector: {type: threshold, op: '>', value: 6.0e10}\n    summary: high\n")
    clock = SimulatedClock(T0)
    pipe = Pipeline(load_rules(rule), clock)
    noisy, trainer = ("", "") if shared_pool else ("noisy", "trainer")
    costs, uid = [], 0
    for step in range(24):  # 2 min at 5 s
        now = T0 + 5 * step
        clock.set(now)
        batch = []
        for _ in range(4000):
            uid += 1
            name = metric if metric.startswith("verl_") else f"{metric}_{uid % 20}"  # 20 names: past the per-metric cap
            batch.append(Sample(name, {"pod": f"{uid:032x}", "node": "n2"}, 1.0, now))
        started = time.perf_counter()
        pipe.ingest(batch, noisy, now)
        costs.append(time.perf_counter() - started)
        if step >= 12:
            pipe.ingest([Sample("verl_gpu_memory_used_bytes", {"gpu": "0", "node": "n1", "job": "verl"}, 70 * GB, now)],
                        trainer, now)
        pipe.tick()
    stored = any(s.labels.get("gpu") == "0" for s in pipe.store)
    alerted = any(a.labels.get("gpu") == "0" for a in pipe.book.firing() + pipe.book.pending())
    out = {"trainer_series_stored": stored, "trainer_alerted": alerted, "series": len(pipe.store),
           "churn_ingest_ms_per_scrape": round(1000 * statistics.median(costs), 2)}
    pipe.close()
    return out


# -- 2. a trainer clock an hour behind -----------------------------------------------------------------
def clock_behind(new: bool) -> int:
    clock = SimulatedClock(T0)
    pipe = Pipeline(load_rule_files(None), clock)
    raised = set()
    for i in range(30):
        now = T0 + 60 * i
        clock.set(now)
        stamp = now if i < 2 else now - 3600
        batch = SourceBatch("trainer", [Sample("verl_global_step", {"job": "verl", "node": "n1"}, float(i), stamp)])
        if new:
            refuse_out_of_bounds(batch, now)
            pipe.ingest(batch.samples, "trainer", now)
            pipe.touch(batch.refused, now)
        else:
            pipe.ingest(batch.samples, "trainer")
        pipe.ingest([Sample("up", {"job": "verl", "node": "n1"}, 1.0, now)], "trainer", now if new else None)
        pipe.tick()
        raised |= {a.fingerprint for a in pipe.book.firing() + pipe.book.pending() if a.name == "TrainerDown"}
    pipe.close()
    return len(raised)


# -- 3. message sizes ----------------------------------------------------------------------------------
LIMITS = {"dingtalk": 20000, "feishu": 20 * 1024, "wecom": 4096}


def wire(kind: str, body: dict) -> int:
    if kind == "dingtalk":
        return max(len(body["markdown"]["text"].encode()), len(encode(body)))
    if kind == "wecom":
        return len(body["markdown"]["content"].encode())
    return len(encode(body))


def messages() -> dict[str, Any]:
    flavours = {"many_lines": (1000, "x"), "escapes": (60, 'q"\\' * 60 + " 中文"),
                "hostile": (200, "a\nRoot Cause: forged\n@all <@all> [x](http://evil.example) \u202e")}
    out: dict[str, Any] = {}
    for kind in LIMITS:
        raw = {"name": kind, "type": kind, "url": "http://127.0.0.1:1/x", **({"secret": "s"} if kind != "wecom" else {})}
        cfg = parse_config({"receivers": [raw]}).receivers[kind]
        n = build_notifier(cfg)
        before = after = 0
        for count, summary in flavours.values():
            alerts = [Alert({"alertname": f"GPUXidError{i}", "severity": "P1", "node": "n1"}, {"summary": summary},
                            starts_at=T0) for i in range(count)]
            notes = [Notification(kind, "g", {}, "firing", alerts, [a.fingerprint for a in alerts], T0)]
            link = "http://127.0.0.1:9105/api/v1/alerts"
            old = render(notes, max_bytes=n.max_bytes, link=link)
            before = max(before, wire(kind, n.build(old, notes)))

            def again(b: int, notes: list[Notification] = notes, link: str = link, kind: str = kind) -> Any:
                return render(notes, max_bytes=b, link=link, dialect=kind)
            fitted = n.fit(again(n.max_bytes), notes, False, again)
            after = max(after, wire(kind, n.build(fitted, notes)))
        n.close()
        out[kind] = {"limit": LIMITS[kind], "before_max_bytes": before, "after_max_bytes": after}
    return out


# -- 4. silences ---------------------------------------------------------------------------------------
def silences(count: int = 8000, alerts: int = 40, rounds: int = 20) -> dict[str, float]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE silences (id TEXT PRIMARY KEY, matchers TEXT, starts_at REAL, ends_at REAL, "
                 "created_by TEXT, comment TEXT, created_at REAL)")
    store = SilenceStore(conn)
    for i in range(count):
        store.add([f'node="gpu-{i:05d}"', 'alertname="GPUXidError"'], T0, T0 + 86400)
    probe = [Alert({"alertname": "GPUXidError", "node": f"gpu-{i * 97:05d}"}) for i in range(alerts)]
    now = T0 + 10

    def before() -> int:
        active = [s for s in store.all() if s.state(now) == "active"]
        return sum(any(all_match(s.matchers, a.labels) for s in active) for a in probe)

    def after() -> int:
        mute = store.muting(now)
        return sum(mute(a) for a in probe)

    assert before() == after()
    timings = {}
    for name, fn in (("before", before), ("after", after)):
        started = time.perf_counter()
        for _ in range(rounds):
            fn()
        timings[name] = (time.perf_counter() - started) / rounds
    return {"silences": count, "before_ms_per_flush": round(1000 * timings["before"], 2),
            "after_ms_per_flush": round(1000 * timings["after"], 3),
            "speedup": round(timings["before"] / timings["after"], 1)}


# -- 5. slowloris --------------------------------------------------------------------------------------
class OldHandler(BaseHTTPRequestHandler):
    timeout = READ_DEADLINE_S  # what the API had: a per-read socket timeout

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def slowloris(conns: int, hold_s: float) -> dict[str, Any]:
    old = ThreadingHTTPServer(("127.0.0.1", 0), OldHandler)
    old.daemon_threads = True
    threading.Thread(target=old.serve_forever, daemon=True).start()
    daemon = SimpleNamespace(health=lambda: {"status": "ok", "reasons": []})
    new = MonitorAPI(daemon, "127.0.0.1", 0, None)
    new.start()
    ports = {"before": old.server_address[1], "after": new.port}
    socks: dict[str, list[socket.socket]] = {k: [] for k in ports}
    for _ in range(conns):  # paced: the old server's accept backlog is 5
        for k, port in ports.items():
            socks[k].append(socket.create_connection(("127.0.0.1", port)))
        time.sleep(0.01)
    closed_at: dict[str, list[float]] = {k: [] for k in ports}
    alive = {k: set(range(conns)) for k in ports}
    latencies = []
    started = time.monotonic()
    while time.monotonic() - started < hold_s:
        for k, ss in socks.items():
            for i in list(alive[k]):
                try:
                    ss[i].sendall(b"G")
                except OSError:
                    alive[k].discard(i)
                    closed_at[k].append(time.monotonic() - started)
        t = time.perf_counter()
        ok = httpx.get(f"http://127.0.0.1:{ports['after']}/healthz", timeout=5).status_code == 200
        latencies.append((time.perf_counter() - t) if ok else float("inf"))
        time.sleep(2.0)
    for ss in socks.values():
        for s in ss:
            s.close()
    old.shutdown()
    old.server_close()
    new.stop()
    return {"connections": conns, "hold_s": hold_s,
            "before_held_at_end": len(alive["before"]), "after_held_at_end": len(alive["after"]),
            "after_all_closed_by_s": round(max(closed_at["after"]), 1) if len(closed_at["after"]) == conns else None,
            "healthz_max_ms_while_held": round(1000 * max(latencies), 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true")
    p.add_argument("--slowloris", type=int, default=50)
    p.add_argument("--hold", type=float, default=30.0)
    args = p.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result: dict[str, Any] = {f"churn_{label}": {"before": churn(True, Path(tmp), metric),
                                                     "after": churn(False, Path(tmp), metric)}
                                  for label, metric in (("same_metric", "verl_gpu_memory_used_bytes"),
                                                        ("other_metric", "exporter_pod_info"))}
    result["clock_behind_trainerdown"] = {"before": clock_behind(False), "after": clock_behind(True)}
    result["messages"] = messages()
    result["silences"] = silences()
    result["slowloris"] = slowloris(args.slowloris, args.hold)
    if not args.json:
        for k, v in result.items():
            print(f"{k}: {v}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
