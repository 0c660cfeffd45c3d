"""SPEC §2 import boundaries: verl imports neither monitor nor alerting; alerting imports neither;
monitor imports alerting but never verl; no product package imports the harness (harness/ may import all
three). Checked on the AST: imports, and string constants in code that name a forbidden package's module
(``"verl.cli.train"`` in monitor/ would spawn the trainer), so docstrings and comments don't count."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"verl": {"monitor", "alerting", "harness"}, "alerting": {"monitor", "verl", "harness"},
             "monitor": {"verl", "harness"}, "harness": set()}
PRODUCTS = ("verl", "monitor", "alerting")
# Text written for a person, never run by the package that holds it (file -> the one package it may name).
HUMAN_TEXT = {"alerting/procedures.py": "verl"}  # REWARD_CHECK: a command the chat message suggests to the operator
MODULE_NAME = re.compile(r"(?<![\w./-])(verl|monitor|alerting|harness)\.[a-z_]\w*")


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def named_modules(path: Path) -> set[str]:
    """Packages whose modules a string constant in code names (docstrings excluded)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {m.group(1) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
            for m in MODULE_NAME.finditer(n.value) if _is_module(m.group(0))}


def _is_module(dotted: str) -> bool:
    """``verl.cli.train`` is a module; ``verl.alerting`` (a logger name) is not."""
    top, sub = dotted.split(".")[:2]
    return (ROOT / top / f"{sub}.py").exists() or (ROOT / top / sub / "__init__.py").exists()


@pytest.mark.parametrize("package", PRODUCTS)
def test_product_does_not_spawn_or_name_another_products_modules(package: str) -> None:
    crossings = [f"{f.relative_to(ROOT)} names a {bad} module in a string"
                 for f in sorted((ROOT / package).rglob("*.py")) for bad in sorted(named_modules(f) & FORBIDDEN[package])
                 if HUMAN_TEXT.get(str(f.relative_to(ROOT))) != bad]
    assert not crossings, "\n".join(crossings)


def test_string_checker_sees_a_spawn(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text('"""Runs verl.cli.train (a docstring may say so)."""\nLOG = "verl.alerting"\n'
                   'CMD = ["python", "-m", "verl.cli.train"]\n')
    assert named_modules(bad) == {"verl"}


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
