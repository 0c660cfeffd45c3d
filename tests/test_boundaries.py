"""SPEC §2 import boundaries: verl imports neither monitor nor alerting; alerting imports neither;
monitor imports alerting but never verl. Checked on the AST, so strings and comments don't count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"verl": {"monitor", "alerting"}, "alerting": {"monitor", "verl"}, "monitor": {"verl"}}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_cross_boundaries(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"package {package}/ has no modules"
    crossings = [
        f"{f.relative_to(ROOT)} imports {bad}"
        for f in files
        for bad in sorted(imported_packages(f) & FORBIDDEN[package])
    ]
    assert not crossings, "\n".join(crossings)


def test_checker_sees_a_crossing(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("import os\nfrom monitor.detectors import base\n")
    assert imported_packages(bad) == {"os", "monitor"}


def _without_module_docstring(path: Path) -> str:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
        tree.body = tree.body[1:]
    return ast.dump(tree)


def test_one_clock_interface() -> None:
    """alerting/clock.py is the model, verl/utils/clock.py its checked copy (verl may not import alerting)."""
    assert _without_module_docstring(ROOT / "verl/utils/clock.py") == _without_module_docstring(
        ROOT / "alerting/clock.py"), "verl/utils/clock.py drifted from alerting/clock.py: copy the model over"
