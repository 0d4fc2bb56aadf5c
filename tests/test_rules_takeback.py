"""The rules that take committed tokens back to the mask (dico/rules/takeback.py; docs/decoding.md §7.3, §7.4, §7.7,
§7.10), each on one step's scores written by hand, then on the embedded model where a rule's promise needs a run.

WINO drafts above 0.6 and, when it drafted more than one, takes back earlier tokens its mirrored block confirms
below 0.9; Saber commits above the mean commit confidence (at least n) and takes back the tokens whose confidence
fell most; token-to-mask takes doubted tokens back where LLaDA 2.1 would replace them; ReMDM takes the least likely
tokens back in loops. The loop's side of a take-back (recorded, caches, the pass limit): test_revision.py.
"""
from __future__ import annotations

import math

import pytest
import torch

from dico import generate
from standins import rule, scores, with_signals, written

TEAM = "We have bikes, drums and bats. Pick two of them."


# ============================================================================ WINO

def test_wino_drafts_above_its_threshold_at_most_its_cap_else_the_top_one():
    r = rule("wino")
    r.start((0, 30))
    conf = [0.7] * 30
    assert len(r.choose(with_signals(scores(conf), verify=[0.0] * 30)).commit) == 20   # min(max(21, 5), 20)
    r.start((0, 4))
    assert r.choose(with_signals(scores([0.3, 0.5, 0.2, 0.1]), verify=[0.0] * 4)).commit == [1]


def test_wino_takes_back_earlier_tokens_its_mirror_doubts_only_after_a_wide_pass():
    r = rule("wino")
    r.start((0, 6))
    doubt = [0.95, 0.5, 0.0, 0.0, 0.0, 0.0]        # position 1 was decoded and its mirror doubts it
    one = r.choose(with_signals(scores([0.9, 0.9, 0.7, 0.1, 0.2, 0.1], decoded=[0, 1]), verify=doubt))
    assert one.commit == [2] and one.remask == []                  # a single draft: nothing taken back
    wide = r.choose(with_signals(scores([0.9, 0.9, 0.7, 0.8, 0.2, 0.1], decoded=[0, 1, 2]), verify=doubt))
    assert wide.commit == [3] and wide.remask == []
    r.last_accept = 5
    both = r.choose(with_signals(scores([0.9, 0.9, 0.2, 0.2, 0.8, 0.7], decoded=[0, 1, 2, 3]),
                                 verify=[0.95, 0.5, 0.2, 0.97, 0.0, 0.0]))
    assert both.commit == [4, 5] and both.remask == [1, 2]


def test_wino_takes_back_at_most_one_less_than_the_previous_pass_committed():
    r = rule("wino")
    r.start((0, 8))
    r.last_accept = 2
    s = with_signals(scores([0.1] * 4 + [0.8, 0.8, 0.1, 0.1], decoded=[0, 1, 2, 3]),
                     verify=[0.3, 0.1, 0.2, 0.4, 0, 0, 0, 0])
    assert r.choose(s).remask == [1]                                # the least confirmed one


def test_wino_never_takes_back_a_fixed_position():
    r = rule("wino")
    r.start((0, 4))
    s = with_signals(scores([0.1, 0.1, 0.8, 0.8], decoded=[0, 1]), verify=[0.1, 0.1, 0, 0])
    s.fixed = torch.tensor([True, False, False, False])
    assert r.choose(s).remask == [1]


# ============================================================================ Saber

def test_saber_commits_above_the_mean_commit_confidence_at_least_n_and_takes_back_what_fell_most():
    r = rule("saber")                                # n = 2
    first = r.choose(scores([0.9, 0.5, 0.8, 0.1]))
    # before any commit the bar is 1: the top two; fix = 2 -> take back max(1, ceil(2 / 8)) = 1 (at most fix - 1)
    assert first.commit == [0, 2]
    assert first.remask == [2]                       # it rose least since the (zero) previous pass: 0.8 < 0.9
    assert r.committed_conf[[0, 2]].tolist() == pytest.approx([0.9, 0.8])
    second = r.choose(scores([0.3, 0.86, 0.7, 0.2], decoded=[0]))
    # bar: mean(0.9, 0.8) = 0.85 -> 1 passes; fewer than n: the top two of the masked (1, 2); 0 fell by 0.6
    assert second.commit == [1, 2] and second.remask == [0]


