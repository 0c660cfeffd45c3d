"""The "Verl PPO Training Dashboard": the article's §3.2 panels over the trainer's /metrics (SPEC §4)."""

from __future__ import annotations

from .deployment import cluster, rollout_servers
from .grafana import SEL, Dashboard, Panel, PanelQuery, Row, Variable, rate, standard_variables, zero_if_empty

CIRCUIT_STATES = [{
    "type": "value",
    "options": {
        "0": {"text": "closed", "color": "green", "index": 0},
        "1": {"text": "half-open", "color": "orange", "index": 1},
        "2": {"text": "open", "color": "red", "index": 2},
    },
}]
OUTLIERS_LINK = {
    "title": "Top-3 anomalous prompts (trainer API)",
    "url": "${trainer_api}/api/v1/reward_outliers?k=3",
    "targetBlank": True,
}
CONFIG_LABELS = (
    "instance, model, kl_coef, reward_batch_size, rollout_worker_num, rollout_buffer_max_size, "
    "rollout_buffer_eviction_policy, data_num_workers, data_persistent_workers, data_pin_memory, "
    "offload_reward_to_cpu"
)


def _increase(metric: str, by: str = "") -> str:
    agg = f"sum by ({by}) " if by else "sum "
    return f"{agg}(increase({metric}{{{SEL}}}[$__rate_interval]))"


def overview() -> Row:
    return Row("Overview", [
        Panel("stat", "Global step", "Current global training step (verl_global_step).", "none",
              [PanelQuery(f"max(verl_global_step{{{SEL}}})")], width=4, height=4, options={"colorMode": "none"}),
        Panel("stat", "Training speed", "Steps per minute, from the slope of verl_global_step.", "opm",
              [PanelQuery(f"max(deriv(verl_global_step{{{SEL}}}[$__rate_interval])) * 60")], width=4, height=4,
              options={"colorMode": "none"}),
        Panel("stat", "Heartbeat age",
              "Seconds since the training loop last made progress; TrainingStalled (P0) fires past 5 min.",
              "s", [PanelQuery(f"time() - max(verl_heartbeat_timestamp_seconds{{{SEL}}})")],
              width=4, height=4, thresholds=[(None, "green"), (120, "orange"), (300, "red")]),
        Panel("stat", "Last checkpoint age",
              "Seconds since the last complete checkpoint; CheckpointStale (P1) fires past 2 h.", "s",
              [PanelQuery(f"time() - max(verl_checkpoint_last_success_timestamp_seconds{{{SEL}}})")],
              width=4, height=4, thresholds=[(None, "green"), (3600, "orange"), (7200, "red")]),
        Panel("stat", "Reward model circuit",
              "Reward-model circuit breaker: open means rewards come from the cache of recent samples.",
              "none", [PanelQuery(f"max(verl_reward_model_circuit_state{{{SEL}}})")], width=4, height=4,
              mappings=CIRCUIT_STATES, thresholds=[(None, "green"), (1, "orange"), (2, "red")]),
        Panel("stat", "Rollout workers alive", "Rollout worker processes currently alive.", "none",
              [PanelQuery(f"sum(verl_rollout_workers_alive{{{SEL}}})")], width=4, height=4,
              thresholds=[(None, "red"), (1, "green")]),
    ])


