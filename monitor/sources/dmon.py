"""``nvidia-smi dmon`` text: a ``#``-header naming the columns (and a units line), then one row per
GPU per interval. Columns depend on ``-s`` letters and ``-o DT`` adds Date/Time, so rows are parsed by
header name; ``-`` means "not supported", and a stray ``^C`` from an interrupted run is ignored."""

from __future__ import annotations

import asyncio
from datetime import datetime

from alerting.clock import Clock
from monitor.model import Sample, SourceBatch, with_node
from monitor.sources.base import DownLabels, Polled, Round, ThreadedRead
from monitor.sources.tail_state import NotRegularFile, open_regular

RESTART_S = 5.0         # a dmon command that ended (or sent a line too long) is started again after this
COMMAND_RETRY_S = 30.0  # ... and one that cannot be started at all is tried again after this
READ_LIMIT = 4 << 20    # bytes of a dmon log read per round at most (a few KB a second is what dmon writes)
READ_DEADLINE_S = 5.0   # a read not done by then marks the source down (it runs in a worker thread)

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


class DmonFileSource:
    """A dmon log some other process writes: what was appended since the last round, every second. Read
    in a worker thread with a deadline, opened non-blocking, a regular file only."""

    def __init__(self, path: str, node: str | None, index: int) -> None:
        self.path, self.parser, self.position = path, DmonParser(node, f"dmon{index}"), 0
        self.name = self.metric = self.parser.source
        self.interval, self.budget, self.offset, self.wait_after = 1.0, 1.0, 0.0, True
        self.down = DownLabels("dmon", node)
        self.reader = ThreadedRead(READ_DEADLINE_S)

    def _read(self) -> str:
        with open_regular(self.path) as fh:
            fh.seek(self.position)
            data = fh.read(READ_LIMIT)
        if len(data) == READ_LIMIT and (cut := data.rfind(b"\n") + 1) > 0:
            data = data[:cut]  # the line cut at the limit is read whole next round
        self.position += len(data)
        return data.decode("utf-8", errors="replace")

    async def poll(self, clock: Clock) -> Round:
        batch = SourceBatch(self.parser.source)
        try:
            text = await self.reader.run(self._read)
        except NotRegularFile as exc:
            batch.error("not_regular_file")
            return Round([Polled(batch)], up=False, problem=str(exc))
        except OSError:  # not written yet, or rotated away: counted, the source is down, no log line
            batch.error("read_error")
            return Round([Polled(batch)], up=False)
        return Round([Polled(self.parser.feed(text.splitlines(), clock.now()))])


class DmonCommandSource:
    """``nvidia-smi dmon`` run by the monitor: one round per line it prints (a stream, no interval)."""

    def __init__(self, command: list[str], node: str | None, index: int) -> None:
        self.command, self.parser = command, DmonParser(node, f"dmon{index}")
        self.name = self.metric = self.parser.source
        self.interval, self.budget, self.offset, self.wait_after = 0.0, 5.0, 0.0, True
        self.down = DownLabels("dmon", node)
        self.proc: asyncio.subprocess.Process | None = None
        self.pause = 0.0  # wait before the next start

    async def poll(self, clock: Clock) -> Round:
        if self.proc is None:
            await asyncio.sleep(self.pause)
            try:
                self.proc = await asyncio.create_subprocess_exec(*self.command, stdout=asyncio.subprocess.PIPE,
                                                                 stderr=asyncio.subprocess.DEVNULL)
            except OSError:
                self.pause = COMMAND_RETRY_S
                batch = SourceBatch(self.parser.source)
                batch.error("command_failed")
                return Round([Polled(batch)], up=None)
        assert self.proc.stdout is not None
        self.pause = RESTART_S
        try:
            line = await self.proc.stdout.readline()
        except Exception:  # e.g. a line longer than the stream limit: start the command again
            await self.close()
            raise
        if not line:  # the command ended
            await self.close()
            return Round(up=None)
        return Round([Polled(self.parser.feed([line.decode(errors="replace")], clock.now()))], up=None)

    async def close(self) -> None:
        """Also on cancellation at shutdown: never leave nvidia-smi running."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            proc.terminate()
            await asyncio.shield(proc.wait())
