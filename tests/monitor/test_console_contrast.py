"""WCAG AA contrast of the console's stylesheet: every rule that sets a text colour sets the background
it sits on, and each such pair (CSS variables resolved) is at least 4.5:1. The same ``ratio`` checks the
computed colours in Chromium (test_console_oncall.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BASE = Path(__file__).resolve().parents[2] / "monitor" / "web" / "templates" / "base.html"
AA = 4.5


def _rgb(text: str) -> tuple[float, float, float]:
    text = text.strip()
    if text.startswith("#"):
        h = text[1:]
        h = "".join(c * 2 for c in h) if len(h) == 3 else h
        return tuple(int(h[i:i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]
    nums = re.findall(r"[\d.]+", text)
    return tuple(float(n) / 255 for n in nums[:3])  # type: ignore[return-value]


def _luminance(color: str) -> float:
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in _rgb(color)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def ratio(fg: str, bg: str) -> float:
    a, b = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def stylesheet_pairs(css: str) -> list[tuple[str, str, str]]:
    """(selector, colour, background) of every rule setting both, variables resolved."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    var = dict(re.findall(r"(--[\w-]+)\s*:\s*(#[0-9a-fA-F]{3,6})", css))
    resolve = lambda v: re.sub(r"var\((--[\w-]+)\)", lambda m: var[m.group(1)], v.strip())  # noqa: E731
    out = []
    for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        decl = dict((k.strip(), v) for k, v in re.findall(r"([\w-]+)\s*:\s*([^;]+)", body))
        if "color" in decl and "background" in decl:
            fg, bg = resolve(decl["color"]), resolve(decl["background"])
            if bg.startswith("#") and fg.startswith("#"):
                out.append((selector.strip(), fg, bg))
    return out


def _css() -> str:
    text = BASE.read_text()
    return text[text.index("<style>") + 7:text.index("</style>")]


def test_the_ratio_is_wcags() -> None:
    assert ratio("#000", "#fff") == pytest.approx(21.0)
    assert ratio("#fff", "#fff") == pytest.approx(1.0)
    assert ratio("#d9480f", "#fff") == pytest.approx(4.3, abs=0.05)  # the old P1 badge: below AA
    assert ratio("rgb(255, 255, 255)", "rgba(179, 20, 27, 1)") == pytest.approx(ratio("#fff", "#b3141b"))


def test_every_colour_pair_in_the_stylesheet_meets_aa() -> None:
    pairs = stylesheet_pairs(_css())
    selectors = " ".join(s for s, _, _ in pairs)
    for needed in (".sev-P1", ".sev-P2", ".state-pending", ".state-resolved", ".mute", "body", ".btn.primary"):
        assert needed in selectors, f"{needed} sets no colour pair"
    bad = [(s, fg, bg, round(ratio(fg, bg), 2)) for s, fg, bg in pairs if ratio(fg, bg) < AA]
    assert not bad, bad


def test_a_pair_below_aa_is_caught() -> None:
    css = ":root { --p1:#d9480f; } .sev-P1 { color:#fff; background:var(--p1); }"
    [(sel, fg, bg)] = stylesheet_pairs(css)
    assert sel == ".sev-P1" and ratio(fg, bg) < AA
