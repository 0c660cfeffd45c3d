"""Alertmanager label matchers (``name="v"``, ``!=``, ``=~``, ``!~``) used by routes, inhibit rules
and silences. Regexes are anchored, as in Alertmanager."""

from __future__ import annotations

import re
from dataclasses import dataclass

_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|(\S*))\s*$')


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # one of = != =~ !~
    value: str

    def matches(self, labels: dict[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        hit = re.fullmatch(self.value, actual) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        value = self.value.replace('"', '\\"')
        return f'{self.name}{self.op}"{value}"'

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, "isRegex": "~" in self.op, "isEqual": "!" not in self.op}


def parse_matcher(text: str) -> Matcher:
    m = _MATCHER.match(text)
    if not m:
        raise ValueError(f'bad matcher {text!r}; expected name="value" with = != =~ or !~')
    value = m.group(3) if m.group(3) is not None else m.group(4)
    value = value.replace('\\"', '"')
    if "~" in m.group(2):
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"bad regex in matcher {text!r}: {exc}") from None
    return Matcher(m.group(1), m.group(2), value)


def matcher_from_json(data: dict[str, object]) -> Matcher:
    """Alertmanager API v2 matcher object (``isRegex``/``isEqual``)."""
    try:
        regex, equal = bool(data.get("isRegex")), data.get("isEqual", True) is not False
        op = ("=~" if equal else "!~") if regex else ("=" if equal else "!=")
        m = Matcher(str(data["name"]), op, str(data["value"]))
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"bad matcher object {data!r}; expected name, value, isRegex, isEqual") from None
    return parse_matcher(str(m))  # validates the name and the regex


def all_match(matchers: list[Matcher] | tuple[Matcher, ...], labels: dict[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)
