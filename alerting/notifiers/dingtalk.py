"""DingTalk custom robot (自定义机器人), https://open.dingtalk.com/document/robots/custom-robot-access :
POST ``/robot/send?access_token=..`` with ``{"msgtype": "markdown", "markdown": {title, text}, "at":
{atMobiles}}``; a mention only shows when the text also contains ``@<mobile>``. Signed robots take
``timestamp`` (ms, within 1 h of DingTalk's clock) and ``sign`` = base64(HMAC-SHA256(secret,
"{timestamp}\\n{secret}")) as query parameters. 20 messages per minute per robot; an overrun throttles
the robot for 10 minutes (errcode 130101 / 410100)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from alerting.model import Notification
from alerting.notifiers.base import Delivery, Notifier, encode
from alerting.templates import Rendered

CODES = {130101: "rate", 410100: "rate", -1: "retry"}  # -1: "system busy, retry later"


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class DingTalkNotifier(Notifier):
    kind = "dingtalk"
    max_bytes = 18000  # first text budget; the limit below is checked on the request as sent
    limit_bytes = 20000  # documented: markdown text at most 20000 bytes (the whole request held to it too)
    too_long_codes = frozenset({460101})
    limits = [(20, 60.0)]
    throttle_s = 600.0

    def build(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> dict[str, object]:
        # DingTalk markdown needs a blank line to break lines.
        text = "\n\n".join(rendered.text.splitlines())
        mobiles = [m for m in self.cfg.mentions if m not in ("all", "@all")]
        at_all = len(mobiles) < len(self.cfg.mentions)  # @all only where the receiver configures it
        if self.cfg.mentions:
            text += "\n\n" + " ".join(f"@{m}" for m in mobiles) + (" @all" if at_all else "")
        return {"msgtype": "markdown", "markdown": {"title": rendered.title[:64], "text": text},
                "at": {"atMobiles": mobiles, "isAtAll": at_all}}

    def overshoot(self, body: dict) -> int:  # type: ignore[override]
        text = body["markdown"]["text"].encode()
        return max(len(text), len(encode(body))) - self.limit_bytes

    def send(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> Delivery:
        body = self.build(rendered, notes, digest)
        params = None
        if self.cfg.secret:
            ts = int(self.sign_clock.now() * 1000)
            params = {"timestamp": str(ts), "sign": dingtalk_sign(self.cfg.secret, ts)}
        got = self.post(self.cfg.url, body, params)
        if isinstance(got, Delivery):
            return got
        status, data = got
        if not isinstance(data, dict) or "errcode" not in data:
            return Delivery.permanent(f"dingtalk: HTTP {status} without an errcode body (is the url a DingTalk robot?)")
        if data["errcode"] == 0:
            return Delivery(True)
        return self.classify(int(data["errcode"]), data.get("errmsg", ""), CODES)
