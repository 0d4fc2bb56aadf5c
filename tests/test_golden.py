"""Behaviour is pinned: every example prompt, method and mode commits what the golden decodes recorded, and so
do a few prompts decoded with the DiCo authors' code preset.

The golden file was written by ``python tests/golden/make_golden.py`` with the real decoder on the
embedded model; a refactor that changes one commit, token, seed or cluster fails here.
"""
import json
from pathlib import Path

import pytest

import dico

GOLDEN = json.loads((Path(__file__).parent / "golden" / "decodes.json").read_text())
# DiCo with the authors' code preset (issue 29), recorded alike; each case carries the settings it was given.
AUTHORS_CODE = json.loads((Path(__file__).parent / "golden" / "authors_code.json").read_text())


@pytest.fixture(scope="module")
def predictor():
    return dico.load_model()


def test_golden_decodes_were_made_with_the_shipped_model(predictor):
    assert GOLDEN["model"] == AUTHORS_CODE["model"] == predictor.name


def case_id(case: dict) -> str:
    return f"{case['example']}-{case['method']}-{case['mode']}" + ("-authors-code" if "settings" in case else "")


@pytest.mark.parametrize("case", GOLDEN["decodes"] + AUTHORS_CODE["decodes"], ids=case_id)
def test_every_step_commits_what_the_golden_decode_committed(predictor, case):
    trace = dico.generate(predictor, case["prompt"], case["method"], mode=case["mode"], gen_length=case["gen_length"],
                          block_length=case["block_length"], settings=case.get("settings"))
    got = [[s.phase, s.committed, s.tokens, s.seeds, s.clusters] for s in trace.steps]
    for k, (mine, golden) in enumerate(zip(got, case["steps"])):
        assert mine == golden, f"step {k} differs"
    assert len(got) == len(case["steps"]) == trace.nfe == case["nfe"]
    assert trace.text == case["text"]
