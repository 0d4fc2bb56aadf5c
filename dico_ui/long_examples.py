"""The long worked answers among the shipped examples: each names the model it opens on (dico-tiny-long) and its gen
length (256) in assets/examples.json, and opens replayed from its shipped trace bundle, without a model.

Long answers are where the paper measures DiCo (GSM8K at gen 256); the short families the page opens on are where
it gains least. What the page says of both comes from the committed Table 1 files (``lesson``), never typed in.
"""
from __future__ import annotations

import json
from pathlib import Path

from dico.settings import NON_AR
from dico.trace import Trace, read_traces
from dico_ui import render
from dico_ui.outputs import friendly, results
from dico_ui.text import EXAMPLES, clean

ROOT = EXAMPLES.parent.parent
LONG_TABLE = ROOT / "assets" / "bench" / "table1_chain_long.json"      # Table 1 on chain items, dico-tiny-long
SHORT_TABLE = ROOT / "assets" / "bench" / "table1_gen96.json"           # Table 1 on the short families, dico-tiny


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


def _passes(table: Path, mode: str = NON_AR) -> dict[str, dict[str, tuple[float, int, int]]]:
    """A Table 1 file's mean NFE, right answers and items by task and row label, in ``mode``."""
    try:
        rows = json.loads(table.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return {}
    found: dict = {}
    for row in rows:
        if row.get("mode") == mode:
            found.setdefault(row["task"], {})[row["label"]] = (row["nfe_mean"], row["correct"], row["n"])
    return found


def lesson(long_table: Path = LONG_TABLE, short_table: Path = SHORT_TABLE) -> str:
    """Where on this stage DiCo saves passes against Fast-dLLM (long answers) and where it does not (short ones),
    from the committed Table 1 files, non-AR; "" when neither is shipped."""
    said = []
    chain = _passes(long_table).get("chain", {})
    if "DiCo" in chain and "Fast-dLLM" in chain:
        (dico, right, n), (fast, fast_right, _) = chain["DiCo"], chain["Fast-dLLM"]
        said.append(f"On {n} held-out long answers (gen 256, non-AR) DiCo took {dico:.1f} passes, "
                    f"{dico / fast:.2f}x Fast-dLLM's {fast:.1f} ({right} and {fast_right} of {n} right)")
    short = _passes(short_table)
    ratios = [(task, rows["DiCo"][0] / rows["Fast-dLLM"][0]) for task, rows in short.items()
              if "DiCo" in rows and "Fast-dLLM" in rows]
    if ratios:
        shown = ", ".join(f"{task} {ratio:.2f}x" for task, ratio in ratios)
        said.append(f"on the short families at gen 96 (dico-tiny) DiCo's passes are {shown} Fast-dLLM's")
    return ("; ".join(said) + ". Divide and Conquer need a long answer to divide.") if said else ""


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
                  + (lesson() + "  \n" if lesson() else "") + render.summary(traces))
        return {**results(traces, status), "prompt": traces[0].prompt, "model": example["model"],
                "gen_length": example["gen_length"], "mode": NON_AR}
    return open_long_example
