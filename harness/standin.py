"""Local stand-ins of the chat robots (DingTalk, WeCom, Feishu, a generic JSON webhook), following
their documented contracts, for the demo, benchmarks and tests: on a laptop with no robot configured
``make demo`` delivers to one of these, so the whole loop (render -> sign -> HTTP -> errcode handling) runs
for real. Each runs a real ``ThreadingHTTPServer`` on 127.0.0.1 with an ephemeral port (``port=0``).

Shared behaviour: the robots answer HTTP 200 with an error code in the JSON body; rate windows are
counted on an injected clock (share the engine's ``SimulatedClock``), signature timestamps on wall time
(the real robots compare against their own clock). On demand a stand-in answers 500, hangs past the
client's timeout (without accepting the message, as if the request was lost), answers a given errcode,
or is down (socket closed: connection refused) -- see ``fail_next`` and ``down``/``up``. Everything
accepted is recorded in ``received`` with the stand-in's clock time and passed to ``on_receive`` (the
demo prints it as it arrives).

Why our own servers and not a mock library: the point is to exercise the real notifiers over real HTTP,
including the robots' quirks (HTTP 200 + errcode, signing, byte limits, rate windows), which a generic
HTTP mock does not know."""


from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from alerting.clock import Clock, SystemClock


@dataclass
class Received:
    at: float
    path: str
    query: dict[str, str]
    body: Any

    @property
    def text(self) -> str:
        """The human-readable message content, whatever the channel."""
        b = self.body
        if isinstance(b, dict):
            if "markdown" in b:
                return b["markdown"].get("text") or b["markdown"].get("content", "")
            if "card" in b:
                card = b["card"]
                return card["header"]["title"]["content"] + "\n" + card["elements"][0]["text"]["content"]
        return json.dumps(b, ensure_ascii=False)


@dataclass
class RobotStandIn:
    """Base of the stand-ins; subclasses implement ``check`` (the channel's documented rules)."""

    clock: Clock = field(default_factory=SystemClock)
    sign_clock: Clock = field(default_factory=SystemClock)
    hang_s: float = 1.0
    received: list[Received] = field(default_factory=list)
    attempts: int = 0  # every request that reached the server, accepted or not
    script: deque[str] = field(default_factory=deque)
    _sent: deque[float] = field(default_factory=deque)
    _throttled_until: float = 0.0
    on_receive: Callable[[Received], None] | None = None
    listen_port: int = 0  # 0: a free ephemeral port

    rate_limit = 20
    window_s = 60.0

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.port = self.listen_port
        self.server: ThreadingHTTPServer | None = None
        self.up()

    # -- lifecycle -------------------------------------------------------------------------------------
    def up(self) -> None:
        robot = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                status, body = robot._handle(self.path, raw)
                if status == 0:
                    return  # hang-up: no answer at all
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def down(self) -> None:
        """Close the socket: clients get 'connection refused' until ``up``."""
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def close(self) -> None:
        self.down()

    def fail_next(self, n: int, how: str) -> None:
        """Next ``n`` requests: ``"500"``, ``"timeout"`` or ``"errcode:<code>"`` (not accepted)."""
        self.script.extend([how] * n)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- request handling ------------------------------------------------------------------------------
    def _handle(self, path: str, raw: bytes) -> tuple[int, Any]:
        with self.lock:
            self.attempts += 1
            how = self.script.popleft() if self.script else ""
        if how == "timeout":
            time.sleep(self.hang_s)
            return 0, None
        if how == "500":
            return 500, {"error": "internal"}
        parts = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            return 400, {"error": "body is not JSON"}
        if how.startswith("errcode:"):
            return 200, self.error(int(how.split(":")[1]), "scripted failure")
        with self.lock:
            problem = self.check(parts.path, query, body, len(raw))
            if problem is not None:
                return 200, problem
            now = self.clock.now()
            if now < self._throttled_until:
                return 200, self.rate_error()
            while self._sent and self._sent[0] <= now - self.window_s:
                self._sent.popleft()
            if len(self._sent) >= self.rate_limit:
                self._throttled_until = now + self.throttle_s
                return 200, self.rate_error()
            self._sent.append(now)
            rec = Received(now, parts.path, query, body)
            self.received.append(rec)
        if self.on_receive is not None:
            self.on_receive(rec)
        return 200, self.ok()

    throttle_s = 0.0

    def ok(self) -> dict[str, Any]:
        return {"errcode": 0, "errmsg": "ok"}

    def error(self, code: int, msg: str) -> dict[str, Any]:
        return {"errcode": code, "errmsg": msg}

    def rate_error(self) -> dict[str, Any]:
        raise NotImplementedError

    def check(self, path: str, query: dict[str, str], body: Any, size: int) -> dict[str, Any] | None:
        return None


