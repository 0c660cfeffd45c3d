"""Hostile checkpoints: a crafted ``.metadata`` never runs, a structural edit is one line naming the part.

Every forgery re-hashes the manifest and ``COMPLETE`` (``hostile.rehash``), as an attacker with write
access would, so only the loader's own checks stand between the file and the process.
"""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from hostile import edit_meta, plant_payload, rehash
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from test_ft_checkpoint import make_models, save, train_step

from verl.checkpoint import CheckpointError, CheckpointManager, layout, verify
from verl.checkpoint.safe_load import load_metadata
from verl.cli.ckpt import main as ckpt_main

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
DCP_PARTS = ("actor", "critic", "optim/actor", "optim/critic")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    actor, critic, oa, oc = make_models()
    train_step(actor, critic, (oa, oc))
    save(CheckpointManager(root, async_save=False), 8, actor, critic, oa, oc)
    return root / "global_step_8"


@pytest.fixture
def ckpt(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "run" / pristine.name)
    return tmp_path / "run" / pristine.name


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("part", DCP_PARTS)
def test_payload_in_each_metadata_never_runs(ckpt: Path, tmp_path: Path, part: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "payload-ran"
    plant_payload(ckpt, part, marker)
    for command in ("verify", "list", "digest"):
        assert ckpt_main([command, str(ckpt.parent)]) == 2, command
        line = one_error_line(capsys)
        assert f"refused global_step_8/{part}/.metadata" in line and "not a DCP metadata type" in line, line
    actor, critic, oa, oc = make_models(seed=1)
    with pytest.raises(CheckpointError, match=f"refused global_step_8/{part}/.metadata"):
        CheckpointManager(ckpt.parent).load(models={"actor": actor, "critic": critic},
                                            optimizers={"actor": oa, "critic": oc})
    assert not marker.exists(), "the pickle payload ran"


def test_the_pristine_checkpoint_still_loads_through_the_safe_reader(ckpt: Path) -> None:
    for part in DCP_PARTS:
        md = load_metadata(ckpt / part / ".metadata")
        assert md.state_dict_metadata
    actor, critic, oa, oc = make_models(seed=1)
    loaded = CheckpointManager(ckpt.parent).load(models={"actor": actor, "critic": critic},
                                                 optimizers={"actor": oa, "critic": oc})
    assert loaded is not None and loaded.step == 8


def _forge_metadata(ckpt: Path, part: str, change) -> None:
    path = ckpt / part / ".metadata"
    md = pickle.loads(path.read_bytes())  # the test's own trusted file
    change(md)
    path.write_bytes(pickle.dumps(md))
    rehash(ckpt)


def test_forged_sizes_and_paths_in_metadata_are_refused(ckpt: Path, pristine: Path) -> None:
    def huge(md) -> None:
        meta = next(iter(md.state_dict_metadata.values()))
        meta.size = torch.Size([10**6, 10**6])

    _forge_metadata(ckpt, "actor", huge)
    with pytest.raises(CheckpointError, match=r"refused global_step_8/actor/\.metadata: declares \d+ bytes"):
        verify(ckpt)
    shutil.copy(pristine / "actor" / ".metadata", ckpt / "actor" / ".metadata")

    def traversal(md) -> None:
        info = next(iter(md.storage_data.values()))
        info.relative_path = "../../../../etc/passwd"

    _forge_metadata(ckpt, "critic", traversal)
    with pytest.raises(CheckpointError, match=r"refused global_step_8/critic/\.metadata: storage entry points at"):
        verify(ckpt)


def _drop(d: dict, *path: str | int) -> None:
    for key in path[:-1]:
        d = d[key]
    del d[path[-1]]


STRUCTURAL_EDITS = {
    "COMPLETE is a list": (lambda c: (c / layout.MARKER).write_text("[]"), "malformed global_step_8/COMPLETE"),
    "COMPLETE sha not hex": (lambda c: (c / layout.MARKER).write_text('{"global_step": 8, "meta_sha256": 5}'),
                             "COMPLETE: meta_sha256"),
    "meta.json is a list": (lambda c: edit_meta(c, lambda m: []), "global_step_8/meta.json is not a JSON object"),
    "a part is a string": (lambda c: edit_meta(c, lambda m: m["parts"].update(actor="x")), "no 'parts' mapping"),
    "manifest entry without bytes": (lambda c: edit_meta(c, lambda m: _drop(m, "manifest", "actor/.metadata", "bytes")),
                                     "manifest.actor/.metadata: missing key 'bytes'"),
    "rollout shard without rank": (
        lambda c: edit_meta(c, lambda m: _drop(m, "parts", "rollout_cache", "shards", 0, "rank")),
        "parts.rollout_cache.shards[0]: missing key 'rank'"),
    "rollout shard outside the dir": (
        lambda c: edit_meta(c, lambda m: m["parts"]["rollout_cache"]["shards"][0].update(file="../x.arrow")),
        "shards[0].file: expected a file name"),
    "manifest path escapes": (
        lambda c: edit_meta(c, lambda m: m["manifest"].update({"../../etc/passwd": {"sha256": "0" * 64, "bytes": 1}})),
        "manifest: expected a path inside the checkpoint directory"),
    "torch RNG state truncated": (lambda c: edit_meta(c, lambda m: m["rng"][0].update(torch="AAAA")),
                                  "rng[0].torch: 3 bytes"),
    "python RNG state short": (lambda c: edit_meta(c, lambda m: m["rng"][0].update(python=[3, [1, 2], None])),
                               "rng[0].python[1]"),
    "numpy RNG kind": (lambda c: edit_meta(c, lambda m: m["rng"][0]["numpy"].__setitem__(0, "PCG64")),
                       "rng[0].numpy[0]"),
    "kl controller is a list": (lambda c: edit_meta(c, lambda m: m.update(kl_controller=[1])), "kl_controller"),
    "world size is a string": (lambda c: edit_meta(c, lambda m: m.update(world_size="1")), "world_size"),
    "global step disagrees": (lambda c: edit_meta(c, lambda m: m.update(global_step=9)), "says global_step 9"),
    "version is a huge list": (lambda c: edit_meta(c, lambda m: m["parts"]["actor"].update(version=list(range(10**4)))),
                               "actor shard format version mismatch"),
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL_EDITS))
def test_structural_edit_is_one_line_naming_the_part(ckpt: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    edit, needle = STRUCTURAL_EDITS[name]
    edit(ckpt)
    with pytest.raises(CheckpointError) as info:
        verify(ckpt)
    text = str(info.value)
    assert needle in text and "\n" not in text and len(text) < 400, text
    for command in ("verify", "list", "digest"):
        assert ckpt_main([command, str(ckpt.parent)]) == 2, command
        assert needle in one_error_line(capsys)


def test_rotation_keeps_a_dir_whose_marker_was_removed(tmp_path: Path) -> None:
    """Markers removed by hand (or a resume pointed at the wrong place) must not let the next save's
    rotation delete the old steps: only debris without meta.json is provably a killed save."""
    actor, critic, oa, oc = make_models()
    mgr = CheckpointManager(tmp_path, async_save=False, keep_last=1)
    save(mgr, 20, actor, critic, oa, oc)
    (tmp_path / "global_step_20" / layout.MARKER).unlink()
    (tmp_path / "global_step_3").mkdir()  # debris of a killed save: no meta.json
    for step in (30, 40):
        save(mgr, step, actor, critic, oa, oc)
    assert (tmp_path / "global_step_20" / layout.META).is_file()
    assert not (tmp_path / "global_step_3").exists() and not (tmp_path / "global_step_30").exists()
    assert (tmp_path / "global_step_40" / layout.MARKER).is_file()


# -- fuzz: whatever meta.json / .metadata hold, the only outcome is a valid result or CheckpointError ----

_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                     max_leaves=12)
_META_KEYS = ["format_version", "global_step", "world_size", "parts", "rng", "manifest", "kl_controller", "extra",
              "lr_scheduler", "dataset", "created_at", "model_config_hash"]


