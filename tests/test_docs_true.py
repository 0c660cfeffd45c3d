"""The READMEs name what exists: read as text, checked against the tree (nothing is imported or run).

- every file a README names in backticks (``monitor/series/store.py``, ``tests/e2e/test_ha_pair.py``, a bare
  ``test_ha_pair.py``, ``test_x.py::test_y``) exists, and the test it names is defined in that file;
- README.md's layout names real files and folders, and names every module of the monitor's packages but
  detectors/ (a newcomer looks there for where a thing lives);
- README.md's tour lists as many modules as it says it crosses, each one real;
- product code that points a reader at a test file points at one that exists;
- no README states a count of tests (it goes stale with the next test written; ``pytest --co`` knows).

Each check returns its violations and is shown to fail on a made-up name in a tmp_path tree.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = ("README.md", "monitor/README.md", "alerting/README.md", "verl/README.md", "verl/checkpoint/README.md",
           "harness/README.md", "dashboards/README.md", "prometheus/README.md")
TOP_DIRS = ("verl", "monitor", "alerting", "harness", "dashboards", "prometheus", "benchmarks", "tests", ".ci")
FILE_SUFFIX = r"\.(?:py|ya?ml|md|json|csv|txt|prom|j2|html|sh)"
# a path in backticks: `monitor/series/store.py`, `tests/e2e/test_ha_pair.py::test_x`, `rules/default.yaml`
PATH_IN_TICKS = re.compile(rf"`((?:[\w.-]+/)*[\w.-]+?{FILE_SUFFIX})(?![\w.])(?:::(\w+))?")
TEST_FILE = re.compile(r"(?<![\w/])(test_\w+\.py)(?:::(\w+))?")
# in product code a pointer may also be a path: `tests/monitor/test_monitor_detectors.py::test_ks_shift`
TEST_PATH = re.compile(r"(?<![\w/])(tests/(?:[\w-]+/)*test_\w+\.py)(?:::(\w+))?")
TEST_COUNT = re.compile(r"\b\d[\d,]* (?:tests|test functions)\b(?! (?:of|in) (?:a|the) )")


def _code_block_after(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(heading)
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    end = next(i for i in range(first + 1, len(lines)) if lines[i].startswith("```"))
    return lines[first + 1:end]


# Files of other projects a README cites by their own path (upstream verl, vLLM, SGLang, CleanRL).
ELSEWHERE = {"verl/utils/tracking.py", "vllm/v1/metrics/loggers.py", "python/sglang/srt/metrics/collector.py",
             "ppo.py"}


def _where(root: Path, readme: Path, name: str, prev_test: str | None) -> list[Path] | None:
    """The files a README's name may mean, or None when the name is not one of ours to check: a path is
    read from the root or beside the README (``sources/relabel.py`` in monitor/README.md); a bare test file
    anywhere under tests/, ``_cadence.py`` after ``test_monitor_verl_jsonl.py`` as
    ``test_monitor_verl_cadence.py``; a bare module anywhere in the README's package. A bare data file
    (``meta.json``, ``silences.json``) is what the products write at run time, not a file of the tree."""
    if name in ELSEWHERE:
        return None
    if "/" in name:
        head = name.split("/")[0]
        if head not in TOP_DIRS and not (readme.parent / head).is_dir():
            return None  # a run's layout (``actor/ckpt_contents.json``), not the tree's
        return [root / name, readme.parent / name]
    if name.startswith("_") and name.endswith(".py") and prev_test:
        name = prev_test.rsplit("_", 1)[0] + name
    if name.startswith("test_"):
        return sorted((root / "tests").rglob(name))
    if name.endswith(".py"):
        return sorted(p for p in readme.parent.rglob(name) if ".venv" not in p.parts)
    return None


def _test_defined(path: Path, test: str) -> bool:
    """``test_x.py::test_y`` names a test of that file; ``::test_drift_`` a family of them."""
    pattern = rf"^\s*(?:async )?def {re.escape(test)}" + ("" if test.endswith("_") else r"\b")
    return re.search(pattern, path.read_text(encoding="utf-8"), re.M) is not None


def missing_paths(root: Path) -> list[str]:
    out = []
    for rel in READMES:
        readme = root / rel
        prev_test = None  # ``_cadence.py`` may follow its family's first file on the line before
        for n, line in enumerate(readme.read_text(encoding="utf-8").splitlines(), 1):
            hits = sorted([(m.start(), m.group(1), m.group(2)) for m in PATH_IN_TICKS.finditer(line)]
                          + [(m.start(), m.group(1), m.group(2)) for m in TEST_FILE.finditer(line)])
            for _, name, test in hits:
                if "*" in name or name.startswith(("..", "/")) or "<" in name:
                    continue
                where = _where(root, readme, name, prev_test)
                if name.rsplit("/", 1)[-1].startswith("test_"):
                    prev_test = name.rsplit("/", 1)[-1][:-3]
                if where is None:
                    continue
                found = [p for p in where if p.is_file()]
                if not found:
                    out.append(f"{rel}:{n}: {name} does not exist")
                elif test and not any(_test_defined(p, test) for p in found):
                    out.append(f"{rel}:{n}: {name} defines no {test}")
    return sorted(set(out))


def layout_names(root: Path) -> list[str]:
    """README.md's layout: each ``x.py``, ``x.yaml`` or ``x/`` it names exists, in the package of its block
    (or the sub-folder the line starts with, e.g. ``sources/``), or from the root."""
    out = []
    top = sub = root
    for line in _code_block_after((root / "README.md").read_text(encoding="utf-8"), "### Layout"):
        indent = len(line) - len(line.lstrip())
        first = line.split()[0] if line.split() else ""
        if indent == 0 and first.endswith("/"):
            top = sub = root / first
        elif indent == 2:
            sub = top / first if first.endswith("/") else top
        for name in re.findall(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+(?:\.py|\.yaml|/))(?![\w/])", line):
            if not any((base / name).exists() for base in (sub, top, root)):
                out.append(f"README.md layout: {name} (under {sub.relative_to(root).as_posix() or '.'}/) "
                           "does not exist")
    return out


# the monitor's packages whose every module the layout names (detectors/ is named as one: its modules are
# the detector registry's entries, listed in monitor/README.md)
MONITOR_FOLDERS = ("monitor", "monitor/sources", "monitor/series", "monitor/evaluation", "monitor/book",
                   "monitor/endpoints")


def layout_omissions(root: Path) -> list[str]:
    """Every module of the monitor's packages (``MONITOR_FOLDERS``) is named in README.md's layout."""
    block = "\n".join(_code_block_after((root / "README.md").read_text(encoding="utf-8"), "### Layout"))
    named = set(re.findall(r"[\w-]+\.py|[\w-]+/", block))
    out = []
    for folder in (f for f in MONITOR_FOLDERS if (root / f).is_dir()):
        for p in sorted((root / folder).iterdir()):
            if p.name.startswith("_") or p.name == "README.md":
                continue
            key = p.name if p.suffix == ".py" else p.name + "/" if p.is_dir() and not p.name.startswith(".") else None
            if key and key not in named:
                out.append(f"README.md layout: {folder}/{key} is not named; say what it is for")
    return out


def tour_count(root: Path) -> list[str]:
    """The tour's closing list has as many modules as its opening sentence says, split by package as said."""
    text = (root / "README.md").read_text(encoding="utf-8")
    said = re.search(r"through\s+(\d+) Python modules \((\d+) in `verl/`, (\d+) in `monitor/`, (\d+) in "
                     r"`alerting/`", text)
    listed = re.search(r"The (\d+) modules, by package: (.*?)\n\n", text, re.S)
    if not said or not listed:
        return ["README.md tour: the module count sentence or the closing list is gone"]
    mods = re.findall(r"`([\w/]+\.py)`", listed.group(2))
    out = [f"README.md tour: {m} does not exist" for m in mods if not (root / m).is_file()]
    total, *per = (int(x) for x in said.groups())
    counts = [sum(m.startswith(p + "/") for m in mods) for p in ("verl", "monitor", "alerting")]
    if len(mods) != total or int(listed.group(1)) != total or counts != per:
        out.append(f"README.md tour: says {total} modules ({per}), lists {len(mods)} ({counts})")
    return out