def step_time() -> Row:
    return Row("Step time breakdown", [
        Panel("timeseries", "Step time by stage",
              "Wall time of each PPO stage in the last step, stacked: the article's flame graph as a "
              "breakdown (Prometheus cannot feed Grafana's flame graph panel). The tallest band is the "
              "bottleneck component.",
              "s", [PanelQuery(f"sum by (stage) (verl_stage_seconds{{{SEL}}})", "{{stage}}")],
              width=16, stacked=True),
        Panel("bargauge", "Share of step time",
              "Fraction of the step each stage takes (recording rule instance:verl_stage_seconds:ratio).",
              "percentunit", [PanelQuery(f"avg by (stage) (instance:verl_stage_seconds:ratio{{{SEL}}})", "{{stage}}")],
              width=8, min=0, max=1, thresholds=[(None, "green"), (0.5, "orange")],
              options={"displayMode": "gradient", "orientation": "horizontal"}),
        # per-rank times, gathered each step and exported by global rank 0
        Panel("timeseries", "Stage time by rank",
              "Wall time of each stage on each torchrun rank (verl_rank_stage_seconds). A straggler is the "
              "rank whose stage stands above its peers; the peers' wait shows up in the same stage or the "
              "next one with a collective (split below). StragglerRank (monitor) pages it with rank, node and stage.",
              "s", [PanelQuery(f"max by (rank, node, stage) (verl_rank_stage_seconds{{{SEL}}})",
                           "rank {{rank}} ({{node}}) {{stage}}")], width=12),
        Panel("timeseries", "Step time by rank",
              "Wall time of the last step on each torchrun rank (verl_rank_step_seconds); the step's "
              "collectives make them equal, so a spread here means ranks left the step at different times.",
              "s", [PanelQuery(f"max by (rank, node) (verl_rank_step_seconds{{{SEL}}})", "rank {{rank}} ({{node}})")],
              width=12),
        Panel("timeseries", "Compute and wait by rank",
              "Each rank's stage time split in two: its own work (verl_rank_stage_compute_seconds, solid) and "
              "the time it sat in a collective waiting for its peers (verl_rank_stage_wait_seconds). A "
              "straggler computes longer; the others wait about as long, in the same stage or the next one "
              "with a collective. StragglerRank scores the compute part.",
              "s", [PanelQuery(f"max by (rank, node, stage) (verl_rank_stage_compute_seconds{{{SEL}}})",
                           "compute rank {{rank}} ({{node}}) {{stage}}"),
                    PanelQuery(f"max by (rank, node, stage) (verl_rank_stage_wait_seconds{{{SEL}}})",
                           "wait rank {{rank}} ({{node}}) {{stage}}")], width=24),
    ])


def policy() -> Row:
    return Row("Policy and KL", [
        Panel("heatmap", "KL divergence per layer",
              "x = time, y = layer, colour = divergence of that layer from the reference model "
              "(verl_layer_kl). A band that darkens alone points at the layer that over-fits.",
              "none", [PanelQuery(f"max by (layer) (verl_layer_kl{{{SEL}}})", "{{layer}}")], width=12, height=10),
        Panel("timeseries", "KL divergence and coefficient",
              "Mean per-token KL divergence of the actor from the reference and the KL penalty coefficient. A KL spike with "
              "kl_coef at 0 is the article's 'kl_coef mis-set' case (expected 0.1-0.5).",
              "none", [PanelQuery(f"max(verl_kl_divergence{{{SEL}}})", "KL"),
                       PanelQuery(f"max(verl_kl_coef{{{SEL}}})", "kl_coef")], width=12, height=10),
        Panel("timeseries", "Policy entropy", "Mean token entropy of the actor policy (nats).", "none",
              [PanelQuery(f"max(verl_entropy{{{SEL}}})", "entropy")], width=6),
        Panel("timeseries", "Clip fraction", "Share of tokens whose PPO ratio was clipped.", "percentunit",
              [PanelQuery(f"max(verl_clip_fraction{{{SEL}}})", "clip fraction")], width=6),
        Panel("timeseries", "Losses", "PPO clipped policy loss and clipped value (critic) loss.", "none",
              [PanelQuery(f"max(verl_policy_loss{{{SEL}}})", "policy"),
               PanelQuery(f"max(verl_critic_loss{{{SEL}}})", "critic")], width=6),
        Panel("timeseries", "Gradient norm", "Gradient norm before clipping, per model.", "none",
              [PanelQuery(f"max by (model) (verl_grad_norm{{{SEL}}})", "{{model}}")], width=6),
        Panel("timeseries", "Advantage variance", "Variance of the advantages before whitening.", "none",
              [PanelQuery(f"max(verl_advantage_variance{{{SEL}}})", "advantage variance")], width=8),
        Panel("timeseries", "Non-finite steps", "Steps skipped for NaN/Inf loss or gradients.", "none",
              [PanelQuery(zero_if_empty(_increase("verl_nonfinite_steps_total")), "skipped steps")],
              width=8, thresholds=[(None, "green"), (1, "red")], threshold_style="dashed"),
        Panel("timeseries", "Batches paused by the reward guard",
              "Updates the reward guard skipped (variance jump x3 or > 5 % extreme rewards), by reason; beside "
              "them actor updates skipped on cached rewards only (reward model not answering).",
              "none", [PanelQuery(zero_if_empty(_increase("verl_batches_paused_total", "reason"), "reason"),
                              "{{reason}}"),
                       PanelQuery(zero_if_empty(_increase("verl_updates_skipped_total", "reason"), "reason"),
                              "skipped: {{reason}}")], width=8),
    ])


