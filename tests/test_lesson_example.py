"""The example the page opens on is chosen by measurement: an item where one token a step, Fast-dLLM and
DiCo answer right and naive top-k breaks it, and the About text says which lanes were right by the item's checker."""
import json

import pytest

from dico.embedded import tasks
from dico.trace import Trace
from dico_ui import about, examples, render, text


def _trace(label, text, nfe, answer_nfe=None, prompt="p", method="vanilla"):
    trace = Trace(model="m", method=method, mode="non-ar", settings={}, prompt=prompt, prompt_length=1,
                  gen_length=96, block_length=None, text=text, nfe=nfe, label=label)
    trace.answer_nfe = answer_nfe if answer_nfe is not None else nfe
    return trace


PICKS = tasks.make_split("pick", "test", 6)


def _race(answers):
    """A fake race: per prompt, each lane's text and DiCo's answer step."""
    def race_traces(predictor, prompt, lanes=examples.LESSON_LANES):
        texts, dico_answer = answers[prompt]
        return [_trace(label, text, nfe, dico_answer if method == "dico" else None, prompt, method)
                for label, method, text, nfe in zip(("Vanilla", "Top-4 per step", "Fast-dLLM", "DiCo"),
                                                    ("vanilla", "topk", "fast", "dico"), texts, (96, 24, 6, 9))]
    return race_traces


def test_the_chosen_example_is_one_where_only_naive_top_k_is_wrong_and_dico_finishes_soonest(monkeypatch):
    right = {item.prompt: item.answer for item in PICKS}
    assert all(tasks.check(item, right[item.prompt]) for item in PICKS)
    a, b, c, d, e, f = (item.prompt for item in PICKS)
    answers = {a: ([right[a]] * 4, 9),                                  # nothing broke: no lesson
               b: ([right[b], "I pick", right[b], right[b]], 12),      # the lesson, DiCo's answer at step 12
               c: ([right[c], "I pick", right[c], right[c]], 7),       # the lesson, DiCo's answer at step 7
               d: ([right[d], "I pick", right[d], "I pick"], 5),       # DiCo broke too: not the lesson
               e: (["I pick", "I pick", right[e], right[e]], 4),       # Vanilla wrong: not the lesson
               f: ([right[f], "I pick", right[f], right[f]], 7)}       # ties c on DiCo and Fast-dLLM: shorter one wins
    monkeypatch.setattr(examples, "race_traces", _race(answers))
    item, traces, found = examples.choose(None, ("pick",), 6, progress=False)
    expected = min((PICKS[2], PICKS[5]), key=lambda i: len(i.prompt))
    assert item == expected and [t.text for t in traces][1] == "I pick"
    assert found == {"families": ["pick"], "items": 6, "naive_wrong": 5, "lesson": 3}
    entry = examples.example_entry(item, found, "model-x")
    assert entry["source"] == f"tasks.make_split('pick', 'test')[{PICKS.index(item)}]"
    assert (entry["offered"], entry["count"], entry["target"]) == (list(item.offered), item.count, item.target)
    assert "3 of 6 held-out pick items showed the lesson" in entry["chosen"]


def test_no_item_showing_the_lesson_is_a_clear_message(monkeypatch):
    answers = {item.prompt: ([item.answer] * 4, 9) for item in PICKS}
    monkeypatch.setattr(examples, "race_traces", _race(answers))
    with pytest.raises(SystemExit, match="naive top-k was wrong on 0 of 6"):
        examples.choose(None, ("pick",), 6, progress=False)


def test_the_about_text_says_which_lanes_answered_a_shipped_example_right(tmp_path, monkeypatch):
    item = PICKS[0]
    shipped = tmp_path / "examples.json"
    shipped.write_text(json.dumps({"examples": [{"prompt": item.prompt, "family": "pick", "target": item.target,
                                                 "offered": list(item.offered), "count": item.count},
                                                {"prompt": "Write a poem.", "family": "free", "target": None}]}))
    monkeypatch.setattr(text, "EXAMPLES", shipped)
    broken = f"I pick {item.offered[0]} and {item.offered[0]}."
    traces = [_trace("Vanilla", item.answer, 96, prompt=item.prompt),
              _trace("Top-4 per step", broken, 24, prompt=item.prompt),
              _trace("DiCo", item.answer, 9, prompt=item.prompt)]
    said = about.judged(traces)
    assert "**Vanilla** in 96 steps, **DiCo** in 9 steps" in said
    assert f"**Top-4 per step** answered “{broken}”: wrong, in 24 steps." in said
    assert said in about.about_text(traces)
    assert about.judged([_trace("DiCo", "A poem.", 9, prompt="Write a poem.")]) == ""      # no checker: nothing said
    assert about.judged([_trace("DiCo", "x", 9, prompt="not an example")]) == ""
    shipped.write_text("{broken")
    # a broken examples file: the prompt itself still says what is right (dico.embedded.judge reads the choices)
    assert about.judged(traces).startswith("This prompt is a pick task")


def test_a_finished_lane_on_a_shipped_example_says_whether_its_answer_is_right(tmp_path, monkeypatch):
    item = PICKS[0]
    shipped = tmp_path / "examples.json"
    shipped.write_text(json.dumps({"examples": [{"prompt": item.prompt, "family": "pick", "target": item.target,
                                                 "offered": list(item.offered), "count": item.count}]}))
    monkeypatch.setattr(text, "EXAMPLES", shipped)
    right = _trace("Vanilla", item.answer, 96, prompt=item.prompt)
    broken = _trace("Top-4 per step", f"I pick {item.offered[0]} and {item.offered[0]}.", 24, prompt=item.prompt)
    assert render.verdicts([(right, 95, "done"), (broken, 23, "done"), (right, 3, "decoding")]) == [True, False, None]
    assert render.verdicts([(_trace("DiCo", item.answer, 9, prompt="not an example"), 8, "done")]) == [None]
    assert '<span class="verdict wrong">wrong answer</span>' in render.lane_html(broken, 23, "done", right=False)
    assert "verdict" not in render.lane_html(broken, 23, "done")


def test_the_page_opens_on_a_race_where_only_naive_top_k_answers_wrong():
    """The shipped example run, as the page draws it: Top-4 per step's lane is marked wrong, the others right."""
    from dico.trace import read_traces
    from dico_ui.handlers import EXAMPLE_RUN

    traces = read_traces(EXAMPLE_RUN.read_bytes())
    cards = render.lanes_html([(t, t.nfe - 1, "done") for t in traces])
    assert [t.name for t in traces] == ["Vanilla", "Top-4 per step", "Fast-dLLM", "DiCo"]
    assert render.verdicts([(t, t.nfe - 1, "done") for t in traces]) == [True, False, True, True]
    assert cards.count("verdict right") == 3 and cards.count("verdict wrong") == 1
