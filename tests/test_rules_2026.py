"""The decoders of 2026 (docs/decoding.md §3.2, §7.6-7.12): LLaDA 2.1's joint threshold replaces written tokens,
token-to-mask takes them back instead, dInfer's hierarchy commits one token a sure run of masks and its credit
rewards a steady prediction, PC-Sampler calibrates confidence by how common a token is, Prophet commits everything
once the answer's logit gap is wide, ReMDM takes the least likely tokens back in loops. Each rule's choice on
scripted scores, then the loop's promises on the embedded model (edits recorded and replayed, fixed tokens never
edited; a cache refreshed every pass decodes an editing run exactly as none: tests/test_revision.py)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import dico
from dico import Trace, generate
from dico.forking import fork
from dico.rules import Scores
from standins import MASK_ID, rule

TEAM = "We have bikes, drums and bats. Pick two of them."
WORD = "Jeremiah counts 18 plums. He finds 4 more. How many plums does Jeremiah have now?"


def written(conf, pred, tokens, *, masked=(), fixed=(), window=None) -> Scores:
    """Scores of a response whose ``tokens`` are written (but at ``masked``), the model predicting ``pred``."""
    n = len(conf)
    is_masked = torch.zeros(n, dtype=torch.bool)
    is_masked[list(masked)] = True
    is_fixed = torch.zeros(n, dtype=torch.bool)
    is_fixed[list(fixed)] = True
    ids = torch.tensor(tokens)
    ids[is_masked] = MASK_ID
    return Scores(conf=torch.tensor(conf, dtype=torch.float32), pred=torch.tensor(pred), margin=torch.zeros(n),
                  masked=is_masked, window=window or (0, n), fixed=is_fixed, tokens=ids)


# ------------------------------------------------------------------------------------------ LLaDA 2.1

def test_llada21_fills_masks_above_its_threshold_and_replaces_confident_disagreements_in_the_same_pass():
    joint = rule("llada21")                                  # quality mode: 0.7 / 0.5
    joint.start((0, 5))
    # written 5 1 2 _ _; the model predicts 5 6 7 8 9 at 0.9 0.6 0.8 0.4 0.95 and 0.45 at the last written one
    choice = joint.choose(written([0.9, 0.6, 0.8, 0.4, 0.95], [5, 6, 7, 8, 9], [5, 1, 2, 3, 4], masked=[3, 4]))
    assert choice.commit == [4]                              # 0.95 > 0.7; position 3 (0.4) waits
    assert choice.edit == [1, 2]                             # 6 over 1 (0.6), 7 over 2 (0.8): both above 0.5
    assert choice.phase == "fast"
    choice = rule("llada21").choose(written([0.9, 0.45, 0.8, 0.4, 0.6], [5, 6, 7, 8, 9], [5, 1, 2, 3, 4],
                                            masked=[3, 4]))
    assert choice.commit == [4] and choice.edit == [2]       # none above 0.7: the best mask; 0.45 is not > 0.5


def test_llada21_never_edits_a_fixed_token_or_one_outside_its_window():
    joint = rule("llada21")
    joint.start((2, 4))
    choice = joint.choose(written([0.99] * 6, [9] * 6, [1, 2, 3, 4, 5, 6], masked=[3], fixed=[2], window=(2, 4)))
    assert choice.commit == [3] and choice.edit == []


def test_llada21_lingers_on_a_full_window_for_its_post_edit_passes_then_ends_it_without_a_write():
    joint = rule("llada21", max_post_edit_steps=2)
    joint.start((0, 2))
    disagree = written([0.9, 0.9], [7, 8], [1, 2])            # no mask left, two confident disagreements
    assert joint.lingers()
    assert joint.choose(disagree).edit == [0, 1] and joint.lingers()       # post-edit pass 1
    assert joint.choose(disagree).edit == [0, 1] and joint.lingers()       # post-edit pass 2
    last = joint.choose(disagree)                                          # pass 3 > 2: ends, writes nothing
    assert (last.commit, last.edit, last.phase) == ([], [], "edit") and not joint.lingers()


def test_llada21_ends_a_full_window_on_the_first_pass_that_would_write_nothing():
    joint = rule("llada21")
    joint.start((0, 2))
    agree = written([0.9, 0.9], [1, 2], [1, 2])
    assert joint.choose(agree).edit == [] and not joint.lingers()


def test_llada21_speed_mode_is_sglangs_defaults_and_given_values_win():
    assert (rule("llada21", speed_mode=True).settings.threshold, rule("llada21", speed_mode=True).settings
            .edit_threshold) == (0.5, 0.0)
    assert rule("llada21", speed_mode=True, threshold=0.8).settings.threshold == 0.8


# ------------------------------------------------------------------------------------------ token-to-mask

def test_t2m_takes_doubted_tokens_back_instead_of_replacing_them_within_its_budget():
    remask = rule("t2m", max_post_edit_steps=1)
    remask.start((0, 3))
    choice = remask.choose(written([0.9, 0.9, 0.9], [7, 2, 9], [1, 2, 3], masked=[2]))
    assert (choice.commit, choice.remask, choice.edit) == ([2], [0], [])
    choice = remask.choose(written([0.9, 0.9, 0.9], [7, 8, 9], [1, 2, 3], masked=[0]))   # budget spent
    assert (choice.commit, choice.remask) == ([0], []) and not remask.lingers()


# ------------------------------------------------------------------------------------------ dInfer's hierarchy

def test_hierarchy_commits_the_best_of_every_sure_run_of_masks_and_everything_above_its_threshold():
    hierarchy = rule("hierarchy")                          # 0.9 / low 0.3
    s = written([0.5, 0.4, 0.0, 0.2, 0.25, 0.0, 0.35, 0.95, 0.6], [9] * 9, [1] * 9, masked=[0, 1, 3, 4, 6, 7, 8])
    # runs of masks: [0, 1] best 0.5 at 0; [3, 4] best 0.25 (not above 0.3); [6, 7, 8] best 0.95 at 7; 0.95 > 0.9
    assert sorted(hierarchy.choose(s).commit) == [0, 7]


def test_hierarchy_always_commits_the_windows_best_position():
    s = written([0.1, 0.2, 0.15], [9] * 3, [1] * 3, masked=[0, 1, 2])
    assert rule("hierarchy").choose(s).commit == [1]


# ------------------------------------------------------------------------------------------ dInfer's credit

def test_credit_commits_at_its_threshold_and_else_the_best_with_its_near_ties():
    credit = rule("credit")                                # threshold 0.9, reached by equality
    credit.start((0, 4))
    assert credit.choose(written([0.95, 0.9, 0.5, 0.99], [9] * 4, [1] * 4, masked=[0, 1, 2])).commit == [0, 1]
    # none reaches 0.9: the best, and a position within 1e-5 of it (its code's float32 rule)
    assert credit.choose(written([0.5, 0.500005, 0.49, 0.3], [9] * 4, [1] * 4, masked=[0, 1, 2, 3])).commit == [0, 1]


def test_credit_adds_what_a_steady_prediction_earned_to_its_logit_and_lets_it_decay():
    credit = rule("credit")                                # alpha 0.7, gamma 0.2, beta 0.8
    credit.start((1, 3))
    logits = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    masked = torch.tensor([True, True, False])
    probs = torch.softmax(logits, dim=-1)
    fused = credit.fuse(logits.clone(), probs, masked)
    earned = probs[1, 0] ** 0.2                            # position 1's top token; position 2 is written: none
    assert torch.equal(fused[0], logits[0])                # outside the window: untouched
    assert torch.allclose(fused[1], logits[1] + torch.tensor([0.7 * torch.log1p(earned), 0.0, 0.0]))
    assert torch.equal(fused[2], logits[2])
    fused = credit.fuse(logits.clone(), probs, masked)     # the second pass: decayed, then earned again
    assert torch.allclose(fused[1, 0], logits[1, 0] + 0.7 * torch.log1p(0.8 * earned + earned))
    credit.start((0, 3))                                   # a new window starts with no credit
    assert torch.allclose(credit.fuse(logits.clone(), probs, torch.zeros(3, dtype=torch.bool)), logits)


def test_credit_without_weight_commits_as_dinfers_plain_threshold_and_with_it_in_fewer_passes(predictor):
    with_credit = generate(predictor, WORD, "credit", mode="non-ar", gen_length=96)
    without = generate(predictor, WORD, "credit", mode="non-ar", gen_length=96, credit_alpha=0.0)
    fast = generate(predictor, WORD, "fast", mode="non-ar", gen_length=96, threshold=0.9)
    assert [s.committed for s in without.steps] == [s.committed for s in fast.steps]     # no near ties here
    assert with_credit.text == fast.text and with_credit.nfe < fast.nfe


# ------------------------------------------------------------------------------------------ PC-Sampler

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


# ------------------------------------------------------------------------------------------ Prophet

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


# ------------------------------------------------------------------------------------------ ReMDM

def test_remdm_commits_then_loops_taking_back_and_committing_then_finishes(predictor):
    trace = generate(predictor, TEAM, "remdm", gen_length=16, init_unmask_ratio=0.75, loop_steps=3)
    kinds = ["back" if s.remasked else "commit" for s in trace.steps]
    # 12 commits to the ratio, 3 loops of (take back 1, commit 1), then the last 4 one a pass
    assert kinds == ["commit"] * 12 + ["back", "commit"] * 3 + ["commit"] * 4
    assert all(len(s.committed) == 1 for s in trace.steps if not s.remasked)
    assert all(len(s.remasked) == 1 and not s.committed for s in trace.steps if s.remasked)
    assert trace.nfe == 22 and "[MASK]" not in trace.text


@pytest.mark.parametrize("request_, field", [(dict(mode="semi-ar", block_length=8), "mode"),
                                             (dict(init_unmask_ratio=0.8), "init_unmask_ratio")])
def test_remdm_refuses_what_its_code_cannot_run_before_any_pass(predictor, request_, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        generate(predictor, TEAM, "remdm", gen_length=16, **request_)


# ------------------------------------------------------------------------------------------ the loop

def test_an_edit_is_recorded_with_the_token_before_and_after_and_the_response_ends_with_the_new_one(predictor):
    trace = generate(predictor, WORD, "llada21", gen_length=48)        # the shipped model edits often (docs)
    tokens = {}
    for step in trace.steps:
        for p, old, new in step.edited:
            assert tokens[p] == old != new
        tokens.update(zip(step.committed, step.tokens))
        tokens.update((p, new) for p, _, new in step.edited)
    assert trace.replaced() > 0 and trace.response == [tokens[p] for p in range(48)]
    assert Trace.from_json(trace.to_json()) == trace


def test_a_fork_of_an_editing_run_replays_its_edits_and_never_edits_the_forced_token(predictor):
    parent = generate(predictor, WORD, "llada21", gen_length=48)
    at = next(s.index for s in parent.steps if s.edited)
    child = fork(predictor, parent, at, force={0: parent.response[0]})
    decided = lambda steps: [(s.committed, s.tokens, s.edited) for s in steps]     # noqa: E731
    assert decided(child.steps[:at]) == decided(parent.steps[:at])
    assert all(p != 0 for s in child.steps[at:] for p, _, _ in s.edited)


def test_an_older_trace_without_edits_still_loads():
    trace = Trace.load(dico.__path__[0] + "/../tests/golden/traces/word0-dico-non-ar.json")
    assert all(s.edited == [] for s in trace.steps)


def test_every_figure_draws_an_edit_where_the_run_made_it(predictor):
    import visuals
    from dico_ui import render
    trace = generate(predictor, WORD, "llada21", gen_length=48)
    k, (p, old, new) = next((s.index, s.edited[0]) for s in trace.steps if s.edited)
    marks = [d for d in visuals.trajectory_figure(trace).data if d.name == "replaced (token edit)"]
    assert marks and (p, k) in set(zip(marks[0].x, marks[0].y))
    assert any(d.name == f"replaced (token edit) at step {k}" for d in visuals.step_view_figure(trace, k).data)
    html = render.response_html(trace, k)
    assert 'class="tok edited new"' in html and f"position {p}: replaced at step {k}" in html


def test_a_snapshot_closed_mid_run_holds_the_response_as_it_stood_edits_and_constraints_included(predictor):
    import copy

    from dico.loop import Decoding, close_snapshot, drive
    first = generate(predictor, WORD, "llada21", gen_length=48).response[0]
    run = Decoding(predictor, WORD, "llada21", gen_length=48, constraints={0: first})
    for trace, step in drive(run):
        if step.edited:
            running, standing = copy.deepcopy(trace), run.ids[0, run.m:].tolist()    # the copy a worker sends back
            break
    snapshot = close_snapshot(predictor, running)
    assert snapshot.stopped and snapshot.response == standing
    assert snapshot.response[0] == first