def reward() -> Row:
    return Row("Reward", [
        Panel("timeseries", "Reward mean",
              "Mean sequence reward per batch. Mean collapsing to 0 or NaN: check reward model loading "
              "and its input format first.", "none",
              [PanelQuery(f"max(verl_reward_mean{{{SEL}}})", "mean")], width=8, links=[OUTLIERS_LINK]),
        Panel("timeseries", "Reward std (0.8 threshold)",
              "Standard deviation of rewards per batch; the red band is the 0.8 threshold of "
              "RewardDistributionDrift (std > 0.8 for 5 min). The panel link lists the top-3 anomalous "
              "prompts.", "none", [PanelQuery(f"max(verl_reward_std{{{SEL}}})", "std")], width=8,
              thresholds=[(None, "green"), (0.8, "red")], threshold_style="line+area", links=[OUTLIERS_LINK]),
        Panel("stat", "Reward std, 5 min minimum",
              "Lowest reward std over the last 5 minutes: red means std stayed above 0.8 for 5 min, "
              "the article's drift warning. Follow the link for the top-3 anomalous prompts.", "none",
              [PanelQuery(f"min(min_over_time(verl_reward_std{{{SEL}}}[5m]))")], width=4,
              thresholds=[(None, "green"), (0.8, "red")], links=[OUTLIERS_LINK]),
        Panel("stat", "Extreme rewards", "Share of rewards beyond the guard's bound; the guard pauses "
              "a batch above 5 %.", "percentunit", [PanelQuery(f"max(verl_reward_extreme_ratio{{{SEL}}})")],
              width=4, thresholds=[(None, "green"), (0.05, "red")]),
    ])


def data() -> Row:
    return Row("Data", [
        Panel("timeseries", "Prompt diversity",
              "Prompt diversity (every 1000 steps); the method label says semantic (mean pairwise "
              "embedding distance, with verl-ops[semantic]) or lexical (distinct-n).", "none",
              [PanelQuery(f"max by (method) (verl_prompt_diversity{{{SEL}}})", "{{method}}")], width=6),
        Panel("timeseries", "Reward shift (KS p-value)",
              "KS-test p-value of recent rewards against a reference window; below 0.01 the reward "
              "distribution has shifted.", "none",
              [PanelQuery(f"min(verl_reward_shift_ks_pvalue{{{SEL}}})", "p-value")], width=6,
              thresholds=[(None, "red"), (0.01, "green")], threshold_style="dashed"),
        Panel("timeseries", "Prompt shift (MMD p-value)",
              "MMD permutation p-value of the recent prompts' sentence embeddings against the run's "
              "first prompts; below 0.001 the prompt distribution moved (PromptDistributionShift). "
              "Stays 1 without verl-ops[semantic].", "none",
              [PanelQuery(f"min(verl_prompt_shift_pvalue{{{SEL}}})", "p-value")], width=6,
              thresholds=[(None, "red"), (0.001, "green")], threshold_style="dashed"),
        Panel("timeseries", "Buffer sample age", "Mean age of the samples drawn from the rollout buffer.",
              "s", [PanelQuery(f"max(verl_buffer_sample_age_seconds{{{SEL}}})", "mean age")], width=6),
    ])


