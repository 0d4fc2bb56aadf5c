"""Measurements of the paper's observations as functions of a trace (dico.observe, docs/observations.md): the clash of
a parallel step, dependency among masked tokens, and how local either is. They replay the trace's states, count
their own passes and never change the decode."""
import math
from pathlib import Path

import pytest
import torch

import dico
from dico.observe import Replayed, attention_locality, clash, dependency, locality, stage_of, step_clash
from dico.trace import read_traces
from standins import dream_standin, llada_standin, random_predictor

EXAMPLE = Path(__file__).resolve().parent.parent / "assets" / "ui" / "example_run.json"


@pytest.fixture(scope="module")
def lesson():
    return {t.method: t for t in read_traces(EXAMPLE.read_bytes())}


def test_the_lessons_broken_step_clashes_by_nats_and_the_careful_steps_do_not(predictor, lesson):
    """Top-4 per step commits "S" "ara" "G" "ill" together at step 23: each likely alone, unlikely together."""
    topk, fast = lesson["topk"], lesson["fast"]
    model = Replayed(predictor, topk)
    assert step_clash(model, topk, 23) > 5.0
    assert model.passes == 4                           # one pass a token of the step: its state and three more
    fast_clash = clash(predictor, fast, limit=12)      # its 12 most confident tokens a step (a wide step costs)
    assert all(v is None or abs(v) < 0.1 for v in fast_clash)
    assert fast_clash.passes == sum(min(len(s.committed), 12) for s in fast.steps if len(s.committed) >= 2)


def test_a_step_of_one_token_has_no_clash_and_costs_no_pass(predictor, lesson):
    measured = clash(predictor, lesson["vanilla"])
    assert list(measured) == [None] * lesson["vanilla"].nfe and measured.passes == 0


def test_measuring_never_changes_the_decode(predictor, lesson):
    trace = lesson["dico"]
    before = trace.to_json()
    clash(predictor, trace, limit=3)
    dependency(predictor, trace, trace.nfe - 1)
    assert trace.to_json() == before


def test_clash_is_the_chain_rule_written_out(monkeypatch):
    """On a model whose output depends on its input: the marginals summed on the state before the step, minus the
    joint by the chain rule, most confident first, each conditional one pass on the state so far."""
    import dico.observe
    monkeypatch.setattr(dico.observe, "ROWS_PER_PASS", 1)       # the stand-in's logits hash its whole batch
    predictor = random_predictor(seed=3)
    trace = dico.generate(predictor, "a b c", "topk", k=3, gen_length=9)
    k = 0
    step = trace.steps[k]
    order = sorted(zip(step.committed, step.tokens), key=lambda pt: (-step.confidence[pt[0]], pt[0]))
    prompt = predictor.encode_prompt(trace.prompt)
    state = [predictor.mask_id] * trace.gen_length

    def log_p(pos, token):
        logits, _ = predictor.forward(torch.tensor([prompt + state]))
        row = logits[0, len(prompt) + pos].double()
        row[predictor.mask_id] = -math.inf
        return float(torch.log_softmax(row, -1)[token])
    marginals = sum(log_p(p, t) for p, t in order)
    joint = 0.0
    for p, t in order:
        joint += log_p(p, t)
        state[p] = t
    assert clash(predictor, trace)[k] == pytest.approx(marginals - joint, abs=1e-9)
    assert clash(predictor, trace, limit=2).passes == sum(min(len(s.committed), 2) for s in trace.steps
                                                          if len(s.committed) >= 2)


@pytest.mark.parametrize("standin", [llada_standin, dream_standin], ids=["llada", "dream"])
def test_llada_and_dream_code_paths_measure_a_model_whose_tokens_are_independent_as_zero(standin):
    """The stand-ins' logits ignore the input (but for noise that differs by a row's place in the batch): no step
    clashes and no write moves another position."""
    predictor = standin()
    trace = dico.generate(predictor, "a b", "topk", k=3, gen_length=9, mode="non-ar")
    assert all(v is None or abs(v) < 1e-2 for v in clash(predictor, trace))
    found = dependency(predictor, trace, 1)
    positions, matrix = found
    assert positions == [p for p, t in enumerate(trace.tokens_before(1)) if t is None]
    assert found.passes == len(positions) + 1
    assert all(abs(v) < 1e-2 for row in matrix for v in row)


def test_dependency_is_a_kl_matrix_over_the_masked_positions_with_a_zero_diagonal(predictor, lesson):
    trace = lesson["vanilla"]
    positions, matrix = dependency(predictor, trace, 85)
    assert positions == [p for p, t in enumerate(trace.tokens_before(85)) if t is None]
    assert len(matrix) == len(positions) and all(len(row) == len(positions) for row in matrix)
    assert all(matrix[i][i] == 0 for i in range(len(positions))) and all(v >= 0 for row in matrix for v in row)
    assert sum(map(sum, matrix)) > 1.0                       # the names of the pick do move each other
    with pytest.raises(ValueError, match=r"^at: must be a step of the run, 0\.\.95, got 96"):
        dependency(predictor, trace, 96)


def test_locality_compares_the_share_within_w_with_an_even_spread():
    positions = [0, 1, 2, 10]
    matrix = [[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]]        # 4 of 6 units within 3 positions
    found = locality(positions, matrix, w=3)
    assert found.within == pytest.approx(4 / 6) and found.even == pytest.approx(6 / 12)
    assert found.mean_distance == pytest.approx((1 * 4 + 8 * 2) / 6) and found.total == 6
    assert locality(positions, matrix, among={0, 1, 2}).within == 1.0
    assert locality([3], [[0]]) is None


def test_attention_locality_by_stage_from_the_captured_maps(predictor):
    trace = dico.generate(predictor, "Take the numbers 4, 9, 2. Add 3 to each number.", "dico", gen_length=32,
                          capture_attention=True)
    found = attention_locality(trace, w=3)
    assert set(found) == {"early", "middle", "late"}
    for stage in found.values():
        assert stage is None or (0 <= stage.within <= 1 and 0 < stage.even <= 1 and 0 <= stage.total <= 1)
    assert stage_of(trace, 0) == "early"
    with pytest.raises(ValueError, match="attention: the trace has no attention maps"):
        attention_locality(dico.generate(predictor, "Add 3 to 4.", "fast", gen_length=8))
