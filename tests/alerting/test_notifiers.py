from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from alerting.config import parse_config
from alerting.model import Notification
from alerting.notifiers import build_notifier, redact
from alerting.notifiers.webhook import webhook_payload
from alerting.templates import render
from tests.alerting.helpers import T0, alert, receiver


def send(kind: str, fake: Any, notes: list[Notification] | None = None, **extra: Any):  # noqa: ANN201
    cfg = parse_config({"receivers": [receiver(kind, fake, **extra)]}).receivers[kind]
    n = build_notifier(cfg)
    notes = notes or [Notification(kind, "g", {}, "firing", [alert("GPUXidError")], ["x"], T0)]
    try:
        return n.send(render(notes, max_bytes=n.max_bytes), notes)
    finally:
        n.close()


def test_dingtalk_signed_markdown_with_mentions(fakes: dict[str, Any]) -> None:
    dt = fakes["dingtalk"]
    assert send("dingtalk", dt, mentions=["13800000000"]).ok
    (got,) = dt.received
    assert got.query["access_token"] == dt.token and got.query["sign"] and got.query["timestamp"]
    assert got.body["msgtype"] == "markdown" and got.body["at"]["atMobiles"] == ["13800000000"]
    assert got.body["markdown"]["title"] == "【verl-alert】P1: GPU Xid Error"
    assert "\n\nCluster: llama3-1k-gpu" in got.text and got.text.endswith("@13800000000")


def test_dingtalk_wrong_secret_is_permanent_and_redacted(fakes: dict[str, Any]) -> None:
    res = send("dingtalk", fakes["dingtalk"], secret="SECwrong-secret")
    assert not res.ok and not res.retryable and res.code == 310000
    assert "sign not match" in res.error and "SECwrong" not in res.error and fakes["dingtalk"].received == []


@pytest.mark.parametrize(("how", "retryable", "rate"), [
    ("errcode:130101", True, True), ("errcode:410100", True, True), ("500", True, False),
    ("errcode:300001", False, False), ("errcode:460101", True, False)])
def test_dingtalk_error_classification(fakes: dict[str, Any], how: str, retryable: bool, rate: bool) -> None:
    fakes["dingtalk"].fail_next(1, how)
    res = send("dingtalk", fakes["dingtalk"])
    assert (res.ok, res.retryable, res.rate_limited) == (False, retryable, rate)


def test_timeout_and_connection_refused_are_retryable(fakes: dict[str, Any]) -> None:
    fakes["wecom"].fail_next(1, "timeout")
    res = send("wecom", fakes["wecom"])
    assert res.retryable and "timeout" in res.error
    fakes["wecom"].down()
    res = send("wecom", fakes["wecom"])
    assert res.retryable and "connection failed" in res.error and fakes["wecom"].key not in res.error


def test_wecom_markdown_limit_and_plot_image(fakes: dict[str, Any], tmp_path: Path) -> None:
    wc = fakes["wecom"]
    png = tmp_path / "kl.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    a = alert("KLDriftDetected", severity="P2")
    a.annotations["plot"] = str(png)
    many = [alert("GPUOverTemperature", severity="P2", gpu=str(i), node=f"节点{i}") for i in range(400)]
    assert send("wecom", wc, [Notification("wecom", "g", {}, "firing", [a], [a.fingerprint], T0)]).ok
    assert send("wecom", wc, [Notification("wecom", "g", {}, "firing", many, [], T0)]).ok
    md, img, big = wc.received
    assert md.body["msgtype"] == "markdown" and img.body["msgtype"] == "image"
    assert img.body["image"]["md5"] == hashlib.md5(png.read_bytes()).hexdigest()
    assert base64.b64decode(img.body["image"]["base64"]) == png.read_bytes()
    assert len(big.body["markdown"]["content"].encode()) <= 4096 and "more:" in big.text
    wc.fail_next(1, "errcode:45009")
    res = send("wecom", wc)
    assert res.rate_limited and res.retryable


def test_feishu_signed_card_and_codes(fakes: dict[str, Any]) -> None:
    fs = fakes["feishu"]
    assert send("feishu", fs).ok
    (got,) = fs.received
    assert got.body["msg_type"] == "interactive" and got.body["card"]["header"]["template"] == "red"
    assert got.body["card"]["header"]["title"]["content"] == "【verl-alert】P1: GPU Xid Error"
    res = send("feishu", fs, secret="wrong")
    assert not res.retryable and res.code == 19021
    fs.fail_next(1, "errcode:11232")
    assert send("feishu", fs).rate_limited