def throughput() -> Row:
    return Row("Throughput and resources", [
        Panel("timeseries", "Actor throughput",
              "Generated + trained tokens per second, with its 30 min average as the baseline that "
              "ThroughputDrop compares against (halved = alert).", "suffix: tok/s",
              [PanelQuery(f"sum(verl_actor_tokens_per_second{{{SEL}}})", "tokens/s"),
               PanelQuery(f"sum(instance:verl_actor_tokens_per_second:avg30m{{{SEL}}})", "30 min average")],
              width=8),
        Panel("timeseries", "GPU memory", "GPU framebuffer memory used and size, per GPU (trainer NVML "
              "sampler; absent on CPU-only hosts).", "bytes",
              [PanelQuery(f"max by (instance, gpu) (verl_gpu_memory_used_bytes{{{SEL}}})", "used {{instance}}/{{gpu}}"),
               PanelQuery(f"max by (instance, gpu) (verl_gpu_memory_total_bytes{{{SEL}}})", "total {{instance}}/{{gpu}}")],
              width=8),
        Panel("timeseries", "GPU memory growth slope",
              "Least-squares slope of GPU memory over 30 min, in MB/min; above the red 10 MB/min line "
              "for 15 min the memory is leaking (MemoryLeakSuspected).", "suffix: MB/min",
              [PanelQuery(f"max by (instance, gpu) (instance_gpu:verl_gpu_memory_used_bytes:deriv30m{{{SEL}}}) "
                      "* 60 / 1e6", "{{instance}}/{{gpu}}")],
              width=8, thresholds=[(None, "green"), (10, "red")], threshold_style="line"),
        Panel("timeseries", "Host and rollout-worker CPU",
              "Host CPU busy ratio, and CPU use of each rollout worker (100 % = one core).", "percentunit",
              [PanelQuery(f"max by (instance) (verl_host_cpu_utilization_ratio{{{SEL}}})", "host {{instance}}"),
               PanelQuery(f"max by (worker) (verl_rollout_worker_cpu_ratio{{{SEL}}})", "worker {{worker}}")],
              width=12),
        Panel("timeseries", "Dataloader wait and checkpoint stall",
              "Time the last step waited for prompts (data.num_workers=0 shows here first) and time "
              "the last checkpoint blocked training (async save: staging only).", "s",
              [PanelQuery(f"max(verl_dataloader_wait_seconds{{{SEL}}})", "dataloader wait"),
               PanelQuery(f"max(verl_checkpoint_stall_seconds{{{SEL}}})", "checkpoint stall")], width=12),
    ])


def buffer() -> Row:
    return Row("Rollout buffer", [
        Panel("timeseries", "Buffer size", "Samples held in the rollout buffer (bounded by "
              "rollout_buffer_max_size; a 50 % drop is RolloutBufferDrop).", "none",
              [PanelQuery(f"sum by (stage) (verl_rollout_buffer_size{{{SEL}}})", "{{stage}}")], width=6),
        Panel("timeseries", "Oldest sample age", "Age of the oldest buffered sample; above 30 min "
              "rollout is backlogged (raise rollout_worker_num).", "s",
              [PanelQuery(f"max(verl_rollout_buffer_age_seconds{{{SEL}}})", "oldest")], width=6,
              thresholds=[(None, "green"), (1800, "red")], threshold_style="dashed"),
        Panel("timeseries", "Evictions and drops", "Samples evicted by the bounded buffer and rollout "
              "samples rejected by validation, per second, by reason.", "cps",
              [PanelQuery(zero_if_empty(rate("verl_rollout_buffer_evictions_total")), "evicted"),
               PanelQuery(zero_if_empty(rate("verl_rollout_samples_dropped_total", by="reason"), "reason"),
                      "dropped {{reason}}")], width=6),
        Panel("timeseries", "Worker restarts, lost prompts", "Rollout workers restarted by the supervisor "
              "(their unacknowledged prompts are re-queued), and prompts whose rollout went missing or came "
              "back twice (the trainer's per-step check; anything above 0 is a bug).", "none",
              [PanelQuery(zero_if_empty(_increase("verl_rollout_worker_restarts_total")), "restarts"),
               PanelQuery(zero_if_empty(_increase("verl_rollout_prompts_lost_total")), "prompts lost"),
               PanelQuery(zero_if_empty(_increase("verl_rollout_prompts_duplicated_total")), "prompts duplicated")],
              width=6),
    ])


