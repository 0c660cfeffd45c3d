"""``verl-ckpt list|verify|digest DIR``: inspect checkpoints without starting a trainer.

DIR is a checkpoint root (holding ``global_step_<N>/``) or one ``global_step_<N>`` directory; for a
root, ``verify`` and ``digest`` use the newest complete checkpoint. Errors: one line, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verl.checkpoint import CheckpointError, digest_checkpoint, latest_complete, layout, list_steps, verify


def _target(directory: Path) -> Path:
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory (pass a checkpoint root or a global_step_<N> dir)")
    if layout.step_of(directory) is not None:
        return directory
    newest = latest_complete(directory)
    if newest is None:
        raise CheckpointError(f"no complete checkpoint under {directory} (no global_step_<N>/COMPLETE)")
    return newest


def _list(directory: Path) -> int:
    """Exit 2 when a checkpoint that claims to be complete does not verify: scripts must notice."""
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory (pass a checkpoint root)")
    steps = list_steps(directory)
    if not steps:
        print(f"no checkpoints under {directory}")
    invalid = []
    for step, path in steps:
        if not layout.is_complete(path):
            status = "incomplete"
        else:
            try:
                verify(path, check_checksums=False)
                status = "complete"
            except CheckpointError as exc:
                status = f"invalid: {exc}"
                invalid.append(f"{path.name}: {exc}")
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        print(f"step={step}\t{status}\t{size / 1e6:.1f} MB\t{path}")
    if invalid:
        more = f" (and {len(invalid) - 1} more)" if len(invalid) > 1 else ""
        raise CheckpointError(f"invalid checkpoint {invalid[0]}{more}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verl-ckpt", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["list", "verify", "digest"])
    parser.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            return _list(args.dir)
        target = _target(args.dir)
        meta = verify(target)
        if args.command == "verify":
            print(f"ok step={meta['global_step']} world_size={meta['world_size']} files={len(meta['manifest'])} {target}")
        else:
            print(f"step={meta['global_step']} sha256={digest_checkpoint(target)}")
        return 0
    except CheckpointError as exc:
        print(f"verl-ckpt: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"verl-ckpt: cannot read {getattr(exc, 'filename', args.dir)}: {exc.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
