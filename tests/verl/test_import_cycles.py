"""No import cycle among verl's modules, counting every import: module level, inside functions and under
``TYPE_CHECKING`` (a cycle hidden in a function body is still one piece of code that needs the other)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports_of(path: Path) -> set[Path]:
    """The verl modules ``path`` names in any import statement anywhere in it."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, node.module] if node.module else parent)
            else:
                base = node.module or ""
            # ``from pkg import sub`` imports the submodule when there is one, else a name of pkg
            names = [f"{base}.{a.name}" if module_file(f"{base}.{a.name}") else base for a in node.names]
        else:
            continue
        out.update(f for name in names if name.split(".")[0] == "verl" and (f := module_file(name)) and f != path)
    return out


def cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    found: list[list[Path]] = []

    def visit(v: Path) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_verl_has_no_import_cycle() -> None:
    graph = {f: imports_of(f) for f in sorted((ROOT / "verl").rglob("*.py"))}
    found = [" -> ".join(str(p.relative_to(ROOT)) for p in c) for c in cycles(graph)]
    assert not found, "import cycles in verl:\n" + "\n".join(found)


def test_checker_sees_a_function_level_cycle(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    graph = {a: {b}, b: {a}, tmp_path / "c.py": {a}}
    assert cycles(graph) == [sorted([a, b])]
    assert module_file("verl.trainer.ppo_step") in imports_of(ROOT / "verl/trainer/ppo_trainer.py")
