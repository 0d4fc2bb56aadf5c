"""The rule that edits written tokens (dico/rules/editing.py; docs/decoding.md §3.2, §7.6): LLaDA 2.1's joint
threshold fills masks and replaces confident disagreements in the same pass, on one step's scores written by hand.
Then the loop's promises on the embedded model: edits recorded and replayed, fixed tokens never edited (a cache
refreshed every pass decodes an editing run exactly as none: tests/test_revision.py).
"""
from __future__ import annotations

import dico
from dico import Trace, generate
from dico.forking import fork
from standins import rule, written

WORD = "Jeremiah counts 18 plums. He finds 4 more. How many plums does Jeremiah have now?"


# ============================================================================ LLaDA 2.1

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


# ============================================================================ editing in the loop

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
