"""Issue 26's done-when, held against the source text (ast; nothing is imported or run):

(a) no import cycle among the modules of verl/, monitor/, alerting/ and harness/: module-level imports,
    imports inside functions and under ``if TYPE_CHECKING:`` all count (``from pkg import name`` is an import
    of the submodule ``pkg.name`` when there is one, else of ``pkg/__init__.py``; the package ``__init__`` that
    Python runs on the way to a submodule is not counted as an import of it);
(b) alerting gets no hook or callback from the monitor: no ``getattr``/``hasattr`` looking up a ``set_...``
    hook, no ``set_...`` setter of alerting (or on an engine) called from monitor/, no lambda or bound method
    handed to an alerting constructor or function;
(c) no notifier (alerting/notifiers/) fetches over HTTP: a notifier only pushes to its receiver, and a GET
    reads back the monitor's API (``/api/v1/``);
(d) ``ppo_step`` takes the step's parts, not the trainer: no parameter annotated ``RLTrainer``, and
    verl/trainer/ppo_step.py does not import ppo_trainer;
(e) monitor/daemon.py only schedules: at most 250 lines; (f) no product module over 450 lines;
(g) issue 34's typed seam: no ``getattr``/``hasattr`` on the engine anywhere in monitor/ (it is an
    ``alerting.sink.AlertSink``: call what the protocol names), and no monitor module imports alerting's
    internal constants (ALL_CAPS names from ``alerting.correlate``/``alerting.procedures``): what alerting
    needs measured reaches the monitor as data (``alerting.sink.DiagnosisNeeds``).

Each check is a function of a tree's root returning its violations as ``file:line: what, and what to change``;
each is asserted empty on this repository and shown to find a violation planted in a tmp_path tree.
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("verl", "monitor", "alerting", "harness")
PRODUCTS = ("verl", "monitor", "alerting")
MAX_MODULE_LINES = 450
MAX_DAEMON_LINES = 250
HTTP_METHODS = frozenset({"get", "head", "post", "put", "patch", "delete", "request", "stream", "send"})
MONITOR_API = "/api/v1/"

# each file is parsed and walked once, each tree's cycles found once: the checks stay under two seconds
_trees: dict[Path, ast.Module] = {}
_walks: dict[Path, list[ast.AST]] = {}
_cycles: dict[Path, list[Cycle]] = {}


def _tree(path: Path) -> ast.Module:
    if path not in _trees:
        _trees[path] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return _trees[path]


def _nodes(path: Path) -> list[ast.AST]:
    """Every node of the file's tree (``ast.walk``)."""
    if path not in _walks:
        _walks[path] = list(ast.walk(_tree(path)))
    return _walks[path]


def forget() -> None:
    """Drop what was read (a test that rewrites a planted file reads it again)."""
    _trees.clear()
    _walks.clear()
    _cycles.clear()


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the four packages under ``root``."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


