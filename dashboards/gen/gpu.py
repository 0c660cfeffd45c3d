"""GPU dashboard: dcgm-exporter's DCGM_FI_* fields (dashboards/dcgm-fields.csv) next to the trainer's own
NVML sampler (verl_gpu_*), so a node without dcgm-exporter still has its GPU panels."""

from __future__ import annotations

from .grafana import SEL, Dashboard, Panel, PanelQuery, Row, Variable, rate, zero_if_empty

BY_GPU = "max by (Hostname, gpu)"
LEGEND = "{{Hostname}}/{{gpu}}"
TEMP = [(None, "green"), (80, "orange"), (85, "red")]


def dcgm() -> Row:
    return Row("dcgm-exporter", [
        Panel("timeseries", "GPU utilization", "DCGM_FI_DEV_GPU_UTIL: share of time a kernel ran.",
              "percent", [PanelQuery(f"{BY_GPU} (DCGM_FI_DEV_GPU_UTIL{{{SEL}}})", LEGEND)], width=8, min=0, max=100),
        Panel("timeseries", "Engine activity", "DCP profiling ratios: graphics engine, tensor pipe and "
              "DRAM interface activity (need DCP-capable GPUs).", "percentunit",
              [PanelQuery(f"{BY_GPU} (DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{SEL}}})", "engine " + LEGEND),
               PanelQuery(f"{BY_GPU} (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{SEL}}})", "tensor " + LEGEND),
               PanelQuery(f"{BY_GPU} (DCGM_FI_PROF_DRAM_ACTIVE{{{SEL}}})", "dram " + LEGEND)], width=8),
        Panel("timeseries", "Framebuffer memory", "DCGM_FI_DEV_FB_USED / FB_FREE (MiB in dcgm, shown "
              "in bytes).", "bytes",
              [PanelQuery(f"{BY_GPU} (DCGM_FI_DEV_FB_USED{{{SEL}}}) * 1048576", "used " + LEGEND),
               PanelQuery(f"{BY_GPU} (DCGM_FI_DEV_FB_FREE{{{SEL}}}) * 1048576", "free " + LEGEND)], width=8),
        Panel("timeseries", "Framebuffer growth slope", "Least-squares slope of FB_USED over 30 min "
              "(recording rule) in MB/min; the red line is the 10 MB/min leak threshold.", "suffix: MB/min",
              [PanelQuery(f"{BY_GPU} (instance_gpu:DCGM_FI_DEV_FB_USED:deriv30m{{{SEL}}}) * 60 * 1048576 / 1e6",
                      LEGEND)], width=8, thresholds=[(None, "green"), (10, "red")], threshold_style="line"),
        Panel("timeseries", "Temperatures", "GPU core and memory temperature; GPUOverTemperature above "
              "85 C for 5 min.", "celsius",
              [PanelQuery(f"{BY_GPU} (DCGM_FI_DEV_GPU_TEMP{{{SEL}}})", "gpu " + LEGEND),
               PanelQuery(f"{BY_GPU} (DCGM_FI_DEV_MEMORY_TEMP{{{SEL}}})", "memory " + LEGEND)], width=8,
              thresholds=TEMP, threshold_style="dashed"),
        Panel("timeseries", "Power draw", "DCGM_FI_DEV_POWER_USAGE.", "watt",
              [PanelQuery(f"{BY_GPU} (DCGM_FI_DEV_POWER_USAGE{{{SEL}}})", LEGEND)], width=8),
        Panel("timeseries", "Clocks", "SM and memory clocks.", "hertz",
              [PanelQuery(f"{BY_GPU} (DCGM_FI_DEV_SM_CLOCK{{{SEL}}}) * 1e6", "sm " + LEGEND),
               PanelQuery(f"{BY_GPU} (DCGM_FI_DEV_MEM_CLOCK{{{SEL}}}) * 1e6", "mem " + LEGEND)], width=8),
        Panel("timeseries", "PCIe throughput", "DCP PCIe TX/RX rate including protocol headers.", "Bps",
              [PanelQuery(f"{BY_GPU} (DCGM_FI_PROF_PCIE_TX_BYTES{{{SEL}}})", "tx " + LEGEND),
               PanelQuery(f"{BY_GPU} (DCGM_FI_PROF_PCIE_RX_BYTES{{{SEL}}})", "rx " + LEGEND)], width=8),
        Panel("timeseries", "PCIe replays and NVLink traffic", "PCIe retries per second and NVLink "
              "bandwidth counter rate (0 on GPUs without NVLink).", "cps",
              [PanelQuery(rate("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", by="Hostname, gpu"), "pcie replays " + LEGEND),
               PanelQuery(zero_if_empty(rate("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", by="Hostname, gpu"), "gpu"),
                      "nvlink " + LEGEND)], width=8),
        Panel("stat", "Last Xid error", "DCGM_FI_DEV_XID_ERRORS is the code of the last Xid error "
              "(0 = none); Xid 48/63/64/74/79 need a node drain.", "none",
              [PanelQuery(zero_if_empty(f"max(DCGM_FI_DEV_XID_ERRORS{{{SEL}}})"))], width=6,
              thresholds=[(None, "green"), (1, "red")]),
        Panel("stat", "Row remapping", "Uncorrectable remapped rows, and remap failures (1 = the GPU "
              "needs replacing).", "none",
              [PanelQuery(f"max(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{SEL}}})", "uncorrectable rows"),
               PanelQuery(f"max(DCGM_FI_DEV_ROW_REMAP_FAILURE{{{SEL}}})", "remap failure")], width=6,
              thresholds=[(None, "green"), (1, "red")]),
        Panel("stat", "Energy rate", "Power from the energy counter (mJ/s -> W), cross-checks POWER_USAGE.",
              "watt", [PanelQuery(rate("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") + " / 1000")], width=6,
              options={"colorMode": "none"}),
        Panel("stat", "vGPU license", "vGPU license status (0 = not applicable / unlicensed).", "none",
              [PanelQuery(f"max(DCGM_FI_DEV_VGPU_LICENSE_STATUS{{{SEL}}})")], width=6, options={"colorMode": "none"}),
    ])


