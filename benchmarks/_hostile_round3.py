"""Issue 36's hostile cases, each measured in a fresh interpreter (its own peak RSS) against a checkout:
``python benchmarks/hostile_input.py --round3 [--tree /path/to/other/checkout] --json``. Run against an
older checkout, the same snippets give the "before" figures (both query_range APIs are handled).

- ``jsonl_long_line``: one JSONL line of ``--long-line-mb`` MB without newline, tailed to its end: peak
  RSS (MB), polls, what was counted;
- ``prom_body``: a Prometheus answering a ``--prom-body-mb`` MB query_range matrix: peak RSS, errors;
- ``prom_drip``: a Prometheus dripping a small answer a byte every 50 ms, request timeout 2 s: seconds;
- ``fifo``: a FIFO nobody writes as the JSONL path: seconds until poll returns (5 s cap: "blocked");
- ``silences``: 3000 regex silences: CPU ms per flush of 20 alerts (10 flushes), listing seconds;
- ``late``: a scraped sample stamped 7 min late: refused and counted, or stored;
- ``lock_link``: ``DIR/.lock`` a symlink to another file: that file's size after ``DirLock.acquire``;
- ``embed``: one ``--embed-mb`` MB prompt embedded: seconds and peak RSS (needs the semantic extra).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# the peak resident set of this interpreter (VmHWM: reset by exec, unlike ru_maxrss, which keeps the parent's)
_PEAK = ("PEAK = lambda: int(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM'))) "
         "/ 1024\n")

JSONL_LONG_LINE = _PEAK + """
import os, tempfile, time
from pathlib import Path
from monitor.sources.verl_jsonl import JsonlTail
mb = int(os.environ["MB"])
d = tempfile.mkdtemp(); p = Path(d) / "exp.jsonl"
with open(p, "wb") as fh:
    fh.write(b'{"step": 1, "data": {"x": "')
    for _ in range(mb):
        fh.write(b"a" * (1 << 20))
base = PEAK(); tail = JsonlTail(p, "n"); errors = {}; polls = 0; t0 = time.perf_counter()
while polls < 200:
    polls += 1
    for k, v in tail.poll(1000.0 + polls).errors.items():
        errors[k] = errors.get(k, 0) + v
    if tail._offset >= p.stat().st_size:
        break
os.unlink(p)
RESULT = {"peak_rss_mb": round(PEAK()), "rss_before_mb": round(base), "polls": polls, "errors": errors,
          "s": round(time.perf_counter() - t0, 2)}
"""

PROM_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
mode, mb = sys.argv[1], int(sys.argv[2])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
        head = b'{"status":"success","data":{"resultType":"matrix","result":['
        series = b'{"metric":{"__name__":"verl_x","i":"%d"},"values":[' + b",".join(
            b'[%d,"1.5"]' % t for t in range(1000)) + b']}'
        try:
            if mode == "drip":  # 20 points, about 500 bytes: 25 s at a byte every 50 ms
                body = head + b'{"metric":{"__name__":"verl_x"},"values":[' + b",".join(
                    b'[%d,"1.5"]' % t for t in range(20)) + b']}]}}'
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1]); self.wfile.flush()
                    __import__("time").sleep(0.05)
                return
            self.wfile.write(head); sent, i = 0, 0
            while sent < mb << 20:
                piece = (b"," if i else b"") + (series % i); self.wfile.write(piece); sent += len(piece); i += 1
            self.wfile.write(b"]}}")
        except OSError:
            pass
s = HTTPServer(("127.0.0.1", 0), H); print(s.server_address[1], flush=True); s.serve_forever()
"""

PROM = _PEAK + """
import asyncio, inspect, os, subprocess, sys, time
import httpx
from monitor.sources import prom_api
mode = os.environ["MODE"]
srv = subprocess.Popen([sys.executable, "-c", os.environ["SERVER"], mode, os.environ["MB"]], stdout=subprocess.PIPE, text=True)
url = f"http://127.0.0.1:{srv.stdout.readline().strip()}"
timeout = 2.0 if mode == "drip" else 60.0
base = PEAK(); t0 = time.perf_counter()
try:
    if inspect.iscoroutinefunction(prom_api.query_range):
        async def go():
            async with httpx.AsyncClient() as c:
                return await prom_api.query_range(c, url, "verl_x", 0, 600, 15, 3600, timeout)
        batch = asyncio.run(go())
    else:
        with httpx.Client() as c:
            batch = prom_api.query_range(c, url, "verl_x", 0, 600, 15, 3600, timeout)
finally:
    srv.kill()
RESULT = {"s": round(time.perf_counter() - t0, 2), "peak_rss_mb": round(PEAK()), "rss_before_mb": round(base),
          "samples": len(batch.samples), "errors": dict(batch.errors)}
"""

