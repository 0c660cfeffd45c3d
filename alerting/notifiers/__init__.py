"""Channel notifiers, one module per channel; ``build_notifier`` picks one by receiver type."""

from __future__ import annotations

import httpx

from alerting.clock import Clock
from alerting.config import ReceiverConfig
from alerting.notifiers.base import Delivery, Notifier, redact
from alerting.notifiers.dingtalk import DingTalkNotifier
from alerting.notifiers.feishu import FeishuNotifier
from alerting.notifiers.webhook import AlertmanagerNotifier, WebhookNotifier
from alerting.notifiers.wecom import WeComNotifier

KINDS: dict[str, type[Notifier]] = {
    "dingtalk": DingTalkNotifier, "wecom": WeComNotifier, "feishu": FeishuNotifier,
    "webhook": WebhookNotifier, "alertmanager": AlertmanagerNotifier,
}


def build_notifier(cfg: ReceiverConfig, sign_clock: Clock | None = None,
                   transport: httpx.BaseTransport | None = None) -> Notifier:
    return KINDS[cfg.type](cfg, sign_clock=sign_clock, transport=transport)


__all__ = ["Delivery", "Notifier", "build_notifier", "redact", "KINDS"]
