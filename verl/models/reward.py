"""Reward sources behind one interface: ``score(texts) -> list[float]``.

``load_reward_model(path)`` accepts
- ``rule:NAME``: a built-in rule (see ``RULES``);
- ``module:function``: any importable ``function(texts: list[str]) -> list[float]``;
- a local HF sequence-classification directory (the first logit is the reward).
"""

from __future__ import annotations

import importlib
import string
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch

from verl.config.errors import TrainerConfigError


class Scores(list):
    """A list of floats that also formats like a float when it holds one score, so the article's
    ``print(f"Reward: {model.score([text]):.3f}")`` works as written."""

    def __format__(self, spec: str) -> str:
        if spec and len(self) == 1:
            return format(self[0], spec)
        return format(list(self), spec) if not spec else ", ".join(format(v, spec) for v in self)


class RewardModel(Protocol):
    def score(self, texts: list[str]) -> list[float]: ...


def _lowercase_ratio(text: str) -> float:
    """Share of characters that are ASCII lowercase letters; empty text scores 0."""
    return sum(ch in string.ascii_lowercase for ch in text) / len(text) if text else 0.0


def _length_ratio(text: str, target: int = 12) -> float:
    """Closeness of the response length to ``target`` characters (1 at the target)."""
    return max(0.0, 1.0 - abs(len(text) - target) / target)


RULES: dict[str, Callable[[str], float]] = {"lowercase": _lowercase_ratio, "length": _length_ratio}


class RuleReward:
    def __init__(self, name: str) -> None:
        if name not in RULES:
            raise TrainerConfigError(f"reward.path 'rule:{name}': unknown rule; use one of {', '.join(sorted(RULES))}")
        self.name = name
        self._rule = RULES[name]

    def score(self, texts: Sequence[str]) -> list[float]:
        """Score only the response part: a "Q: ... A: ..." text is scored after its last 'A:'."""
        return Scores(self._rule(_response_part(t)) for t in texts)


def _response_part(text: str) -> str:
    head, sep, tail = text.rpartition("A:")
    return tail.strip() if sep else text


class FunctionReward:
    def __init__(self, spec: str) -> None:
        module_name, _, func_name = spec.partition(":")
        try:
            func = getattr(importlib.import_module(module_name), func_name)
        except (ImportError, AttributeError) as exc:
            raise TrainerConfigError(f"reward.path '{spec}': cannot import ({exc}); give module:function") from None
        self._func = func

    def score(self, texts: Sequence[str]) -> list[float]:
        return Scores(float(v) for v in self._func(list(texts)))


class HFReward:
    """A local HF sequence-classification model; scores in batches of ``batch_size``."""

    def __init__(self, path: str, device: str = "cpu", batch_size: int = 64) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()  # as the trainer's own HF loads (verl.models.hf_loading)
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True)
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.to(device).eval()
        self.device = device
        self.batch_size = batch_size

    @torch.no_grad()
    def score(self, texts: Sequence[str]) -> list[float]:
        out = Scores()
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(list(texts[i:i + self.batch_size]), return_tensors="pt", padding=True,
                                 truncation=True).to(self.device)
            out.extend(self.model(**enc).logits[:, 0].float().cpu().tolist())
        return out


def load_reward_model(path: str, device: str = "cpu", batch_size: int = 64) -> RewardModel:
    if path.startswith("rule:"):
        return RuleReward(path.removeprefix("rule:"))
    if Path(path).is_dir():
        return HFReward(path, device=device, batch_size=batch_size)
    if ":" in path and not path.startswith(("/", ".")):
        return FunctionReward(path)
    raise TrainerConfigError(
        f"reward.path '{path}': not a directory, rule:NAME or module:function; fix the path"
    )
