"""The user's vocabulary: our config keys as a volcengine verl user spells them, with verl's defaults.

Runbooks and suggestions name config keys. For a run of our trainer (dialect ``"verl-ops"``) they are
our keys (``kl_coef``, ``reward_batch_size``); for a volcengine verl run (dialect ``"verl"``: the series
came from its ``file`` logger or its ``rl_insight`` gauges) they must be verl's (``algorithm.kl_ctrl.kl_coef``,
``reward_model.micro_batch_size_per_gpu``) with verl's defaults, and a key verl does not have is said
so rather than named. Every verl key and default below was read in verl's
``verl/trainer/config/_generated_ppo_trainer.yaml`` (main, 0.8.0.dev) and ``ppo_trainer.yaml`` (0.6.0).

API (plain functions; ``dialect`` is ``"verl"`` or anything else for our own spelling):

- ``key(name, dialect)`` -> the key as the user writes it (``"kl_coef"`` -> ``"algorithm.kl_ctrl.kl_coef"``
  and ``"actor_rollout_ref.actor.kl_loss_coef"`` joined by " / " when verl has two);
- ``default(name, dialect)`` -> the default as text, or None;
- ``describe(name, dialect, config=None)`` -> ``"algorithm.kl_ctrl.kl_coef (verl default 0.001, now 0.0)"``
  (``config``: the run's resolved settings under our key names, e.g. ``verl_config_info`` labels; dotted
  or underscored names both work: ``data.num_workers`` / ``data_num_workers``);
- ``setting(name, value, dialect)`` -> ``"data.pin_memory=true"``, or verl's note when it has no such key;
- ``Vocabulary(dialect, config)`` -> the same bound to one run, as runbook templates use it:
  ``{{ vocab.key('kl_coef') }}``, ``{{ vocab.describe('data.num_workers') }}``.

Unknown names come back unchanged, so a template never breaks on a key this table lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

VERL = "verl"
OURS = "verl-ops"


@dataclass(frozen=True)
class Term:
    ours_default: str | None          # our trainer's default (verl/config/schema.py) or expected range
    verl_keys: tuple[str, ...]        # empty: verl has no such setting
    verl_default: str | None
    verl_note: str = ""               # what to say instead when verl has no such key


TERMS: dict[str, Term] = {
    "kl_coef": Term("expected 0.1-0.5, 0.0 disables the penalty",
                    ("algorithm.kl_ctrl.kl_coef", "actor_rollout_ref.actor.kl_loss_coef"), "0.001"),
    "reward_batch_size": Term("default 64", ("reward_model.micro_batch_size_per_gpu",), "null = whole batch"),
    "offload_reward_to_cpu": Term(None, ("reward_model.model.fsdp_config.param_offload",), "false"),
    "data.num_workers": Term("0 = main process", ("data.dataloader_num_workers",), "8"),
    "data.persistent_workers": Term(None, (), None, "not configurable in verl (its StatefulDataLoader decides)"),
    "data.pin_memory": Term(None, (), None, "not configurable in verl"),
    "data.prompt_dataset": Term(None, ("data.train_files",), None),
    "data.batch_size": Term("default 16", ("data.train_batch_size",), "1024"),
    "rollout_worker_num": Term(None, ("actor_rollout_ref.rollout.agent.num_workers",), "8"),
    "rollout_buffer_max_size": Term("default 50000", (), None,
                                    "verl keeps no rollout buffer between steps (batches are trained on at once)"),
    "rollout_buffer_eviction_policy": Term("fifo", (), None, "verl keeps no rollout buffer"),
    "lr": Term("default 1e-3", ("actor_rollout_ref.actor.optim.lr",), "1e-06"),
    "critic.lr": Term("default 1e-3", ("critic.optim.lr",), "1e-05"),
    "total_steps": Term("default 100", ("trainer.total_training_steps",), "null = epochs x batches"),
    "checkpoint.interval": Term("default 500", ("trainer.save_freq",), "-1 = never"),
    "kl_target": Term("default 0.1", ("algorithm.kl_ctrl.target_kl",), "0.1"),
    "kl_ctrl": Term("default fixed", ("algorithm.kl_ctrl.type",), "fixed"),
    "grad_clip": Term("default 1.0", ("actor_rollout_ref.actor.grad_clip",), "1.0"),
    "gradient_checkpointing": Term("default false", ("actor_rollout_ref.model.enable_gradient_checkpointing",), "true"),
}
# spellings of the same term (config-info labels use underscores)
_ALIASES = {"data_num_workers": "data.num_workers", "data_persistent_workers": "data.persistent_workers",
            "data_pin_memory": "data.pin_memory", "data_prompt_dataset": "data.prompt_dataset",
            "--offload_reward_to_cpu": "offload_reward_to_cpu", "actor.lr": "lr",
            "trainer.total_steps": "total_steps", "algorithm.kl_target": "kl_target",
            "algorithm.kl_ctrl": "kl_ctrl"}


def _term(name: str) -> tuple[str, Term | None]:
    canon = _ALIASES.get(name, name)
    return canon, TERMS.get(canon)


def key(name: str, dialect: str = OURS) -> str:
    canon, term = _term(name)
    if dialect != VERL or term is None:
        return "--offload_reward_to_cpu" if canon == "offload_reward_to_cpu" and dialect != VERL else name
    if not term.verl_keys:
        return f"{canon} ({term.verl_note})"
    return " / ".join(term.verl_keys)


def default(name: str, dialect: str = OURS) -> str | None:
    _, term = _term(name)
    if term is None:
        return None
    return term.verl_default if dialect == VERL else term.ours_default


def current(name: str, config: Mapping[str, str] | None) -> str | None:
    """The run's value of ``name`` from resolved settings keyed by our names (dots or underscores)."""
    if not config:
        return None
    canon, _ = _term(name)
    for k in (name, canon, canon.replace(".", "_")):
        if k in config and config[k] not in (None, ""):
            return str(config[k])
    return None


def describe(name: str, dialect: str = OURS, config: Mapping[str, str] | None = None) -> str:
    canon, term = _term(name)
    shown = key(name, dialect)
    if term is None:
        return shown
    if dialect == VERL and not term.verl_keys:
        return shown
    parts = []
    dflt = default(name, dialect)
    if dflt is not None:
        parts.append(f"verl default {dflt}" if dialect == VERL else dflt)
    now = current(name, config)
    if now is not None:
        parts.append(f"now {now}")
    return f"{shown} ({', '.join(parts)})" if parts else shown


def setting(name: str, value: str, dialect: str = OURS) -> str:
    """``key=value`` as the user would write it; verl's note instead when verl has no such key."""
    _, term = _term(name)
    if dialect == VERL and term is not None and not term.verl_keys:
        return key(name, dialect)
    return f"{key(name, dialect).split(' / ')[0]}={value}"


@dataclass(frozen=True)
class Vocabulary:
    """``describe``/``key``/``default`` bound to one run's dialect and resolved config (for templates)."""

    dialect: str = OURS
    config: Mapping[str, str] | None = None

    def key(self, name: str) -> str:
        return key(name, self.dialect)

    def default(self, name: str) -> str:
        return default(name, self.dialect) or ""

    def describe(self, name: str) -> str:
        return describe(name, self.dialect, self.config)

    def setting(self, name: str, value: str) -> str:
        return setting(name, value, self.dialect)
