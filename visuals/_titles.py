"""Figure titles that fit a phone and axes that count steps: wrapped title lines, the top margin they need, integer
step ticks."""
from __future__ import annotations

import textwrap

# Titles are wrapped to lines that fit a phone (390 px: about 44 characters of the title, 64 of its note), and
# the top margin grows with them; TOOLBAR_PX is the band above the title that plotly's toolbar floats in.
TITLE_CHARS, NOTE_CHARS, TOOLBAR_PX, TITLE_LINE_PX, NOTE_LINE_PX = 44, 64, 34, 20, 18


def wrap(text: str, width: int) -> list[str]:
    """Lines of at most ``width`` characters (a '<br>' in ``text`` always breaks; words are never split)."""
    return [line for part in text.split("<br>") for line in textwrap.wrap(part, width, break_on_hyphens=False) or [""]]


def subtitle(title: str, note: str) -> str:
    """A figure title and its smaller note, wrapped to lines that fit a phone's width."""
    return "<br>".join(wrap(title, TITLE_CHARS)) + "".join(f"<br><sup>{line}</sup>" for line in wrap(note, NOTE_CHARS))


def title_px(text: str) -> int:
    """The height a ``subtitle`` takes, its toolbar band included: a figure's top margin starts there."""
    notes = text.count("<sup>")
    return TOOLBAR_PX + TITLE_LINE_PX * (text.count("<br>") + 1 - notes) + NOTE_LINE_PX * notes + 12


def titled(title: str, note: str = "", plot: int | None = None, **margin) -> dict:
    """``title``, ``margin`` (and with ``plot``, ``height``) of a layout: the wrapped title, a top margin that makes
    room for it (plus ``margin['t']``, the room the figure needs above its plot for its own labels), and a height
    that keeps ``plot`` px for the plot area whatever the title's length."""
    text = subtitle(title, note) if note else "<br>".join(wrap(title, TITLE_CHARS))
    margin = {**margin, "t": title_px(text) + margin.get("t", 0)}
    return dict(title=text, margin=margin, **({"height": plot + margin["t"] + margin.get("b", 100)} if plot else {}))


def int_ticks(count: int) -> dict:
    """Integer ticks for an axis of ``count`` steps: every step when few, else a round stride (1, 2, 5, 10, ...);
    never a tick at -0.5 or 1.5 (a stopped run's short axis)."""
    stride = next(s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 10**9) if count / s <= 12)
    return dict(tickmode="linear", tick0=0, dtick=stride, tickformat="d")
