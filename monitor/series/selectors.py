"""Series selectors in PromQL's instant-vector syntax: ``name{label="v", other=~"re"}``.

A hand-written parser because no installed library exposes PromQL's selector grammar (prometheus_client
only parses exposition text); the subset here is exactly the four matchers Prometheus documents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from alerting.matchers import Matcher  # the same four PromQL matchers silences and routes use
from monitor.errors import MonitorConfigError

_SELECTOR_RE = re.compile(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)?\s*(?:\{(.*)\})?\s*$", re.S)
_MATCHER_RE = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


class SelectorError(MonitorConfigError):
    """A selector that is not PromQL's ``name{label="value", ...}``."""


@dataclass(frozen=True)
class Selector:
    text: str
    name: str | None
    matchers: tuple[Matcher, ...]

    def matches(self, name: str, labels: dict[str, str]) -> bool:
        if self.name is not None and name != self.name:
            return False
        full = {**labels, "__name__": name}
        return all(m.matches(full) for m in self.matchers)


def parse_selector(text: str) -> Selector:
    m = _SELECTOR_RE.match(text)
    if not m or (not m.group(1) and not m.group(2)):
        raise SelectorError(f"bad series selector {text!r}: expected name{{label=\"value\",...}}")
    body = m.group(2) or ""
    matchers: list[Matcher] = []
    pos = 0
    while pos < len(body.strip()):
        mm = _MATCHER_RE.match(body, pos)
        if not mm:
            raise SelectorError(f"bad label matcher in selector {text!r} near {body[pos:]!r}")
        value = mm.group(3).encode().decode("unicode_escape")
        try:  # a regex is compiled (RE2, as Prometheus) when its matcher is built
            matchers.append(Matcher(mm.group(1), mm.group(2), value))
        except ValueError as exc:
            raise SelectorError(f"bad regex {value!r} in selector {text!r}: {exc}") from exc
        pos = mm.end()
    return Selector(text=text, name=m.group(1), matchers=tuple(matchers))
