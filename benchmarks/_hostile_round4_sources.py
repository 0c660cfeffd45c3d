"""Issue 45's source and log cases, each measured in a fresh interpreter against a checkout (the same
interface as ``_hostile_round3``): ``python benchmarks/hostile_input.py --round4 [--tree CHECKOUT] --json``.
Run against an older checkout, the same snippets give the "before" figures.

- ``log_restored``: ``state.db`` restored from an older copy under a running engine's cursor, then a new
  alert: taken by the engine, queued for a page;
- ``log_bad_row``: one transition-log row that is not JSON between two alerts: takes that failed of 5,
  alerts taken;
- ``file_sd_targets``: a file_sd JSON file of ``--sd-targets`` targets: targets kept, seconds to read it,
  peak RSS (MB);
- ``file_sd_yaml``: a ``--sd-yaml-mb`` MB YAML file_sd file read by a polling source: the longest the
  shared event loop stalled (s), seconds until its targets were in or it was refused, what was said;
- ``ray_body``: a Ray dashboard answering ``--ray-mb`` MB: peak RSS, what the round did;
- ``ray_bad_record``: ``null`` and ``end_time_ms: "abc"`` records beside 3 real deaths: deaths read;
- ``ray_storm``: 10 000 deaths at once: death series emitted, and what the series say about the rest;
- ``scrape_repeat``: 300 random scrapes repeating series: rounds where the cached parse keeps another
  value than the uncached one;
- ``unicode_digits``: ``x １２``: samples stored.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks._hostile_round3 import _PEAK, _run

LOG_RESTORED = """
import sqlite3, tempfile
from pathlib import Path
from alerting import translog
from alerting.clock import SimulatedClock
from alerting.engine import AlertEngine
from alerting.translog import TransitionLog
from tests.alerting.helpers import T0, alert, make_config
d = Path(tempfile.mkdtemp()); clock = SimulatedClock(T0)
def open_log(p):
    c = sqlite3.connect(str(p), isolation_level=None, check_same_thread=False); translog.create(c)
    return TransitionLog(c)
log = open_log(d / "state.db")
for a in (alert("Old"), alert("Old", status="resolved")):
    translog.append(log.conn, a, T0)
log.conn.execute("VACUUM INTO ?", (str(d / "old.db"),))
for i in range(3):
    translog.append(log.conn, alert(f"Mid{i}"), T0); translog.append(log.conn, alert(f"Mid{i}", status="resolved"), T0)
cfg = make_config([{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}])
e = AlertEngine(cfg, d / "alerting.db", clock); e.follow(log); e.catch_up(); e.close(); log.conn.close()
old = open_log(d / "old.db")
e = AlertEngine(cfg, d / "alerting.db", clock); e.follow(old)
translog.append(old.conn, alert("New"), T0 + 10)
e.catch_up(); clock.advance(31.0); e.tick()
queued = {a.name for r in e.outbox.heads_due(clock.now() + 1e9) for a in r.notification.alerts}
events = getattr(e.health, "events", lambda: [])()
RESULT = {"new_alert_taken": "New" in {a["labels"]["alertname"] for a in e.views.alerts()}, "paged": "New" in queued,
          "named": [x[:90] for x in events]}
e.close()
"""

LOG_BAD_ROW = """
import sqlite3, tempfile
from pathlib import Path
from alerting import translog
from alerting.clock import SimulatedClock
from alerting.engine import AlertEngine
from alerting.translog import TransitionLog
from tests.alerting.helpers import T0, alert, make_config
d = Path(tempfile.mkdtemp()); clock = SimulatedClock(T0)
c = sqlite3.connect(str(d / "state.db"), isolation_level=None, check_same_thread=False); translog.create(c)
log = TransitionLog(c)
e = AlertEngine(make_config([{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}]), d / "a.db", clock)
e.follow(log); e.catch_up()
translog.append(c, alert("Before"), T0)
c.execute("INSERT INTO alert_events (fingerprint, status, starts_at, at, record) VALUES ('x','firing',1,1,'{oops')")
translog.append(c, alert("After"), T0)
failed = 0
for _ in range(5):
    try:
        e.catch_up()
    except Exception as exc:
        failed += 1; err = type(exc).__name__