@dataclass(frozen=True)
class Edge:
    """``src`` imports ``dst`` at ``file:line``; ``how`` says where the import statement stands."""

    src: str
    dst: str
    file: str
    line: int
    how: str  # "", " (in a function)", " (under TYPE_CHECKING)"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(body: list[ast.stmt], how: str = "") -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with where it stands, function bodies and TYPE_CHECKING blocks included
    (an import is a statement: only statement bodies are walked, never expressions)."""
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt, how
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _import_nodes(stmt.body, how or " (in a function)")
        elif isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
            yield from _import_nodes(stmt.body, " (under TYPE_CHECKING)")
            yield from _import_nodes(stmt.orelse, how)
        else:  # classes, loops, with, try (its handlers), match (its cases)
            inner = [s for name in ("body", "orelse", "finalbody") for s in getattr(stmt, name, [])]
            inner += [s for h in [*getattr(stmt, "handlers", []), *getattr(stmt, "cases", [])] for s in h.body]
            yield from _import_nodes(inner, how)


def imports(root: Path, mods: dict[str, Path] | None = None) -> list[Edge]:
    """Import edges between the modules of ``mods`` (default: all four packages under ``root``)."""
    mods = modules(root) if mods is None else mods
    edges: list[Edge] = []
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, how in _import_nodes(_tree(path).body):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    targets += next(([".".join(parts[:k])] for k in range(len(parts), 0, -1)
                                     if ".".join(parts[:k]) in mods), [])
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets += [sub] if sub in mods else [base] if base in mods else []
            edges += [Edge(name, t, _rel(root, path), node.lineno, how) for t in dict.fromkeys(targets) if t != name]
    return edges


@dataclass(frozen=True)
class Cycle:
    modules: tuple[str, ...]  # the dotted names of one strongly connected component
    text: str  # each shortest loop through its modules, import by import, and the fix


def import_cycles(root: Path) -> list[Cycle]:
    if root not in _cycles:
        _cycles[root] = _find_cycles(root)
    return _cycles[root]


def _find_cycles(root: Path) -> list[Cycle]:
    mods = modules(root)
    graph = nx.DiGraph()
    for e in imports(root, mods):
        if not graph.has_edge(e.src, e.dst):  # the first import statement stands for the pair
            graph.add_edge(e.src, e.dst, edge=e)
    found = []
    for comp in sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1):
        sub = graph.subgraph(comp)
        loops: dict[frozenset[Edge], list[Edge]] = {}  # the shortest loop through each module, each loop once
        for m in comp:
            back = min((nx.shortest_path(sub, w, m) for w in sub.successors(m)), key=len)
            chain = [sub.edges[a, b]["edge"] for a, b in itertools.pairwise([m, *back])]
            loops.setdefault(frozenset(chain), chain)
        text = "\n".join(" -> ".join(f"{e.file}:{e.line}{e.how}" for e in chain) + f" -> {chain[0].file}"
                         for chain in loops.values())
        found.append(Cycle(tuple(comp), f"import cycle among {', '.join(_rel(root, mods[m]) for m in comp)}: move "
                           "what they share into a third module, or pass it in (a parameter, a small dataclass), "
                           f"so that one side no longer imports the other:\n{text}"))
    return found


def cycles_in(root: Path, package: str) -> list[str]:
    """The import cycles that pass through a module of ``package``."""
    return [c.text for c in import_cycles(root) if any(m.split(".")[0] == package for m in c.modules)]


def _files(root: Path, *folders: str) -> list[Path]:
    return [p for folder in folders for p in sorted((root / folder).rglob("*.py"))]


def getattr_hooks(root: Path) -> list[str]:
    """``getattr(x, "set_...")`` / ``hasattr``: a hook found by name between the monitor and alerting."""
    return [f"{_rel(root, path)}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r}) finds a hook by name: "
            "capture what it would pass where the data is and send it forward on the alert (no setter)"
            for path in _files(root, "alerting", "monitor") for node in _nodes(path)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str) and node.args[1].value.startswith("set_")]


def _is_engine(expr: ast.expr) -> bool:
    """``engine``, ``self.engine``, ``daemon.engine``, ``pipe.engine``...: the alerting engine by its name."""
    return (isinstance(expr, ast.Name) and "engine" in expr.id.lower()) or (
        isinstance(expr, ast.Attribute) and "engine" in expr.attr.lower())


def engine_getattr(root: Path) -> list[str]:
    return [f"{_rel(root, path)}:{node.lineno}: {ast.unparse(node)} looks the engine's methods up by name: "
            "call what alerting.sink.AlertSink names (add it there when the monitor needs more)"
            for path in _files(root, "monitor") for node in _nodes(path)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and node.args and _is_engine(node.args[0])]


INTERNAL = ("alerting.correlate", "alerting.procedures")


def monitor_imports_alerting_constants(root: Path) -> list[str]:
    return [f"{_rel(root, path)}:{node.lineno}: imports {a.name} from {node.module}, alerting's internals: take "
            "it from alerting.sink.DiagnosisNeeds, handed to the monitor at construction"
            for path in _files(root, "monitor") for node, _ in _import_nodes(_tree(path).body)
            if isinstance(node, ast.ImportFrom) and node.module in INTERNAL
            for a in node.names if a.name.isupper()]


def _alerting_setters(root: Path) -> set[str]:
    return {item.name for path in _files(root, "alerting") for cls in _nodes(path)
            if isinstance(cls, ast.ClassDef) for item in cls.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("set_")}


def _alerting_names(tree: ast.Module) -> set[str]:
    """Names a monitor module binds to alerting's modules, classes and functions."""
    names: set[str] = set()
    for node, _ in _import_nodes(tree.body):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "alerting":
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "alerting"}
    return names


