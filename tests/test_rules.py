"""The decoding rules Vanilla and Fast-dLLM, semi-AR windows for every method, and settings validation, as
docs/decoding.md §3-§5 states them (DiCo's own rule: test_divide_conquer.py).

Single rules are checked through ``choose`` with hand-made ``Scores``; where steps follow one another the
rule is driven through ``dico.generate`` with a scripted mask predictor (tests/standins.py) whose
confidences the test sets step by step. Positions are response offsets.
"""
from __future__ import annotations

import pytest
import torch

import dico
from dico.methods import make_rule
from dico.rules import factor_set
from dico.rules.divide_conquer import DiCo
from dico.rules.schedule import Vanilla
from dico.settings import DiCoSettings
from standins import MASK_ID, rule, run, scores, scripted

torch.set_num_threads(1)

PROMPT = "w20 w21 w22"


# ============================================================================ Vanilla

def test_vanilla_commits_the_single_most_confident_masked_window_position():
    choice = Vanilla().choose(scores([0.2, 0.9, 0.95, 0.5], decoded=[2]))
    assert choice.commit == [1] and choice.phase == "vanilla"


def test_vanilla_stays_inside_the_window():
    assert Vanilla().choose(scores([0.2, 0.3, 0.99, 0.99], window=(0, 2))).commit == [1]


def test_vanilla_decodes_in_order_of_confidence_with_nfe_equal_to_gen_length():
    conf = [0.5, 0.9, 0.3, 0.7, 0.6, 0.4]
    trace = run(lambda step, ids: conf, 6, method="vanilla")
    assert [s.committed for s in trace.steps] == [[1], [3], [4], [0], [5], [2]]
    assert trace.nfe == 6
    assert trace.response == [10, 11, 12, 13, 14, 15]       # the scripted argmax at every position


# ============================================================================ Fast-dLLM

def test_fast_threshold_commits_every_masked_window_position_strictly_above_the_threshold():
    fast = rule("fast", threshold=0.75)
    choice = fast.choose(scores([0.8, 0.75, 0.9, 0.76, 0.2, 0.99], decoded=[2], window=(0, 5)))
    assert choice.commit == [0, 3] and choice.phase == "fast"


def test_fast_threshold_defaults_to_the_papers_095():
    assert rule("fast").settings.threshold == 0.95
    assert rule("fast").choose(scores([0.96, 0.94, 0.951])).commit == [0, 2]


def test_fast_threshold_falls_back_to_the_top1_when_none_qualifies():
    assert rule("fast").choose(scores([0.3, 0.6, 0.4])).commit == [1]


@pytest.mark.parametrize("conf, f, expected", [
    ([0.7, 0.99, 0.8, 0.9], 1.0, {1, 3, 2}),   # sorted .99 .9 .8 .7: k=3 gives 4*0.2 = 0.8 < 1; k=4 gives 1.5
    ([0.6, 0.59, 0.95], 1.0, {2}),              # k=1: 2*0.05 < 1; k=2: 3*0.4 = 1.2
    ([0.4, 0.3], 1.0, set()),                   # k=1: 2*0.6 = 1.2: the set itself may be empty
    ([0.5, 0.2], 1.0, set()),                   # k=1: 2*0.5 = 1.0 is not < 1
    ([0.6, 0.5], 2.0, {0, 1}),                  # f = 2: k=2 gives 3*0.5 = 1.5 < 2
])
def test_factor_set_is_the_top_k_for_the_largest_k_with_k_plus_1_times_1_minus_ck_below_f(conf, f, expected):
    assert set(factor_set(torch.tensor(conf), torch.arange(len(conf)), f).tolist()) == expected


def test_factor_set_only_looks_at_the_given_positions():
    conf = torch.tensor([0.99, 0.99, 0.7, 0.9])
    assert set(factor_set(conf, torch.tensor([2, 3])).tolist()) == {2, 3}   # .9 .7: k=2 gives 3*0.3 = 0.9 < 1
    assert set(factor_set(conf, torch.tensor([0, 2])).tolist()) == {0, 2}   # .99 .7: k=2 gives 0.9 < 1


def test_fast_factor_commits_the_factor_set_of_masked_window_positions():
    factor = rule("fast-factor")
    choice = factor.choose(scores([0.7, 0.99, 0.8, 0.9, 0.999], decoded=[1], window=(0, 4)))
    assert sorted(choice.commit) == [2, 3]        # sorted .9, .8, .7: k=2 3*0.2=0.6; k=3 4*0.3=1.2
    assert choice.phase == "fast"


def test_fast_factor_commits_at_least_one():
    assert rule("fast-factor").choose(scores([0.4, 0.45, 0.3])).commit == [1]


