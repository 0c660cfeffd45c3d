"""The rollout cache part: Apache Arrow IPC files, sharded by time, each at most ``shard_bytes``.

Each file carries the cache version in its schema metadata, and meta.json repeats it, so a resume
refuses a cache written by an incompatible layout instead of misreading it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from .errors import CheckpointError
from .shapes import short

ROLLOUT_CACHE_VERSION = "v2.1"
VERSION_KEY = b"verl.rollout_cache.version"
DEFAULT_SHARD_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class Shard:
    file: str
    rows: int
    bytes: int
    t_min: float | None
    t_max: float | None


def as_table(rows: pa.Table | list[dict[str, Any]]) -> pa.Table:
    return rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)


def _write(path: Path, table: pa.Table) -> int:
    schema = table.schema.with_metadata({**(table.schema.metadata or {}), VERSION_KEY: ROLLOUT_CACHE_VERSION})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(table.replace_schema_metadata(schema.metadata))
    return path.stat().st_size


def write(
    directory: Path, table: pa.Table, rank: int, shard_bytes: int, time_column: str = "timestamp"
) -> list[Shard]:
    """Sort by ``time_column`` (when present) and cut consecutive time ranges into files no larger than
    ``shard_bytes``. A single row larger than the limit gets a file of its own."""
    directory.mkdir(parents=True, exist_ok=True)
    has_time = time_column in table.column_names
    if has_time:
        table = table.sort_by(time_column)
    shards: list[Shard] = []
    start, n = 0, table.num_rows
    per_row = max(1, table.nbytes // max(1, n))
    while start < n or not shards:
        rows = max(1, min(n - start, int(shard_bytes * 0.9) // per_row))
        while True:
            piece = table.slice(start, rows)
            path = directory / f"rank{rank}-{len(shards):05d}.arrow"
            size = _write(path, piece)
            if size <= shard_bytes or rows == 1:
                break
            rows = max(1, rows // 2)  # estimate was off (variable-width rows): halve and rewrite
        times = piece.column(time_column) if has_time and piece.num_rows else None
        shards.append(
            Shard(
                path.name, piece.num_rows, size,
                float(times[0].as_py()) if times is not None else None,
                float(times[-1].as_py()) if times is not None else None,
            )
        )
        start += piece.num_rows
        if n == 0:
            break
    return shards


def check_version(found: str | None, where: str) -> None:
    if found != ROLLOUT_CACHE_VERSION:
        raise CheckpointError(
            f"Rollout cache version mismatch: expected {ROLLOUT_CACHE_VERSION}, got {short(found)} ({where})"
        )


def read(directory: Path, files: list[str]) -> pa.Table:
    """Concatenate the given shard files, checking each file's own version stamp."""
    tables = []
    for name in files:
        try:
            with pa.memory_map(str(directory / name), "r") as source:
                table = pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowException) as exc:
            raise CheckpointError(f"unreadable rollout cache file rollout_cache/{name}: "
                                  f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}") from None
        raw = (table.schema.metadata or {}).get(VERSION_KEY)
        check_version(raw.decode() if raw else None, f"rollout_cache/{name}")
        tables.append(table.replace_schema_metadata(None))
    try:
        return pa.concat_tables(tables) if tables else pa.table({})
    except pa.ArrowException as exc:
        raise CheckpointError(f"rollout cache shards in {directory.parent.name} have different columns "
                              f"({type(exc).__name__})") from None
