"""Regenerate the golden traces: ``python tests/golden/make_golden.py`` (about a minute on 2 cores).

Two files, both produced by the real decoder on the embedded model:

- ``decodes.json``: every example prompt (assets/examples.json) x every method x both modes, as the
  commits of every step (phase, positions, tokens, seeds, clusters). ``tests/test_golden.py`` decodes
  them again and demands the same commits: a refactor must not change behaviour, commit for commit.
- ``traces/*.json``: a few full traces (confidence, prediction, attention) that the figure tests draw.
- ``authors_code.json``: three example prompts (a word problem, a list, a free prompt) x both modes decoded
  by DiCo with the authors' code preset
  (``{"authors_code": true}``, ``dico.settings.AUTHORS_CODE``), in the format of ``decodes.json`` plus the
  settings each decode was given; ``tests/test_golden.py`` checks them the same way.

Rerun it only when decoding is meant to change (a new embedded model, a deliberate rule change), and
say so in the commit.
"""
import json
from pathlib import Path

import dico

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GEN_LENGTH, BLOCK_LENGTH = 96, 32
MODES = {"non-ar": None, "semi-ar": BLOCK_LENGTH}
# Full traces for the figure tests: a word problem and a list task, every method, both modes for DiCo.
FULL = [(0, m, "non-ar") for m in dico.METHODS] + [(0, "dico", "semi-ar"), (4, "dico", "non-ar"),
                                                  (4, "vanilla", "semi-ar")]


# The authors' code preset on a word problem, a list and a free prompt (semi-AR is where it decodes otherwise).
PRESET, PRESET_EXAMPLES = {"authors_code": True}, (0, 4, 9)


def commits(trace) -> list:
    return [[s.phase, s.committed, s.tokens, s.seeds, s.clusters] for s in trace.steps]


def main() -> None:
    predictor = dico.load_model()
    examples = json.loads((ROOT / "assets" / "examples.json").read_text())["examples"]
    decodes = []
    (HERE / "traces").mkdir(exist_ok=True)
    for i, example in enumerate(examples):
        for mode in MODES:
            for method in dico.METHODS:
                full = (i, method, mode) in FULL
                entry, trace = decoded(predictor, i, example, method, mode, capture_attention=full and method == "dico")
                decodes.append(entry)
                if full:
                    trace.save(HERE / "traces" / f"{example['family']}{i}-{method}-{mode}.json")
    (HERE / "decodes.json").write_text(json.dumps({"model": predictor.name, "decodes": decodes}, separators=(",", ":")))
    print(f"{len(decodes)} decodes, {len(FULL)} full traces written under {HERE}")
    authors_code(predictor, examples)


def decoded(predictor, i: int, example: dict, method: str, mode: str, settings: dict | None = None,
            capture_attention: bool = False) -> tuple[dict, dico.Trace]:
    """One golden decode (the request and the commits of every step) and its trace."""
    trace = dico.generate(predictor, example["prompt"], method, mode=mode, gen_length=GEN_LENGTH,
                          block_length=MODES[mode], settings=settings, capture_attention=capture_attention)
    return {"example": i, "method": method, "mode": mode, "prompt": example["prompt"], "gen_length": GEN_LENGTH,
            "block_length": MODES[mode], "nfe": trace.nfe, "text": trace.text, "steps": commits(trace),
            **({"settings": settings} if settings else {})}, trace


def authors_code(predictor, examples) -> None:
    """DiCo with the authors' code preset on a few examples, both modes (``authors_code.json``)."""
    decodes = [decoded(predictor, i, examples[i], "dico", mode, PRESET)[0] for i in PRESET_EXAMPLES for mode in MODES]
    (HERE / "authors_code.json").write_text(json.dumps({"model": predictor.name, "decodes": decodes},
                                                       separators=(",", ":")))
    print(f"{len(decodes)} decodes with {PRESET} written under {HERE}")


if __name__ == "__main__":
    main()
