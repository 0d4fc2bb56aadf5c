"""Regenerate the golden traces: ``python tests/golden/make_golden.py`` (about a minute on 2 cores).

Two files, both produced by the real decoder on the embedded model:

- ``decodes.json``: every example prompt (assets/examples.json) x every method x both modes, as the
  commits of every step (phase, positions, tokens, seeds, clusters) and the step's near ties: the
  positions whose full-precision confidence (guided in Divide) lies within ``near_ties.TOLERANCE`` of
  one on the other side of the commit decision. ``tests/test_golden.py`` decodes them again and demands
  the same commits up to the order among near-tied positions (tests/near_ties.py): a refactor must not
  change behaviour, commit for commit, and another CPU's last bits may only reorder near ties.
- ``traces/*.json``: a few full traces (confidence, prediction, attention) that the figure tests draw.
- ``authors_code.json``: three example prompts (a word problem, a list, a free prompt) x both modes decoded
  by DiCo with the authors' code preset
  (``{"authors_code": true}``, ``dico.settings.AUTHORS_CODE``), in the format of ``decodes.json`` plus the
  settings each decode was given; ``tests/test_golden.py`` checks them the same way.

Rerun it only when decoding is meant to change (a new embedded model, a deliberate rule change), and
say so in the commit.
"""
import importlib.util
import json
import time
from pathlib import Path

import dico
from dico.loop import Decoding

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# tests/near_ties.py: the comparison's own definition of a near tie (a script, so not on the tests' path)
_spec = importlib.util.spec_from_file_location("near_ties", HERE.parent / "near_ties.py")
near = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(near)

GEN_LENGTH, BLOCK_LENGTH = 96, 32
MODES = {"non-ar": None, "semi-ar": BLOCK_LENGTH}
# Full traces for the figure tests: a word problem and a list task, every method, both modes for DiCo.
FULL = [(0, m, "non-ar") for m in dico.METHODS] + [(0, "dico", "semi-ar"), (4, "dico", "non-ar"),
                                                  (4, "vanilla", "semi-ar")]


def decode_keeping_scores(predictor, prompt: str, method: str, **options):
    """``dico.generate``, also keeping per step the full-precision values the rule ranked (the trace rounds them)."""
    run = Decoding(predictor, prompt, method, **options)
    ranked, choose = [], run.rule.choose

    def keep(scores):
        choice = choose(scores)
        ranked.append((scores.conf if choice.guided is None else choice.guided).tolist())
        return choice
    run.rule.choose = keep
    while not run.done:
        t0 = time.perf_counter()
        logits, attentions = run.forward()
        run.step(logits, attentions, time.perf_counter() - t0)
    return run.close(), ranked


# The authors' code preset on a word problem, a list and a free prompt (semi-AR is where it decodes otherwise).
PRESET, PRESET_EXAMPLES = {"authors_code": True}, (0, 4, 9)


def commits(trace, ranked) -> list:
    steps = []
    for s, values in zip(trace.steps, ranked):
        candidates = [p for p in range(*s.window) if s.confidence[p] is not None]
        ties = near.near_ties(values, candidates, s.committed)
        steps.append([s.phase, s.committed, s.tokens, s.seeds, s.clusters, ties])
    return steps


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
    golden = {"model": predictor.name, "tie_tolerance": near.TOLERANCE, "decodes": decodes}
    (HERE / "decodes.json").write_text(json.dumps(golden, separators=(",", ":")))
    print(f"{len(decodes)} decodes, {len(FULL)} full traces written under {HERE}")
    authors_code(predictor, examples)


def decoded(predictor, i: int, example: dict, method: str, mode: str, settings: dict | None = None,
            capture_attention: bool = False) -> tuple[dict, dico.Trace]:
    """One golden decode (the request and the commits of every step) and its trace."""
    trace, ranked = decode_keeping_scores(predictor, example["prompt"], method, mode=mode, gen_length=GEN_LENGTH,
                                          block_length=MODES[mode], settings=settings,
                                          capture_attention=capture_attention)
    return {"example": i, "method": method, "mode": mode, "prompt": example["prompt"], "gen_length": GEN_LENGTH,
            "block_length": MODES[mode], "nfe": trace.nfe, "text": trace.text, "steps": commits(trace, ranked),
            **({"settings": settings} if settings else {})}, trace


def authors_code(predictor, examples) -> None:
    """DiCo with the authors' code preset on a few examples, both modes (``authors_code.json``)."""
    decodes = [decoded(predictor, i, examples[i], "dico", mode, PRESET)[0] for i in PRESET_EXAMPLES for mode in MODES]
    golden = {"model": predictor.name, "tie_tolerance": near.TOLERANCE, "decodes": decodes}
    (HERE / "authors_code.json").write_text(json.dumps(golden, separators=(",", ":")))
    print(f"{len(decodes)} decodes with {PRESET} written under {HERE}")


if __name__ == "__main__":
    main()
