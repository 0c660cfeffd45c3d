from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerting.cli import main
from tests.alerting.helpers import T0, alert


def write_config(tmp_path: Path, fakes: dict[str, Any], secret: str) -> Path:
    dt = fakes["dingtalk"]
    cfg = {"receivers": [{"name": "ops-dingtalk", "type": "dingtalk", "url": dt.url, "secret": secret,
                          "timeout": "2s"},
                         {"name": "ops-wecom-zh", "type": "wecom", "url": fakes["wecom"].url, "lang": "zh-CN"}],
           "route": {"receiver": "ops-dingtalk"}}
    path = tmp_path / "alerting.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_test_command_ok_and_wrong_secret(tmp_path: Path, fakes: dict[str, Any],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    dt = fakes["dingtalk"]
    assert main(["test", "--config", str(write_config(tmp_path, fakes, dt.secret)), "--receiver", "ops-dingtalk"]) == 0
    assert "delivered" in capsys.readouterr().out and len(dt.received) == 1
    bad = write_config(tmp_path, fakes, "SECthis-is-the-wrong-one")
    assert main(["test", "--config", str(bad), "--receiver", "ops-dingtalk"]) == 1
    out = capsys.readouterr()
    assert "errcode 310000: sign not match" in out.err
    assert "SECthis-is-the-wrong-one" not in out.err + out.out and dt.token not in out.err + out.out
    assert main(["test", "--config", str(bad), "--receiver", "nobody"]) == 2
    assert "--receiver: 'nobody'" in capsys.readouterr().err


def test_testing_one_receiver_needs_only_its_own_secrets(tmp_path: Path, fakes: dict[str, Any],
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's first robot: another receiver's unset ${DINGTALK_TOKEN} and secret_env are not in the way."""
    monkeypatch.delenv("W42_UNSET_TOKEN", raising=False)
    monkeypatch.delenv("W42_UNSET_SECRET", raising=False)
    cfg = {"receivers": [{"name": "ops-dingtalk", "type": "dingtalk", "url": "https://x/robot/send?access_token=${W42_UNSET_TOKEN}",
                          "secret_env": "W42_UNSET_SECRET"},
                         {"name": "ops-wecom", "type": "wecom", "url": fakes["wecom"].url}],
           "route": {"receiver": "ops-dingtalk", "routes": [{"matchers": ['severity="P0"'], "receiver": "ops-wecom"}]}}
    path = tmp_path / "alerting.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["test", "--config", str(path), "--receiver", "ops-wecom"]) == 0, capsys.readouterr().err
    assert len(fakes["wecom"].received) == 1
    assert main(["test", "--config", str(path), "--receiver", "ops-dingtalk"]) == 2  # its own secret is missing
    assert "W42_UNSET" in capsys.readouterr().err


def test_render_en_and_zh(tmp_path: Path, fakes: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    a = alert("DataflowCollapse", severity="P0")
    a.annotations.update(root_cause="Reward Model OOM on node gpu-08 (A100-80G)", suggestion="Reduce x")
    f = tmp_path / "alert.json"
    f.write_text(json.dumps(a.to_json()))
    assert main(["render", "--alert", str(f), "--receiver", "any"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "【verl-alert】P0: Dataflow Collapse" and lines[2] == "Time: 2025-04-12 14:23:17 UTC"
    cfg = write_config(tmp_path, fakes, "s")
    assert main(["render", "--alert", str(f), "--receiver", "ops-wecom-zh", "--config", str(cfg)]) == 0
    assert "根因: Reward Model OOM" in capsys.readouterr().out
    f.write_text("{not json")
    assert main(["render", "--alert", str(f), "--receiver", "x"]) == 2
    assert "--alert" in capsys.readouterr().err


def test_silence_add_list_expire_on_state_db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "state" / "alerting.db")
    assert main(["silence", "add", "--db", db, 'alertname="GPUOverTemperature"', "node=~\"gpu-0.\"",
                 "--duration", "2h", "--comment", "fan repair"]) == 0
    sid = capsys.readouterr().out.strip()
    assert main(["silence", "list", "--db", db]) == 0
    listed = capsys.readouterr().out
    assert sid in listed and "active" in listed and "fan repair" in listed
    assert main(["silence", "expire", "--db", db, sid]) == 0
    capsys.readouterr()
    main(["silence", "list", "--db", db])
    assert "expired" in capsys.readouterr().out
    assert main(["silence", "add", "--db", db, "alertname"]) == 2
    assert "bad matcher" in capsys.readouterr().err


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("receivers:\n  - name: x\n    type: pager\n    url: http://a\n")
    proc = subprocess.run([sys.executable, "-m", "alerting.cli", "test", "--config", str(cfg), "--receiver", "x"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "receivers[0].type" in proc.stderr and "Traceback" not in proc.stderr
    assert T0  # the shared epoch is importable from the helpers


def test_silence_against_monitor_api(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stand-in for the monitor's /api/v1/silences, backed by a real AlertEngine."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from alerting.clock import SystemClock
    from alerting.config import parse_config
    from alerting.engine import AlertEngine
    from alerting.model import parse_rfc3339

    engine = AlertEngine(parse_config({"receivers": [{"name": "w", "type": "webhook", "url": "http://127.0.0.1:9/"}]}),
                         tmp_path / "a.db", SystemClock())

    class Api(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def reply(self, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self.reply({"status": "success", "data": engine.views.silences()})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            sid = engine.views.add_silence(body["matchers"], ends_at=parse_rfc3339(body["endsAt"]),
                                     created_by=body["createdBy"], comment=body["comment"])
            self.reply({"status": "success", "silenceID": sid})

        def do_DELETE(self) -> None:
            ok = engine.views.expire_silence(self.path.rsplit("/", 1)[1])
            self.reply({"status": "success" if ok else "error"})

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    api = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        assert main(["silence", "add", 'alertname=~"GPU.*"', "--api", api, "--duration", "30m"]) == 0
        sid = capsys.readouterr().out.strip()
        (sil,) = engine.views.silences()
        assert sil["id"] == sid and sil["matchers"][0] == {"name": "alertname", "value": "GPU.*", "isRegex": True,
                                                           "isEqual": True}
        assert main(["silence", "list", "--api", api]) == 0
        assert sid in capsys.readouterr().out
        assert main(["silence", "expire", sid, "--api", api]) == 0
        assert engine.views.silences()[0]["status"]["state"] == "expired"
    finally:
        srv.shutdown()
        srv.server_close()
        engine.close()
    assert main(["silence", "list", "--api", api]) == 2
    assert "cannot reach" in capsys.readouterr().err