def test_webhook_v4_and_alertmanager_v2(fakes: dict[str, Any]) -> None:
    wh = fakes["webhook"]
    a = alert("TrainerDown", severity="P0")
    n = Notification("webhook", "0/webhook:x", {"alertname": "TrainerDown"}, "firing", [a], [a.fingerprint], T0)
    assert send("webhook", wh, [n]).ok
    body = wh.received[0].body
    assert body == webhook_payload(n) and body["version"] == "4" and body["alerts"][0]["fingerprint"] == a.fingerprint
    assert body["commonLabels"]["alertname"] == "TrainerDown"
    cfg = parse_config({"receivers": [{"name": "am", "type": "alertmanager", "url": wh.base}]}).receivers["am"]
    am = build_notifier(cfg)
    assert am.send(render([n]), [n]).ok
    am.close()
    got = wh.received[1]
    assert got.path == "/api/v2/alerts" and got.body[0]["labels"] == a.labels and "fingerprint" not in got.body[0]
    wh.fail_next(1, "500")
    assert send("webhook", wh, [n]).retryable


def test_redact_hides_tokens() -> None:
    text = redact("POST http://x/robot/send?access_token=abc&sign=zz failed for SECxyz", "SECxyz")
    assert "abc" not in text and "zz" not in text and "SECxyz" not in text
    assert json.dumps(text)


def test_wecom_image_travels_with_the_alert_and_is_never_fetched(fakes: dict[str, Any], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    (tmp_path / "leak.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    requests: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            requests.append(self.path)
            super().do_GET()

    handler = functools.partial(Handler, directory=str(tmp_path))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        a = alert("MemoryLeakSuspected")
        a.annotations["plot"] = f"http://127.0.0.1:{srv.server_address[1]}/leak.png"  # a link: stays a link
        assert send("wecom", fakes["wecom"], [Notification("wecom", "g", {}, "firing", [a], [], T0)]).ok
        a.plot_file = str(tmp_path / "leak.png")  # the PNG the monitor rendered, carried by the alert
        assert send("wecom", fakes["wecom"], [Notification("wecom", "g", {}, "firing", [a], [], T0)]).ok
        a.plot_file = str(tmp_path / "missing.png")
        monkeypatch.setattr("alerting.notifiers.wecom.PLOT_WAIT_S", 0.2)  # a plot that never comes
        res = send("wecom", fakes["wecom"], [Notification("wecom", "g", {}, "firing", [a], [], T0)])
        assert res.ok and "plot not sent" in res.error
    finally:
        srv.shutdown()
        srv.server_close()
    assert requests == []  # nothing was fetched back over HTTP
    kinds = [r.body["msgtype"] for r in fakes["wecom"].received]
    assert kinds == ["markdown", "markdown", "image", "markdown"]


def test_a_huge_answer_from_a_receiver_is_not_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from alerting.notifiers import base

    sent: list[int] = []

    def stream():  # noqa: ANN202
        for _ in range(64):
            sent.append(1)
            yield b'{"errcode": 0, "pad": "' + b"x" * 65536
        yield b'"}'

    cfg = parse_config({"receivers": [{"name": "dingtalk", "type": "dingtalk",
                                       "url": "http://127.0.0.1:9/robot/send?access_token=t"}]}).receivers["dingtalk"]
    n = build_notifier(cfg, transport=httpx.MockTransport(lambda req: httpx.Response(200, content=stream())))
    monkeypatch.setattr(base, "ANSWER_LIMIT", 256 << 10)
    notes = [Notification("dingtalk", "g", {}, "firing", [alert("GPUXidError")], ["x"], T0)]
    try:
        res = n.send(render(notes, max_bytes=n.max_bytes), notes)
    finally:
        n.close()
    assert not res.ok and "without an errcode" in res.error  # read as an answer that is not the robot's
    assert len(sent) <= 6  # stopped at the limit (256 KiB), not 4 MiB read into memory


def test_clients_share_one_verifying_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every notifier and monitor source client verifies TLS with the process's one context: the CA bundle is
    loaded and parsed once (httpx's default makes a context per client, ~20 ms each)."""
    import asyncio
    import ssl

    from alerting.http_limits import tls_context
    from monitor.sources.scrape_http import ScrapeClient

    tls_context.cache_clear()
    made: list[ssl.SSLContext] = []
    create = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: made.append(create(*a, **k)) or made[-1])
    cfg = parse_config({"receivers": [{"name": f"r{i}", "type": "wecom", "url": f"https://robot{i}.example/send"}
                                      for i in range(3)]})
    notifiers = [build_notifier(r) for r in cfg.receivers.values()]
    scrape = ScrapeClient()
    try:
        assert len(made) == 1 and made[0] is tls_context()
        assert made[0].verify_mode == ssl.CERT_REQUIRED and made[0].check_hostname
    finally:
        for n in notifiers:
            n.close()
        asyncio.run(scrape.aclose())
        tls_context.cache_clear()
