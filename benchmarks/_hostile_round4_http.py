"""Issue 45's hostile cases on the monitor's HTTP surface, each against ``verl-monitor run`` started from a
checkout in its own process (an older checkout gives the "before" figures): ``run(tree)``, the interface
of ``_hostile_round3.py``; ``hostile_input.py --round4`` runs it beside the sources' half.

- ``api_flood``: ``clients`` concurrent API clients (no token) looping ``GET /api/v1/alerts`` while 32
  Alertmanager webhook POSTs, 12 /metrics scrapes and 12 /healthz polls arrive, each on a fresh
  connection with a 5 s timeout: those answered 200, and what the API clients got (status or error);
- ``cross_origin``: no token (the default): a ``text/plain`` silence POST with a foreign ``Origin``, a
  ``text/plain`` webhook POST marked cross-site, the console's silence form through a foreign ``Host``
  (DNS rebinding): the statuses, and the silences and alerts they made;
- ``absurd_cookie``: a token set; a session cookie with a 5000-digit expiry: the statuses of /healthz,
  /metrics, the API and the console, and the tracebacks in the daemon's log;
- ``logout``: the old session cookie after logout (303: back to the login page; 200: it still works), and
  100 wrong tokens sent as fast as one client can: how many were judged (401) and how many held (429).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/_hostile_round4_http.py` from a checkout
    sys.path.insert(0, str(ROOT))

from benchmarks._hostile_round3 import _run  # noqa: E402

START = """
import json, os, re, socket, subprocess, sys, tempfile, time
import httpx, yaml
def start(extra):
    work = tempfile.mkdtemp(prefix="round4-http-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    (open(os.path.join(work, "alerting.yaml"), "w")).write(yaml.safe_dump({
        "receivers": [{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/hook"}],
        "route": {"receiver": "hook"}}))
    cfg = {"listen": f"127.0.0.1:{port}", "state_db": os.path.join(work, "state.db"), "targets": [],
           "eval_interval": "1s", "cluster": "bench", "notify_config": os.path.join(work, "alerting.yaml"), **extra}
    (open(os.path.join(work, "monitor.yaml"), "w")).write(yaml.safe_dump(cfg))
    err = open(os.path.join(work, "stderr.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "monitor.cli", "run", "--config", os.path.join(work, "monitor.yaml")],
                            stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/healthz", timeout=1); break
        except httpx.HTTPError:
            time.sleep(0.2)
    return url, proc, os.path.join(work, "stderr.log")
def raw(url, request):
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request if isinstance(request, bytes) else request.encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data.decode("latin-1")
HOOK = {"version": "4", "alerts": [{"status": "firing", "labels": {"alertname": "Injected", "severity": "P1"},
                                    "startsAt": "2026-01-01T00:00:00Z"}]}
"""

API_FLOOD = START + """
import asyncio
from collections import Counter
url, proc, _ = start({})
N = int(os.environ["CLIENTS"])
async def main():
    stop = asyncio.Event(); api = Counter(); served = {"webhook": Counter(), "metrics": Counter(), "healthz": Counter()}
    async def client():
        async with httpx.AsyncClient(timeout=5) as c:
            while not stop.is_set():
                try:
                    api[(await c.get(f"{url}/api/v1/alerts")).status_code] += 1
                except httpx.HTTPError as exc:
                    api[type(exc).__name__] += 1
    async def one(kind, method, path, **kw):
        async with httpx.AsyncClient(timeout=5) as c:
            try:
                served[kind][(await c.request(method, f"{url}{path}", **kw)).status_code] += 1
            except httpx.HTTPError as exc:
                served[kind][type(exc).__name__] += 1
    tasks = [asyncio.create_task(client()) for _ in range(N)]
    await asyncio.sleep(2.0)
    polls = []
    for i in range(32):
        polls.append(asyncio.create_task(one("webhook", "POST", "/api/v1/alertmanager/webhook", json=HOOK)))
        if i % 8 < 3:
            polls.append(asyncio.create_task(one("metrics", "GET", "/metrics")))
            polls.append(asyncio.create_task(one("healthz", "GET", "/healthz")))
        await asyncio.sleep(0.2)
    await asyncio.gather(*polls)
    stop.set()
    await asyncio.gather(*tasks)
    return api, served
try:
    api, served = asyncio.run(main())
finally:
    proc.terminate(); proc.wait(15)
RESULT = {k: f"{c[200]}/{sum(c.values())} ok" + (f" {dict((str(s), n) for s, n in c.items() if s != 200)}" if len(c) > 1 or 200 not in c else "")
          for k, c in served.items()}
RESULT["api_clients"] = N
RESULT["api_answers"] = {str(k): v for k, v in api.most_common()}
"""

CROSS_ORIGIN = START + """
url, proc, _ = start({})
try:
    silence = json.dumps({"matchers": ['alertname=~".*"'], "duration": "1h", "comment": "catch-all"})
    plain = httpx.post(f"{url}/api/v1/silences", content=silence,
                       headers={"content-type": "text/plain;charset=UTF-8", "origin": "http://evil.example"}).status_code
    hook = httpx.post(f"{url}/api/v1/alertmanager/webhook", content=json.dumps(HOOK),
                      headers={"content-type": "text/plain;charset=UTF-8", "origin": "http://evil.example",
                               "sec-fetch-site": "cross-site"}).status_code
    made = len(httpx.get(f"{url}/api/v1/silences").json()["data"])
    time.sleep(1.5)  # an evaluation: an injected alert would be firing now
    injected = len(httpx.get(f"{url}/api/v1/alerts").json()["data"])
    port = url.rsplit(":", 1)[1]; evil = f"rebind.evil.example:{port}"
    page_status, page = raw(url, f"GET /silences/new HTTP/1.1\\r\\nHost: {evil}\\r\\nConnection: close\\r\\n\\r\\n")
    cookie = re.search(r"verl_monitor_csrf=([^;\\r]+)", page)
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    csrf = token.group(1) if token else "x"
    form = f"csrf={csrf}&matchers=alertname%3D~%22.%2A%22&duration=1h&comment=rebind&creator=page"
    form_status, _ = raw(url, f"POST /silences HTTP/1.1\\r\\nHost: {evil}\\r\\nOrigin: http://{evil}\\r\\n"
                              f"Cookie: verl_monitor_csrf={cookie.group(1) if cookie else csrf}\\r\\n"
                              "Content-Type: application/x-www-form-urlencoded\\r\\n"
                              f"Content-Length: {len(form)}\\r\\nConnection: close\\r\\n\\r\\n{form}")
    after = len(httpx.get(f"{url}/api/v1/silences").json()["data"])
finally:
    proc.terminate(); proc.wait(15)
RESULT = {"text_plain_cross_origin_silence": plain, "text_plain_cross_site_webhook": hook,
          "silences_made": made, "alerts_injected": injected, "rebind_form_page": page_status,
          "rebind_form_post": form_status, "rebind_silences_made": after - made}
"""

ABSURD_COOKIE = START + """
url, proc, log = start({"bearer_token": "bench-token"})
try:
    cookie = b"Cookie: verl_monitor_session=" + b"9" * 5000 + b".ab\\r\\n"
    out = {}
    for path in ("/healthz", "/metrics", "/api/v1/alerts", "/"):
        out[path] = raw(url, f"GET {path} HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n".encode()
                            + cookie + b"\\r\\n")[0]
finally:
    proc.terminate(); proc.wait(15)
RESULT = {"status": out, "tracebacks_logged": open(log).read().count("Traceback")}
"""

LOGOUT = START + """
url, proc, _ = start({"bearer_token": "bench-token"})
def login(c, token):
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/login").text).group(1)
    return c.post("/login", data={"csrf": csrf, "token": token, "next": "/"})
try:
    with httpx.Client(base_url=url, follow_redirects=False, timeout=10) as c:
        login(c, "bench-token")
        session = c.cookies["verl_monitor_session"]
        c.post("/logout", data={"csrf": c.cookies["verl_monitor_csrf"]})
    old = httpx.get(f"{url}/", cookies={"verl_monitor_session": session}, follow_redirects=False).status_code
    with httpx.Client(base_url=url, follow_redirects=False, timeout=10) as c:
        csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/login").text).group(1)
        codes = {}; t0 = time.perf_counter()
        for i in range(100):
            code = c.post("/login", data={"csrf": csrf, "token": f"guess-{i}", "next": "/"}).status_code
            codes[code] = codes.get(code, 0) + 1
        s = time.perf_counter() - t0
finally:
    proc.terminate(); proc.wait(15)
RESULT = {"old_cookie_after_logout": old, "wrong_tokens": {str(k): v for k, v in codes.items()},
          "tries_per_s": round(100 / s, 1), "s": round(s, 2)}
"""


def run(tree: Path, clients: int = 200) -> dict[str, dict]:
    return {
        "api_flood": _run(tree, API_FLOOD, {"CLIENTS": str(clients)}),
        "cross_origin": _run(tree, CROSS_ORIGIN, {}),
        "absurd_cookie": _run(tree, ABSURD_COOKIE, {}),
        "logout": _run(tree, LOGOUT, {}),
    }


if __name__ == "__main__":  # python benchmarks/_hostile_round4_http.py [TREE]: this half alone
    for case, figures in run(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT).items():
        print(f"{case}: {figures}")
