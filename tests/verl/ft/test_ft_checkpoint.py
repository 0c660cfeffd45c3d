"""CheckpointManager on one process: layout, exact restore, async staging, rotation, validation."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from prometheus_client import CollectorRegistry, Counter, Gauge

from verl.checkpoint import (
    CheckpointError,
    CheckpointManager,
    digest_checkpoint,
    digest_models,
    latest_complete,
    verify,
)
from verl.checkpoint import rollout_cache as rcache
from verl.cli.ckpt import main as ckpt_main

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def make_models(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module, torch.optim.Optimizer, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    actor = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))
    critic = torch.nn.Linear(16, 1)
    return actor, critic, torch.optim.AdamW(actor.parameters(), lr=1e-2), torch.optim.AdamW(critic.parameters(), lr=1e-2)


def train_step(actor: torch.nn.Module, critic: torch.nn.Module, opts: tuple[torch.optim.Optimizer, ...]) -> None:
    x = torch.randn(4, 16)
    (actor(x).pow(2).mean() + critic(x).pow(2).mean()).backward()
    for o in opts:
        o.step()
        o.zero_grad()


def rows(n: int, t0: float = 0.0) -> list[dict]:
    return [{"timestamp": t0 + i, "prompt": f"prompt {i} " + "x" * (i % 7), "reward": i / n} for i in range(n)]


def save(mgr: CheckpointManager, step: int, actor, critic, oa, oc, **kw):
    return mgr.save(
        step, models={"actor": actor, "critic": critic}, optimizers={"actor": oa, "critic": oc},
        dataset_state={"epoch": 0, "offset": step * 4}, kl_value=0.1 + step, extra={"guard": {"n": step}},
        model_config={"hidden": 32}, rollout_cache=kw.pop("rollout_cache", rows(20)), **kw,
    )


def test_save_and_resume_restores_everything(tmp_path: Path) -> None:
    actor, critic, oa, oc = make_models()
    train_step(actor, critic, (oa, oc))
    reg = CollectorRegistry()
    stall = Gauge("verl_checkpoint_stall_seconds", "", registry=reg)
    last = Gauge("verl_checkpoint_last_success_timestamp_seconds", "", registry=reg)
    mgr = CheckpointManager(tmp_path, stall_gauge=stall, last_success_gauge=last)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    save(mgr, 3, actor, critic, oa, oc)
    mgr.wait()
    expected_draws = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    want_digest = digest_models({"actor": actor, "critic": critic})

    ckpt = tmp_path / "global_step_3"
    assert latest_complete(tmp_path) == ckpt
    assert (ckpt / "actor" / "__0_0.distcp").is_file() and (ckpt / "optim" / "critic" / ".metadata").is_file()
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["format_version"] == 1 and meta["global_step"] == 3 and meta["world_size"] == 1
    assert {"python", "numpy", "torch"} <= set(meta["rng"][0])
    assert meta["parts"]["rollout_cache"]["version"] == "v2.1"
    assert "actor/__0_0.distcp" in meta["manifest"]
    assert last.collect()[0].samples[0].value > 0 and stall.collect()[0].samples[0].value > 0

    actor2, critic2, oa2, oc2 = make_models(seed=99)
    assert digest_models({"actor": actor2, "critic": critic2}) != want_digest
    loaded = CheckpointManager(tmp_path).load(
        models={"actor": actor2, "critic": critic2}, optimizers={"actor": oa2, "critic": oc2}, model_config={"hidden": 32}
    )
    assert loaded is not None and loaded.step == 3
    assert loaded.dataset_state == {"epoch": 0, "offset": 12} and loaded.kl_value == pytest.approx(3.1)
    assert loaded.extra == {"guard": {"n": 3}}
    assert loaded.rollout_cache.to_pylist() == rows(20)
    assert digest_models({"actor": actor2, "critic": critic2}) == want_digest == digest_checkpoint(ckpt)
    # RNG streams continue exactly where the saved run was
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected_draws
    # optimizer state came back too: one more identical step keeps the two runs identical
    torch.manual_seed(1)
    train_step(actor, critic, (oa, oc))
    torch.manual_seed(1)
    train_step(actor2, critic2, (oa2, oc2))
    assert digest_models({"actor": actor, "critic": critic}) == digest_models({"actor": actor2, "critic": critic2})


def test_async_staging_reuses_buffers_and_rotation_keeps_newest(tmp_path: Path) -> None:
    actor, critic, oa, oc = make_models()
    train_step(actor, critic, (oa, oc))
    mgr = CheckpointManager(tmp_path, keep_last=2, async_save=True)
    (tmp_path / "global_step_1").mkdir(parents=True)  # debris of a killed save, older than anything
    save(mgr, 2, actor, critic, oa, oc)
    allocated = mgr._buffers.allocations
    for step in (4, 6, 8):
        train_step(actor, critic, (oa, oc))
        res = save(mgr, step, actor, critic, oa, oc)  # waits for the save in flight first
        assert res is not None and res.stall_s >= 0
    assert mgr._buffers.allocations == allocated  # steady state: staging allocates nothing
    mgr.wait()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["global_step_6", "global_step_8"]
    assert digest_checkpoint(tmp_path / "global_step_8") == digest_models({"actor": actor, "critic": critic})
    assert save(mgr, 8, actor, critic, oa, oc) is None  # an existing complete step is never rewritten
    with pytest.raises(ValueError, match="keep_last"):
        CheckpointManager(tmp_path, keep_last=0)


def test_parts_with_identical_names_and_shapes_do_not_share_buffers(tmp_path: Path) -> None:
    torch.manual_seed(0)
    actor, critic = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)  # same keys, same shapes
    mgr = CheckpointManager(tmp_path, async_save=True)
    for step in (1, 2):
        mgr.save(step, models={"actor": actor, "critic": critic})
    mgr.wait()
    assert mgr._buffers.allocations == 4
    assert digest_checkpoint(tmp_path / "global_step_2") == digest_models({"actor": actor, "critic": critic})


def test_incomplete_checkpoint_is_not_latest(tmp_path: Path) -> None:
    actor, critic, oa, oc = make_models()
    mgr = CheckpointManager(tmp_path, async_save=False)
    save(mgr, 1, actor, critic, oa, oc)
    save(mgr, 2, actor, critic, oa, oc)
    (tmp_path / "global_step_2" / "COMPLETE").unlink()
    assert latest_complete(tmp_path) == tmp_path / "global_step_1"
    with pytest.raises(CheckpointError, match="incomplete checkpoint global_step_2"):
        verify(tmp_path / "global_step_2")


def _one_ckpt(tmp_path: Path) -> Path:
    actor, critic, oa, oc = make_models()
    mgr = CheckpointManager(tmp_path, async_save=False)
    save(mgr, 8, actor, critic, oa, oc)
    return tmp_path / "global_step_8"


def _edit_meta(ckpt: Path, fn) -> None:
    meta = json.loads((ckpt / "meta.json").read_text())
    fn(meta)
    (ckpt / "meta.json").write_text(json.dumps(meta))


def test_tampered_format_version_is_a_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _one_ckpt(tmp_path)
    _edit_meta(ckpt, lambda m: m.update(format_version=2))
    with pytest.raises(CheckpointError, match="mismatch") as info:
        CheckpointManager(tmp_path).load(models={"actor": make_models()[0]})
    assert "\n" not in str(info.value) and "meta.json" in str(info.value)
    assert ckpt_main(["verify", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "format version mismatch" in err and "Traceback" not in err


def test_rollout_cache_version_mismatch_message(tmp_path: Path) -> None:
    ckpt = _one_ckpt(tmp_path)
    _edit_meta(ckpt, lambda m: m["parts"]["rollout_cache"].update(version="v2.0"))
    with pytest.raises(CheckpointError, match=r"^Rollout cache version mismatch: expected v2\.1, got v2\.0"):
        verify(ckpt)


def test_rollout_cache_file_version_is_checked(tmp_path: Path) -> None:
    table = pa.table({"x": [1, 2]}).replace_schema_metadata({rcache.VERSION_KEY: b"v2.0"})
    with pa.OSFile(str(tmp_path / "old.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(CheckpointError, match="expected v2.1, got v2.0"):
        rcache.read(tmp_path, ["old.arrow"])


def test_truncated_shard_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _one_ckpt(tmp_path)
    shard = ckpt / "actor" / "__0_0.distcp"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"^checksum mismatch in global_step_8/actor/__0_0\.distcp$"):
        verify(ckpt)
    assert ckpt_main(["digest", str(ckpt)]) == 2
    assert capsys.readouterr().err == "verl-ckpt: checksum mismatch in global_step_8/actor/__0_0.distcp\n"
    # a flipped byte with the size unchanged is caught by the hash, not only by the size
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(CheckpointError, match="checksum mismatch in global_step_8/actor/__0_0.distcp"):
        verify(ckpt)


def test_rollout_cache_sharded_by_time_within_limit(tmp_path: Path) -> None:
    data = rows(400)
    random.Random(0).shuffle(data)  # written out of order, sharded by time
    shards = rcache.write(tmp_path, pa.Table.from_pylist(data), rank=0, shard_bytes=4096)
    assert len(shards) > 3
    assert all((tmp_path / s.file).stat().st_size <= 4096 for s in shards)
    assert all(a.t_max < b.t_min for a, b in zip(shards, shards[1:], strict=False))
    assert rcache.read(tmp_path, [s.file for s in shards]).to_pylist() == rows(400)


def test_cli_list_verify_digest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = _one_ckpt(tmp_path)
    (tmp_path / "global_step_9").mkdir()
    assert ckpt_main(["list", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("step=8\tcomplete") and out[1].startswith("step=9\tincomplete")
    assert ckpt_main(["verify", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("ok step=8 world_size=1")
    assert ckpt_main(["digest", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"step=8 sha256={digest_checkpoint(ckpt)}\n"
    assert ckpt_main(["digest", str(tmp_path / "nope")]) == 2
    assert "nope is not a directory" in capsys.readouterr().err


def test_failed_save_is_counted_not_raised_into_the_step(tmp_path: Path) -> None:
    actor, critic, oa, oc = make_models()
    failures = Counter("verl_checkpoint_failures", "", registry=CollectorRegistry())
    mgr = CheckpointManager(tmp_path / "ro", failures_counter=failures)
    (tmp_path / "ro").write_text("a file where the checkpoint root should be")
    res = mgr.save(1, models={"actor": actor})
    assert res is not None
    with pytest.raises(CheckpointError, match="save of global_step_1 failed"):
        mgr.wait()
    assert failures._value.get() == 1


KILLED_SAVE = textwrap.dedent(
    """
    import sys, time, torch
    from verl.checkpoint import CheckpointManager, layout
    torch.manual_seed(0)
    model = torch.nn.Linear(512, 512)
    mgr = CheckpointManager(sys.argv[1], async_save=True)
    mgr.save(1, models={"actor": model}); mgr.wait()
    real = layout.atomic_write_json
    def slow(path, obj):  # the disk stalls just before the marker: the kill lands mid-save
        if path.name == layout.MARKER:
            time.sleep(60)
        real(path, obj)
    layout.atomic_write_json = slow
    with torch.no_grad():
        model.weight.add_(1.0)
    mgr.save(2, models={"actor": model})
    print("staged", flush=True)
    time.sleep(60)
    """
)


def test_sigkill_during_async_save_leaves_previous_checkpoint_usable(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVE, str(tmp_path)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "staged"
        deadline = 200
        while not (tmp_path / "global_step_2" / "meta.json").exists() and deadline:
            deadline -= 1
            subprocess.run(["sleep", "0.05"], check=True)
        proc.kill()
    finally:
        proc.wait(timeout=30)
    assert (tmp_path / "global_step_2").is_dir()
    assert latest_complete(tmp_path) == tmp_path / "global_step_1"
    verify(tmp_path / "global_step_1")
    model = torch.nn.Linear(512, 512)
    mgr = CheckpointManager(tmp_path, async_save=True)
    assert mgr.load(models={"actor": model}).step == 1
    mgr.save(2, models={"actor": model})  # the debris is replaced by a complete save
    mgr.wait()
    assert latest_complete(tmp_path) == tmp_path / "global_step_2"
    verify(tmp_path / "global_step_2")
