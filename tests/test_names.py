"""One name, one meaning, read from the source text (ast and regex; nothing is imported or run):

- no two module-level classes of verl/, monitor/, alerting/, harness/ and dashboards/ share a name, except
  the clock: ``verl/utils/clock.py`` is a copy of ``alerting/clock.py`` that test_boundaries pins identical
  (verl may not import alerting), one definition written twice;
- ``take`` means one thing: a buffer handing out rollouts (``verl/data/buffer.py``); the engine catches up on
  the log, the correlator notes evidence, the rate limiter spends budget;
- product code, configs and their READMEs carry no issue numbers: a comment says why, the git history says
  which issue asked for it.

Each check returns its violations and is shown to find one planted in a tmp_path tree.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLASS_PACKAGES = ("verl", "monitor", "alerting", "harness", "dashboards")
# verl may not import alerting, so the clock is written twice; test_boundaries.test_one_clock_interface
# fails when the copy drifts from its model.
CHECKED_COPIES = {frozenset({"verl/utils/clock.py", "alerting/clock.py"})}
TAKE_HOME = {"verl/data/buffer.py"}
TEXT_ROOTS = ("verl", "monitor", "alerting", "harness", "dashboards", "prometheus")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".j2", ".tmpl"}
TOP_TEXTS = ("README.md",)
# "(issue 36)", "issues 32-33", "Issue 25": ours. An upstream project's issue ("verl issue 7817") is a citation.
ISSUE_NUMBER = re.compile(r"(?<!verl )\b[Ii]ssues? #?\d+")


def _rel(root: Path, p: Path) -> str:
    return p.relative_to(root).as_posix()


def duplicate_classes(root: Path) -> list[str]:
    where: dict[str, list[str]] = defaultdict(list)
    for package in CLASS_PACKAGES:
        for p in sorted((root / package).rglob("*.py")):
            for node in ast.parse(p.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(_rel(root, p))
    return [f"class {name} is defined in {', '.join(files)}: give each meaning its own name, or import the one"
            for name, files in sorted(where.items())
            if len(files) > 1 and frozenset(files) not in CHECKED_COPIES]


def take_meanings(root: Path) -> list[str]:
    out = []
    for package in CLASS_PACKAGES:
        for p in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.lstrip("_") == "take"
                        and _rel(root, p) not in TAKE_HOME):
                    out.append(f"{_rel(root, p)}:{node.lineno}: {node.name}() is another meaning of 'take' "
                               f"(it means a buffer handing out rollouts): name what this one does")
    return out


def issue_numbers(root: Path) -> list[str]:
    files = [root / t for t in TOP_TEXTS] + [p for d in TEXT_ROOTS for p in sorted((root / d).rglob("*"))
                                             if p.is_file() and p.suffix in TEXT_SUFFIXES]
    out = []
    for p in files:
        rel = _rel(root, p)
        if not p.exists():
            continue
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if m := ISSUE_NUMBER.search(line):
                out.append(f"{rel}:{n}: {m.group(0)!r}: say the reason it stands for (git log has the issue)")
    return out


@pytest.mark.parametrize("check", [duplicate_classes, take_meanings, issue_numbers])
def test_the_names_hold(check) -> None:
    found = check(ROOT)
    assert not found, "\n".join(found)


def _plant(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    for d in CLASS_PACKAGES + TEXT_ROOTS:
        (root / d).mkdir(exist_ok=True)
    return root


def test_each_check_finds_a_planted_violation(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "verl/a.py": "class ConfigError(ValueError):\n    pass\n",
        "alerting/b.py": "class ConfigError(ValueError):\n    pass\n\n\nclass Limiter:\n    def take(self):\n"
                         "        pass\n",
        "verl/utils/clock.py": "class Clock:\n    pass\n",
        "alerting/clock.py": "class Clock:\n    pass\n",
        "verl/data/buffer.py": "class Buffer:\n    def take(self, n):\n        pass\n",
        "monitor/README.md": "## Durability (issue 23)\nverl issue 7817 is upstream's.\n",
        "monitor/rules/default.yaml": "# issue 32\n",
    })
    assert duplicate_classes(root) == [
        "class ConfigError is defined in verl/a.py, alerting/b.py: give each meaning its own name, or import the one"]
    assert [v.split(":")[0:2] for v in take_meanings(root)] == [["alerting/b.py", "6"]]
    assert issue_numbers(root) == [
        "monitor/README.md:1: 'issue 23': say the reason it stands for (git log has the issue)",
        "monitor/rules/default.yaml:1: 'issue 32': say the reason it stands for (git log has the issue)"]
