"""Notifier contract: turn a rendered message (or the raw notifications, for JSON receivers) into one
HTTP call and classify the answer. Robot APIs answer HTTP 200 with an error code in the body, so each
channel maps its codes to delivered / retry later / rate limited / permanent. Error strings name the code
and the robot's message but never the URL (it carries the access token) or the secret."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from alerting.clock import Clock, SystemClock
from alerting.config import ReceiverConfig
from alerting.http_limits import BodyTooLarge, read, tls_context
from alerting.model import Notification
from alerting.templates import Rendered

# Query parameters that carry robot credentials (DingTalk access_token/timestamp/sign, WeCom key,
# Feishu/others token/secret), and the userinfo part of any URL (http://user:pass@host).
ANSWER_LIMIT = 1 << 20  # a robot's answer is a few hundred bytes of JSON; a larger one is not read whole
_SECRETY = re.compile(r"(?<![A-Za-z0-9])(access_token|key|sign|timestamp|token|secret)=[^&\s\"'<>]+", re.I)
_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/\s@\"'<>]+@", re.I)


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with the given secrets, credential query values and URL userinfo replaced by ``***``."""
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return _USERINFO.sub(r"\1***@", _SECRETY.sub(r"\1=***", text))


@dataclass
class Delivery:
    ok: bool
    retryable: bool = False
    rate_limited: bool = False
    error: str = ""
    code: int | None = None
    too_long: bool = False  # the robot refused the message's size: worth re-sending shorter


    @classmethod
    def retry(cls, error: str, code: int | None = None) -> Delivery:
        return cls(False, retryable=True, error=error, code=code)

    @classmethod
    def permanent(cls, error: str, code: int | None = None) -> Delivery:
        return cls(False, error=error, code=code)


