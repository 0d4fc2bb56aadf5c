"""The rules that keep a schedule of their own (dico/rules/schedule.py; docs/decoding.md §7.9, §7.12), each on one
step's scores written by hand, then on the embedded model where a rule's promise needs a run.

PC-Sampler calibrates confidence by how common a token is; Prophet commits everything once the answer's logit gap is
wide for its progress. Vanilla: test_rules.py; Top-k: test_methods_topk.py.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import dico
from dico import generate
from dico.rules import Scores
from standins import rule, written

TEAM = "We have bikes, drums and bats. Pick two of them."
WORD = "Jeremiah counts 18 plums. He finds 4 more. How many plums does Jeremiah have now?"


# ============================================================================ PC-Sampler

def pc_sampler(table, **settings):
    sampler = rule("pc-sampler", **settings)
    sampler.bind(SimpleNamespace(name="stand-in", token_frequency=torch.tensor(table)))
    return sampler


def test_pc_sampler_prefers_a_rare_token_to_a_more_confident_common_one():
    sampler = pc_sampler([0.3, 1e-4, 1e-9, 0.0])                  # token 0 common, 1 rare, 2 and 3 rarer
    # scores: 0.9 x -log(0.3) = 1.08 against 0.6 x -log(1e-4) = 5.5
    assert sampler.choose(written([0.9, 0.6], [0, 1], [0, 0], masked=[0, 1])).commit == [1]
    # -log(1e-9) and -log(1e-10) are both capped at clip_alpha 10: a tie, to the lower position
    assert sampler.choose(written([0.2, 1.0, 1.0], [0, 2, 3], [0] * 3, masked=[0, 1, 2])).commit == [1]
    assert pc_sampler([0.3, 1e-4], num_transfer_tokens=2).choose(
        written([0.9, 0.6, 0.5], [0, 1, 1], [0] * 3, masked=[0, 1, 2])).commit == [1, 2]


def test_pc_samplers_own_position_weight_favours_the_start_of_the_window():
    s = written([0.5, 0.6, 0.6, 0.6], [1, 1, 1, 1], [0] * 4, masked=[0, 3], window=(0, 4))
    assert pc_sampler([0.3, 1e-4]).choose(s).commit == [3]                   # d2Cache: no weight
    assert pc_sampler([0.3, 1e-4], lambd=0.25).choose(s).commit == [0]       # 4.6 against 5.5 x exp(-0.75)


def test_pc_sampler_is_refused_before_any_pass_on_a_model_without_a_frequency_table():
    from standins import random_predictor
    predictor = random_predictor(seed=3)
    predictor.token_frequency = None
    with pytest.raises(ValueError, match="PC-Sampler needs the token frequencies of 'random'"):
        dico.Decoding(predictor, "a b", "pc-sampler", gen_length=4)


def test_a_token_frequency_file_reads_as_pc_samplers_code_reads_it(tmp_path):
    from dico.models import ModelError, read_token_frequency
    path = tmp_path / "token_frequency.json"
    path.write_text(json.dumps({"num_token": 10, "p_baseline_dict": {"0": 6, "2": 3}}))
    assert read_token_frequency(path, 4).tolist() == pytest.approx([0.6, 0.1, 0.3, 0.1])   # unseen: 1 / N
    path.write_text(json.dumps({"num_token": 10, "p_baseline_dict": {"9": 6}}))
    with pytest.raises(ModelError, match="token_frequency: cannot read"):
        read_token_frequency(path, 4)


def test_the_embedded_model_ships_the_frequencies_of_its_training_text(predictor):
    table = predictor.token_frequency
    assert table is not None and len(table) == len(predictor.tokenizer)
    eos = predictor.tokenizer.eos_token_id            # one a training item: 20,000 of the counted tokens
    saved = json.loads((dico.models.EMBEDDED / "token_frequency.json").read_text())
    assert float(table[eos]) == pytest.approx(20_000 / saved["num_token"])
    assert generate(predictor, WORD, "pc-sampler", gen_length=48).nfe == 48


# ============================================================================ Prophet

def prophet_scores(gap: float, n: int = 10, masked=None) -> Scores:
    s = written([0.5] * n, [9] * n, [1] * n, masked=range(n) if masked is None else masked)
    s.margin = torch.full((n,), gap)
    return s


def test_prophet_commits_every_mask_at_once_when_the_answers_gap_reaches_the_one_for_its_progress():
    prophet = rule("prophet")
    prophet.plan(10, 10)
    prophet.start((0, 10))
    assert len(prophet.choose(prophet_scores(7.0)).commit) == 1       # step 1 of 10: early, 7.0 < 7.5
    assert len(prophet.choose(prophet_scores(7.0, masked=range(1, 10))).commit) == 1   # step 2: still early
    for _ in range(2):                                                  # steps 3, 4: 3/10 early, 4/10 mid
        prophet.choose(prophet_scores(4.9, masked=range(3, 10)))
    exit_step = prophet.choose(prophet_scores(5.0, masked=range(5, 10)))    # step 5: mid, 5.0 >= 5.0
    assert exit_step.commit == [5, 6, 7, 8, 9] and exit_step.phase == "fast"


def test_prophet_watches_only_the_answer_positions_it_is_told():
    prophet = rule("prophet", answer_start=8, answer_length=2)
    prophet.plan(10, 10)
    s = prophet_scores(0.0)
    s.margin[8:] = 100.0
    assert len(prophet.choose(s).commit) == 10


@pytest.mark.parametrize("mode, cache", [("semi-ar", "dual"), ("semi-ar", "prefix"), ("non-ar", "delayed")])
def test_prophet_is_refused_a_kv_cache_before_any_pass(predictor, monkeypatch, mode, cache):
    """Its early exit commits every mask of the response, and a cached pass leaves the positions it does not compute
    (after the block with the dual cache) holding the logits of an older pass: refused, one line naming ``cache``."""
    monkeypatch.setattr(predictor, "forward", lambda *a, **k: pytest.fail("a refused run made a forward pass"))
    with pytest.raises(ValueError, match=r"^cache: Prophet cannot run with it \(its early exit commits every mask"):
        generate(predictor, TEAM, "prophet", mode=mode, gen_length=16, block_length=8, cache=cache)
    assert dico.methods.admit("prophet", mode, {"cache": "none"}).settings.cache == "none"