def test_saber_takes_nothing_back_once_its_window_is_done():
    r = rule("saber")
    choice = r.choose(scores([0.9, 0.9, 0.2, 0.2], decoded=[0], window=(0, 2)))
    assert choice.commit == [1] and choice.remask == []


def test_saber_reaches_back_into_earlier_blocks():
    r = rule("saber", n=1)
    r.choose(scores([0.9, 0.9, 0.9, 0.9], decoded=[0, 1, 2], window=(2, 4)))
    s = scores([0.95, 0.9, 0.5, 0.4], decoded=[0, 2, 3], window=(2, 4))      # 1 was taken back in block one
    assert r.choose(s).commit == [1]


def test_saber_take_backs_grow_with_its_commits():
    r = rule("saber", n=2)
    r.choose(scores([0.0] * 40))
    conf = [0.99] * 20 + [0.0] * 20
    choice = r.choose(scores(conf))
    assert len(choice.commit) == 20 and len(choice.remask) == math.ceil(20 / 8)


def published_topk(m: int, response: dict[int, float], k: int, largest: bool) -> list[int]:
    """What Saber's published code picks: ``torch.topk`` over its (1, m + n) row, the prompt and every position
    that is not a candidate at -inf (commits) or +inf (take-backs), as response offsets in position order."""
    row = torch.full((1, m + 12), -math.inf if largest else math.inf)
    for p, v in response.items():
        row[0, m + p] = v
    _, picked = torch.topk(row[0], k=k, largest=largest)
    return sorted(p - m for p in picked.tolist())


def test_among_exactly_equal_confidences_saber_commits_and_takes_back_as_its_published_codes_topk_does():
    # Before any commit the bar is 1: no position passes, so Saber commits the top n = 2 of the `equal` positions
    # tied at 0.9; then takes back max(1, ceil(2 / 8)) = 1 of those two, tied again (both rose 0.9 from 0). Which
    # of equal values torch.topk takes depends on the whole row it is given, the prompt's -inf included: the rule
    # lays it out as the published code does (``Scores.prompt_length``, the loop's prompt length).
    lower = 0
    for m in (0, 5, 20, 40):
        for equal in range(2, 8):
            r = rule("saber")
            conf = [0.9] * equal + [0.1] * (12 - equal)
            step = scores(conf)
            step.prompt_length = m
            choice = r.choose(step)
            commit = published_topk(m, dict(enumerate(conf)), 2, largest=True)
            assert choice.commit == commit
            assert choice.remask == published_topk(m, {p: conf[p] for p in commit}, 1, largest=False)
            lower += choice.commit != [0, 1] or choice.remask != [0]
    assert lower        # and torch's choice is not always the lower positions (the rest of the project's tie rule)


# ============================================================================ token-to-mask

def test_t2m_takes_doubted_tokens_back_instead_of_replacing_them_within_its_budget():
    remask = rule("t2m", max_post_edit_steps=1)
    remask.start((0, 3))
    choice = remask.choose(written([0.9, 0.9, 0.9], [7, 2, 9], [1, 2, 3], masked=[2]))
    assert (choice.commit, choice.remask, choice.edit) == ([2], [0], [])
    choice = remask.choose(written([0.9, 0.9, 0.9], [7, 8, 9], [1, 2, 3], masked=[0]))   # budget spent
    assert (choice.commit, choice.remask) == ([0], []) and not remask.lingers()


# ============================================================================ ReMDM

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
