"""The long worked answers among the shipped examples: each names the model it opens on (dico-tiny-long) and its gen
length (256) in assets/examples.json, and opens replayed from its shipped trace bundle, without a model.

Long answers are where the paper measures DiCo (GSM8K at gen 256); the short families the page opens on are where
it gains least. What the page says of both comes from the committed Table 1 files (``about.long_lesson``), never
typed in.
"""
from __future__ import annotations

import json
from pathlib import Path

from dico.settings import NON_AR
from dico.trace import Trace, read_traces
from dico_ui import render
from dico_ui.about import long_lesson
from dico_ui.models import MODEL_NOTES
from dico_ui.outputs import friendly, results
from dico_ui.text import EXAMPLES, clean

ROOT = EXAMPLES.parent.parent


def long_examples(path: Path | None = None) -> list[dict]:
    """The examples that open on a model of their own from a shipped trace ([] when the file cannot be read)."""
    try:
        examples = json.loads((path or EXAMPLES).read_text())["examples"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [e for e in examples if isinstance(e, dict) and e.get("trace") and e.get("model")]


def button_label(example: dict) -> str:
    words = example["prompt"].split()
    return f"{' '.join(words[:2])}… ({example['model']}, gen {example['gen_length']})"


def _traces(example: dict) -> list[Trace]:
    path = ROOT / example["trace"]
    try:
        return read_traces(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"file: the long example's traces are not shipped with this copy ({exc.strerror}); "
                         "python -m dico_ui.examples --long 3 makes them") from None


def opener(index: int):
    """The page's handler for the ``index``-th long example's button."""
    @friendly("Cannot open the long example", page=True)
    def open_long_example() -> dict:
        example = long_examples()[index]
        traces = _traces(example)
        passes = ", ".join(f"{clean(t.name)} {t.nfe}" for t in traces)
        status = (f"A long worked answer on **{clean(example['model'])}** at gen {example['gen_length']}, replayed "
                  f"from traces shipped with the app: {render.run_caption(traces[0])}. Passes: {passes}.  \n"
                  + (long_lesson() + "  \n" if long_lesson() else "") + render.summary(traces))
        note = f"**{clean(example['model'])}** loads when you press Run. " + MODEL_NOTES.get(example["model"], "")
        return {**results(traces, status), "prompt": traces[0].prompt, "model": example["model"],
                "gen_length": example["gen_length"], "mode": NON_AR, "model_note": note}
    return open_long_example
