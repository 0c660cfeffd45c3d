"""``nvidia-smi dmon`` text: a ``#``-header naming the columns (and a units line), then one row per
GPU per interval. Columns depend on ``-s`` letters and ``-o DT`` adds Date/Time, so rows are parsed by
header name; ``-`` means "not supported", and a stray ``^C`` from an interrupted run is ignored."""

from __future__ import annotations

from datetime import datetime

from monitor.model import Sample, SourceBatch, with_node

MB = 1024.0 * 1024.0  # dmon's "MB" columns are MiB (same counters as nvidia-smi's memory MiB)

# dmon column -> (our name, factor to base units)
COLUMNS: dict[str, tuple[str, float]] = {
    "fb": ("verl_gpu_memory_used_bytes", MB),
    "sm": ("verl_gpu_utilization_ratio", 0.01),
    "gtemp": ("verl_gpu_temperature_celsius", 1.0),
    "rxpci": ("verl_gpu_pcie_rx_bytes_per_second", MB),
    "txpci": ("verl_gpu_pcie_tx_bytes_per_second", MB),
    "pwr": ("verl_gpu_power_watts", 1.0),
    "mem": ("verl_gpu_memory_bandwidth_utilization_ratio", 0.01),
}


class DmonParser:
    """Feed lines in order; it remembers the latest header."""

    def __init__(self, node: str | None = None, source: str = "dmon") -> None:
        self.node = node
        self.source = source
        self.header: list[str] | None = None

    def feed(self, lines: list[str], now: float) -> SourceBatch:
        batch = SourceBatch(self.source)
        for raw in lines:
            line = raw.replace("^C", " ").strip()
            if not line:
                continue
            if line.startswith("#"):
                cols = line.lstrip("#").split()
                if cols and cols[0] in ("gpu", "Date", "Time"):
                    self.header = cols
                continue  # the units line, or a provenance comment
            if self.header is None:
                batch.error("no_header")
                continue
            cells = line.split()
            if len(cells) != len(self.header):
                batch.error("malformed_row")
                continue
            row = dict(zip(self.header, cells, strict=True))
            t = now
            if "Date" in row and "Time" in row:
                try:
                    # dmon prints the host's local time; naive -> timestamp() reads it as local too
                    t = datetime.strptime(row["Date"] + row["Time"], "%Y%m%d%H:%M:%S").timestamp()
                except ValueError:
                    batch.error("malformed_time")
                    continue
            gpu = row.get("gpu", "0")
            for col, (name, factor) in COLUMNS.items():
                cell = row.get(col)
                if cell is None or cell == "-":
                    continue
                try:
                    value = float(cell) * factor
                except ValueError:
                    batch.error("malformed_value")
                    continue
                batch.samples.append(Sample(name, with_node({"gpu": gpu}, self.node), value, t))
        return batch