def nvml() -> Row:
    by = "max by (instance, gpu)"
    legend = "{{instance}}/{{gpu}}"
    return Row("Trainer NVML sampler (verl_gpu_*)", [
        Panel("timeseries", "GPU utilization (trainer)", "verl_gpu_utilization_ratio from the trainer's "
              "NVML sampler (absent on CPU-only hosts).", "percentunit",
              [PanelQuery(f"{by} (verl_gpu_utilization_ratio{{{SEL}}})", legend)], width=8, min=0, max=1),
        Panel("timeseries", "GPU memory used ratio (trainer)", "Used / total framebuffer per GPU "
              "(recording rule instance_gpu:verl_gpu_memory_used:ratio).", "percentunit",
              [PanelQuery(f"{by} (instance_gpu:verl_gpu_memory_used:ratio{{{SEL}}})", legend)],
              width=8, min=0, max=1, thresholds=[(None, "green"), (0.9, "red")], threshold_style="dashed"),
        Panel("timeseries", "GPU temperature (trainer)", "verl_gpu_temperature_celsius.", "celsius",
              [PanelQuery(f"{by} (verl_gpu_temperature_celsius{{{SEL}}})", legend)], width=8,
              thresholds=TEMP, threshold_style="dashed"),
        Panel("timeseries", "PCIe throughput (trainer)", "verl_gpu_pcie_tx/rx_bytes_per_second.", "Bps",
              [PanelQuery(f"{by} (verl_gpu_pcie_tx_bytes_per_second{{{SEL}}})", "tx " + legend),
               PanelQuery(f"{by} (verl_gpu_pcie_rx_bytes_per_second{{{SEL}}})", "rx " + legend)], width=8),
        Panel("timeseries", "NVLink errors and Xid events (trainer)", "NVLink errors by GPU, link and "
              "type, and Xid events by code, in the interval (NVLinkErrors / GPUXidError).", "none",
              [PanelQuery(zero_if_empty("sum by (gpu, link, type) (increase(verl_gpu_nvlink_errors_total"
                                    f"{{{SEL}}}[$__rate_interval]))", "type"), "nvlink {{gpu}} {{link}} {{type}}"),
               PanelQuery(zero_if_empty("sum by (gpu, xid) (increase(verl_gpu_xid_errors_total"
                                    f"{{{SEL}}}[$__rate_interval]))", "xid"), "xid {{gpu}} {{xid}}")],
              width=8, thresholds=[(None, "green"), (1, "red")], threshold_style="dashed"),
        Panel("timeseries", "Host CPU (trainer)", "verl_host_cpu_utilization_ratio; CPU > 95 % with "
              "fluctuating GPU memory is the CPU-bound bottleneck pattern.", "percentunit",
              [PanelQuery(f"max by (instance) (verl_host_cpu_utilization_ratio{{{SEL}}})", "{{instance}}")],
              width=8, min=0, max=1, thresholds=[(None, "green"), (0.95, "red")], threshold_style="dashed"),
    ])


def dashboard() -> Dashboard:
    return Dashboard(
        uid="verl-gpu-dcgm",
        title="Verl GPU (DCGM and NVML)",
        description="GPU health from dcgm-exporter (DCGM_FI_*) and the trainer's NVML sampler (verl_gpu_*).",
        tags=["verl", "gpu", "dcgm"],
        variables=[
            Variable("datasource", "Data source", "datasource", "prometheus"),
            # `up` so that both the dcgm-exporter job and the trainer job are offered
            Variable("job", "Job", "query", "label_values(up, job)", include_all=True, multi=True),
            Variable("instance", "Instance", "query", 'label_values(up{job=~"$job"}, instance)',
                     include_all=True, multi=True),
        ],
        rows=[dcgm(), nvml()],
        refresh="10s",
        time_from="now-1h",
    )