def encode(body: Any) -> bytes:
    """The exact bytes posted (compact UTF-8 JSON): budgets are measured on these, not on the text."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


Rerender = Callable[[int], Rendered]  # a text budget in bytes -> the message rendered to fit it
FIT_TRIES = 6


class Notifier:
    kind = "base"
    max_bytes = 16000   # the first text budget; ``overshoot`` has the last word, on the encoded request
    too_long_codes: frozenset[int] = frozenset()
    limits: list[tuple[int, float]] = []  # (messages, seconds) the robot accepts
    throttle_s = 60.0

    def __init__(self, cfg: ReceiverConfig, sign_clock: Clock | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.cfg = cfg
        # Signatures carry wall time even in replay: the robot checks them against its own clock.
        self.sign_clock = sign_clock or SystemClock()
        self.client = httpx.Client(timeout=cfg.timeout_s, transport=transport, follow_redirects=False,
                                   verify=tls_context())

    @property
    def robot_id(self) -> str:
        """Rate limits belong to the robot (its URL), shared by receivers that post to the same one."""
        return hashlib.sha256(self.cfg.url.encode()).hexdigest()[:16]  # the url holds the token: never stored

    def cost(self, notes: list[Notification], digest: bool) -> int:
        return 1

    def send(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> Delivery:
        raise NotImplementedError

    def build(self, rendered: Rendered, notes: list[Notification], digest: bool = False) -> Any:
        """The request body ``send`` posts for ``rendered`` (None: this channel has no size limit)."""
        return None

    def overshoot(self, body: Any) -> int:
        """Bytes by which ``body``, as encoded, exceeds the robot's documented limit (<= 0: fits)."""
        return 0

    def fit(self, rendered: Rendered, notes: list[Notification], digest: bool,
            rerender: Rerender | None, budget: int | None = None) -> Rendered:
        """``rendered``, or re-rendered smaller until the final encoded request fits: the text budget
        shrinks by what the request overshot (newline doubling, escaping, the envelope)."""
        budget = budget or self.max_bytes
        for _ in range(FIT_TRIES):
            over = self.overshoot(self.build(rendered, notes, digest))
            if over <= 0 or rerender is None:
                return rendered
            # every text byte is at least one request byte, so cutting ``over`` from the text as it
            # is (not from the budget: whole alert lines often leave it well under) gets there
            size = len(rendered.text.encode())
            budget = min(budget, size) - max(over, size // 50)
            rendered = rerender(max(budget, 64))
        return rendered

    def deliver(self, rendered: Rendered, notes: list[Notification], digest: bool = False,
                rerender: Rerender | None = None) -> Delivery:
        """Send, fitted; a robot that still answers "too long" gets the message again, shorter (twice at
        most), so a notification never fails permanently for its size."""
        rendered = self.fit(rendered, notes, digest, rerender)
        result = self.send(rendered, notes, digest)
        budget = len(rendered.text.encode())
        for _ in range(2):
            if not result.too_long or rerender is None:
                break
            budget //= 2
            rendered = self.fit(rerender(budget), notes, digest, rerender, budget)
            result = self.send(rendered, notes, digest)
        if result.too_long and rerender is not None:  # refused at a quarter of the size: not the size
            # (40058 also means "a field is invalid"); permanent, or the outbox would retry it for ever
            return Delivery.permanent(f"{result.error}; refused again at {budget} B of text", result.code)
        return result

    def close(self) -> None:
        self.client.close()

    def post(self, url: str, body: Any, params: dict[str, str] | None = None) -> tuple[int, Any] | Delivery:
        """POST JSON; transport problems and 5xx/429 become retryable ``Delivery``s."""
        try:
            # merge, not replace: robot urls already carry their token in the query
            target = httpx.URL(url).copy_merge_params(params) if params else httpx.URL(url)
            with self.client.stream("POST", target, content=encode(body),
                                    headers={"Content-Type": "application/json"}) as resp:
                try:
                    content = read(resp, ANSWER_LIMIT) if resp.status_code < 500 and resp.status_code != 429 else b""
                except BodyTooLarge:  # its answer is not a robot's: read as one that is not JSON
                    content = b"\x00"
        except httpx.TimeoutException as exc:
            return Delivery.retry(f"timeout ({type(exc).__name__}) after {self.cfg.timeout_s:g}s")
        except httpx.HTTPError as exc:
            return Delivery.retry(f"connection failed ({type(exc).__name__})")
        if resp.status_code == 429:
            return Delivery(False, retryable=True, rate_limited=True, error="HTTP 429 too many requests", code=429)
        if resp.status_code >= 500:
            return Delivery.retry(f"HTTP {resp.status_code} from receiver", resp.status_code)
        try:
            data = json.loads(content) if content else {}
        except (ValueError, RecursionError):
            data = None
        return resp.status_code, data

    def classify(self, code: int, msg: str, table: dict[int, str]) -> Delivery:
        """``table`` maps documented codes to 'rate' or 'retry'; other non-zero codes are permanent."""
        msg = redact(str(msg), self.cfg.secret)[:200]
        what = f"{self.kind} errcode {code}: {msg}"
        kind = table.get(code, "permanent")
        if code in self.too_long_codes:  # retried shorter by ``deliver``, else later: never lost for its size
            return Delivery(False, retryable=True, error=what + " (message too long)", code=code, too_long=True)
        if kind == "rate":
            return Delivery(False, retryable=True, rate_limited=True, error=what, code=code)
        if kind == "retry":
            return Delivery.retry(what, code)
        return Delivery.permanent(what + _HINTS.get((self.kind, code), ""), code)


_HINTS = {
    ("dingtalk", 310000): " (check the receiver's secret, keywords and IP allow-list)",
    ("dingtalk", 300001): " (the access_token in the receiver url is wrong or the robot was removed)",
    ("dingtalk", 460101): " (message too long)",
    ("wecom", 93000): " (the key in the receiver url is wrong or the robot was removed)",
    ("wecom", 40058): " (message too long or a field is invalid)",
    ("feishu", 19021): " (signature or timestamp rejected: check the receiver's secret and the clock)",
    ("feishu", 19024): " (message lacks the robot's keyword)",
}