@dataclass
class DingTalkStandIn(RobotStandIn):
    """DingTalk custom robot, https://open.dingtalk.com/document/robots/custom-robot-access :
    ``POST /robot/send?access_token=T[&timestamp=ms&sign=S]``; sign = base64(HMAC-SHA256(secret,
    "{timestamp}\\n{secret}")), timestamp within one hour, else errcode 310000 "sign not match";
    unknown token errcode 300001; msgtype text/markdown/link/actionCard/feedCard; markdown text over
    20000 bytes errcode 460101 "message too long"; more than 20 messages per minute errcode 130101
    "send too fast" and the robot stays throttled for 10 minutes."""

    token: str = "dt-token"
    secret: str | None = "SECdingtalk-secret"
    throttle_s = 600.0

    @property
    def url(self) -> str:
        return f"{self.base}/robot/send?access_token={self.token}"

    def rate_error(self) -> dict[str, Any]:
        return self.error(130101, "send too fast, exceed 20 times per minute")

    def check(self, path: str, query: dict[str, str], body: Any, size: int) -> dict[str, Any] | None:
        if path != "/robot/send" or query.get("access_token") != self.token:
            return self.error(300001, "token is not exist")
        if self.secret:
            try:
                ts = int(query["timestamp"])
            except (KeyError, ValueError):
                return self.error(310000, "sign not match, timestamp missing")
            if abs(self.sign_clock.now() * 1000 - ts) > 3600_000:
                return self.error(310000, "sign not match, timestamp is out of range")
            want = base64.b64encode(hmac.new(self.secret.encode(), f"{ts}\n{self.secret}".encode(),
                                             hashlib.sha256).digest()).decode()
            if query.get("sign") != want:
                return self.error(310000, "sign not match")
        if not isinstance(body, dict) or body.get("msgtype") not in ("text", "markdown", "link", "actionCard",
                                                                     "feedCard"):
            return self.error(40035, "unsupported msgtype")
        if body["msgtype"] == "markdown":
            md = body.get("markdown") or {}
            if not md.get("title") or not md.get("text"):
                return self.error(40035, "markdown needs title and text")
            if len(md["text"].encode()) > 20000:
                return self.error(460101, "message too long")
        return None


@dataclass
class WeComStandIn(RobotStandIn):
    """WeCom group robot, https://developer.work.weixin.qq.com/document/path/91770 :
    ``POST /cgi-bin/webhook/send?key=K``; wrong key errcode 93000 "invalid webhook url"; markdown
    content at most 4096 UTF-8 bytes (errcode 40058); image: ``base64`` of a jpg/png of at most 2 MB and
    the ``md5`` of the raw bytes (mismatch errcode 40009 invalid image); unknown msgtype errcode 40008;
    20 messages per minute, errcode 45009 "api freq out of limit"."""

    key: str = "wecom-key"

    @property
    def url(self) -> str:
        return f"{self.base}/cgi-bin/webhook/send?key={self.key}"

    def rate_error(self) -> dict[str, Any]:
        return self.error(45009, "api freq out of limit")

    def check(self, path: str, query: dict[str, str], body: Any, size: int) -> dict[str, Any] | None:
        if path != "/cgi-bin/webhook/send" or query.get("key") != self.key:
            return self.error(93000, "invalid webhook url")
        kind = body.get("msgtype") if isinstance(body, dict) else None
        if kind == "markdown":
            if len(str(body["markdown"].get("content", "")).encode()) > 4096:
                return self.error(40058, "markdown.content exceed max length 4096")
        elif kind == "image":
            try:
                raw = base64.b64decode(body["image"]["base64"])
            except (KeyError, ValueError):
                return self.error(40009, "invalid image")
            if len(raw) > 2 * 1024 * 1024 or hashlib.md5(raw).hexdigest() != body["image"].get("md5"):
                return self.error(40009, "invalid image size or md5")
        elif kind not in ("text", "news", "file", "template_card"):
            return self.error(40008, "invalid message type")
        return None


