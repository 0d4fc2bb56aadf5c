"""Behaviour is pinned: every example prompt, method and mode commits what the golden decodes recorded.

The golden file was written by ``python tests/golden/make_golden.py`` with the real decoder on the
embedded model; a refactor that changes one commit, token, seed or cluster fails here.
"""
import json
from pathlib import Path

import pytest

import dico

GOLDEN = json.loads((Path(__file__).parent / "golden" / "decodes.json").read_text())


@pytest.fixture(scope="module")
def predictor():
    return dico.load_model()


def test_golden_decodes_were_made_with_the_shipped_model(predictor):
    assert GOLDEN["model"] == predictor.name


@pytest.mark.parametrize("case", GOLDEN["decodes"], ids=lambda c: f"{c['example']}-{c['method']}-{c['mode']}")
def test_every_step_commits_what_the_golden_decode_committed(predictor, case):
    trace = dico.generate(predictor, case["prompt"], case["method"], mode=case["mode"], gen_length=case["gen_length"],
                          block_length=case["block_length"])
    got = [[s.phase, s.committed, s.tokens, s.seeds, s.clusters] for s in trace.steps]
    for k, (mine, golden) in enumerate(zip(got, case["steps"])):
        assert mine == golden, f"step {k} differs"
    assert len(got) == len(case["steps"]) == trace.nfe == case["nfe"]
    assert trace.text == case["text"]
