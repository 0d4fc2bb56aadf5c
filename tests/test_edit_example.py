"""The editing example: LLaDA 2.1 replacing a written token mid-decode, chosen by measurement
(``python -m dico_ui.examples --edit``: its edits repair the answer, the same rule without edits is wrong), shipped as
a bundle the fork panel opens without a model, the step view on the replacement and the status saying what it was."""
import json
from pathlib import Path

import pytest

import dico
from dico.embedded import tasks
from dico.settings import DEFAULT_GEN_LENGTH, NON_AR
from dico.trace import read_traces
from visuals._common import EDITED

gr = pytest.importorskip("gradio")

from dico_ui import about, examples, forks, render  # noqa: E402
from dico_ui.handlers import EXAMPLE_RUN  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = json.loads((ROOT / "assets" / "examples.json").read_text())
LANES = ["Vanilla", "LLaDA 2.1, no edits", "LLaDA 2.1", "Token-to-mask"]


@pytest.fixture(scope="module")
def example():
    return read_traces(forks.EDIT_EXAMPLE.read_bytes())


def held_out(prompt: str):
    """The held-out item a shipped prompt is (its family's own checker), from the test split."""
    entry = next(e for e in SHIPPED["examples"] if e["prompt"] == prompt)
    return next(i for i in tasks.make_split(entry["family"], "test", tasks.TEST_SIZE) if i.prompt == prompt)


def first_edit(trace):
    return next(k for k, s in enumerate(trace.steps) if s.edited)


# ---------------------------------------------------------------------------- the shipped bundle

def test_the_shipped_example_edits_and_the_edit_repairs_the_answer(example):
    assert [t.name for t in example] == LANES
    assert [t.method for t in example] == ["vanilla", "llada21", "llada21", "t2m"]
    assert all(t.mode == NON_AR and t.gen_length == DEFAULT_GEN_LENGTH and not t.stopped for t in example)
    assert len({t.prompt for t in example}) == 1
    plain, editing = example[1], example[2]
    assert plain.recorded_settings()["edit_threshold"] == 1.0 and plain.replaced() == 0
    assert editing.settings_given() == {} and editing.replaced() >= 1
    item = held_out(editing.prompt)
    assert tasks.check(item, editing.text) and not tasks.check(item, plain.text)
    assert render.judged_item(editing.prompt) is not None                # the page judges it too (a shipped example)
    assert forks.EDIT_EXAMPLE.stat().st_size < EXAMPLE_RUN.stat().st_size   # small: no bigger than the page's own


def test_how_the_example_was_chosen_is_recorded_in_the_examples_file(example):
    entry = next(e for e in SHIPPED["examples"] if e["prompt"] == example[0].prompt)
    assert entry["chosen"].startswith(examples.EDIT_CHOSEN) and "--edit" in entry["chosen"]
    assert f"fewest replacements ({example[2].replaced()}, in {example[2].nfe} passes)" in entry["chosen"]
    assert example[1].text.strip() in entry["note"] and "same step" in entry["note"]
    assert SHIPPED["examples"][SHIPPED["opens_on"]]["prompt"] == read_traces(EXAMPLE_RUN.read_bytes())[0].prompt


@pytest.mark.slow
def test_the_shipped_example_is_what_the_decoder_does(example, predictor):
    """``python -m dico_ui.examples --edit`` must be rerun when decoding changes."""
    for trace in example[1:3]:
        again = dico.generate(predictor, trace.prompt, trace.method, gen_length=trace.gen_length,
                              settings=trace.settings_given())
        assert again.text == trace.text and [s.edited for s in again.steps] == [s.edited for s in trace.steps]


# ---------------------------------------------------------------------------- the page

def test_the_editing_example_opens_without_a_model_on_the_step_of_the_edit(example):
    out = forks.open_edit_example()
    editing = example[2]
    k = first_edit(editing)
    assert [t.name for t in out["traces"]] == LANES and out["prompt"] == editing.prompt
    assert out["step_run"]["value"] == 2 and out["step"]["value"] == k and out["step"]["interactive"]
    assert '<span class="tok edited new"' in out["step_text"] and '<span class="tok revised"' in out["step_text"]
    assert f"replaced {len(editing.steps[k].edited)}" in out["step_text"]
    assert f"{EDITED} at step {k}" in [d.name for d in out["step_view"].data]           # the step view's blue box
    assert EDITED in [d.name for d in out["trajectory"].data]          # the trajectory is the editing run's
    assert out["answers"].count("verdict right") == [tasks.check(held_out(t.prompt), t.text)
                                                     for t in example].count(True)
    assert "verdict wrong" in out["answers"] and out["side_by_side"] is not None and out["download"]


