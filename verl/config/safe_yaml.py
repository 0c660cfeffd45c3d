"""Reading a hostile YAML config: one-line errors for non-UTF-8 bytes, aliases, deep nesting, oversize
files; values quoted at most ~80 characters.

A copy of the loader in ``alerting/safe_config.py``, kept small on purpose: the package boundary
forbids ``verl`` to import ``alerting`` (and ``alerting`` to import ``verl``). Aliases are refused
while composing (a ``yaml.SafeLoader`` subclass), so a "billion laughs" file is never expanded.
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from verl.config.errors import TrainerConfigError

MAX_CONFIG_BYTES = 8 * 1024**2
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80


class UnsafeTrainerYAML(TrainerConfigError):
    """The text cannot be read as config; one line naming the source and the fix."""


class _TrainerYAMLLoader(yaml.SafeLoader):
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


def did_you_mean(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"known keys here: {', '.join(sorted(known))}"


def load_yaml_text(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_TrainerYAMLLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UnsafeTrainerYAML(f"{source}{where}: not valid YAML ({short(str(problem), 120)}); fix the syntax") from None
    except RecursionError:
        raise UnsafeTrainerYAML(f"{source}: YAML nested too deep; flatten the file") from None
    except (ValueError, OverflowError) as exc:  # constructors: a 5000-digit int, a 13th month in a date
        raise UnsafeTrainerYAML(f"{source}: invalid YAML value ({short(str(exc), 120)})") from None


def load_yaml_file(path: Path) -> Any:
    if path.exists() and not path.is_file():  # a FIFO or a device would block the read or never end
        raise UnsafeTrainerYAML(f"{path}: not a regular file; pass a YAML file")
    with open(path, "rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise UnsafeTrainerYAML(f"{path}: more than {MAX_CONFIG_BYTES} bytes; is this the right file?")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UnsafeTrainerYAML(f"{path} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); save the file as UTF-8") from None
    return load_yaml_text(text, str(path))
