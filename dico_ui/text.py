"""Text that reaches the page: user text made safe for HTML and toasts, prose read from ``assets/ui``."""
from __future__ import annotations

import html
import re
from functools import cache
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "ui"
EXAMPLES = ASSETS.parent / "examples.json"          # the example prompts (dico_ui.examples writes the lesson's)
# Bidi controls (LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI, LRM, RLM, ALM): a U+202E in a prompt would
# reverse the rest of a toast, so they are removed from any text shown outside its own isolated box.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def clean(text: object) -> str:
    """User or library text for a toast or a status line: bidi controls removed, HTML escaped."""
    return html.escape(_BIDI.sub("", str(text)), quote=False)


def isolated(text: object) -> str:
    """User text inside HTML: escaped and isolated (``<bdi>``), so its direction cannot leak into ours."""
    return f"<bdi>{clean(text)}</bdi>"


@cache
def prose(name: str) -> str:
    """A prose, CSS or template file from ``assets/ui`` (read once)."""
    return (ASSETS / name).read_text(encoding="utf-8")