def _root_name(expr: ast.expr) -> str | None:
    while isinstance(expr, (ast.Attribute, ast.Call)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _callbacks(call: ast.Call, methods: set[str], functions: set[str]) -> list[str]:
    """Arguments of ``call`` that are functions: a lambda, a bound method ``self.m``, a module function."""
    values = [*call.args, *(k.value for k in call.keywords)]
    return [ast.unparse(v) for v in values
            if isinstance(v, ast.Lambda)
            or (isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "self"
                and v.attr in methods)
            or (isinstance(v, ast.Name) and v.id in functions)]


def monitor_hands_alerting_callbacks(root: Path) -> list[str]:
    setters = _alerting_setters(root)
    found = []
    for path in _files(root, "monitor"):
        tree = _tree(path)
        ours = _alerting_names(tree)
        functions = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        # every method name of the module's classes: ``self.m`` handed on is a bound method
        methods = {m.name for c in _nodes(path) if isinstance(c, ast.ClassDef) for m in c.body
                   if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in _nodes(path):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr.startswith("set_") and (
                    func.attr in setters or "engine" in ast.unparse(func.value).lower()):
                found.append(f"{_rel(root, path)}:{node.lineno}: {ast.unparse(func)}(...) pushes into alerting "
                             "after construction: capture the data in the monitor and send it forward with the "
                             "alert (no setter on the engine)")
            elif ours and _root_name(func) in ours and (cbs := _callbacks(node, methods, functions)):
                found.append(f"{_rel(root, path)}:{node.lineno}: {ast.unparse(func)}(...) is handed a callback "
                             f"into the monitor ({', '.join(cbs)}): pass the data forward as values, never a "
                             "function alerting calls back")
    return found


def _http_call(call: ast.Call) -> str | None:
    """The HTTP method of a client call (``client.get``, ``httpx.post``, ``x.request("GET", ...)``), or None."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in HTTP_METHODS:
        return None
    target = ast.unparse(func.value).lower()
    if not (target.endswith("client") or target in ("httpx", "requests", "urllib.request")):
        return None
    if func.attr in ("request", "stream") and call.args and isinstance(call.args[0], ast.Constant):
        return str(call.args[0].value).upper()
    return func.attr.upper()


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def notifier_fetches(root: Path) -> list[str]:
    found = []
    for path in _files(root, "alerting/notifiers"):
        for node in _nodes(path):
            if not isinstance(node, ast.Call):
                continue
            method = _http_call(node)
            at_api = any(MONITOR_API in s for a in [*node.args, *(k.value for k in node.keywords)] for s in _strings(a))
            if method in ("GET", "HEAD") or (method and at_api):
                found.append(f"{_rel(root, path)}:{node.lineno}: {ast.unparse(node)[:80]} reads over HTTP (the "
                             f"monitor's {MONITOR_API} API): a notifier only pushes to its receiver; let what it "
                             "needs (the plot's bytes) travel with the alert")
    return found


def step_takes_trainer(root: Path) -> list[str]:
    rel = "verl/trainer/ppo_step.py"
    path = root / rel
    if not path.exists():
        return [f"{rel}: missing; point this check at the module that holds ppo_step"]
    step = next((n for n in _tree(path).body if isinstance(n, ast.FunctionDef) and n.name == "ppo_step"), None)
    found = [] if step is not None else [f"{rel}: no function ppo_step; point this check at where the step lives"]
    if step is not None:
        a = step.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                    *([a.kwarg] if a.kwarg else [])]:
            if arg.annotation is not None and "RLTrainer" in ast.unparse(arg.annotation):
                found.append(f"{rel}:{arg.lineno}: ppo_step's parameter {arg.arg} is an RLTrainer: hand it the "
                             "step's parts (a small dataclass the trainer builds once)")
    found += [f"{e.file}:{e.line}{e.how}: imports verl.trainer.ppo_trainer: the step must not know the trainer"
              for e in imports(root, modules(root)) if e.src == "verl.trainer.ppo_step" and e.dst == "verl.trainer.ppo_trainer"]
    return found


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def daemon_too_long(root: Path) -> list[str]:
    path = root / "monitor" / "daemon.py"
    n = _lines(path) if path.exists() else 0
    return [f"monitor/daemon.py:{MAX_DAEMON_LINES + 1}: {n} lines (at most {MAX_DAEMON_LINES}): the daemon only "
            "schedules; move sources, wiring and API helpers into their own modules"] if n > MAX_DAEMON_LINES else []


def long_modules(root: Path, package: str) -> list[str]:
    return [f"{_rel(root, p)}:{MAX_MODULE_LINES + 1}: {n} lines (at most {MAX_MODULE_LINES}): split it along a real "
            "seam" for p in _files(root, package) if (n := _lines(p)) > MAX_MODULE_LINES]


# -- this repository ----------------------------------------------------------------------------------------------
def _case(check: Callable[..., list[str]], *args: str) -> Any:
    """``check(ROOT, *args)`` as a pytest.param named after the check."""
    name = check.__name__ + "".join(f"[{a}]" for a in args)
    return pytest.param(functools.partial(check, ROOT, *args), id=name)


HOUSE = [
    _case(cycles_in, "verl"),
    _case(cycles_in, "monitor"), _case(cycles_in, "alerting"), _case(cycles_in, "harness"),
    _case(getattr_hooks),
    _case(engine_getattr),
    _case(monitor_imports_alerting_constants),
    _case(monitor_hands_alerting_callbacks),
    _case(notifier_fetches),
    _case(step_takes_trainer),
    _case(daemon_too_long),
    _case(long_modules, "verl"),
    _case(long_modules, "monitor"),
    _case(long_modules, "alerting"),
]


@pytest.mark.parametrize("check", HOUSE)
def test_the_house_holds(check: Callable[[], list[str]]) -> None:
    found = check()
    assert not found, "\n".join(found)


# -- each check finds a planted violation --------------------------------------------------------------------------
PLANTED = {
    # (a) a loop through a TYPE_CHECKING import and a function-level one; c.py imports into it without a loop
    "verl/__init__.py": "",
    "verl/a.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from verl.b import B\n",
    "verl/b.py": "class B:\n    def f(self):\n        from . import a\n        return a\n",
    "verl/c.py": "import verl.b\nfrom verl import a\n",
    # (d) the step takes the trainer
    "verl/trainer/__init__.py": "",
    "verl/trainer/ppo_trainer.py": "class RLTrainer:\n    pass\n",
    "verl/trainer/ppo_step.py": ("from __future__ import annotations\n\nfrom typing import TYPE_CHECKING\n\n"
                                 "if TYPE_CHECKING:\n    from .ppo_trainer import RLTrainer\n\n\n"
                                 "def ppo_step(batch: list[int], t: RLTrainer) -> None:\n    pass\n"),
    # (b) a hook found by name, a setter pushed into the engine, a callback handed to alerting
    "alerting/__init__.py": "",
    "alerting/engine.py": ("class Engine:\n    def __init__(self, on_flush=None):\n        self.on_flush = on_flush\n\n"
                           "    def set_config_info(self, node, labels):\n        pass\n"),
    "monitor/__init__.py": "",
    "monitor/pipeline.py": ("def wire(engine, store):\n    hook = getattr(engine, 'set_evidence', None)\n"
                            "    return hook and hook(store.query)\n"),
    "monitor/daemon.py": ("from alerting.engine import Engine\n\n\nclass Daemon:\n    def __init__(self):\n"
                          "        self.engine = Engine(on_flush=self._annotate)\n"
                          "        self.engine.set_config_info('n1', {})\n        Engine(clock=self.clock)\n\n"
                          "    def _annotate(self, alert):\n        return alert\n" + "# filler\n" * 240),
    # (c) a notifier that reads the plot back; posting to its receiver and dict.get are fine
    "alerting/notifiers/__init__.py": "",
    "alerting/notifiers/wecom.py": ("import httpx\n\n\nclass WeCom:\n    def send(self, ref, data):\n"
                                    "        self.client.post(self.url, json={'errcode': data.get('errcode')})\n"
                                    "        httpx.post(f'{self.monitor}/api/v1/alerts', json={})\n"
                                    "        return self.client.get(ref).content\n"),
    # (g) the engine's methods found by name, alerting's constants imported
    "monitor/endpoints/health.py": ("from alerting.correlate import REDIAGNOSE_S, load_rules\n\n\n"
                          "def report(daemon):\n    problems = getattr(daemon.engine, 'delivery_problems', None)\n"
                          "    return hasattr(engine, 'page_pending') or getattr(self.engine, 'x') or getattr(h, 'y')\n"),
    "harness/__init__.py": "",
}


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    for rel, text in PLANTED.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_cycle_check_finds_function_level_and_type_checking_loops(planted: Path) -> None:
    (cycle,) = import_cycles(planted)
    assert cycle.modules == ("verl.a", "verl.b")
    assert "verl/a.py:4 (under TYPE_CHECKING) -> verl/b.py:3 (in a function) -> verl/a.py" in cycle.text
    assert "move what they share into a third module" in cycle.text
    edges = {(e.src, e.dst, e.how) for e in imports(planted)}
    assert ("verl.c", "verl.b", "") in edges and ("verl.c", "verl.a", "") in edges  # no loop: not a cycle
    (planted / "verl/b.py").write_text("class B:\n    pass\n")
    forget()
    assert import_cycles(planted) == []


def test_hook_setter_and_callback_checks_find_them(planted: Path) -> None:
    assert getattr_hooks(planted) == ["monitor/pipeline.py:2: getattr(..., 'set_evidence') finds a hook by name: "
                                      "capture what it would pass where the data is and send it forward on the "
                                      "alert (no setter)"]
    found = monitor_hands_alerting_callbacks(planted)
    assert [f.split(" (")[0].split(": ")[0] for f in found] == ["monitor/daemon.py:6", "monitor/daemon.py:7"]
    assert "Engine(...) is handed a callback into the monitor (self._annotate)" in found[0]
    assert "self.engine.set_config_info(...) pushes into alerting" in found[1]  # clock=self.clock is a value


def test_notifier_check_finds_a_get_and_a_call_to_the_monitors_api(planted: Path) -> None:
    found = notifier_fetches(planted)
    assert [f.split(": ")[0] for f in found] == ["alerting/notifiers/wecom.py:7", "alerting/notifiers/wecom.py:8"]
    assert "httpx.post(f'{self.monitor}/api/v1/alerts'" in found[0] and "self.client.get(ref)" in found[1]
    assert all("let what it needs (the plot's bytes) travel with the alert" in f for f in found)


def test_step_check_finds_the_trainer_parameter_and_import(planted: Path) -> None:
    assert step_takes_trainer(planted) == [
        "verl/trainer/ppo_step.py:9: ppo_step's parameter t is an RLTrainer: hand it the step's parts (a small "
        "dataclass the trainer builds once)",
        "verl/trainer/ppo_step.py:6 (under TYPE_CHECKING): imports verl.trainer.ppo_trainer: the step must not "
        "know the trainer"]
    (planted / "verl/trainer/ppo_step.py").write_text("def step(parts):\n    pass\n")
    forget()
    assert step_takes_trainer(planted) == ["verl/trainer/ppo_step.py: no function ppo_step; point this check at "
                                           "where the step lives"]


def test_length_checks_find_a_long_daemon_and_a_long_module(planted: Path) -> None:
    assert daemon_too_long(planted) == ["monitor/daemon.py:251: 251 lines (at most 250): the daemon only "
                                        "schedules; move sources, wiring and API helpers into their own modules"]
    assert long_modules(planted, "monitor") == []
    (planted / "alerting/engine.py").write_text("x = 1\n" * 451)
    assert long_modules(planted, "alerting") == ["alerting/engine.py:451: 451 lines (at most 450): split it along "
                                                 "a real seam"]


def test_seam_checks_find_getattr_on_the_engine_and_an_internal_constant(planted: Path) -> None:
    assert [f.split(" looks")[0] for f in engine_getattr(planted)] == [
        "monitor/endpoints/health.py:5: getattr(daemon.engine, 'delivery_problems', None)",
        "monitor/endpoints/health.py:6: hasattr(engine, 'page_pending')", "monitor/endpoints/health.py:6: getattr(self.engine, 'x')",
        "monitor/pipeline.py:2: getattr(engine, 'set_evidence', None)"]
    assert monitor_imports_alerting_constants(planted) == [
        "monitor/endpoints/health.py:1: imports REDIAGNOSE_S from alerting.correlate, alerting's internals: take it from "
        "alerting.sink.DiagnosisNeeds, handed to the monitor at construction"]  # load_rules is a function: fine