# ============================================================================ semi-AR windows

def block_script(n: int, block: int):
    """Positions of blocks not yet open are near-certain; inside the open block confidences vary."""
    def script(step, response):
        masked = (response == MASK_ID).nonzero()
        if not masked.numel():                      # a lingering rule's pass over the full last window
            return [0.99] * n
        open_start = int(masked[0]) // block * block
        return [0.99 if p >= open_start + block else 0.3 + 0.05 * ((p * 7 + step) % 6) for p in range(n)]
    return script


@pytest.mark.parametrize("method", [m for m in dico.METHODS if m != "wino" and dico.settings.decodes_in(m, "semi-ar")])
def test_semi_ar_never_commits_outside_the_open_block_but_what_it_took_back(method):
    trace = run(block_script(12, 4), 12, method=method, mode="semi-ar", block_length=4)
    windows = [tuple(s.window) for s in trace.steps]
    assert windows == sorted(windows) and set(windows) == {(0, 4), (4, 8), (8, 12)}
    taken_back: set[int] = set()
    for step in trace.steps:
        assert step.committed or step.phase == "edit"       # an editing rule's pass over a full window (§3.2)
        assert all(step.window[0] <= p < step.window[1] or p in taken_back for p in step.committed)
        taken_back |= set(step.remasked)


def test_dico_uses_N_8_seeds_in_non_ar_and_4_in_semi_ar_by_default():
    assert run(block_script(8, 4), 8, mode="semi-ar", block_length=4).settings["seeds"] == 4
    assert run(lambda step, ids: [0.99] * 8, 8).settings["seeds"] == 8
    assert DiCo(mode="semi-ar").n_seeds == 4 and DiCo().n_seeds == 8


def test_dico_defaults_are_the_papers_and_the_authors_code():
    s = DiCoSettings()
    assert (s.alpha, s.beta, s.tau1, s.tau2, s.tau3, s.r_gate) == (0.5, 0.05, 0.3, 0.6, 3.0, 0.8)
    assert (s.t_max, s.gap, s.shortcut, s.guidance, s.logit_margin) == (10, 2, 0.98, True, True)


# ============================================================================ settings validation

@pytest.mark.parametrize("method, settings, field", [
    ("dico", {"tau1": 1.5}, "tau1"),
    ("dico", {"tau1": 0}, "tau1"),
    ("dico", {"tau2": -0.1}, "tau2"),
    ("dico", {"r_gate": 1.01}, "r_gate"),
    ("dico", {"alpha": 2.0}, "alpha"),
    ("dico", {"beta": 0.0}, "beta"),
    ("dico", {"tau3": 0}, "tau3"),
    ("dico", {"seeds": -1}, "seeds"),
    ("dico", {"conquer_fallback": "anywhere"}, "conquer_fallback"),
    ("vanilla", {"remasking": "lowest"}, "remasking"),
    ("vanilla", {"temperature": -1}, "temperature"),
    ("fast", {"top_p": 0}, "top_p"),
    ("dico", {"t_max": 0}, "t_max"),
    ("dico", {"gap": -1}, "gap"),
    ("dico", {"guidance_origin": "middle"}, "guidance_origin"),
    ("dico", {"conquer": "vote"}, "conquer"),
    ("dico", {"bogus": 1}, "bogus"),
    ("fast", {"threshold": 1.5}, "threshold"),
    ("fast", {"threshold": 0.0}, "threshold"),
    ("fast", {"tau1": 0.3}, "tau1"),
    ("fast-factor", {"factor": 0}, "factor"),
    ("vanilla", {"threshold": 0.9}, "threshold"),
    ("greedy", {}, "method"),
])
def test_settings_are_validated_and_the_message_names_the_field(method, settings, field):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        make_rule(method, "non-ar", settings)


def test_settings_at_the_edge_of_their_range_are_accepted():
    edge = rule("dico", tau1=1.0, tau2=1.0, r_gate=1.0, seeds=1, t_max=1, gap=0).settings
    assert (edge.tau1, edge.tau2, edge.r_gate, edge.seeds, edge.t_max, edge.gap) == (1.0, 1.0, 1.0, 1, 1, 0)
    assert rule("fast", threshold=1.0).settings.threshold == 1.0


def test_bad_settings_are_refused_before_any_forward_pass():
    predictor = scripted([], 8)
    with pytest.raises(ValueError, match="^tau2:"):
        dico.generate(predictor, PROMPT, "dico", gen_length=8, tau2=2)
    with pytest.raises(ValueError, match="^method:"):
        dico.generate(predictor, PROMPT, "greedy", gen_length=8)
    assert predictor.model.calls == []