RESULT = {"takes_failed_of_5": failed, "taken": sorted(a["labels"]["alertname"] for a in e.views.alerts())}
e.close()
"""

FILE_SD_TARGETS = _PEAK + """
import json, os, tempfile, time
from pathlib import Path
from monitor.sources.file_sd import FileSDConfig, FileSDSource
n = int(os.environ["N"]); d = Path(tempfile.mkdtemp()); p = d / "sd.json"
p.write_text(json.dumps([{"targets": [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:9100" for i in range(n)],
                          "labels": {"job": "ray"}}]))
base = PEAK(); src = FileSDSource(FileSDConfig((str(p),), job="ray"), None)
t0 = time.perf_counter(); gone, errors = src.refresh(); s = time.perf_counter() - t0
RESULT = {"file_mb": round(p.stat().st_size / 1e6, 1), "targets_kept": len(src.targets), "read_s": round(s, 2),
          "peak_rss_mb": round(PEAK()), "rss_before_mb": round(base), "said": [str(x)[:120] for x in errors]}
"""

FILE_SD_YAML = """
import asyncio, os, tempfile, time
from pathlib import Path
from monitor.sources.file_sd import FileSDConfig, FileSDSource
mb = float(os.environ["MB"]); d = Path(tempfile.mkdtemp()); p = d / "sd.yaml"
with open(p, "w") as fh:
    i = 0
    while fh.tell() < mb * 1e6:
        fh.write(f"- targets: ['10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:9100']\\n  labels: {{job: ray, n: '{i}'}}\\n")
        i += 1
src = FileSDSource(FileSDConfig((str(p),), job="ray"), None)
async def main():
    worst, last, stop = 0.0, time.perf_counter(), False
    async def ticker():
        nonlocal worst, last
        while not stop:
            await asyncio.sleep(0.01); now = time.perf_counter(); worst = max(worst, now - last - 0.01); last = now
    t = asyncio.create_task(ticker()); t0 = time.perf_counter()
    read = getattr(src, "refresh_off_loop", None); said = []
    while not src.targets and time.perf_counter() - t0 < 300:
        _, errors = (await read()) if read is not None else src.refresh()
        said += [str(e).split(": ", 1)[-1][:100] for e in errors]
        if any("still reading" not in x for x in said):
            break  # refused: the answer is in
        await asyncio.sleep(0.05)
    took = time.perf_counter() - t0; stop = True; await t
    return worst, took, said
worst, took, said = asyncio.run(main())
RESULT = {"file_mb": round(p.stat().st_size / 1e6, 1), "groups": i, "loop_stall_max_s": round(worst, 2),
          "done_in_s": round(took, 2), "targets_kept": len(src.targets), "said": said[-1:]}
"""

RAY_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
mb = int(sys.argv[1])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
        try:
            if "/workers" in self.path:
                self.wfile.write(b'{"result":true,"data":{"result":{"result":[]}}}'); return
            self.wfile.write(b'{"result":true,"data":{"result":{"result":['); sent, i = 0, 0
            while sent < mb << 20:
                rec = (b"," if i else b"") + b'{"actor_id":"a%d","class_name":"X","state":"DEAD","pid":%d,"node_id":"n","death_cause":{"actor_died_error_context":{"reason":"RAY_KILL","error_message":"' % (i, i) + b"x" * 900 + b'"}}}'
                self.wfile.write(rec); sent += len(rec); i += 1
            self.wfile.write(b"]}}}")
        except OSError:
            pass
s = HTTPServer(("127.0.0.1", 0), H); print(s.server_address[1], flush=True); s.serve_forever()
"""

RAY_BODY = _PEAK + """
import asyncio, os, subprocess, sys, time
import httpx
from alerting.clock import SystemClock
from monitor.sources.ray_state import RayConfig, RayStateSource
srv = subprocess.Popen([sys.executable, "-c", os.environ["SERVER"], os.environ["MB"]], stdout=subprocess.PIPE, text=True)
url = f"http://127.0.0.1:{srv.stdout.readline().strip()}"
base = PEAK(); t0 = time.perf_counter()
async def go():
    async with httpx.AsyncClient() as c:
        src = RayStateSource(RayConfig(url, token="t", timeout=120.0), c)
        try:
            r = await src.poll(SystemClock())
            return f"read: {len(src.deaths)} deaths, {len(src.done)} done"
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc)[:120]}"
try:
    what = asyncio.run(go())
finally:
    srv.kill()
RESULT = {"s": round(time.perf_counter() - t0, 2), "peak_rss_mb": round(PEAK()), "rss_before_mb": round(base),
          "round": what}
"""

RAY_RECORDS = """
import asyncio, json, os
from pathlib import Path
import httpx
from alerting.clock import SimulatedClock
from monitor.sources.ray_state import RayConfig, RayStateSource
fix = json.loads((Path("tests/fixtures/ray-2.60-state-api-dead.json")).read_text())
actors, workers = fix["actors"]["data"]["result"]["result"], fix["workers"]["data"]["result"]["result"]
died = max(w["end_time_ms"] for w in workers) / 1000
mode = os.environ["MODE"]
if mode == "bad":
    actors = [None, *actors]
    workers = [*workers, {**workers[0], "worker_id": "bad", "pid": 4242, "end_time_ms": "abc", "exit_type": "SYSTEM_ERROR"}]
else:
    actors = [{"actor_id": f"a{i}", "class_name": "RolloutWorker", "pid": 1000 + i, "node_id": f"n{i % 8}",
               "death_cause": {"actor_died_error_context": {"reason": "NODE_DIED"}}} for i in range(10000)]
    workers = []
def answer(records):
    return json.dumps({"result": True, "data": {"result": {"result": records}}}).encode()
def handle(req):
    return httpx.Response(200, content=answer(actors if "/actors" in req.url.path else workers))
async def go():
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as c:
        src = RayStateSource(RayConfig("http://127.0.0.1:8265"), c)
        src.polls = 1
        try:
            r = await src.poll(SimulatedClock(died + 5))
        except Exception as exc:
            return {"round": f"failed: {type(exc).__name__}: {str(exc)[:80]}", "deaths_paged": 0}
        deaths = [s for p in r.polled for s in p.batch.samples if s.name == "verl_ray_death"]
        out = {"round": "ok", "deaths_paged": sum(s.labels.get("kind") != "unlisted" and s.value == 1 for s in deaths),
               "errors": {k: v for p in r.polled for k, v in p.batch.errors.items()}}
        unlisted = [s for s in deaths if s.labels.get("kind") == "unlisted"]
        if mode == "storm":
            out["death_series"] = len(deaths)
            out["said"] = (f"{int(unlisted[0].value) + int(unlisted[0].labels['listed'])} deaths, "
                           f"{unlisted[0].labels['listed']} listed") if unlisted else "nothing about the rest"
        return out
RESULT = asyncio.run(go())
"""

SCRAPE_REPEAT = """
import random
from monitor.sources.prom_text import parse_exposition
from monitor.sources.scrape_cache import ScrapeCache
from monitor.series.store import SeriesStore, StoreLimits, series_key
def kept(b):
    out = {}
    series, values, _ = b.known or ([], [], 0.0)
    for s, v in zip(series, list(values)):
        out.setdefault(s.key, v)
    for s in b.samples:
        out.setdefault(series_key(s.name, s.labels), s.value)
    return out
rng = random.Random(7); cache, store = ScrapeCache(), SeriesStore(StoreLimits()); differ = 0
for rnd in range(300):
    t = 1000.0 + rnd
    lines = ["# TYPE x gauge"]
    for j in range(6):
        a = rng.randrange(3)
        order = rng.random() < 0.5
        labels = f'a="{a}",b="1"' if order else f'b="1",a="{a}"'
        stamp = f" {int((t - rng.random()) * 1000)}" if rng.random() < 0.3 else ""
        lines.append(f"x{{{labels}}} {rng.randrange(100)}{stamp}")
    text = "\\n".join(lines) + "\\n"
    want = kept(parse_exposition(text, t, "t", "n", {"job": "j"}))
    b = parse_exposition(text, t, "t", "n", {"job": "j"}, cache=cache)
    differ += kept(b) != want
    for s in b.samples:
        store.get_or_create(s.name, s.labels, "t")
    cache.learn(b.comments or [], [(k, i, ins, nm, store.get(series_key(s.name, s.labels)))
                                   for s, k, i, ins, nm in b.learn], len(want))
RESULT = {"rounds_differing_of_300": differ}
"""

UNICODE_DIGITS = """
from monitor.sources.prom_text import parse_exposition
b = parse_exposition("x \\uff11\\uff12\\n", 100.0, "t", "n", {"job": "j"})
RESULT = {"stored": [(s.name, s.value) for s in b.samples], "counted": dict(b.errors)}
"""


def run(tree: Path, sd_targets: int = 100_000, sd_yaml_mb: float = 14.8, ray_mb: int = 500) -> dict[str, dict]:
    return {
        "log_restored": _run(tree, LOG_RESTORED, {}),
        "log_bad_row": _run(tree, LOG_BAD_ROW, {}),
        "file_sd_targets": _run(tree, FILE_SD_TARGETS, {"N": str(sd_targets)}),
        "file_sd_yaml": _run(tree, FILE_SD_YAML, {"MB": str(sd_yaml_mb)}),
        "ray_body": _run(tree, RAY_BODY, {"MB": str(ray_mb), "SERVER": RAY_SERVER}),
        "ray_bad_record": _run(tree, RAY_RECORDS, {"MODE": "bad"}),
        "ray_storm": _run(tree, RAY_RECORDS, {"MODE": "storm"}),
        "scrape_repeat": _run(tree, SCRAPE_REPEAT, {}),
        "unicode_digits": _run(tree, UNICODE_DIGITS, {}),
    }
