"""The rules that commit what clears a bar (dico/rules/threshold.py; docs/decoding.md §7.1, §7.2, §7.8, §7.11), each
on one step's scores written by hand, then on the embedded model where a rule's promise needs a run.

EB-Sampler commits the longest confidence-ordered prefix whose entropies, summed less their largest, stay within
gamma; KLASS commits the ready positions (confident and stable for `history` passes) or LLaDA's schedule; dInfer's
hierarchy commits the best of every sure run of masks, and its credit rewards a steady prediction. Fast-dLLM's
threshold and factor: test_rules.py.
"""
from __future__ import annotations

import torch

from dico import generate
from standins import rule, scores, with_signals, written

WORD = "Jeremiah counts 18 plums. He finds 4 more. How many plums does Jeremiah have now?"


# ============================================================================ EB-Sampler

def test_eb_commits_the_longest_prefix_whose_entropy_less_its_largest_stays_within_gamma():
    # confidence order: 2, 0, 3, 1; entropies along it 0.5, 0.05, 0.04, 0.3 -> sums less max 0, 0.05, 0.09, 0.39
    s = with_signals(scores([0.8, 0.3, 0.9, 0.7]), entropy=[0.05, 0.3, 0.5, 0.04])
    assert rule("eb", gamma=0.1).choose(s).commit == [0, 2, 3]
    assert rule("eb", gamma=0.06).choose(s).commit == [0, 2]
    assert rule("eb", gamma=0.0).choose(s).commit == [2]            # the most confident always fits


def test_eb_looks_only_at_masked_positions_of_the_window():
    s = with_signals(scores([0.99, 0.98, 0.97, 0.96], decoded=[0], window=(0, 3)), entropy=[0.0, 0.0, 0.0, 0.0])
    assert rule("eb").choose(s).commit == [1, 2]


# ============================================================================ KLASS

def klass_step(r, conf, kl, **kw):
    return r.choose(with_signals(scores(conf, **kw), kl=kl))


def test_klass_commits_every_confident_position_whose_kl_stayed_low_for_its_history():
    r = rule("klass")                              # confidence 0.9, KL 0.01, history 2
    r.start((0, 4))
    first = klass_step(r, [0.95, 0.95, 0.5, 0.2], [1e-3, 1e-3, 1e-3, 1e-3])
    assert first.commit == [0] and first.phase == "vanilla"        # a history of one pass: nothing ready yet
    second = klass_step(r, [0.95, 0.95, 0.95, 0.2], [1e-3, 0.5, 1e-3, 1e-3], decoded=[0])
    assert second.commit == [2] and second.phase == "fast"          # 1's KL jumped; 2 stable for two passes


def test_klass_falls_back_to_llada_schedule_when_nothing_is_ready():
    r = rule("klass", steps=2)                    # two passes for 4 masks: two a pass, the most confident
    r.plan(4, 4)
    r.start((0, 4))
    assert klass_step(r, [0.5, 0.8, 0.7, 0.1], [1.0] * 4).commit == [1, 2]


def test_klass_keeps_its_history_across_blocks_unless_told_to_reset_it():
    for reset, expected in ((False, [4, 5]), (True, [4])):
        r = rule("klass", reset_each_block=reset)                  # history 2
        r.start((0, 2))
        klass_step(r, [0.95, 0.2, 0.5, 0.5, 0.5, 0.5], [1e-3] * 6, window=(0, 2))
        r.start((2, 6))
        first = klass_step(r, [0.5, 0.5, 0.5, 0.97, 0.95, 0.93], [1e-3] * 6, decoded=[0, 1], window=(2, 6))
        assert first.commit == [3]                                 # a window's first pass: the schedule's top-1
        # 4 and 5 were stable for two passes; after a reset the window's first KL reads as unstable: the schedule
        second = klass_step(r, [0.5, 0.5, 0.5, 0.5, 0.95, 0.93], [1e-3] * 6, decoded=[0, 1, 3], window=(2, 6))
        assert second.commit == expected


def test_klass_gsm8k_preset_and_explicit_values():
    from dico.settings import settings_for
    assert (settings_for("klass", {"gsm8k_script": True}).confidence, settings_for("klass").confidence) == (0.6, 0.9)
    assert settings_for("klass", {"gsm8k_script": True, "kl": 0.02}).kl == 0.02


# ============================================================================ dInfer's hierarchy

def test_hierarchy_commits_the_best_of_every_sure_run_of_masks_and_everything_above_its_threshold():
    hierarchy = rule("hierarchy")                          # 0.9 / low 0.3
    s = written([0.5, 0.4, 0.0, 0.2, 0.25, 0.0, 0.35, 0.95, 0.6], [9] * 9, [1] * 9, masked=[0, 1, 3, 4, 6, 7, 8])
    # runs of masks: [0, 1] best 0.5 at 0; [3, 4] best 0.25 (not above 0.3); [6, 7, 8] best 0.95 at 7; 0.95 > 0.9
    assert sorted(hierarchy.choose(s).commit) == [0, 7]


def test_hierarchy_always_commits_the_windows_best_position():
    s = written([0.1, 0.2, 0.15], [9] * 3, [1] * 3, masked=[0, 1, 2])
    assert rule("hierarchy").choose(s).commit == [1]


# ============================================================================ dInfer's credit

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
