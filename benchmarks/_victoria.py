"""VictoriaMetrics + vmalert beside the monitor and Prometheus (``monitor_vs_prometheus.py --victoria-metrics``).

Debian's ``victoria-metrics`` package (single-node VictoriaMetrics and ``vmalert``), installed here with
apt-get when missing: a benchmark peer, never a dependency of the monitor. VictoriaMetrics scrapes the same
targets every 5 s (a scrape-only copy of Prometheus' config: it parses no ``rule_files``); vmalert evaluates
the same ``prometheus/rules`` files every 5 s against it, writes recording rules and alert state back, and
notifies a loopback sink (vmalert 1.79 has no notifier-less mode).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

PACKAGE = "victoria-metrics"
BINARIES = ("victoria-metrics", "vmalert")


def ensure_installed() -> str | None:
    """None when both binaries are on PATH (installing the package if missing), else a one-line error."""
    if all(shutil.which(b) for b in BINARIES):
        return None
    if os.geteuid() != 0:
        return f"error: no `{BINARIES[0]}`/`vmalert` on PATH; run `apt-get install {PACKAGE}` as root, or drop --victoria-metrics"
    print(f"installing Debian's {PACKAGE} (benchmark peer only) ...", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", PACKAGE], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0 or not all(shutil.which(b) for b in BINARIES):
        return f"error: `apt-get install {PACKAGE}` failed ({done.stderr.strip().splitlines()[-1:]}); install it by hand"
    return None


class _Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def scrape_config(prometheus_yml: Path, work: Path) -> Path:
    """Prometheus' config without what VictoriaMetrics' strict parser refuses (rules, evaluation)."""
    import yaml

    cfg = yaml.safe_load(prometheus_yml.read_text())
    cfg.pop("rule_files", None)
    cfg["global"].pop("evaluation_interval", None)
    path = work / "victoria-scrape.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start(prometheus_yml: Path, work: Path, vm_port: int, vmalert_port: int,
          log: Any) -> tuple[list[subprocess.Popen[Any]], http.server.ThreadingHTTPServer]:
    """VictoriaMetrics and vmalert (in that order) and the notification sink the caller shuts down."""
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    vm_url = f"http://127.0.0.1:{vm_port}"
    vm = subprocess.Popen([shutil.which("victoria-metrics") or "victoria-metrics",
                           f"-promscrape.config={scrape_config(prometheus_yml, work)}",
                           f"-storageDataPath={work / 'victoria'}", f"-httpListenAddr=127.0.0.1:{vm_port}",
                           "-retentionPeriod=1d", "-loggerLevel=ERROR"], stdout=subprocess.DEVNULL, stderr=log)
    vmalert = subprocess.Popen([shutil.which("vmalert") or "vmalert", f"-rule={work / 'rules' / '*.yml'}",
                                f"-datasource.url={vm_url}", f"-remoteWrite.url={vm_url}",
                                f"-notifier.url=http://127.0.0.1:{sink.server_address[1]}",
                                "-evaluationInterval=5s", f"-httpListenAddr=127.0.0.1:{vmalert_port}",
                                "-external.label=cluster=bench", "-loggerLevel=ERROR"],
                               stdout=subprocess.DEVNULL, stderr=log)
    return [vm, vmalert], sink


def rule_groups(vmalert_port: int) -> int | None:
    """Rule groups vmalert evaluates (None: it did not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{vmalert_port}/api/v1/rules", timeout=10) as resp:
            return len(json.load(resp)["data"]["groups"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
