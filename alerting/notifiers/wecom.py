"""WeCom group robot (企业微信群机器人), https://developer.work.weixin.qq.com/document/path/91770 :
POST ``/cgi-bin/webhook/send?key=..``; markdown ``content`` at most 4096 UTF-8 bytes; mentions as
``<@userid>`` inside markdown; image messages carry ``base64`` and the ``md5`` of the raw image (at most
2 MB, jpg/png). 20 messages per minute per robot, errcode 45009 when exceeded."""

from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path

from alerting.model import Notification
from alerting.notifiers.base import Delivery, Notifier
from alerting.templates import Rendered

CODES = {45009: "rate", -1: "retry"}
MAX_IMAGE_BYTES = 2 * 1024 * 1024
# The monitor renders a plot in a worker thread after the alert starts firing (and writes it whole, by
# rename); with a short group_wait the message can be sent first, so the image waits for it this long.
PLOT_WAIT_S = 10.0


def _plot_ref(notes: list[Notification]) -> str:
    """The first alert's plot as a local file: the PNG the monitor rendered for it (``Alert.plot_file``),
    or a ``plot`` annotation that names a file. A plot given only as a URL stays a link in the text: the
    image travels with the alert, it is never fetched back over HTTP."""
    for a in (a for n in notes for a in n.alerts):
        ref = a.plot_file or a.annotations.get("plot", "")
        if ref and "://" not in ref:
            return ref
    return ""


class WeComNotifier(Notifier):
    kind = "wecom"
    max_bytes = 4096  # documented: markdown content at most 4096 UTF-8 bytes
    too_long_codes = frozenset({40058})
    limits = [(20, 60.0)]
    throttle_s = 60.0

    def cost(self, notes: list[Notification], digest: bool) -> int:
        return 1 if digest or not _plot_ref(notes) else 2

    def _load_plot(self, ref: str) -> bytes:
        path = Path(ref)
        deadline = time.monotonic() + PLOT_WAIT_S
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        raw = path.read_bytes()
        if len(raw) > MAX_IMAGE_BYTES or not raw.startswith((b"\x89PNG", b"\xff\xd8")):
            raise ValueError("plot is not a PNG/JPEG of at most 2 MB")
        return raw

    def _check(self, got: tuple[int, object] | Delivery) -> Delivery:
        if isinstance(got, Delivery):
            return got
        status, data = got
        if not isinstance(data, dict) or "errcode" not in data:
            return Delivery.permanent(f"wecom: HTTP {status} without an errcode body (is the url a WeCom robot?)")
        if data["errcode"] == 0:
            return Delivery(True)
        return self.classify(int(data["errcode"]), str(data.get("errmsg", "")), CODES)

    def build(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> dict[str, object]:
        text = rendered.text
        if self.cfg.mentions:  # <@all> only when the receiver lists "all"
            mention = "\n" + " ".join(f"<@{m.lstrip('@')}>" for m in self.cfg.mentions)
            if len((text + mention).encode()) <= self.max_bytes:
                text += mention
        return {"msgtype": "markdown", "markdown": {"content": text}}

    def overshoot(self, body: dict) -> int:  # type: ignore[override]
        return len(body["markdown"]["content"].encode()) - self.max_bytes

    def send(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> Delivery:
        result = self._check(self.post(self.cfg.url, self.build(rendered, notes, digest)))
        ref = "" if digest else _plot_ref(notes)
        if not result.ok or not ref:
            return result
        try:
            raw = self._load_plot(ref)
        except (OSError, ValueError) as exc:
            return Delivery(True, error=f"plot not sent: {type(exc).__name__}: {str(exc)[:120]}")
        image = {"base64": base64.b64encode(raw).decode(), "md5": hashlib.md5(raw).hexdigest()}
        img = self._check(self.post(self.cfg.url, {"msgtype": "image", "image": image}))
        # The text went out; a lost plot is reported but not retried, which would repeat the text.
        return result if img.ok else Delivery(True, error=f"plot not sent: {img.error}")
