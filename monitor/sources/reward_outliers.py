"""The verl trainers' most anomalous prompts (``/api/v1/reward_outliers?k=3``) as a source: every 10 s,
all trainers at once, each request capped at 2 s. What it reads travels forward as ``TopPrompts``
records, the context a RewardDistributionDrift alert of that trainer's node carries. A trainer that cannot
be reached keeps its last prompts, one answering with an error status has none (the endpoint is optional:
neither counts as an error)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from alerting.clock import Clock
from alerting.http_limits import BodyTooLarge, read_async
from monitor.sources.base import DownLabels, Round, TopPrompts
from monitor.sources.prom_text import Target

EVERY_S = 10.0
CAP_S = 2.0
BODY_LIMIT = 1 << 20  # three prompts of at most a few KB each: a larger answer is not the trainer's


def prompt_lines(doc: Any) -> tuple[str, ...]:
    """The top 3 of a reward_outliers answer as "reward: prompt" lines."""
    items = doc.get("outliers", doc.get("data", [])) if isinstance(doc, dict) else doc
    lines = []
    for it in (items if isinstance(items, list) else [])[:3]:
        if isinstance(it, dict):
            reward = it.get("reward", it.get("score"))
            prompt = str(it.get("prompt", it.get("text", "")))[:200]
            lines.append(f"{reward}: {prompt}" if reward is not None else prompt)
        else:
            lines.append(str(it)[:200])
    return tuple(lines)


class RewardOutlierSource:
    """``tokens``: target name -> the trainer's API token (its ``metrics.api_token``)."""

    def __init__(self, targets: list[Target], tokens: dict[str, str], client: httpx.AsyncClient) -> None:
        self.targets = [tg for tg in targets if tg.job == "verl"]
        self.tokens, self.client = tokens, client
        self.name = self.metric = "reward outliers"
        self.interval, self.budget, self.offset, self.wait_after = EVERY_S, EVERY_S, 0.0, True
        self.down = DownLabels("verl")

    async def fetch(self, tg: Target, now: float) -> TopPrompts | None:
        url = str(httpx.URL(tg.url).copy_with(path="/api/v1/reward_outliers", query=b"k=3"))
        token = self.tokens.get(tg.name)
        headers = {"Authorization": f"Bearer {token}"} if token else None
        cap = min(tg.timeout, CAP_S)
        try:
            doc = await asyncio.wait_for(self._get(url, cap, headers), cap)
        except (httpx.HTTPError, ValueError, asyncio.TimeoutError, RecursionError, BodyTooLarge):
            return None
        return TopPrompts(tg.name, tg.node, prompt_lines(doc), now)

    async def _get(self, url: str, timeout: float, headers: dict[str, str] | None) -> object:
        async with self.client.stream("GET", url, timeout=timeout, headers=headers) as resp:
            return json.loads(await read_async(resp, BODY_LIMIT)) if resp.status_code == 200 else None

    async def poll(self, clock: Clock) -> Round:
        now = clock.now()
        got = await asyncio.gather(*(self.fetch(tg, now) for tg in self.targets), return_exceptions=True)
        return Round(up=None, top_prompts=[p for p in got if isinstance(p, TopPrompts)])

    async def close(self) -> None:
        pass  # the client is the daemon's