def test_the_status_says_which_token_was_replaced_by_which_and_what_it_changed(example):
    status = forks.open_edit_example()["status"]
    plain, editing = example[1], example[2]
    k = first_edit(editing)
    pos, old, new = editing.steps[k].edited[0]
    word = lambda t: f"‘{editing.token_text(t).strip()}’"                       # noqa: E731
    assert f"wrote {word(old)} at position {pos} in step" in status
    assert f"in step {k} replaced it with {word(new)}" in status
    assert f"“{editing.text.strip()}” (right)" in status and f"“{plain.text.strip()}” (wrong)" in status
    assert f"**{plain.name}** (the same rule at edit_threshold 1.0, which replaced nothing) keeps {word(old)}" in status
    assert f"step view opens on {editing.name}'s step {k}" in status


def test_a_missing_or_broken_example_is_said_not_raised(monkeypatch, tmp_path):
    title = "**Cannot open the editing example**: file:"
    monkeypatch.setattr(forks, "EDIT_EXAMPLE", ROOT / "nothing.json")
    with pytest.warns(UserWarning):
        assert forks.open_edit_example()["status"].startswith(title + " the editing example is not shipped")
    broken = tmp_path / "edit_example.json"
    broken.write_text("{broken")
    monkeypatch.setattr(forks, "EDIT_EXAMPLE", broken)
    with pytest.warns(UserWarning):
        assert forks.open_edit_example()["status"].startswith(title + " not valid JSON")
    monkeypatch.setattr(forks, "EDIT_EXAMPLE", EXAMPLE_RUN)                  # a bundle without an edit
    with pytest.warns(UserWarning):
        assert forks.open_edit_example()["status"] == (f"{title} no run of the editing example replaced a token; "
                                                       "python -m dico_ui.examples --edit makes it again")


def test_the_story_is_empty_without_an_editing_run():
    assert about.edit_story(read_traces(EXAMPLE_RUN.read_bytes())) == ""


def test_the_page_wires_the_editing_example_beside_the_example_fork(app_module):
    demo = app_module.demo
    ids = {getattr(block, "elem_id", None): block for block in demo.blocks.values()}
    assert {"fork-example", "edit-example"} <= set(ids)
    wired = [f for f in demo.fns.values() if (ids["edit-example"]._id, "click") in f.targets]
    assert [f.name for f in wired] == ["open_edit_example"] and not wired[0].show_api
    same = next(f for f in demo.fns.values() if (ids["fork-example"]._id, "click") in f.targets)
    assert [b._id for b in wired[0].outputs] == [b._id for b in same.outputs]       # every result and the prompt


# ---------------------------------------------------------------------------- the measurement

class Run:
    """What the measurement reads of a lane's run."""

    def __init__(self, name, text, replaced=0, nfe=5):
        self.name, self.text, self.nfe, self._replaced = name, text, nfe, replaced

    def replaced(self):
        return self._replaced


TEAMS = tasks.make_split("team", "test", 6)


def fake_race(outcomes):
    """Per prompt: (the no-edit lane's text, LLaDA 2.1's text, its replacements, its passes)."""
    def race_traces(predictor, prompt, lanes=examples.LESSON_LANES):
        plain, edited, replaced, nfe = outcomes[prompt]
        runs = {"LLaDA 2.1, no edits": Run("LLaDA 2.1, no edits", plain), "LLaDA 2.1": Run("LLaDA 2.1", edited,
                                                                                            replaced, nfe)}
        if tuple(lanes) == examples.EDIT_PAIR:
            return [runs["LLaDA 2.1, no edits"], runs["LLaDA 2.1"]]
        assert tuple(lanes) == examples.EDIT_LANES
        return [Run("Vanilla", plain), runs["LLaDA 2.1, no edits"], runs["LLaDA 2.1"], Run("Token-to-mask", plain)]
    return race_traces


