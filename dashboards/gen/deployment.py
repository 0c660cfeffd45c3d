"""The rest of a verl deployment: its rollout servers (vLLM, SGLang) and its cluster (Ray,
host memory), as two rows of the training dashboard. Their series come from other jobs than the
trainer's (Ray's service discovery, the servers' own /metrics, node_exporter), so these panels do not
take the trainer's Job/Instance selection; they break down by `instance` (the server or node address).
Names and types: dashboards/peer-metrics.csv (each with its source; checked against tests/fixtures)."""

from __future__ import annotations

from .grafana import Panel, PanelQuery, Row


def rollout_servers() -> Row:
    return Row("Rollout servers (vLLM, SGLang)", [
        Panel("timeseries", "Requests running and waiting",
              "Requests each rollout server is executing and holding in its queue (vLLM "
              "num_requests_running/waiting, SGLang num_running_reqs/num_queue_reqs). Requests held while "
              "tokens stop is RolloutServerStalled (P1).", "none",
              [PanelQuery("sum by (instance) (vllm:num_requests_running)", "{{instance}} running"),
               PanelQuery("sum by (instance) (vllm:num_requests_waiting)", "{{instance}} waiting"),
               PanelQuery("sum by (instance) (sglang:num_running_reqs)", "{{instance}} running"),
               PanelQuery("sum by (instance) (sglang:num_queue_reqs)", "{{instance}} waiting")], width=6),
        Panel("timeseries", "Generation throughput",
              "Tokens generated per second per server (vLLM: rate of generation_tokens_total; SGLang: its "
              "gen_throughput gauge). A flat zero with requests running is a stall.", "cps",
              [PanelQuery("sum by (instance) (rate(vllm:generation_tokens_total[$__rate_interval]))", "{{instance}}"),
               PanelQuery("sum by (instance) (sglang:gen_throughput)", "{{instance}}")], width=6),
        Panel("timeseries", "KV cache usage",
              "KV cache in use per server (vLLM kv_cache_usage_perc, before 0.10 gpu_cache_usage_perc; "
              "SGLang token_usage). Full with a queue for 2 min is RolloutKVCacheFull (P2): raise "
              "actor_rollout_ref.rollout.gpu_memory_utilization or lower max_num_seqs.", "percentunit",
              [PanelQuery("max by (instance) (vllm:kv_cache_usage_perc)", "{{instance}}"),
               PanelQuery("max by (instance) (vllm:gpu_cache_usage_perc)", "{{instance}} (deprecated name)"),
               PanelQuery("max by (instance) (sglang:token_usage)", "{{instance}}")], width=6,
              thresholds=[(None, "green"), (0.99, "red")], threshold_style="dashed", min=0, max=1),
        Panel("timeseries", "Preemptions",
              "vLLM preemptions per second: requests evicted from the KV cache and recomputed later "
              "(a cache too small for the batch).", "cps",
              [PanelQuery("(sum by (instance) (rate(vllm:num_preemptions_total[$__rate_interval]))) or on() vector(0)",
                      "{{instance}}")], width=6),
    ])


def cluster() -> Row:
    return Row("Cluster (Ray, host memory)", [
        Panel("timeseries", "Host memory available",
              "Memory the host can still give (node_exporter MemAvailable, Ray's ray_node_mem_available). "
              "HostMemoryExhaustion (P1) pages with the minutes left when it falls toward zero.", "bytes",
              [PanelQuery("min by (instance) (node_memory_MemAvailable_bytes)", "{{instance}} node_exporter"),
               PanelQuery("min by (instance) (ray_node_mem_available)", "{{instance}} ray")], width=6),
        Panel("timeseries", "Host memory used",
              "Share of host memory in use; Ray's memory monitor kills workers above 0.95 "
              "(RAY_memory_usage_threshold), the kernel OOM killer near 1.", "percentunit",
              [PanelQuery("1 - min by (instance) (node_memory_MemAvailable_bytes) / max by (instance) "
                      "(node_memory_MemTotal_bytes)", "{{instance}} node_exporter"),
               PanelQuery("max by (instance) (ray_node_mem_used) / max by (instance) (ray_node_mem_total)",
                      "{{instance}} ray")], width=6,
              thresholds=[(None, "green"), (0.95, "red")], threshold_style="dashed", min=0, max=1),
        Panel("timeseries", "Ray object store",
              "Object store memory used and available per node (Ray raylet).", "bytes",
              [PanelQuery("sum by (instance) (ray_object_store_used_memory)", "{{instance}} used"),
               PanelQuery("sum by (instance) (ray_object_store_available_memory)", "{{instance}} available")],
              width=6),
        Panel("timeseries", "Ray actors by state",
              "Actors the GCS holds by state (Created = alive; Destroyed grows with every dead actor: "
              "RayActorDied pages each one with its cause from the State API).", "none",
              [PanelQuery("sum by (State) (ray_gcs_actors_count)", "{{State}}")], width=6),
    ])
