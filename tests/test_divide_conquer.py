"""DiCo's rule, phase by phase (Divide, Conquer, Finalize; trajectory guidance, Soft-NMS seeds, clusters), and the
DiCo authors' code choices, as docs/decoding.md §6 states them.

Single phases are checked through ``choose`` with hand-made ``Scores``; where phases follow one another the
rule is driven through ``dico.generate`` with a scripted mask predictor (tests/standins.py) whose
confidences the test sets step by step. Positions are response offsets.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import dico
from dico.rules.divide_conquer import DiCo, grow, guidance_weights, merge, soft_nms_seeds, trim
from dico.settings import DiCoSettings
from standins import FIRST_WORD, Row, phases, profile, run, scores, settle

torch.set_num_threads(1)


# ============================================================================ DiCo: trajectory guidance

def _masked(n: int, decoded=()) -> torch.Tensor:
    masked = torch.ones(n, dtype=torch.bool)
    masked[list(decoded)] = False
    return masked


def test_guidance_weight_is_1_at_the_first_masked_position_and_w_min_at_the_window_end():
    # R = 3/10 decoded: w_min = 0.05 + 0.5 * 0.3 = 0.2; f = 3, l = 10 - 3 = 7
    w = guidance_weights(10, (0, 10), _masked(10, decoded=[0, 1, 2]), alpha=0.5, beta=0.05)
    for k in range(7):
        assert float(w[3 + k]) == pytest.approx(0.2 ** (k / 6), rel=1e-5)
    assert float(w[3]) == pytest.approx(1.0) and float(w[9]) == pytest.approx(0.2)


def test_guidance_paper_origin_measures_the_same_curve_from_the_window_start():
    w = guidance_weights(10, (0, 10), _masked(10, decoded=[0, 1, 2]), 0.5, 0.05, origin="window-start")
    for k in range(10):
        assert float(w[k]) == pytest.approx(0.2 ** (k / 9), rel=1e-5)


def test_guidance_origins_agree_while_nothing_is_decoded():
    masked = _masked(12)
    code = guidance_weights(12, (0, 12), masked, 0.5, 0.05)
    paper = guidance_weights(12, (0, 12), masked, 0.5, 0.05, origin="window-start")
    assert torch.allclose(code, paper)
    assert float(code[11]) == pytest.approx(0.05)            # R = 0: w_min = beta


def test_guidance_in_a_semi_ar_block_takes_R_from_the_whole_response_and_the_curve_from_the_block():
    masked = _masked(32, decoded=range(9))                   # block [8, 16), position 8 already decoded
    w_min = 0.05 + 0.5 * 9 / 32
    code = guidance_weights(32, (8, 16), masked, 0.5, 0.05)
    paper = guidance_weights(32, (8, 16), masked, 0.5, 0.05, origin="window-start")
    for k in range(7):
        assert float(code[9 + k]) == pytest.approx(w_min ** (k / 6), rel=1e-5)
    for k in range(8):
        assert float(paper[8 + k]) == pytest.approx(w_min ** (k / 7), rel=1e-5)


def test_guidance_floor_w_min_is_capped_at_1():
    w = guidance_weights(10, (0, 10), _masked(10, decoded=range(9)), alpha=0.5, beta=0.6)   # 0.6 + 0.45 > 1
    assert float(w[9]) == pytest.approx(1.0)


def test_divide_chooses_seeds_on_guided_confidence_and_guidance_can_be_turned_off():
    conf = profile(16, 0.1, at={0: 0.5, 15: 0.5})            # at 15 (window end, R = 0) cw = 0.5 * 0.05 < tau1
    assert DiCo(DiCoSettings()).choose(scores(conf)).seeds == [0]
    assert DiCo(DiCoSettings(guidance=False)).choose(scores(conf)).seeds == [0, 15]


# ============================================================================ DiCo: Soft-NMS seeds

def _D(d: int, width: int) -> float:
    return 1 - math.exp(-9 * d * d / width ** 2)


@pytest.mark.parametrize("width, near, far", [(16, 4, 8), (32, 6, 20), (8, 2, 5)])
@pytest.mark.parametrize("nudge", [1.02, 0.98])
def test_soft_nms_scales_every_score_by_D_from_each_accepted_seed(width, near, far, nudge):
    # first seed at 0 (cw 1); the second is whichever of near / far keeps the larger s = cw * D(0, j)
    cw = torch.zeros(width)
    cw[0], cw[far] = 1.0, 0.2
    cw[near] = 0.2 * _D(far, width) / _D(near, width) * nudge
    seeds = soft_nms_seeds(cw, torch.ones(width, dtype=torch.bool), 2, 0.1, width)
    assert seeds == [0, near if nudge > 1 else far]


def test_soft_nms_stops_at_the_first_pick_whose_guided_confidence_is_below_tau1():
    # after seed 0, s(1) = 0.35 * D(1) = 0.012 < s(10) = 0.2 * D(10) = 0.194: 10 is picked, 0.2 < tau1: stop.
    # Position 1 (cw 0.35 >= tau1) is not reached.
    cw = torch.zeros(16)
    cw[0], cw[1], cw[10] = 0.9, 0.35, 0.2
    assert soft_nms_seeds(cw, torch.ones(16, dtype=torch.bool), 8, 0.3, 16) == [0]


def test_soft_nms_accepts_at_most_N_seeds_among_masked_window_positions():
    cw = torch.full((16,), 0.9)
    cand = torch.ones(16, dtype=torch.bool)
    cand[0] = False
    seeds = soft_nms_seeds(cw, cand, 3, 0.3, 16)
    assert len(seeds) == 3 and seeds[:2] == [1, 15] and 0 not in seeds


def test_semi_ar_seeds_are_spread_over_the_block_width():
    # W = 8: s(10) = 0.8 * D(2, 8) = 0.344 > s(14) = 0.32 * D(6, 8) = 0.318 (with W = 32 it would be 14)
    conf = profile(32, 0.1, at={8: 0.9, 10: 0.8, 14: 0.32})
    rule = DiCo(DiCoSettings(guidance=False, seeds=2), "semi-ar")
    assert rule.choose(scores(conf, decoded=range(8), window=(8, 16))).seeds == [8, 10]


# ============================================================================ DiCo: clusters

PASSING = np.array([True, True, False, False, True, False, False, False, True])


@pytest.mark.parametrize("gap, end", [(0, 1), (1, 1), (2, 4), (3, 8)])
def test_growth_steps_over_a_run_of_up_to_M_failing_positions_and_stops_at_the_last_passing_one(gap, end):
    assert grow([0, 0], PASSING, gap, 0, 9) == [0, end]
    assert grow([8, 8], PASSING[::-1].copy(), gap, 0, 9) == [8 - end, 8]       # the same to the left


def test_growth_stays_inside_the_window():
    assert grow([3, 3], np.ones(10, dtype=bool), 2, 1, 5) == [1, 4]


@pytest.mark.parametrize("gap, cluster", [(0, [2, 4]), (1, [2, 9])])
def test_divide_growth_fails_at_decoded_positions(gap, cluster):
    conf = profile(16, 0.1, span={(2, 9): 0.5}, at={2: 0.6})
    choice = DiCo(DiCoSettings(guidance=False, seeds=1, gap=gap)).choose(scores(conf, decoded=[5]))
    assert choice.seeds == [2] and choice.clusters == [cluster]


def test_divide_growth_accepts_guided_confidence_equal_to_tau1():
    conf = profile(8, 0.1, at={3: 0.9, 4: 0.5})
    choice = DiCo(DiCoSettings(guidance=False, seeds=1, tau1=0.5, gap=0)).choose(scores(conf))
    assert choice.clusters == [[3, 4]]


def test_merge_joins_clusters_that_overlap_or_touch():
    assert merge([[8, 9], [0, 2], [3, 5], [9, 12], [20, 21], [14, 15]]) == [[0, 5], [8, 12], [14, 15], [20, 21]]


def test_trim_shrinks_clusters_to_their_masked_ends_and_drops_empty_ones():
    masked = np.array([True, False, True, True, False, False, False, True, False, False])
    assert trim([[0, 4], [5, 6], [6, 9]], masked) == [[0, 3], [7, 7]]


@pytest.mark.parametrize("second_seed, clusters", [(5, [[4, 5]]), (6, [[4, 4], [6, 6]])])
def test_divide_keeps_untouched_clusters_and_merges_touching_ones(second_seed, clusters):
    rows = [profile(16, 0.1, at={4: 0.9}), profile(16, 0.1, at={second_seed: 0.9})]
    trace = run(rows, 16, then=settle(), guidance=False, seeds=1)
    assert trace.steps[0].clusters == [[4, 4]]
    assert phases(trace)[:2] == ["divide", "divide"] and trace.steps[1].clusters == clusters


def test_divide_grows_a_seed_from_the_cluster_that_already_contains_it():
    # step 1 seeds 5 inside [3, 5]; 4 is decoded, so growing from [5, 5] with M = 0 would give [5, 6]
    rows = [profile(16, 0.1, at={4: 0.9, 3: 0.4, 5: 0.4}), profile(16, 0.1, at={5: 0.9, 3: 0.4, 6: 0.4})]
    trace = run(rows, 16, then=settle(), guidance=False, seeds=1, gap=0)
    assert trace.steps[0].clusters == [[3, 5]]
    assert trace.steps[1].seeds == [5] and trace.steps[1].clusters == [[3, 6]]


# ============================================================================ DiCo: Divide

def test_divide_commits_the_seeds_only():
    choice = DiCo(DiCoSettings(guidance=False)).choose(scores([0.99] * 32))
    assert choice.phase == "divide" and len(choice.seeds) == 8      # N = 8 in non-AR mode
    assert sorted(choice.commit) == sorted(choice.seeds) and choice.seeds[:2] == [0, 31]


@pytest.mark.parametrize("tau2, next_phase", [(0.6, "conquer"), (0.65, "divide")])
def test_divide_ends_when_the_density_of_still_masked_cluster_positions_reaches_tau2(tau2, next_phase):
    # cluster [2, 6]; the seed 4 (0.99) is committed, the rest are at 0.62: density 0.62 (0.694 if the seed counted)
    first = profile(16, 0.1, span={(2, 6): 0.62}, at={4: 0.99})
    trace = run([first], 16, then=settle(), guidance=False, seeds=1, tau2=tau2)
    assert trace.steps[0].seeds == [4] and trace.steps[0].clusters == [[2, 6]]
    assert phases(trace)[:2] == ["divide", next_phase]


def test_divide_density_is_measured_on_guided_confidence():
    # all masked (R = 0, w_min = 0.05): conf 0.8 on 0..4 gives cw .8 .655 .537 .439 .360;
    # density over 1..4 is 0.498 < tau2 although the raw confidence is 0.8
    trace = run([profile(16, 0.1, span={(0, 4): 0.8})], 16, then=settle(), seeds=1)
    assert trace.steps[0].seeds == [0] and trace.steps[0].clusters == [[0, 4]]
    assert phases(trace)[1] == "divide"


def test_divide_ends_after_two_quiet_steps_not_counting_the_first():
    # 4, 6 and 7 tie at 0.4 (seeds go to the lower position): one predicted token everywhere makes their
    # logit rows, and so their softmax, bitwise equal on any CPU
    row = Row(profile(16, 0.1, span={(4, 7): 0.4}, at={5: 0.45}), pred=[FIRST_WORD] * 16)
    trace = run(lambda step, ids: row, 16, guidance=False, seeds=1)
    assert [s.seeds for s in trace.steps[:3]] == [[5], [4], [6]]          # steps 2 and 3 change nothing
    assert phases(trace)[:4] == ["divide", "divide", "divide", "conquer"]
    assert trace.steps[2].clusters == [[7, 7]]                              # trimmed when Divide ends
    assert trace.steps[3].committed == [7]                                  # Conquer: top-1 inside [7, 7]
    assert phases(trace)[4] == "finalize"       # Divide again (4/16 < R_gate) finds no seed: Finalize, same logits
    assert trace.nfe == 16


@pytest.mark.parametrize("grown_to, divide_steps", [(64, 4), (63, 3)])
def test_divide_counts_a_cluster_grown_by_10_percent_or_more_as_a_change(grown_to, divide_steps):
    # step 0: seed 30 makes [10, 59] (50 positions); step 1 seeds inside it and it grows to [10, grown_to]:
    # 55 positions is +10% (a change), 54 is +8% (quiet). Two quiet steps after that end Divide.
    first = profile(128, 0.1, span={(10, 59): 0.4}, at={30: 0.45})
    later = [profile(128, 0.1, span={(10, grown_to): 0.4}, at={seed: 0.45}) for seed in (10, 11, 12)]
    trace = run([first] + later, 128, then=settle(), guidance=False, seeds=1)
    assert trace.steps[1].clusters == [[10, grown_to]]
    assert phases(trace)[:divide_steps + 1] == ["divide"] * divide_steps + ["conquer"]


def test_divide_counts_a_change_in_the_number_of_clusters_as_a_change():
    # [10, 49] (50 positions) and [51, 51]; step 2 seeds inside the first, which grows to 50 and so touches
    # the second: one cluster [10, 51], only 4% longer, and no seed outside: only the count changed.
    # Steps 3 and 4 are quiet; Conquer follows at step 5 (at step 4 if the count were ignored).
    span = {(10, 49): 0.4}
    rows = [profile(64, 0.1, span=span, at={30: 0.45}),
            profile(64, 0.1, span=span, at={51: 0.45}),
            profile(64, 0.1, span={(10, 50): 0.4}, at={10: 0.45}),
            profile(64, 0.1, span={(10, 50): 0.4}, at={11: 0.45}),
            profile(64, 0.1, span={(10, 50): 0.4}, at={12: 0.45})]
    trace = run(rows, 64, then=settle(), guidance=False, seeds=1, gap=0)
    assert [s.clusters for s in trace.steps[:3]] == [[[10, 49]], [[10, 49], [51, 51]], [[10, 51]]]
    assert phases(trace)[:6] == ["divide"] * 5 + ["conquer"]


@pytest.mark.parametrize("t_max", [2, 3])
def test_divide_ends_after_t_max_steps(t_max):
    # every step seeds a new isolated position (a change every step, density 0): only T_max ends Divide;
    # its clusters were the seeds alone, so nothing is left to conquer
    rows = [profile(16, 0.1, at={2 + 4 * k: 0.45}) for k in range(4)]
    trace = run(rows, 16, then=settle(), guidance=False, seeds=1, t_max=t_max)
    assert [s.seeds for s in trace.steps[:t_max]] == [[2 + 4 * k] for k in range(t_max)]
    assert phases(trace)[t_max - 1:t_max + 1] == ["divide", "finalize"]


def test_divide_without_a_seed_hands_its_logits_to_conquer_when_clusters_exist():
    rows = [profile(16, 0.1, span={(4, 7): 0.4}, at={5: 0.45}), profile(16, 0.2, at={6: 0.25})]
    trace = run(rows, 16, then=settle(), guidance=False, seeds=1)
    assert phases(trace)[:2] == ["divide", "conquer"]
    assert trace.steps[1].committed == [6]                                  # top-1 inside [4, 7]


def test_divide_without_a_seed_or_cluster_goes_to_finalize_on_the_same_logits():
    trace = run([profile(8, 0.15, at={3: 0.2})], 8, then=settle())
    assert trace.steps[0].phase == "finalize" and trace.steps[0].committed == [3]


# ============================================================================ DiCo: Conquer

# Divide step: seeds 3 and 11 (s(11) = 0.9 D(8) = 0.81 beats s(12) = 0.66), clusters [2, 5] and [10, 12],
# density 0.7 >= tau2: the next step is Conquer.
ROW0 = profile(16, 0.1, span={(2, 5): 0.7, (10, 12): 0.7}, at={3: 0.95, 11: 0.9})


def conquer_run(second, **settings) -> dico.Trace:
    return run([ROW0, second], 16, then=settle(), guidance=False, seeds=2, **settings)


def test_conquer_starts_from_the_clusters_divide_built():
    trace = conquer_run(profile(16, 0.99))
    assert trace.steps[0].seeds == [3, 11] and trace.steps[0].clusters == [[2, 5], [10, 12]]
    assert phases(trace)[:2] == ["divide", "conquer"]


def test_conquer_commits_the_shortcut_anywhere_plus_the_factor_rule_in_each_cluster():
    # cluster [2, 5]: .9 .85 .5 -> k=2 (3 * 0.15 < 1, 4 * 0.5 >= 1); cluster [10, 12]: .7 .65 -> k=1;
    # 7 at 0.99 is outside any cluster (shortcut); 14 at 0.97 is not. One factor rule over both clusters
    # together would stop at {2, 4, 7}.
    second = profile(16, 0.1, at={2: 0.9, 4: 0.85, 5: 0.5, 10: 0.7, 12: 0.65, 7: 0.99, 14: 0.97})
    step = conquer_run(second).steps[1]
    assert step.phase == "conquer" and step.committed == [2, 4, 7, 10]


def test_conquer_falls_back_to_the_top1_inside_the_clusters():
    second = profile(16, 0.1, at={2: 0.45, 4: 0.4, 5: 0.42, 10: 0.44, 12: 0.43, 7: 0.9})
    step = conquer_run(second).steps[1]
    assert step.phase == "conquer" and step.committed == [2]               # not 7, the most confident overall


@pytest.mark.parametrize("gap, clusters", [(2, [[0, 9], [12, 15]]), (0, [[6, 6], [8, 12]])])
def test_conquer_grows_clusters_into_masked_positions_above_tau2_never_into_a_neighbour(gap, clusters):
    # The step commits 2, 4, 5 and 10. With M = 2, [2, 5] grows left over 1 (fails) to 0 and right over 6,
    # 7 (fails), 8, 9 and stops at its neighbour [10, 12] (without that limit it would step over 10, 11 to
    # 12 and on to 15); the neighbour cannot grow left, grows right over 13, 14 (fail) to 15 and is trimmed
    # to [12, 15]. With M = 0, [2, 5] reaches 6 only (7 at 0.58 is not above tau2) and is trimmed to [6, 6];
    # [10, 12] then grows left to 8.
    second = profile(16, 0.2, at={2: 0.9, 4: 0.9, 5: 0.9, 10: 0.65, 12: 0.64,
                                  0: 0.7, 6: 0.7, 7: 0.58, 8: 0.65, 9: 0.7, 15: 0.7})
    step = conquer_run(second, gap=gap).steps[1]
    assert step.committed == [2, 4, 5, 10] and step.clusters == clusters


def test_conquer_drops_a_cluster_with_no_masked_position_left():
    second = profile(16, 0.2, at={2: 0.9, 4: 0.9, 5: 0.9, 10: 0.3, 12: 0.3})
    step = conquer_run(second).steps[1]
    assert step.committed == [2, 4, 5] and step.clusters == [[10, 12]]


@pytest.mark.parametrize("rest, next_phase", [(0.65, "conquer"), (0.55, "divide")])
def test_conquer_ends_when_the_mean_confidence_of_still_masked_cluster_positions_is_below_tau2(rest, next_phase):
    # commits 2 and 10; left in clusters: 4, 5 at `rest` and 12 at 0.64 -> mean 0.647 (stay) or 0.58 (leave;
    # 4/16 decoded < R_gate: Divide again)
    second = profile(16, 0.1, at={2: 0.95, 4: rest, 5: rest, 10: 0.66, 12: 0.64})
    trace = conquer_run(second)
    assert trace.steps[1].committed == [2, 10] and trace.steps[1].clusters == [[4, 5], [12, 12]]
    assert phases(trace)[2] == next_phase


# ============================================================================ DiCo: the authors' code choices

def test_growing_through_this_steps_commits_reproduces_the_authors_conquer():
    # the step commits 2, 4, 5 (factor rule), 6 (shortcut) and 10; 7 is masked at 0.7. Ours: 6 is decoded, so a
    # wall ([2, 5] has nothing masked left and goes). The code's: 6 was masked at 0.99 before the commit, so
    # [2, 5] grows through it to 7.
    second = profile(16, 0.2, at={2: 0.9, 4: 0.9, 5: 0.9, 6: 0.99, 7: 0.7, 10: 0.65, 12: 0.64})
    ours, code = (conquer_run(second, gap=0, grow_through_commits=through).steps[1] for through in (False, True))
    assert ours.committed == code.committed == [2, 4, 5, 6, 10]
    assert ours.clusters == [[12, 12]] and code.clusters == [[7, 7], [12, 12]]


@pytest.mark.parametrize("at_7, expected", [(0.9, [7]), (0.5, None)])
def test_the_authors_conquer_fallback_takes_the_windows_top1_above_tau2_or_hands_the_step_on(at_7, expected):
    second = profile(16, 0.1, at={2: 0.45, 4: 0.4, 5: 0.42, 10: 0.44, 12: 0.43, 7: at_7})
    trace = conquer_run(second, conquer_fallback="window")       # run() checks that no forward pass is lost
    if expected:
        assert trace.steps[1].phase == "conquer" and trace.steps[1].committed == expected
    else:   # nothing committed in Conquer: it ends, and Divide (2 of 16 decoded < R_gate) takes the same scores
        assert trace.steps[1].phase == "divide" and trace.steps[1].seeds == [7, 2]


def test_bounding_by_the_previous_clusters_old_span_then_merging_reproduces_the_authors_conquer():
    # [2, 5] grows right to 9, stopped by [10, 12]; [10, 12] may grow left to just past [2, 5] as it stood (5)
    # in the code, just past it as grown (9) in ours. The code then merges the two.
    second = profile(16, 0.2, at={2: 0.9, 4: 0.9, 5: 0.9, 6: 0.7, 7: 0.7, 8: 0.7, 9: 0.7, 10: 0.65, 12: 0.64})
    ours, code = (conquer_run(second, merge_after_conquer=merged).steps[1] for merged in (False, True))
    assert ours.committed == code.committed == [2, 4, 5, 10]
    assert ours.clusters == [[6, 9], [12, 12]] and code.clusters == [[6, 12]]


def test_stopping_right_hand_growth_one_short_reproduces_the_authors_conquer():
    # The step commits 2, 4, 5 and 10 (M = 0). Ours: [2, 5] grows right over 6..9 (0.7 > tau2) up to its neighbour
    # [10, 12], which grows right over 13..15 to the window end. The code's: [2, 5] stops at 8, one short of the
    # neighbour, which then grows left into 9 (past [2, 5] as grown) and right to 14, one short of the window end.
    second = profile(16, 0.2, at={2: 0.9, 4: 0.9, 5: 0.9, 6: 0.7, 7: 0.7, 8: 0.7, 9: 0.7, 10: 0.65, 12: 0.64,
                                  13: 0.7, 14: 0.7, 15: 0.7})
    ours, code = (conquer_run(second, gap=0, short_right_growth=short).steps[1] for short in (False, True))
    assert ours.committed == code.committed == [2, 4, 5, 10]
    assert ours.clusters == [[6, 9], [12, 15]] and code.clusters == [[6, 8], [9, 14]]


def test_the_authors_code_preset_switches_on_every_recorded_code_value():
    from dico.settings import AUTHORS_CODE, specs
    recorded = {s.name for s in specs(DiCoSettings) if s.code is not None}
    assert set(AUTHORS_CODE) == recorded                      # derived from the declarations, nothing else
    assert AUTHORS_CODE == {"mask_in_softmax": True, "seeds": 4, "guidance": True, "grow_through_commits": True,
                            "conquer_fallback": "window", "merge_after_conquer": True, "short_right_growth": True}
    preset = DiCoSettings.from_dict({"authors_code": True})
    assert preset.authors_code and all(getattr(preset, k) == v for k, v in AUTHORS_CODE.items())


def test_settings_given_explicitly_win_over_the_authors_code_preset():
    given = DiCoSettings.from_dict({"authors_code": True, "seeds": 8, "grow_through_commits": False})
    assert (given.seeds, given.grow_through_commits, given.conquer_fallback) == (8, False, "window")
    assert DiCoSettings.from_dict(given.to_dict()) == given                  # a trace's settings rebuild the run
    # built directly, a setting left at its default counts as not given
    assert DiCoSettings(authors_code=True, seeds=8) == DiCoSettings.from_dict({"authors_code": True, "seeds": 8})


def test_the_preset_decodes_as_its_settings_spelled_out_and_the_trace_says_so():
    rows = [ROW0, profile(16, 0.2, at={2: 0.9, 4: 0.9, 5: 0.9, 6: 0.7, 7: 0.7, 8: 0.7, 9: 0.7, 10: 0.65, 12: 0.64})]
    preset = run(rows, 16, then=settle(), guidance=False, authors_code=True)
    spelled = run(rows, 16, then=settle(), guidance=False, **AUTHORS_CODE_BUT_TG)
    assert [s.committed for s in preset.steps] == [s.committed for s in spelled.steps]
    assert [s.clusters for s in preset.steps] == [s.clusters for s in spelled.steps]
    assert preset.settings["authors_code"] is True and spelled.settings["authors_code"] is False
    assert {k: preset.settings[k] for k in AUTHORS_CODE_BUT_TG} == AUTHORS_CODE_BUT_TG


AUTHORS_CODE_BUT_TG = {"mask_in_softmax": True, "seeds": 4, "grow_through_commits": True,
                       "conquer_fallback": "window", "merge_after_conquer": True, "short_right_growth": True}


# ======================================================================= DiCo: the Divide shortcut (beyond the paper)

def test_the_divide_shortcut_commits_every_sure_window_position_beside_the_seeds():
    # seeds (N = 2): 12 (0.995), then 5 (Soft-NMS has pushed 13 down to 0.99 D(1) = 0.03). With the shortcut
    # the step also commits 13 (0.99 > 0.98), not 14 (0.97); a sure seed counts as a seed.
    first = profile(16, 0.1, span={(4, 7): 0.5}, at={5: 0.6, 12: 0.995, 13: 0.99, 14: 0.97})
    plain, sure = (run([first], 16, then=settle(), guidance=False, seeds=2, divide_shortcut=on).steps[0]
                   for on in (False, True))
    assert plain.seeds == sure.seeds == [12, 5]
    assert plain.committed == [5, 12] and plain.shortcut == []
    assert sure.phase == "divide" and sure.committed == [5, 12, 13] and sure.shortcut == [13]


def test_with_the_divide_shortcut_a_sure_semi_ar_block_takes_one_pass():
    # every position at 0.99 (e.g. end-of-text padding): each block of 8 is one Divide step, as with Fast-dLLM
    sure = lambda step, ids: profile(16, 0.99)       # noqa: E731
    trace = run(sure, 16, mode="semi-ar", block_length=8, divide_shortcut=True)
    assert phases(trace) == ["divide", "divide"] and [s.committed for s in trace.steps] == [list(range(8)),
                                                                                            list(range(8, 16))]
    assert all(sorted(s.seeds + s.shortcut) == s.committed for s in trace.steps)
    assert run(sure, 16, mode="semi-ar", block_length=8).nfe > 2                 # seeds only: N = 4 a pass at most


# ============================================================================ DiCo: rounds and Finalize

@pytest.mark.parametrize("r_gate, after", [(0.5, "divide"), (0.3, "finalize")])
@pytest.mark.parametrize("n, block_length", [(10, None), (20, 10)])
def test_when_conquer_ends_divide_again_below_r_gate_else_finalize(n, block_length, r_gate, after):
    # Divide seeds 1 and builds [0, 3]; Conquer commits 0, 2, 3 and the cluster is gone: 4 of the window's
    # 10 positions are decoded (0.4). In semi-AR mode the whole response is only 4/20 decoded: the gate
    # reads the window.
    first = profile(n, 0.1, span={(0, 3): 0.7}, at={1: 0.8})
    second = profile(n, 0.1, span={(0, 3): 0.9})
    mode = "semi-ar" if block_length else "non-ar"
    trace = run([first, second], n, then=settle(), mode=mode, block_length=block_length, guidance=False, seeds=1,
                r_gate=r_gate)
    assert phases(trace)[:3] == ["divide", "conquer", after]
    assert trace.steps[1].committed == [0, 2, 3] and trace.steps[1].unmasked_fraction == pytest.approx(4 / n)


def finalizing(**settings) -> DiCo:
    """A DiCo rule in Finalize: its first step found no seed (every confidence below tau1)."""
    rule = DiCo(DiCoSettings(**settings))
    assert rule.choose(scores([0.1] * 5)).phase == "finalize"
    return rule


def test_finalize_commits_every_position_with_margin_above_tau3_or_conf_above_098():
    s = scores([0.5, 0.5, 0.99, 0.97, 0.5], margin=[3.5, 3.0, 1.0, 2.9, 10.0], decoded=[4])
    choice = finalizing().choose(s)
    assert choice.phase == "finalize" and choice.commit == [0, 2]


def test_finalize_falls_back_to_the_top1_by_confidence():
    assert finalizing().choose(scores([0.6, 0.5, 0.3], margin=[2.0, 2.9, 1.0])).commit == [0]


def test_finalize_uses_the_tau3_setting():
    assert finalizing(tau3=1.5).choose(scores([0.5, 0.6, 0.5], margin=[1.6, 1.4, 0.0])).commit == [0]


def test_without_logit_margin_finalize_commits_conf_above_098_else_the_top1():
    rule = finalizing(logit_margin=False)
    assert rule.choose(scores([0.5, 0.99, 0.97], margin=[9.0, 1.0, 2.0])).commit == [1]
    assert rule.choose(scores([0.5, 0.7, 0.97], margin=[9.0, 1.0, 2.0])).commit == [2]


def test_finalize_through_the_loop_reads_the_models_logit_margin():
    first = Row(conf=profile(8, 0.5), margin=[3.5, 1.0, 1.0, 4.0, 2.9, 1.0, 1.0, 3.05])
    trace = run([first], 8, then=settle(), tau1=0.6)                      # conf 0.5 < tau1: straight to Finalize
    assert trace.steps[0].phase == "finalize" and trace.steps[0].committed == [0, 3, 7]