@seed(13)
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(_META_KEYS), value=_JSON, marker=_JSON)
def test_fuzz_meta_and_complete(pristine: Path, tmp_path_factory: pytest.TempPathFactory, key: str, value, marker) -> None:
    ckpt = tmp_path_factory.mktemp("fz") / pristine.name
    shutil.copytree(pristine, ckpt)
    edit_meta(ckpt, lambda m: m.update({key: value}))
    for doc_edit in (None, marker):
        if doc_edit is not None:
            (ckpt / layout.MARKER).write_text(json.dumps(doc_edit))
        try:
            verify(ckpt)
        except CheckpointError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 500


@seed(13)
@settings(max_examples=80, deadline=None, derandomize=True)
@given(data=st.binary(max_size=300) | st.builds(lambda obj: pickle.dumps(obj), _JSON))
def test_fuzz_metadata_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("md") / ".metadata"
    path.write_bytes(data)
    with pytest.raises(CheckpointError) as info:
        load_metadata(path)
    assert "\n" not in str(info.value)


def test_pickle_opcodes_that_reach_other_globals_are_refused(tmp_path: Path) -> None:
    """Protocol-0 GLOBAL/INST and protocol-2 EXT/STACK_GLOBAL all end in find_class."""
    marker = tmp_path / "ran"
    payloads = [
        f"cos\nsystem\n(S'touch {marker}'\ntR.".encode(),             # GLOBAL + REDUCE
        f"(S'touch {marker}'\nios\nsystem\n.".encode(),               # INST
        b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x8c\x04eval\x93\x8c\x01x\x85R.",  # STACK_GLOBAL
    ]
    for i, data in enumerate(payloads):
        path = tmp_path / f"p{i}" / ".metadata"
        path.parent.mkdir()
        path.write_bytes(data)
        with pytest.raises(CheckpointError, match="is not a DCP metadata type"):
            load_metadata(path)
    assert not marker.exists()
    buf = io.BytesIO()
    pickle.Pickler(buf, protocol=2).dump(torch.Size([2]))  # an allowed global, but not Metadata
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / ".metadata").write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError, match="top-level object is Size"):
        load_metadata(tmp_path / "ok" / ".metadata")


@pytest.mark.parametrize("name", ["meta.json", "actor/.metadata"])
def test_a_fifo_in_place_of_a_file_does_not_hang(ckpt: Path, name: str) -> None:
    import os

    (ckpt / name).unlink()
    os.mkfifo(ckpt / name)
    with pytest.raises(CheckpointError, match="not a regular file"):
        verify(ckpt) if name == "meta.json" else load_metadata(ckpt / name)


@seed(13)
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(st.sampled_from(["list", "verify", "digest", "CKPT", "ROOT", "FILE", "/nonexistent", "--x", "-h2",
                                      ""]), max_size=3))
def test_fuzz_verl_ckpt_argv(pristine: Path, tmp_path: Path, argv: list[str],
                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    paths = {"CKPT": str(pristine), "ROOT": str(pristine.parent), "FILE": str(tmp_path / "f")}
    try:
        code = ckpt_main([paths.get(a, a) for a in argv])
    except SystemExit as exc:  # argparse usage error
        code = exc.code
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    if code == 2 and not err.startswith("usage:"):
        assert len(err.strip().splitlines()) == 1, err