FIFO = """
import os, tempfile, threading, time
from monitor.sources.verl_jsonl import JsonlTail
d = tempfile.mkdtemp(); p = os.path.join(d, "exp.jsonl"); os.mkfifo(p)
out = {}
def poll(): out["errors"] = dict(JsonlTail(p, "n").poll(1000.0).errors)
t0 = time.perf_counter(); th = threading.Thread(target=poll, daemon=True); th.start(); th.join(5.0)
RESULT = {"s": round(time.perf_counter() - t0, 3), "blocked": th.is_alive(), "errors": out.get("errors")}
if th.is_alive():
    os.open(p, os.O_WRONLY | os.O_NONBLOCK)  # a writer: the blocked open returns, the process can exit
"""

SILENCES = """
import sqlite3, time
from alerting.silence import SilenceStore
from alerting.model import Alert
conn = sqlite3.connect(":memory:", isolation_level=None)
conn.execute("CREATE TABLE silences (id TEXT PRIMARY KEY, matchers TEXT, starts_at REAL, ends_at REAL, "
             "created_by TEXT, comment TEXT, created_at REAL)")
s = SilenceStore(conn)
for i in range(3000):
    s.add([f'alertname=~"Nope{i}.*"', f'node=~"n{i}"'], 0.0, 3600.0)
alerts = [Alert({"alertname": f"A{j}", "node": f"gpu-{j}"}) for j in range(20)]
t0 = time.process_time()
for k in range(10):
    mute = s.muting(10.0 + k)
    for a in alerts:
        mute(a)
flush_ms = (time.process_time() - t0) * 100
lists = []
for _ in range(3):
    t0 = time.perf_counter(); [x.to_json(10.0) for x in s.all()]; lists.append(time.perf_counter() - t0)
RESULT = {"cpu_ms_per_flush_20_alerts": round(flush_ms, 2), "first_flush_included": True,
          "list_first_s": round(lists[0], 3), "list_again_s": round(min(lists[1:]), 3)}
"""

LATE = """
import time
from monitor.model import Sample, SourceBatch
from monitor.sources.prom_text import refuse_out_of_bounds
now = time.time()
b = SourceBatch("t", [Sample("verl_gpu_temperature_celsius", {}, 97.0, now - 420)])
refuse_out_of_bounds(b, now)
RESULT = {"stored": len(b.samples), "counted": dict(b.errors)}
"""

LOCK_LINK = """
import os, tempfile
from pathlib import Path
from verl.checkpoint.lock import DirLock
d = Path(tempfile.mkdtemp()); other = d / "precious.txt"; other.write_text("x" * 1000)
(d / "ck").mkdir(); os.symlink(other, d / "ck" / ".lock")
try:
    DirLock(d / "ck", "run").acquire(); refused = None
except Exception as exc:
    refused = str(exc)[:120]
RESULT = {"other_file_bytes_after": len(other.read_bytes()), "of": 1000, "refused": refused}
"""

EMBED = _PEAK + """
import os, time
from verl.data.embeddings import SentenceEmbedder, semantic_available
if not semantic_available():
    RESULT = {"skipped": "no semantic extra"}
else:
    e = SentenceEmbedder(); e.embed(["warm up"]); base = PEAK()
    prompt = "Solve for x: 3x + 5 = 20. " * (int(os.environ["MB"]) * (1 << 20) // 26)
    t0 = time.perf_counter(); e.embed([prompt]); s = time.perf_counter() - t0
    try:
        e.embed(["\\ud800"]); surrogate = "embedded"
    except Exception as exc:
        surrogate = type(exc).__name__
    RESULT = {"s": round(s, 2), "peak_rss_mb": round(PEAK()), "rss_before_mb": round(base), "surrogate": surrogate}
"""


def _run(tree: Path, code: str, env: dict[str, str], timeout: float = 600.0) -> dict:
    script = code + "\nimport json; print('RESULT ' + json.dumps(RESULT))\n"
    full = dict(os.environ, PYTHONPATH=str(tree), **env)
    try:
        done = subprocess.run([sys.executable, "-c", script], cwd=tree, env=full, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g}s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(lines[-1][7:]) if lines else {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}


def run(tree: Path, long_line_mb: int = 300, prom_body_mb: int = 300, embed_mb: int = 100) -> dict[str, dict]:
    return {
        "jsonl_long_line": _run(tree, JSONL_LONG_LINE, {"MB": str(long_line_mb)}),
        "prom_body": _run(tree, PROM, {"MODE": "huge", "MB": str(prom_body_mb), "SERVER": PROM_SERVER}),
        "prom_drip": _run(tree, PROM, {"MODE": "drip", "MB": "0", "SERVER": PROM_SERVER}),
        "fifo": _run(tree, FIFO, {}),
        "silences": _run(tree, SILENCES, {}),
        "late": _run(tree, LATE, {}),
        "lock_link": _run(tree, LOCK_LINK, {}),
        "embed": _run(tree, EMBED, {"MB": str(embed_mb)}) if embed_mb else {"skipped": "--embed-mb 0"},
    }
