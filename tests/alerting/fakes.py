"""The robot stand-ins moved into the package (``alerting/standin.py``) so the demo can use them; the
tests keep their historical names through this re-export."""

from alerting.standin import DingTalkStandIn as FakeDingTalk
from alerting.standin import FeishuStandIn as FakeFeishu
from alerting.standin import Received
from alerting.standin import RobotStandIn as FakeRobot
from alerting.standin import WebhookStandIn as FakeWebhook
from alerting.standin import WeComStandIn as FakeWeCom

__all__ = ["FakeDingTalk", "FakeFeishu", "FakeRobot", "FakeWeCom", "FakeWebhook", "Received"]
