"""The decode order, a per-lane map of the step at which each position was last written (take-backs
and edits shown), in the trace's JSON and as a figure. Derived from the steps, so an older file loads with it."""
import json
from pathlib import Path

import pytest

from dico.trace import read_traces

ROOT = Path(__file__).resolve().parents[1]
EDIT = ROOT / "assets" / "ui" / "edit_example.json"
LESSON = ROOT / "assets" / "ui" / "example_run.json"


@pytest.fixture(scope="module")
def edits():
    return {t.name: t for t in read_traces(EDIT.read_bytes())}


@pytest.fixture(scope="module")
def lesson():
    return {t.method: t for t in read_traces(LESSON.read_bytes())}


def test_each_position_is_mapped_to_the_step_that_last_wrote_it(lesson):
    """Vanilla writes one position a step, so its map is a permutation of its steps; Top-4 writes four a step."""
    vanilla, topk = lesson["vanilla"], lesson["topk"]
    order = vanilla.decode_order()
    assert sorted(order["written_at"]) == list(range(vanilla.nfe)) and order["writes"] == [1] * vanilla.gen_length
    assert order["edited"] == order["taken_back"] == []
    for k, step in enumerate(topk.steps):
        assert [p for p, at in enumerate(topk.decode_order()["written_at"]) if at == k] == sorted(step.committed)


def test_edits_and_take_backs_are_shown(edits):
    """LLaDA 2.1 replaces the token at position 5 at step 3; Token-to-mask takes it back at step 3 and writes it again
    at step 4."""
    llada, t2m = edits["LLaDA 2.1"], edits["Token-to-mask"]
    assert llada.decode_order()["edited"] == [[5, 3]] and llada.decode_order()["written_at"][5] == 3
    assert llada.decode_order()["writes"][5] == 2
    order = t2m.decode_order()
    assert order["taken_back"] == [[5, 3]] and order["written_at"][5] == 4 and order["writes"][5] == 2


def test_the_json_carries_it_and_an_older_file_without_it_loads(edits):
    trace = edits["Token-to-mask"]
    data = json.loads(trace.to_json())
    assert data["decode_order"] == trace.decode_order()
    older = {k: v for k, v in data.items() if k != "decode_order"} | {"schema": "dico-trace/3"}
    back = read_traces(json.dumps(older))[0]
    assert back.decode_order() == trace.decode_order() and back.to_dict() == trace.to_dict()


def test_a_fork_and_constraints_count_as_written_by_hand(lesson):
    """A token fixed by hand before the run reads -1 (before the first step); a fork's take-back is listed at the
    step before the fork's first own step."""
    from dico.trace import Trace
    topk = read_traces(lesson["topk"].to_json())[0]
    data = topk.to_dict()
    data.pop("decode_order")
    forked = Trace.from_dict(data)
    forked.fork = {"parent": "Top-4 per step", "at": 23, "method": "topk", "force": {}, "remask": [4]}
    order = forked.decode_order()
    assert [4, 22] in order["taken_back"]


def test_the_decode_order_figure_draws_a_row_a_lane_and_marks_edits_and_take_backs(edits, lesson):
    import visuals
    fig = visuals.decode_order_figure(list(edits.values()))
    heat = fig.data[0]
    assert heat.type == "heatmap" and list(heat.y) == list(edits)
    vanilla = list(edits.values())[0]
    assert heat.z[0][vanilla.decode_order()["written_at"].index(vanilla.nfe - 1)] == 1.0    # its last step: 1
    names = [d.name for d in fig.data[1:]]
    assert names == ["taken back (re-masked)", "replaced (token edit)"]
    assert "written at step" in heat.text[2][5] and "written 2 times" in heat.text[2][5]
    assert len(visuals.decode_order_figure(list(lesson.values())).data) == 1     # nothing taken back nor edited
