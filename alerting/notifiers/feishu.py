"""Feishu / Lark custom bot, https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot :
POST ``/open-apis/bot/v2/hook/<token>`` with ``msg_type: interactive`` and a ``card``. Signed bots put
``timestamp`` (seconds, within 1 h) and ``sign`` = base64(HMAC-SHA256(key="{timestamp}\\n{secret}",
msg="")) in the body. Answers ``{"code": 0, "msg": "success"}``; 19021 bad signature/timestamp, 11232
frequency limited (100/min, 5/s per bot); request body at most 20 KB."""

from __future__ import annotations

import base64
import hashlib
import hmac

from alerting.model import Notification
from alerting.notifiers.base import Delivery, Notifier, encode
from alerting.templates import Rendered

CODES = {11232: "rate"}


def feishu_sign(secret: str, timestamp_s: int) -> str:
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class FeishuNotifier(Notifier):
    kind = "feishu"
    max_bytes = 18000  # first text budget; the limit below is checked on the request as sent
    limit_bytes = 20000  # documented: request body at most 20 KB (held to 20 000 bytes, whichever KB is meant)
    too_long_codes = frozenset({9499})
    limits = [(100, 60.0), (5, 1.0)]
    throttle_s = 60.0

    def build(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> dict[str, object]:
        body_text = "\n".join(rendered.text.splitlines()[1:])
        if self.cfg.mentions:  # <at id=all></at> only when the receiver lists "all"
            body_text += "\n" + " ".join(f"<at id={m.lstrip('@')}></at>" for m in self.cfg.mentions)
        resolved = all(n.status == "resolved" for n in notes)
        card = {"config": {"wide_screen_mode": True},
                "header": {"title": {"tag": "plain_text", "content": rendered.title},
                           "template": "green" if resolved else "red"},
                "elements": [{"tag": "div", "text": {"tag": "lark_md", "content": body_text}}]}
        body: dict[str, object] = {"msg_type": "interactive", "card": card}
        if self.cfg.secret:
            ts = int(self.sign_clock.now())
            body.update(timestamp=str(ts), sign=feishu_sign(self.cfg.secret, ts))
        return body

    def overshoot(self, body: dict) -> int:  # type: ignore[override]
        return len(encode(body)) - self.limit_bytes

    def send(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> Delivery:
        body = self.build(rendered, notes, digest)
        got = self.post(self.cfg.url, body)
        if isinstance(got, Delivery):
            return got
        status, data = got
        if not isinstance(data, dict):
            return Delivery.permanent(f"feishu: HTTP {status} without a JSON body (is the url a Feishu bot?)")
        code = data.get("code", data.get("StatusCode"))
        if code == 0:
            return Delivery(True)
        if code is None:
            return Delivery.permanent(f"feishu: HTTP {status} without a code in the body")
        return self.classify(int(code), str(data.get("msg", data.get("StatusMessage", ""))), CODES)