def code_points_at_missing_tests(root: Path) -> list[str]:
    out = []
    for package in ("verl", "monitor", "alerting", "harness", "dashboards"):
        for p in sorted((root / package).rglob("*.py")):
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                for m in TEST_FILE.finditer(line):
                    found = sorted((root / "tests").rglob(m.group(1)))
                    if not found:
                        out.append(f"{p.relative_to(root).as_posix()}:{n}: names {m.group(1)}, which does not exist")
                    elif m.group(2) and not any(_test_defined(f, m.group(2)) for f in found):
                        out.append(f"{p.relative_to(root).as_posix()}:{n}: {m.group(1)} defines no {m.group(2)}")
                for m in TEST_PATH.finditer(line):
                    path = root / m.group(1)
                    if not path.is_file():
                        out.append(f"{p.relative_to(root).as_posix()}:{n}: names {m.group(1)}, which does not exist")
                    elif m.group(2) and not _test_defined(path, m.group(2)):
                        out.append(f"{p.relative_to(root).as_posix()}:{n}: {m.group(1)} defines no {m.group(2)}")
    return out


def stated_test_counts(root: Path) -> list[str]:
    return [f"{rel}:{n}: states a test count ({m.group(0)!r}); it goes stale, drop it"
            for rel in READMES
            for n, line in enumerate((root / rel).read_text(encoding="utf-8").splitlines(), 1)
            if (m := TEST_COUNT.search(line))]


