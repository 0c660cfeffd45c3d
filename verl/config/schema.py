"""The trainer's configuration schema: one dataclass per section, one docstring line per key.

Keys the article names keep their names and sit at the top level (``kl_coef``, ``rollout_worker_num``,
``reward_batch_size``, ``rollout_buffer_max_size``, ``rollout_buffer_eviction_policy``,
``offload_reward_to_cpu``). Keys used by the fault-tolerance components are declared here too, so the
schema is complete and an unknown key is always a typo.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TrainerConfig:
    total_steps: int = 100
    """PPO steps to run (one rollout batch + update each)."""
    seed: int = 0
    """Base seed: model init, data order and every per-(step, prompt) sampling generator derive from it."""
    experiment_name: str = "ppo"
    """Free-form run name, shown in logs."""
    log_interval: int = 1
    """Print a log line every N steps (a TTY gets a live progress line instead)."""
    deterministic: bool = True
    """Ask torch for deterministic kernels where they are cheap."""
    torch_threads: int = 0
    """Intra-op CPU threads for torch (0: torch's default). 1 avoids spin-wait contention on shared CPUs."""
    dist_backend: str = "auto"
    """torch.distributed backend under torchrun: auto (nccl with CUDA, gloo otherwise), gloo or nccl."""


@dataclass
class DataConfig:
    prompt_dataset: str = "builtin:toy_prompts"
    """Prompt file: JSONL or Parquet, local path or fsspec URL (s3://... with s3fs); builtin:NAME = shipped."""
    prompt_key: str = "prompt"
    """Field holding the prompt text in each record."""
    batch_size: int = 16
    """Prompts per PPO step, across all ranks."""
    max_prompt_length: int = 32
    """Prompts are truncated (left) to this many tokens."""
    shuffle: bool = True
    """Reshuffle prompt order every epoch (seeded by trainer.seed and the epoch)."""
    num_workers: int = 0
    """torch DataLoader worker processes (the article: 0 makes the main process load data)."""
    persistent_workers: bool = False
    """Keep DataLoader workers alive between epochs (needs num_workers > 0)."""
    pin_memory: bool = False
    """Pin host memory for faster host-to-GPU copies."""
    dedup: bool = True
    """Prompt clustering with a per-cluster cooldown (data guard); data.dedup_method says how prompts are compared."""
    dedup_method: str = "minhash"
    """minhash (lexical MinHash-LSH) or semantic (random-hyperplane LSH on sentence embeddings; needs verl-ops[semantic])."""
    cooldown_minutes: float = 30.0
    """Minimum time before a prompt of the same cluster is sampled again."""
    max_response_tokens: int = 512
    """Rollout validation: longer responses are dropped."""
    response_schema: str | None = None
    """Rollout validation: path to a JSON Schema every response must satisfy (null: not checked)."""
    guard_step_seconds: float = 60.0
    """Training time one step stands for on the cooldown clock (step-derived, so a resumed run admits the same prompts)."""


@dataclass
class TinyModelConfig:
    n_layer: int = 2
    """Transformer blocks of the random-init GPT-2-style model."""
    n_embd: int = 64
    """Hidden size."""
    n_head: int = 2
    """Attention heads."""


@dataclass
class ActorConfig:
    model: str = "tiny"
    """'tiny' (random-init GPT-2-style, byte tokenizer) or a local HF causal-LM directory."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Shape of the tiny model."""
    device: str = "auto"
    """Placement: auto (cuda:LOCAL_RANK if available, else cpu), cpu, cuda, cuda:N."""
    lr: float = 1e-3
    """AdamW learning rate."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up steps."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    ppo_mini_batch_size: int = 16
    """Sequences per optimizer step, per rank."""
    clip_ratio: float = 0.2
    """PPO ratio clip epsilon."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound for negative advantages (> 1)."""
    entropy_coeff: float = 0.0
    """Entropy bonus weight in the actor loss."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this value."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (OOM degradation turns this on)."""
    micro_batches: int = 1
    """Split each mini-batch into this many forward/backward passes."""
    strategy: str = "ddp"
    """ddp (every rank holds the whole model) or fsdp (FSDP2 fully_shard per block and at the root; the reference follows)."""


@dataclass
class CriticConfig:
    model: str | None = None
    """Local HF directory for the critic backbone; null = same as actor.model."""
    device: str = "auto"
    """Placement, as actor.device."""
    lr: float = 1e-3
    """AdamW learning rate."""
    ppo_epochs: int = 1
    """Passes of the critic update over each rollout batch (its own; not actor.ppo_epochs)."""
    ppo_mini_batch_size: int = 16
    """Sequences per critic optimizer step, per rank (its own; not actor.ppo_mini_batch_size)."""
    cliprange_value: float = 0.5
    """Value-loss clip range around the old values."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this value."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward."""
    micro_batches: int = 1
    """Split each mini-batch into this many forward/backward passes."""
    strategy: str = "ddp"
    """ddp or fsdp, as actor.strategy."""


@dataclass
class ReferenceConfig:
    device: str = "auto"
    """Placement of the frozen reference policy."""


@dataclass
class RewardConfig:
    path: str = "rule:lowercase"
    """HF sequence-classification directory, rule:NAME (built-in) or module:function."""
    device: str = "auto"
    """Placement of a model reward (ignored by rules); offload_reward_to_cpu forces cpu."""
    timeout_s: float = 30.0
    """Per-call timeout before a call counts as failed (circuit breaker)."""
    failure_threshold: int = 3
    """Consecutive failures that open the circuit."""
    cache_size: int = 1000
    """(prompt, reward) pairs kept to score from while the circuit is open."""
    probe_interval_s: float = 5.0
    """Seconds between background health probes while open."""
    deadline_multiplier: float = 4.0
    """A closed-circuit call holds the step at most this x p95 of recent ok-call latency (then cached scores; the call still times out at timeout_s); 0 = wait up to timeout_s."""
    deadline_floor_s: float = 0.1
    """Lower bound of that deadline, so scheduling jitter on a healthy model does not serve steps from the cache."""


@dataclass
class RolloutConfig:
    engine: str = "hf"
    """hf (in-process generate: the tiny model's own, transformers' for an HF model) or vllm (needs the [vllm] extra)."""
    response_length: int = 16
    """Maximum new tokens per response."""
    temperature: float = 1.0
    """Sampling temperature."""
    prefetch_batches: int = 0
    """Batches generated ahead into the rollout buffer (async-style backlog; samples are that many steps stale)."""
    oom_backoff_steps: int = 20
    """After a reward-model OOM the shed backlog is not rebuilt for this many steps (memory pressure back-off)."""
    worker_chunk_size: int = 4
    """Prompts per task sent to a rollout worker process (rollout_worker_num > 0)."""


@dataclass
class AlgorithmConfig:
    gamma: float = 1.0
    """GAE discount."""
    lam: float = 0.95
    """GAE lambda."""
    kl_penalty: str = "kl"
    """KL estimator in the token reward: kl, abs, mse or low_var_kl."""
    kl_ctrl: str = "fixed"
    """KL controller: fixed or adaptive."""
    kl_target: float = 0.1
    """Adaptive controller: target KL."""
    kl_horizon: int = 10000
    """Adaptive controller: horizon in samples."""


@dataclass
class GuardConfig:
    variance_jump: float = 3.0
    """Pause a batch whose reward variance jumps by this factor over the recent batches (and significantly)."""
    extreme_ratio: float = 0.05
    """Pause a batch when more than this share of rewards are extreme."""
    window: int = 16
    """Accepted batches the guard's reference spans: slower trends than this are learning, not anomalies."""


@dataclass
class CheckpointConfig:
    interval: int = 500
    """Save every N steps (0 disables periodic saves)."""
    keep_last: int = 3
    """Complete checkpoints kept (the newest complete one is never deleted)."""
    async_save: bool = True
    """Save in the background; the step blocks only while state is staged."""
    rollout_cache_shard_bytes: int = 2 * 1024**3
    """Maximum size of one rollout-cache Arrow file."""
    memory_interval: int = 0
    """Snapshot to the in-memory tier every N steps (0: off); skipped while the previous snapshot is still being written."""
    memory_dir: str | None = None
    """The in-memory tier's directory, on tmpfs (default: /dev/shm/verl-ops-<hash of checkpoint dir>)."""
    memory_keep_last: int = 2
    """Snapshots kept in the in-memory tier."""
    save_on_sigterm: bool = True
    """On SIGTERM (a preemption) finish the save in flight or checkpoint the last finished step, then exit 0."""
    sigterm_grace_s: float = 30.0
    """Longest the SIGTERM save may take; a save still being written then is abandoned (never half-complete)."""


@dataclass
class FaultsConfig:
    reward_hang_at_step: int | None = None
    """From this step the reward model hangs (circuit breaker path)."""
    reward_oom_at_step: int | None = None
    """At this step the reward model raises an out-of-memory error."""
    critic_oom_at_step: int | None = None
    """At this step the critic update raises an out-of-memory error (degradation path)."""
    critic_oom_repeat: int = 1
    """How many consecutive critic-update attempts fail at critic_oom_at_step (2: OOM again while degraded -> checkpoint, stop)."""
    reward_hang_seconds: float = 60.0
    """How long the reward-model hang lasts (wall time) once it starts; then the model answers again."""
    kill_rollout_worker_at_steps: list[int] = field(default_factory=list)
    """SIGKILL a rollout worker at each of these steps."""
    checkpoint_write_delay_s: float = 0.0
    """The background checkpoint writer pauses this long between the data files and meta.json/COMPLETE (a SIGKILL then lands mid-save)."""
    checkpoint_enospc_at_steps: list[int] = field(default_factory=list)
    """The checkpoint saves of these steps fail with ENOSPC (disk full) after their data files are written."""
    gpu_leak_mb_per_min: float = 0.0
    """Hold a real, growing allocation of this many MB per minute (GPU if present, else host memory)."""
    throughput_drop_at_step: int | None = None
    """From this step the dataloader stage sleeps so tokens/s falls by throughput_drop_factor."""
    throughput_drop_factor: float = 0.5
    """Throughput multiplier after throughput_drop_at_step (0.5 = halved)."""
    kl_drift_at_step: int | None = None
    """From this step kl_coef is forced to 0, so KL really drifts."""
    kill_trainer_at_step: int | None = None
    """SIGKILL the trainer itself during this step (after rollout, before the update)."""
    slow_rank: int | None = None
    """This torchrun rank (RANK) is a straggler: it sleeps slow_rank_seconds inside slow_rank_stage of every step from slow_rank_from_step."""
    slow_rank_stage: str = "rollout"
    """The stage the slow rank sleeps in (a verl_stage_seconds stage: rollout, reward, reference, ...)."""
    slow_rank_seconds: float = 0.5
    """How long the slow rank sleeps in that stage each step."""
    slow_rank_from_step: int = 1
    """The first step the slow rank is slow."""
    trigger_file: str | None = None
    """Runtime faults: each JSON line appended here ({"fault": "reward_hang"} or {"fault": "critic_oom"}) is injected at the next step's start."""


@dataclass
class MetricsConfig:
    enabled: bool = True
    """Update metric values (the endpoint only runs when a port is given)."""
    host: str = "127.0.0.1"
    """Address the /metrics endpoint binds."""
    port: int | None = None
    """Port of /metrics, /healthz, /api/v1/reward_outliers (null: no endpoint; 0: pick a free one)."""
    interval_s: float = 30.0
    """Framework-level refresh period (--metrics-interval)."""
    hardware_interval_s: float = 5.0
    """GPU/host sampling period."""
    data_interval_steps: int = 1000
    """Data-level metrics (diversity, reward/prompt shift, sample age) every N steps, in the background."""
    prompt_analysis: str = "auto"
    """Prompt diversity/shift: semantic (embeddings; needs verl-ops[semantic]), lexical (distinct-2), auto (semantic when installed)."""
    layer_kl: bool = True
    """Compute verl_layer_kl (logit-lens KL per layer) each step."""
    outliers_top_k: int = 3
    """Prompts returned by /api/v1/reward_outliers."""
    api_token: str | None = None
    """Bearer token /api/v1/reward_outliers requires (null: open). /metrics and /healthz stay open for scrapers."""
    api_token_env: str | None = None
    """Name of an environment variable holding that token (keeps it out of the YAML and the command line)."""


@dataclass
class Config:
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    """Run length, seed, logging."""
    data: DataConfig = field(default_factory=DataConfig)
    """Prompt dataset and loader."""
    actor: ActorConfig = field(default_factory=ActorConfig)
    """Policy model and its optimizer."""
    critic: CriticConfig = field(default_factory=CriticConfig)
    """Value model and its optimizer."""
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)
    """Frozen reference policy."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward source and its circuit breaker."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Generation engine."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """GAE and KL control."""
    guard: GuardConfig = field(default_factory=GuardConfig)
    """Reward guard thresholds."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoint cadence and retention."""
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    """Fault injection (all off by default)."""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    """Prometheus endpoint and sampling."""
    kl_coef: float = 0.1
    """Initial KL penalty coefficient (the article: expected 0.1-0.5; 0.0 lets KL drift)."""
    rollout_worker_num: int = 0
    """Rollout worker processes (0: generate in the trainer process)."""
    reward_batch_size: int = 64
    """Texts per reward-model call."""
    rollout_buffer_max_size: int = 50000
    """Bound of the rollout buffer; -1 = unbounded (warned at start: the article's OOM)."""
    rollout_buffer_eviction_policy: str = "fifo"
    """fifo (oldest first) or priority (lowest reward first)."""
    offload_reward_to_cpu: bool = False
    """Place the reward model on CPU whatever reward.device says."""
