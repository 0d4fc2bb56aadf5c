"""Regenerate the golden traces: ``python tests/golden/make_golden.py`` (about a minute on 2 cores).

Two files, both produced by the real decoder on the embedded model:

- ``decodes.json``: every example prompt (assets/examples.json) x every method x both modes, as the
  commits of every step (phase, positions, tokens, seeds, clusters). ``tests/test_golden.py`` decodes
  them again and demands the same commits: a refactor must not change behaviour, commit for commit.
- ``traces/*.json``: a few full traces (confidence, prediction, attention) that the figure tests draw.

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


def commits(trace) -> list:
    return [[s.phase, s.committed, s.tokens, s.seeds, s.clusters] for s in trace.steps]


def main() -> None:
    predictor = dico.load_model()
    examples = json.loads((ROOT / "assets" / "examples.json").read_text())["examples"]
    decodes = []
    (HERE / "traces").mkdir(exist_ok=True)
    for i, example in enumerate(examples):
        for mode, block_length in MODES.items():
            for method in dico.METHODS:
                full = (i, method, mode) in FULL
                trace = dico.generate(predictor, example["prompt"], method, mode=mode, gen_length=GEN_LENGTH,
                                      block_length=block_length, capture_attention=full and method == "dico")
                decodes.append({"example": i, "method": method, "mode": mode, "prompt": example["prompt"],
                                "gen_length": GEN_LENGTH, "block_length": block_length, "nfe": trace.nfe,
                                "text": trace.text, "steps": commits(trace)})
                if full:
                    trace.save(HERE / "traces" / f"{example['family']}{i}-{method}-{mode}.json")
    (HERE / "decodes.json").write_text(json.dumps({"model": predictor.name, "decodes": decodes}, separators=(",", ":")))
    print(f"{len(decodes)} decodes, {len(FULL)} full traces written under {HERE}")


if __name__ == "__main__":
    main()
