"""Values from labels and annotations made inert before they enter a chat message.

An alert's labels and annotations come from exporters, rules and webhook senders, none of whom should be
able to write the message's structure: a newline would forge a ``Root Cause:`` line, markdown a heading or
a link, ``@all`` / ``<@id>`` / ``<at id=all>`` a mention, U+202E would spoof a node name. So each value:

- has every line break and control character collapsed into one space (it stays one line);
- has bidi controls and zero-width characters shown as ``⟨U+202E⟩`` (visible, not obeyed);
- has the robot dialect's markdown/markup characters replaced by look-alikes that do not parse
  (full-width ``＜ ＞ ［ ］ ＃ ＠``, ...): WeCom, DingTalk and Feishu document no escape syntax that all
  three honour, and a look-alike reads the same to a person;
- has URLs whose host is not one of the configured link hosts defanged (``hxxps://evil[.]example``), so
  only the monitor's, the runbooks' and explicitly allowed hosts become links.

Why not a library: markdown escapers (e.g. for CommonMark) emit backslash escapes, which these robots'
markdown subsets render literally or ignore, and none handles the mention syntaxes.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

# bidi embeddings/overrides/isolates and marks, zero-width characters, the BOM, the soft hyphen
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\u061c\u00ad\u180e]")
_BREAKS = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# a URL as far as it stays in a charset with no markup in it (no brackets, parentheses, quotes, * or `)
_URL = re.compile(r"(?i)\b(?:([a-z][a-z0-9+.-]*)://|(?=www\.))([a-z0-9.\-:]+)([a-z0-9\-._~:/?#@!$&+,;=%]*)")

_COMMON = {"<": "＜", ">": "＞", "[": "［", "]": "］", "@": "＠", "`": "ˋ", "*": "∗", "#": "＃", "~": "～"}
DIALECTS: dict[str, dict[str, str]] = {
    "wecom": _COMMON,
    "dingtalk": _COMMON,
    "feishu": {**_COMMON, "&": "＆"},  # lark_md decodes entities: &lt;at id=all&gt; would become a tag
    "plain": {},
}


def _show(m: re.Match[str]) -> str:
    return f"⟨U+{ord(m.group(0)):04X}⟩"


def host_of(url: str) -> str:
    m = _URL.match(url.strip())
    return m.group(2).lower().split(":")[0] if m else ""


def clean(value: object, dialect: str = "plain", link_hosts: Iterable[str] = ()) -> str:
    """``value`` as one inert line of text for ``dialect`` (``wecom``, ``dingtalk``, ``feishu``, ``plain``)."""
    text = unicodedata.normalize("NFC", str(value))
    text = _INVISIBLE.sub(_show, text)
    text = _BREAKS.sub(" ", text).strip()
    table = DIALECTS.get(dialect, _COMMON)
    if not table:
        return text
    trans = str.maketrans(table)
    allowed = {h.lower() for h in link_hosts}
    out, at = [], 0
    for m in _URL.finditer(text):
        out.append(text[at:m.start()].translate(trans))
        scheme, host, rest = m.group(1), m.group(2), m.group(3)
        if host.lower().split(":")[0] in allowed and not rest.startswith("@"):  # not https://ours@evil
            out.append(m.group(0))  # ours (monitor, runbooks, link_hosts): a working link, verbatim
        else:
            shown = host.replace(".", "[.]")
            lead = f"hxxp{scheme[4:]}://" if scheme and scheme.lower().startswith("http") else (
                f"{scheme}://" if scheme else "")
            out.append(lead + shown + rest.translate(trans))
        at = m.end()
    out.append(text[at:].translate(trans))
    return "".join(out)


def clean_map(values: dict[str, str], dialect: str, link_hosts: Iterable[str]) -> dict[str, str]:
    return {clean(k, dialect, link_hosts): clean(v, dialect, link_hosts) for k, v in values.items()}
