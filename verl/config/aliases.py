"""volcengine verl's spellings of the config keys we share, accepted by ``verl-train`` as aliases.

A user coming from verl writes ``data.train_batch_size=32`` or ``algorithm.kl_ctrl.kl_coef=0.05``; these
mean our ``data.batch_size`` and ``kl_coef``. Only keys with the same meaning are listed (read in verl's
``verl/trainer/config/_generated_ppo_trainer.yaml``); verl keys we have no counterpart for stay unknown
and get the usual one-line error. Aliases apply to YAML files (nested sections) and to ``key=value``
overrides; giving both spellings with different values is an error naming both.
"""

from __future__ import annotations

from typing import Any

from verl.config.errors import TrainerConfigError

# verl key -> our key (critic.ppo_epochs and critic.ppo_mini_batch_size are spelt the same in verl, so no entry;
# verl's defaults interpolate the actor's values, ours are fixed: 1 and 16)
VERL_ALIASES: dict[str, str] = {
    "data.train_batch_size": "data.batch_size",
    "data.train_files": "data.prompt_dataset",
    "data.dataloader_num_workers": "data.num_workers",
    "data.max_response_length": "rollout.response_length",
    "algorithm.kl_ctrl.kl_coef": "kl_coef",
    "algorithm.kl_ctrl.type": "algorithm.kl_ctrl",
    "algorithm.kl_ctrl.target_kl": "algorithm.kl_target",
    "algorithm.kl_ctrl.horizon": "algorithm.kl_horizon",
    "actor_rollout_ref.model.path": "actor.model",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "actor.gradient_checkpointing",
    "actor_rollout_ref.actor.optim.lr": "actor.lr",
    "actor_rollout_ref.actor.ppo_epochs": "actor.ppo_epochs",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.clip_ratio": "actor.clip_ratio",
    "actor_rollout_ref.actor.clip_ratio_c": "actor.clip_ratio_c",
    "actor_rollout_ref.actor.entropy_coeff": "actor.entropy_coeff",
    "actor_rollout_ref.actor.grad_clip": "actor.grad_clip",
    "actor_rollout_ref.rollout.temperature": "rollout.temperature",
    "critic.optim.lr": "critic.lr",
    "critic.model.path": "critic.model",
    "reward_model.micro_batch_size_per_gpu": "reward_batch_size",
    "reward_model.model.path": "reward.path",
    "trainer.total_training_steps": "trainer.total_steps",
    "trainer.save_freq": "checkpoint.interval",
}


class AliasConflict(TrainerConfigError):
    pass


def alias_key(key: str) -> str:
    """Our key for a verl spelling (unchanged when it is not one)."""
    return VERL_ALIASES.get(key, key)


def _pop(raw: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    parts = dotted.split(".")
    node: Any = raw
    trail = []
    for part in parts[:-1]:
        if not isinstance(node, dict) or not isinstance(node.get(part), dict):
            return False, None
        trail.append((node, part))
        node = node[part]
    if not isinstance(node, dict) or parts[-1] not in node:
        return False, None
    value = node.pop(parts[-1])
    for parent, part in reversed(trail):  # drop sections the alias emptied (verl's kl_ctrl: {...})
        if parent[part] == {}:
            del parent[part]
    return True, value


def _get(raw: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def apply_aliases(raw: dict[str, Any]) -> dict[str, Any]:
    """Rewrite verl spellings in a loaded YAML mapping to ours, in place; returns ``raw``."""
    for verl_key, ours in VERL_ALIASES.items():
        found, value = _pop(raw, verl_key)
        if not found:
            continue
        have, existing = _get(raw, ours)
        if have and not isinstance(existing, dict) and existing != value:
            raise AliasConflict(f"config keys '{verl_key}' (verl's spelling) and '{ours}' disagree "
                                f"({value!r} vs {existing!r}); keep one of them")
        node = raw
        parts = ours.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return raw
