"""Alertmanager label matchers (``name="v"``, ``!=``, ``=~``, ``!~``) used by routes, inhibit rules,
silences and the monitor's rule selectors. Regexes are anchored, as in Alertmanager.

Regexes are compiled once, with RE2 (``google-re2``): Alertmanager and Prometheus use Go's ``regexp``,
which is RE2, so the syntax is theirs (no backreferences or lookarounds: a pattern Alertmanager would
refuse is refused here too) and matching is linear in the label's length. Python's ``re`` backtracks:
one silence like ``alertname=~"(a+)+b"`` cost seconds per alert and halved the scrape rate.
A pattern is also bounded in length (``MAX_REGEX_LEN``) and in the memory RE2 may give its automaton
(``REGEX_MAX_MEM``), so a hostile matcher costs a refusal, never the monitor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import re2

_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|(\S*))\s*$')
MAX_REGEX_LEN = 4096        # characters; real routes and silences use a few dozen
REGEX_MAX_MEM = 1 << 20     # bytes of RE2 program memory per pattern (RE2's default is 8 MiB)

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is our one-line error, not RE2's line on stderr
_OPTIONS.max_mem = REGEX_MAX_MEM


def compile_regex(value: str) -> Any:
    """The RE2 program of a matcher value; ValueError naming the reason when it is refused."""
    if len(value) > MAX_REGEX_LEN:
        raise ValueError(f"regex of {len(value)} characters; at most {MAX_REGEX_LEN}")
    try:
        return re2.compile(value, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"{reason} (RE2/Go regexp syntax, as Alertmanager)") from None


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # one of = != =~ !~
    value: str
    _regex: Any = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if "~" in self.op:
            object.__setattr__(self, "_regex", compile_regex(self.value))

    def matches(self, labels: dict[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        hit = self._regex.fullmatch(actual) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        value = self.value.replace('"', '\\"')
        return f'{self.name}{self.op}"{value}"'

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, "isRegex": "~" in self.op, "isEqual": "!" not in self.op}


def parse_matcher(text: str) -> Matcher:
    m = _MATCHER.match(text)
    if not m:
        raise ValueError(f'bad matcher {text[:200]!r}; expected name="value" with = != =~ or !~')
    value = m.group(3) if m.group(3) is not None else m.group(4)
    value = value.replace('\\"', '"')
    try:
        return Matcher(m.group(1), m.group(2), value)
    except ValueError as exc:
        raise ValueError(f"bad regex in matcher {text[:200]!r}: {exc}") from None


def matcher_from_json(data: dict[str, object]) -> Matcher:
    """Alertmanager API v2 matcher object (``isRegex``/``isEqual``)."""
    try:
        regex, equal = bool(data.get("isRegex")), data.get("isEqual", True) is not False
        op = ("=~" if equal else "!~") if regex else ("=" if equal else "!=")
        m = Matcher(str(data["name"]), op, str(data["value"]))
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"bad matcher object {str(data)[:200]}; expected name, value, isRegex, isEqual") from None
    except ValueError as exc:
        raise ValueError(f"bad regex in matcher object {str(data)[:200]}: {exc}") from None
    return parse_matcher(str(m))  # validates the name


def all_match(matchers: list[Matcher] | tuple[Matcher, ...], labels: dict[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)