def faults() -> Row:
    return Row("Fault tolerance", [
        Panel("timeseries", "Reward model calls", "Reward model calls per second by outcome "
              "(ok, timeout, error, oom, cached).", "cps",
              [PanelQuery(zero_if_empty(rate("verl_reward_model_calls_total", by="outcome"), "outcome"),
                      "{{outcome}}")], width=8),
        Panel("timeseries", "Circuit breaker state", "Reward-model circuit breaker over time.", "none",
              [PanelQuery(f"max by (instance) (verl_reward_model_circuit_state{{{SEL}}})", "{{instance}}")],
              width=8, mappings=CIRCUIT_STATES, custom={"lineInterpolation": "stepAfter"}, min=0, max=2),
        Panel("timeseries", "OOM events and degraded mode",
              "Out-of-memory events by component, and components running degraded (gradient "
              "checkpointing + micro-batches after a critic OOM).", "none",
              [PanelQuery(zero_if_empty(_increase("verl_oom_events_total", "component"), "component"),
                      "OOM {{component}}"),
               PanelQuery(zero_if_empty(f"max by (component) (verl_degraded_mode{{{SEL}}})", "component"),
                      "degraded {{component}}")], width=8),
        Panel("timeseries", "Checkpoint failures", "Checkpoint saves that failed.", "none",
              [PanelQuery(zero_if_empty(_increase("verl_checkpoint_failures_total")), "failures")], width=8,
              thresholds=[(None, "green"), (1, "red")], threshold_style="dashed"),
    ])


def alerts() -> Row:
    return Row("Alerts and live configuration", [
        Panel("stat", "Firing alerts", "Alerts firing in the monitor sidecar (statistical detectors) "
              "and in Prometheus' own rules.", "none",
              [PanelQuery(zero_if_empty("sum(verl_monitor_alerts_firing)"), "monitor"),
               PanelQuery(zero_if_empty('count(ALERTS{alertstate="firing"})'), "prometheus")],
              width=6, thresholds=[(None, "green"), (1, "red")]),
        Panel("table", "Firing alerts by name", "Firing alerts by alertname and severity (monitor); "
              "incidents and suggestions are in the monitor's /api/v1/incidents.", "none",
              [PanelQuery(zero_if_empty("sum by (alertname, severity) (verl_monitor_alerts_firing > 0)",
                                    "alertname"), instant=True)], width=6),
        Panel("table", "Live configuration", "verl_config_info: the live settings the runbooks and "
              "incident suggestions quote.", "none",
              [PanelQuery(f"max by ({CONFIG_LABELS}) (verl_config_info{{{SEL}}})", instant=True)], width=12),
    ])


def dashboard() -> Dashboard:
    trainer_api = Variable("trainer_api", "Trainer API", "textbox", "", default="http://127.0.0.1:8000")
    return Dashboard(
        uid="verl-ppo-training",
        title="Verl PPO Training Dashboard",
        description="PPO post-training health: step time breakdown, KL per layer, reward drift, "
                    "memory growth, throughput, rollout buffer, fault tolerance and alerts.",
        tags=["verl", "ppo", "training"],
        variables=[*standard_variables("verl_global_step"), trainer_api],
        rows=[overview(), step_time(), policy(), reward(), data(), throughput(), buffer(), faults(), alerts(),
              rollout_servers(), cluster()],
    )
