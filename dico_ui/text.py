"""Text that reaches the page: user text made safe for HTML and toasts, prose read from ``assets/ui``, and the
shipped examples (a lane's answer to one of them can be checked)."""
from __future__ import annotations

import html
import json
import re
from functools import cache, lru_cache
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


@lru_cache(maxsize=2)
def _examples(path: Path, mtime_ns: int, size: int) -> tuple[dict, ...]:
    """The examples file, read once per version of it (every finished run asks; the file rarely changes)."""
    return tuple(json.loads(path.read_text(encoding="utf-8"))["examples"])


def example_item(prompt: str):
    """The task item of a shipped example with a checker (its family's, ``dico.embedded.tasks``), else None."""
    from dico.embedded import tasks

    try:
        stat = EXAMPLES.stat()
        example = next(e for e in _examples(EXAMPLES, stat.st_mtime_ns, stat.st_size) if e.get("prompt") == prompt)
        if example.get("family") not in tasks.FAMILIES or not example.get("target"):
            return None
        return tasks.Item(example["family"], prompt, "", str(example["target"]),
                          offered=tuple(example.get("offered", ())), count=int(example.get("count", 0)))
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None
