"""``MemorySnapshotter`` on its own: a round trip restores parameters, optimizer state and RNG exactly; a
snapshot due while one is being written is skipped; defective or hostile snapshots are refused with one
line before anything is restored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from verl.checkpoint.errors import CheckpointError
from verl.checkpoint.memory_tier import MemorySnapshotter


def _parts() -> tuple[dict[str, torch.nn.Module], dict[str, torch.optim.Optimizer]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return {"actor": model}, {"actor": opt}


def _saved(tmp_path: Path) -> tuple[MemorySnapshotter, dict[str, torch.nn.Module], dict[str, torch.optim.Optimizer]]:
    models, optims = _parts()
    snap = MemorySnapshotter(tmp_path / "mem")
    assert snap.snapshot(7, models, optims, {"step": 7, "note": [1, 2.5, None]}, "h1")
    snap.wait()
    return snap, models, optims


def test_round_trip_restores_parameters_optimizer_and_rng(tmp_path: Path) -> None:
    snap, models, optims = _saved(tmp_path)
    want = {k: v.clone() for k, v in models["actor"].state_dict().items()}
    want_exp_avg = optims["actor"].state_dict()["state"][0]["exp_avg"].clone()
    draw = torch.rand(3)  # the RNG moved on after the snapshot
    fresh, fresh_opt = _parts()
    with torch.no_grad():
        for p in fresh["actor"].parameters():
            p.add_(1.0)
    loaded = snap.load(fresh, fresh_opt, "h1")
    assert loaded is not None and loaded.step == 7 and loaded.trainer_state == {"step": 7, "note": [1, 2.5, None]}
    for k, v in fresh["actor"].state_dict().items():
        assert torch.equal(v, want[k]), k
    assert torch.equal(fresh_opt["actor"].state_dict()["state"][0]["exp_avg"], want_exp_avg)
    assert torch.equal(torch.rand(3), draw)  # RNG restored to the snapshot's state


def test_a_snapshot_while_one_is_written_is_skipped(tmp_path: Path) -> None:
    models, optims = _parts()
    snap = MemorySnapshotter(tmp_path / "mem", keep_last=2)
    snap._idle.clear()  # a write in flight
    assert snap.snapshot(1, models, optims, {}, None) is False
    snap._idle.set()
    for step in (1, 2, 3):
        assert snap.snapshot(step, models, optims, {}, None)
        snap.wait()
    assert sorted(p.name for p in (tmp_path / "mem").iterdir()) == ["global_step_2", "global_step_3"]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: (d / "actor.safetensors").write_bytes(b"\0" * 16), "checksum mismatch"),
    (lambda d: _meta(d, parts={"../../x": {"v": 1}}), "not plain names"),
    (lambda d: _meta(d, manifest={**_read(d)["manifest"], "/etc/passwd": {"sha256": "0"}}), "not a file name"),
    (lambda d: _meta(d, format="pickle"), "not a version-1 memory snapshot"),
    (lambda d: _meta(d, rng={"python": 1}), "rng"),
    (lambda d: _meta(d, parts={"actor": {"t": "nope"}, "optim.actor": {"v": 1}}), "malformed snapshot skeleton"),
    (lambda d: (d / "meta.json").write_bytes(b"\xff\xfe"), "unreadable"),
])
def test_defective_snapshots_are_refused_before_anything_moves(tmp_path: Path, edit, message: str) -> None:  # noqa: ANN001
    snap, _, _ = _saved(tmp_path)
    edit(tmp_path / "mem" / "global_step_7")
    fresh, fresh_opt = _parts()
    before = {k: v.clone() for k, v in fresh["actor"].state_dict().items()}
    with pytest.raises(CheckpointError, match=message):
        snap.load(fresh, fresh_opt, "h1")
    assert all(torch.equal(v, before[k]) for k, v in fresh["actor"].state_dict().items())


def test_snapshot_for_another_model_is_refused(tmp_path: Path) -> None:
    snap, _, _ = _saved(tmp_path)
    fresh, fresh_opt = _parts()
    with pytest.raises(CheckpointError, match="model config hash mismatch"):
        snap.load(fresh, fresh_opt, "other")


def _read(d: Path) -> dict:
    return json.loads((d / "meta.json").read_text())


def _meta(d: Path, **changes: object) -> None:
    meta = _read(d)
    meta.update(changes)
    (d / "meta.json").write_text(json.dumps(meta))