@dataclass
class FeishuStandIn(RobotStandIn):
    """Feishu custom bot, https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot :
    ``POST /open-apis/bot/v2/hook/<token>``; answers ``{"code": 0, "msg": "success"}``; wrong token code
    19001; signed bots need body ``timestamp`` (s) and ``sign`` = base64(HMAC-SHA256(key="{ts}\\n{secret}",
    msg="")), within one hour, else 19021; body over 20 KB code 9499; 100 per minute and 5 per second,
    code 11232 "frequency limited"."""

    token: str = "fs-token"
    secret: str | None = "feishu-secret"
    rate_limit = 100

    @property
    def url(self) -> str:
        return f"{self.base}/open-apis/bot/v2/hook/{self.token}"

    def ok(self) -> dict[str, Any]:
        return {"code": 0, "data": {}, "msg": "success"}

    def error(self, code: int, msg: str) -> dict[str, Any]:
        return {"code": code, "data": {}, "msg": msg}

    def rate_error(self) -> dict[str, Any]:
        return self.error(11232, "frequency limited psm[lark.oapi.app_platform_runtime]appID[1]")

    def check(self, path: str, query: dict[str, str], body: Any, size: int) -> dict[str, Any] | None:
        if path != f"/open-apis/bot/v2/hook/{self.token}":
            return self.error(19001, "param invalid: incoming webhook access token invalid")
        if size > 20 * 1024:
            return self.error(9499, "Bad Request: request body too large")
        if self.secret:
            try:
                ts = int(body["timestamp"])
            except (KeyError, TypeError, ValueError):
                return self.error(19021, "sign match fail or timestamp is not within one hour from current time")
            want = base64.b64encode(hmac.new(f"{ts}\n{self.secret}".encode(), b"", hashlib.sha256).digest()).decode()
            if abs(self.sign_clock.now() - ts) > 3600 or body.get("sign") != want:
                return self.error(19021, "sign match fail or timestamp is not within one hour from current time")
        if body.get("msg_type") not in ("text", "post", "image", "share_chat", "interactive"):
            return self.error(19002, "params error, msg_type need")
        recent = [r for r in self.received if r.at > self.clock.now() - 1.0]
        if len(recent) >= 5:
            return self.rate_error()
        return None


@dataclass
class WebhookStandIn(RobotStandIn):
    """A generic JSON receiver (Alertmanager webhook or API v2 ``/api/v2/alerts``): HTTP 200 when
    accepted; failures only when scripted. No rate limit."""

    rate_limit = 1 << 30

    @property
    def url(self) -> str:
        return f"{self.base}/hook"

    def ok(self) -> dict[str, Any]:
        return {}

    def rate_error(self) -> dict[str, Any]:
        return {}


STANDINS: dict[str, type[RobotStandIn]] = {
    "dingtalk": DingTalkStandIn, "wecom": WeComStandIn, "feishu": FeishuStandIn, "webhook": WebhookStandIn}


def receiver_yaml(kind: str, robot: RobotStandIn) -> str:
    """An alerting.yaml routing everything to this stand-in (``verl-alert test`` and ``verl-monitor run
    --notify-config`` read it as they would a real robot's)."""
    import yaml

    receiver = {"name": f"ops-{kind}", "type": kind, "url": robot.url}
    if getattr(robot, "secret", None):
        receiver["secret"] = robot.secret  # type: ignore[attr-defined]
    return yaml.safe_dump({"receivers": [receiver], "route": {"receiver": f"ops-{kind}"}}, sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    """``verl-ops robot wecom`` (or ``python -m harness.standin wecom``): serve a chat-robot stand-in on
    127.0.0.1, write an alerting.yaml that routes to it, print each message it receives until Ctrl-C."""
    import argparse
    from pathlib import Path

    p = argparse.ArgumentParser(prog="verl-ops robot", description=main.__doc__)
    p.add_argument("kind", choices=sorted(STANDINS), nargs="?", default="wecom")
    p.add_argument("--port", type=int, default=0, help="listen port (0: a free one)")
    p.add_argument("--write-config", metavar="FILE", default="alerting-standin.yaml",
                   help="alerting YAML routing to this stand-in (default alerting-standin.yaml; '' writes none)")
    args = p.parse_args(argv)
    robot_cls = STANDINS[args.kind]
    try:
        robot = robot_cls(listen_port=args.port,
                          on_receive=lambda r: print(f"--- received\n{r.text}\n", flush=True))
    except OSError as exc:
        print(f"standin: cannot listen on 127.0.0.1:{args.port} ({exc.strerror}); pass --port 0", flush=True)
        return 2
    print(f"{args.kind} stand-in: {robot.url}", flush=True)
    if args.write_config:
        try:
            Path(args.write_config).write_text(receiver_yaml(args.kind, robot))
        except OSError as exc:
            print(f"standin: --write-config {args.write_config}: cannot write ({exc.strerror}); pass another path",
                  flush=True)
            robot.close()
            return 2
        print(f"wrote {args.write_config} (receiver ops-{args.kind}); try: verl-alert test --config "
              f"{args.write_config} --receiver ops-{args.kind}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    robot.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