def test_the_chosen_item_is_repaired_by_the_fewest_replacements(monkeypatch):
    right = {i.prompt: i.answer for i in TEAMS}
    wrong = "The leader is Alcus Shaw."
    a, b, c, d, e, f = (i.prompt for i in TEAMS)
    outcomes = {a: (right[a], right[a], 0, 4),        # right either way
                b: (wrong, right[b], 3, 5),           # repaired by 3 replacements
                c: (wrong, right[c], 1, 7),           # repaired by 1, in 7 passes
                d: (wrong, right[d], 1, 5),           # repaired by 1, in 5 passes: chosen
                e: (right[e], wrong, 2, 5),           # broken by its edits
                f: (wrong, wrong, 1, 5)}              # wrong either way
    monkeypatch.setattr(examples, "race_traces", fake_race(outcomes))
    item, traces, found = examples.choose_edit(None, ("team",), 6, progress=False)
    assert item == TEAMS[3] and [t.name for t in traces] == LANES
    assert found == {"families": ["team"], "items": 6, "edited": 5, "repaired": 3, "broke": 1,
                     "chosen": {"replaced": 1, "nfe": 5}}
    entry = examples.edit_entry(item, found, "model-x", wrong)
    assert entry["source"] == "tasks.make_split('team', 'test')[3]" and entry["offered"] == list(item.offered)
    assert "its edits repaired 3 (right, and wrong at edit_threshold 1.0" in entry["chosen"]
    assert f"(“{wrong}” without edits)" in entry["note"]


def test_no_repaired_item_is_a_clear_message(monkeypatch):
    monkeypatch.setattr(examples, "race_traces", fake_race({i.prompt: (i.answer, "I pick", 2, 5) for i in TEAMS}))
    with pytest.raises(SystemExit, match="is repaired by LLaDA 2.1's edits: it replaced tokens on 6 of 6 and broke 6"):
        examples.choose_edit(None, ("team",), 6, progress=False)


def test_the_example_is_recorded_once_and_the_page_still_opens_on_its_example():
    lesson = {"prompt": "lesson", "family": "team", "chosen": "by python -m dico_ui.examples --choose ..."}
    shipped = {"examples": [{"prompt": "a"}, {"prompt": "old edit", "chosen": examples.EDIT_CHOSEN + " ..."}, lesson],
               "opens_on": 2}
    new = {"prompt": "new edit", "chosen": examples.EDIT_CHOSEN + " (new)"}
    once = examples.record_edit(shipped, new)
    assert [e["prompt"] for e in once["examples"]] == ["a", "lesson", "new edit"] and once["opens_on"] == 1
    assert examples.record_edit(once, {**new, "chosen": examples.EDIT_CHOSEN + " (again)"})["examples"][-1]["chosen"] \
        == examples.EDIT_CHOSEN + " (again)"
    both = examples.record_edit(once, {"prompt": "lesson", "chosen": examples.EDIT_CHOSEN + " (lesson)"})
    assert [e["prompt"] for e in both["examples"]] == ["a", "lesson"]
    assert both["examples"][1]["chosen"] == lesson["chosen"]
    assert both["examples"][1]["edit_chosen"] == examples.EDIT_CHOSEN + " (lesson)"


@pytest.mark.e2e
def test_in_a_browser_the_editing_example_opens_on_its_replacement(example, page, app_url, artifacts):
    expect = pytest.importorskip("playwright.sync_api").expect
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(app_url, timeout=120_000)
    page.get_by_role("tab", name="Step by step").click()
    page.locator("#edit-example").click()
    expect(page.locator("#status")).to_contain_text("editing example", timeout=120_000)
    expect(page.locator("#answers .lane")).to_have_count(len(LANES))
    edits = example[2].steps[first_edit(example[2])].edited
    expect(page.locator("#step-text .tok.edited")).to_have_count(len(edits))
    expect(page.locator("#step-plot .js-plotly-plot")).to_be_visible(timeout=60_000)
    page.locator("#step-text").screenshot(path=str(artifacts / "edit-example-step.png"))
    page.locator("#fork-panel").screenshot(path=str(artifacts / "edit-example-panel.png"))
    assert errors == []