CHECKS = [missing_paths, layout_names, layout_omissions, tour_count, code_points_at_missing_tests, stated_test_counts]


@pytest.mark.parametrize("check", CHECKS)
def test_the_docs_hold(check) -> None:
    found = check(ROOT)
    assert not found, "\n".join(found)


LAYOUT = """# x

### Layout

```
monitor/      the sidecar
  sources/      base.py (the Source protocol), scrape.py
  series/       store.py
  daemon.py
tests/ benchmarks/RESULTS.md
```

### A tour

through
3 Python modules (0 in `verl/`, 2 in `monitor/`, 1 in `alerting/`; listed at the end):

The 3 modules, by package: `monitor/daemon.py`, `monitor/series/store.py`; `alerting/engine.py`.

See `monitor/daemon.py` and `test_x.py::test_a`.
"""


def _tree(root: Path) -> Path:
    for rel, text in {"README.md": LAYOUT, "monitor/daemon.py": '"""Tested by test_x.py."""\n',
                      "monitor/series/store.py": "", "monitor/sources/base.py": "", "monitor/sources/scrape.py": "",
                      "alerting/engine.py": "", "tests/monitor/test_x.py": "def test_a():\n    pass\n",
                      "benchmarks/RESULTS.md": ""}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    for rel in READMES[1:]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("", encoding="utf-8")
    return root


def test_the_checks_pass_on_a_true_tree_and_fail_on_made_up_names(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert [c.__name__ for c in CHECKS if c(root)] == []
    readme = root / "README.md"
    readme.write_text(LAYOUT.replace("store.py", "storage.py").replace("test_a`", "test_b`")
                      + "\n`monitor/ghost.py`, 130 tests\n", encoding="utf-8")
    (root / "monitor/daemon.py").write_text('"""Tested by test_ghost.py and by tests/monitor/test_x.py::test_b,\n'
                                            'tests/monitor/test_gone.py."""\n', encoding="utf-8")
    (root / "monitor/console.py").write_text("", encoding="utf-8")
    assert missing_paths(root) == ["README.md:18: monitor/series/storage.py does not exist",
                                   "README.md:20: test_x.py defines no test_b",
                                   "README.md:22: monitor/ghost.py does not exist"]
    assert layout_names(root) == ["README.md layout: storage.py (under monitor/series/) does not exist"]
    assert layout_omissions(root) == ["README.md layout: monitor/console.py is not named; say what it is for",
                                      "README.md layout: monitor/series/store.py is not named; say what it is for"]
    assert tour_count(root) == ["README.md tour: monitor/series/storage.py does not exist"]
    assert code_points_at_missing_tests(root) == [
        "monitor/daemon.py:1: names test_ghost.py, which does not exist",
        "monitor/daemon.py:1: tests/monitor/test_x.py defines no test_b",
        "monitor/daemon.py:2: names tests/monitor/test_gone.py, which does not exist"]
    assert stated_test_counts(root) == ["README.md:22: states a test count ('130 tests'); it goes stale, drop it"]
