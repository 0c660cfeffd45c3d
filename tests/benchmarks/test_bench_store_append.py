"""The append benchmark replays a recorded load into fresh series of the recorded capacities, past a seal."""

from __future__ import annotations

from benchmarks.store_append import record, replay


def test_a_recorded_load_replays_past_a_seal() -> None:
    rec = record(1, 2, 3)
    assert rec["t"].shape == rec["v"].shape == (rec["capacity"].size, 3) and rec["capacity"].size > 100
    out = replay(rec, 70)
    assert out["series"] == rec["capacity"].size and out["chunked_series"] > 0  # rules' series hold > 64
    assert out["rounds"] == 70 and out["seal_round_ms"] > out["plain_round_ms"] > 0  # round 64 sealed them
    assert out["encode_us_per_chunk"] > 0
