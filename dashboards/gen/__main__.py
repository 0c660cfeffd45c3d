"""Write (or, with --check, verify) the committed dashboard JSON: `python -m dashboards.gen [--check]`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import gpu, monitor, training

OUT_DIR = Path(__file__).resolve().parents[1]
DASHBOARDS = {
    "verl-training.json": training.dashboard,
    "gpu-dcgm.json": gpu.dashboard,
    "monitor.json": monitor.dashboard,
}


def render(build) -> str:
    return json.dumps(build().to_json(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.gen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is out of date")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="directory to write into")
    args = parser.parse_args(argv)
    if not args.out.is_dir():
        print(f"--out {args.out}: not a directory; create it or pass an existing one", file=sys.stderr)
        return 2
    stale = []
    for name, build in DASHBOARDS.items():
        path = args.out / name
        text = render(build)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"dashboards out of date: {', '.join(stale)}; fix: run `python -m dashboards.gen`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
