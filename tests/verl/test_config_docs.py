"""verl/README.md's configuration table is the schema: every key, its default and its docstring."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path

from verl.config import schema
from verl.config.schema import Config

ROOT = Path(__file__).resolve().parents[2]


def field_docs() -> dict[tuple[str, str], str]:
    """(class name, field) -> the one-line docstring written under the field."""
    tree = ast.parse(inspect.getsource(schema))
    docs = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for stmt, nxt in zip(cls.body, cls.body[1:], strict=False):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)):
                docs[(cls.name, stmt.target.id)] = " ".join(str(nxt.value.value).split())
    return docs


def rows(cls: type = Config, prefix: str = "") -> list[str]:
    docs, hints, out = field_docs(), typing.get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += rows(hints[f.name], f"{prefix}{f.name}.")
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        out.append(f"| `{prefix}{f.name}` | `{default!r}` | {docs.get((cls.__name__, f.name), '')} |")
    return out


def test_readme_table_lists_every_key_with_its_default_and_docstring() -> None:
    readme = (ROOT / "verl/README.md").read_text(encoding="utf-8")
    missing = [r for r in rows() if r not in readme]
    assert missing == [], "update the table in verl/README.md:\n" + "\n".join(missing)
