"""Issue 36: the alerting/monitor state files (SQLite state database, silences snapshot, JSONL offsets) are
never reached through a symbolic link: a link is refused naming the path, a planted temporary is removed."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from alerting.durable import open_sqlite, write_replace
from alerting.silence import SilenceStore
from alerting.store import SCHEMA
from monitor.sources.tail_state import OffsetStore

PRECIOUS = b"someone else's file\n"


def test_a_state_database_that_is_a_link_is_refused_naming_it(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.db"
    elsewhere.write_bytes(PRECIOUS)
    (tmp_path / "state").mkdir()
    db = tmp_path / "state" / "alerting.db"
    os.symlink(elsewhere, db)
    with pytest.raises(OSError, match="symbolic link") as refused:
        open_sqlite(db, SCHEMA)
    assert str(db) in str(refused.value)
    assert elsewhere.read_bytes() == PRECIOUS


def test_snapshot_and_offsets_never_write_through_links(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(PRECIOUS)
    state = tmp_path / "state"
    state.mkdir()
    os.symlink(elsewhere, state / "silences.json.tmp")
    os.symlink(elsewhere, state / "jsonl-offsets.json.tmp")
    conn = open_sqlite(state / "alerting.db", SCHEMA)
    store = SilenceStore(conn, state / "silences.json")
    store.add(['alertname="X"'], 0.0, 60.0)
    store.save_snapshot()
    OffsetStore(state / "jsonl-offsets.json").put("/x", {"offset": 1})
    assert elsewhere.read_bytes() == PRECIOUS
    assert (state / "silences.json").is_file() and (state / "jsonl-offsets.json").is_file()
    os.symlink(elsewhere, state / "linked.json")
    with pytest.raises(OSError, match="symbolic link"):
        write_replace(state / "linked.json", b"{}")
    assert elsewhere.read_bytes() == PRECIOUS
    conn.close()
    assert isinstance(conn, sqlite3.Connection)
