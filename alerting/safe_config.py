"""Loading and checking hostile config files: the shared part of ``verl-alert`` and ``verl-monitor run``.

A config file is input from whoever can write it. This module turns the ways a file can hurt the
process into one-line errors: bytes that are not UTF-8, YAML aliases (a "billion laughs" file expands
to gigabytes from a few hundred bytes; we refuse aliases while composing, so nothing is expanded),
nesting deep enough to exhaust the stack, oversize files, values quoted whole in an error message, and
misspelt keys that would otherwise be ignored.

``verl`` has its own copy of the loader (``verl/config/safe_yaml.py``): the package boundary forbids
``verl`` to import ``alerting``.
"""

from __future__ import annotations

import difflib
import math
import reprlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from alerting.errors import AlertingConfigError

MAX_CONFIG_BYTES = 8 * 1024**2  # configs are kilobytes; a bigger file is a mistake or an attack
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80


class UnsafeYAML(AlertingConfigError):
    """The file cannot be read as config; the message is one line naming the file and the fix."""


class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (``*name``, and so ``<<: *name`` merges) while
    composing, before anything is expanded. Config files never need them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.get_event()
            raise yaml.composer.ComposerError(
                None, None, f"YAML alias *{str(event.anchor)[:40]} is not allowed in config files; write the value out",
                event.start_mark)
        return super().compose_node(parent, index)


def short(value: Any, limit: int = 80) -> str:
    """A value for an error line: at most ``limit`` characters, one line, bounded work."""
    text = value[: limit + 1] if isinstance(value, str) and value[: limit + 1].isprintable() else _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_yaml_text(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UnsafeYAML(f"{source}{where}: not valid YAML ({short(str(problem), 120)}); fix the syntax") from None
    except RecursionError:
        raise UnsafeYAML(f"{source}: YAML nested too deep; flatten the file") from None
    except (ValueError, OverflowError) as exc:  # constructors: a 5000-digit int, a 13th month in a date
        raise UnsafeYAML(f"{source}: invalid YAML value ({short(str(exc), 120)})") from None


def decode_utf8(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UnsafeYAML(f"{source} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); save the file as UTF-8") from None


def read_config_bytes(path: str | Path, what: str = "config") -> bytes:
    """A config file's bytes: a regular file of at most MAX_CONFIG_BYTES; ``OSError`` is the caller's."""
    p = Path(path)
    if p.exists() and not p.is_file():  # a FIFO or a device would block the read or never end
        raise UnsafeYAML(f"{what} {p}: not a regular file; pass a YAML file")
    with open(p, "rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise UnsafeYAML(f"{what} {p}: more than {MAX_CONFIG_BYTES} bytes; is this the right file?")
    return data


def load_yaml_file(path: str | Path, what: str = "config") -> Any:
    """Parse one YAML file safely; ``OSError`` (missing file...) is left to the caller, which knows
    which flag named the path."""
    return load_yaml_bytes(read_config_bytes(path, what), f"{what} {Path(path)}")


def load_yaml_bytes(data: bytes, source: str) -> Any:
    return load_yaml_text(decode_utf8(data, source), source)


def did_you_mean(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(sorted(known))}"


def unknown_key(doc: dict[str, Any], known: Iterable[str]) -> tuple[str, str] | None:
    """The first key of ``doc`` not in ``known``, with a did-you-mean hint, or ``None``."""
    known = set(known)
    for key in doc:
        if key not in known:
            return short(key, 60), did_you_mean(str(key), known)
    return None


def number(value: Any, key: str, *, integer: bool = False, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False, hi_open: bool = False) -> float:
    """A finite number (an int when ``integer``) within the bounds; else ``ValueError`` with one line
    naming ``key``, the bound and the value. Booleans are not numbers here."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise ValueError(f"{key}: expected {kind}, got {short(value)}")
    if not integer and not math.isfinite(value):
        raise ValueError(f"{key}: expected a finite number, got {short(value)}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ValueError(f"{key}: must be {'>' if lo_open else '>='} {lo:g}, got {short(value)}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        raise ValueError(f"{key}: must be {'<' if hi_open else '<='} {hi:g}, got {short(value)}")
    return value
