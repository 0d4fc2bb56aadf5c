"""The fork panel in the app: candidates at a step, Force and Take back as a new lane decoding beside
the original, the API's /fork, the limits a fork shares with lanes, bad input in one message naming its field, and
the shipped fork of the lesson's example. Called as the page calls them, without a server; small gen lengths."""
import json
from pathlib import Path

import pytest

import dico
from dico.forking import candidates
from dico.lanes import MAX_LANES
from dico.trace import Trace, bundle_json, read_traces

gr = pytest.importorskip("gradio")

from dico_ui import forks, runs  # noqa: E402
from dico_ui.about import changed_positions, fork_story, parent_of  # noqa: E402
from dico_ui.bounded import Line  # noqa: E402
from dico_ui.examples import widest_step  # noqa: E402
from dico_ui.forks import FORK_EXAMPLE  # noqa: E402
from dico_ui.handlers import EXAMPLE_RUN  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LESSON = "Pick one leader of Lily Howard, Don Gill and Sara Lake."
GEN = 16


class Session:
    def __init__(self, name="forks"):
        self.session_hash = name


@pytest.fixture(scope="module")
def shown(app_module, predictor):
    """A small race on screen: Top-4 per step and DiCo on the lesson's prompt at gen 16."""
    return [dico.generate(predictor, LESSON, "topk", gen_length=GEN, settings={"k": 4}, label="Top-4 per step"),
            dico.generate(predictor, LESSON, "dico", gen_length=GEN)]


def drained(stream) -> list[dict]:
    return list(stream)


def test_take_back_forks_after_the_step_and_decodes_beside_the_original(shown, predictor):
    parent = shown[0]
    k, pos = 1, parent.steps[1].committed[0]
    frames = drained(forks.fork_ui(Session(), shown, 0, k, pos, "take back", None, ""))
    last = frames[-1]
    traces = last["traces"]
    assert traces[:2] == shown and len(traces) == 3
    fork = traces[-1]
    expected = dico.fork(predictor, parent, at=k + 1, remask=[pos])
    assert fork.fork == expected.fork and fork.text == expected.text and fork.nfe == expected.nfe
    assert fork.name == expected.name and fork.name.startswith("Top-4 per step, fork at step 2: take back")
    assert [s.committed for s in fork.steps] == [s.committed for s in expected.steps]
    assert any("decoding" in f.get("answers", "") for f in frames[:-1]), "the fork streams live"
    assert last["status"].startswith("Done") and fork.name in last["answers"]
    assert last["step_run"]["value"] == 2 and last["step"]["value"] == k + 1      # the step view opens where they part
    assert last["trajectory"] is not None and last["side_by_side"] is not None


def test_force_writes_the_chosen_candidate_or_a_typed_word(shown, predictor):
    parent = shown[0]
    k, pos = 2, parent.steps[2].committed[0]
    out = forks.show_candidates(0, k, pos, shown)
    choices = out["fork_token"]["choices"]
    top = candidates(predictor, parent, k, pos, k=forks.CANDIDATES)
    assert [value for _, value in choices] == [t for t, _, _ in top] and out["fork_token"]["value"] == top[0][0]
    assert f"Position {pos}" in out["fork_note"] and "Force" in out["fork_note"]
    second = top[1][0]
    fork = drained(forks.fork_ui(Session(), shown, 0, k, pos, "force", second, ""))[-1]["traces"][-1]
    assert fork.fork["at"] == k and fork.fork["force"] == {str(pos): second}
    assert fork.tokens_before(k + 1)[pos] == second
    word = drained(forks.fork_ui(Session(), shown, 0, k, pos, "force", second, "Lake"))[-1]["traces"][-1]
    assert word.fork["force"] == {str(pos + i): t for i, t in enumerate(predictor.encode_word("Lake"))}


def test_a_fork_can_continue_with_another_runs_method(shown, predictor):
    parent = shown[0]
    fork = drained(forks.fork_ui(Session(), shown, 0, 1, parent.steps[1].committed[0], "take back", None, "",
                                 1))[-1]["traces"][-1]
    assert fork.method == "dico" and fork.fork["method"] == "topk"


@pytest.mark.parametrize(("args", "field"), [
    (dict(traces=[]), "fork"),
    (dict(run_index=7), "run"),
    (dict(k=99), "at"),
    (dict(position=GEN), "remask"),
    (dict(action="swap"), "action"),
    (dict(action="force", token=None, word=""), "force"),
    (dict(action="force", position=GEN - 1, token=None, word="Lake"), "force"),
])
def test_bad_fork_input_is_one_message_naming_the_field_and_changes_nothing(shown, args, field):
    given = dict(traces=shown, run_index=0, k=1, position=0, action="take back", token=None, word="") | args
    frames = drained(forks.fork_ui(Session(), *given.values()))
    assert len(frames) == 1 and set(frames[0]) == {"status"}, frames
    assert frames[0]["status"].startswith(f"**Cannot fork**: {field}:"), frames[0]["status"]


def test_take_back_of_a_masked_position_is_refused(shown):
    parent = shown[0]
    masked = parent.steps[-1].committed[0]            # still masked after step 0
    frames = drained(forks.fork_ui(Session(), shown, 0, 0, masked, "take back", None, ""))
    assert frames == [{"status": f"**Cannot fork**: remask: position {masked} is still masked before step 1; take "
                                 "back a decoded token"}]


def test_an_edit_of_a_constrained_position_is_refused(predictor):
    fixed = dico.generate(predictor, LESSON, "topk", gen_length=GEN, settings={"k": 4}, constraints={4: "Don"})
    frames = drained(forks.fork_ui(Session(), [fixed], 0, 1, 4, "force", 5, ""))
    assert frames[-1]["status"] == "**Cannot fork**: force: position 4 is fixed by a constraint (or an earlier edit)"


def test_a_fork_counts_as_a_lane(shown):
    full = [shown[0]] * MAX_LANES
    frames = drained(forks.fork_ui(Session(), full, 0, 1, 0, "take back", None, ""))
    assert frames[-1]["status"].startswith(f"**Cannot fork**: fork: {MAX_LANES} runs are on screen")


def test_a_fork_waits_in_the_same_line_and_is_told_busy(shown, monkeypatch):
    monkeypatch.setattr(runs, "LINE", Line(decoders=1, size=1, guess_s=30))
    runs.LINE.join("someone")
    frames = drained(forks.fork_ui(Session("late"), shown, 0, 1, shown[0].steps[1].committed[0], "take back",
                                   None, ""))
    assert frames[-1]["status"].startswith("**Busy**") and not runs.LINE.holds("late")


def test_stop_ends_a_fork_with_its_partial_trace(shown, monkeypatch):
    seen = []
    original = forks.decode_fork_race

    def stop_after_first(req):
        for frame in original(req):
            if len(frame.lanes[-1].trace.steps) > frame.lanes[-1].trace.fork["at"]:
                seen.append(frame)
                runs.stop(Session("stopper"))
            yield frame
    monkeypatch.setattr(forks, "decode_fork_race", stop_after_first)
    parent = shown[0]
    last = drained(forks.fork_ui(Session("stopper"), shown, 0, 0, parent.steps[0].committed[0], "take back",
                                 None, ""))[-1]
    fork = last["traces"][-1]
    assert seen and fork.stopped and last["status"].startswith("Stopped")
    assert len(fork.steps) < dico.fork(forks.get_predictor(), parent, at=1,
                                       remask=[parent.steps[0].committed[0]]).nfe


def test_a_model_fault_mid_fork_keeps_the_partial_fork_on_screen(shown, predictor, monkeypatch, caplog):
    """A fork takes a run's path: a fault of the model ends it, names the lane and the step, and draws the partial
    fork beside the runs on screen (as a run keeps its partial lanes); the line is left and the next fork is fine."""
    parent = shown[0]
    k, pos = 1, parent.steps[1].committed[0]                   # take back after step 1: the fork starts at step 2
    forward, calls = predictor.forward, []

    def faulty(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:                                   # 2 passes replay the parent, then the fork's third step
            raise RuntimeError("injected fault")
        return forward(*args, **kwargs)
    monkeypatch.setattr(predictor, "forward", faulty)
    last = drained(forks.fork_ui(Session("faulty-fork"), shown, 0, k, pos, "take back", None, ""))[-1]
    fork = last["traces"][-1]
    assert last["status"].startswith(f"**The fork failed**: {fork.name} failed at step 5 (RuntimeError: injected "
                                     "fault). Its partial lane stays on screen"), last["status"]
    assert last["traces"][:2] == shown and fork.fork["at"] == 2 and fork.stopped and len(fork.steps) == 4
    assert "stopped at step 4" in last["answers"] and last["trajectory"] is not None and last["step"]["value"] == 2
    assert "injected fault" in caplog.text and not runs.LINE.holds("faulty-fork")
    monkeypatch.setattr(predictor, "forward", forward)
    again = drained(forks.fork_ui(Session("faulty-fork"), shown, 0, k, pos, "take back", None, ""))[-1]
    assert again["status"].startswith("Done")


def test_a_fork_that_reaches_the_pass_limit_ends_there(shown, monkeypatch):
    import dico.loop
    monkeypatch.setattr(dico.loop, "PASS_LIMIT", 0.25)     # 4 passes at gen_length 16: Top-4's own, then no more
    parent = shown[0]
    last = drained(forks.fork_ui(Session(), shown, 0, 2, parent.steps[2].committed[0], "take back", None, ""))[-1]
    fork = last["traces"][-1]
    assert last["status"].startswith("Stopped at the pass limit: ") and fork.limit_reached and not fork.stopped
    assert "stopped at the pass limit (step 4)" in last["answers"]


def test_a_fork_whose_page_closed_while_it_waited_leaves_the_line_and_its_session(shown, monkeypatch):
    forgotten = []
    monkeypatch.setattr(runs, "forget_session", forgotten.append)
    monkeypatch.setattr(runs, "LINE", Line(decoders=1, size=2))
    assert runs.LINE.wait(runs.LINE.join("someone"), 0)                 # the only decoder is taken
    stream = forks.fork_ui(Session("closing-fork"), shown, 0, 1, shown[0].steps[1].committed[0], "take back", None,
                           "")
    assert next(stream)["status"].startswith("Waiting for a free decoder: 1 run ahead")
    with pytest.raises(StopIteration):
        runs.closed(Session("closing-fork")).send(None)                # gradio's unload for this page
    assert list(stream) == [] and not runs.LINE.holds("closing-fork") and forgotten.count("closing-fork") == 2


def test_a_fork_that_continues_with_a_rule_that_cannot_run_so_is_refused_before_anything_runs(shown, monkeypatch):
    monkeypatch.setattr(forks, "decode_fork_race", lambda req: pytest.fail("the fork decoded"))
    lane = {"method": "wino", "settings": {"cache": "dual"}}
    with pytest.raises(gr.Error) as error:
        drained(forks.fork_api(Session("api"), bundle_json(shown), "", 1, {"force": {"3": "Lake"}}, lane))
    assert error.value.message.startswith("lane (WINO (dual cache)): cache: WINO cannot run with it"), \
        error.value.message


def test_api_fork_takes_a_trace_file_a_step_and_edits(shown, predictor):
    bundle = bundle_json(shown)
    edits = {"force": {"3": "Lake"}, "remask": []}
    last = drained(forks.fork_api(Session("api"), bundle, "Top-4 per step", 1, json.dumps(edits), ""))[-1]
    fork = last["traces"][-1]
    expected = dico.fork(predictor, shown[0], at=1, force={3: "Lake"})
    assert fork.text == expected.text and fork.fork == expected.fork and len(last["traces"]) == 3
    for run, at, given, field in (("", 1, "{force", "edits: not valid JSON"), ("nobody", 1, edits, "run: no run"),
                                  ("", 50, edits, "at: must be a step of the run")):
        with pytest.raises(gr.Error) as error:
            drained(forks.fork_api(Session("api"), bundle, run, at, given, ""))
        assert error.value.message.startswith(field), error.value.message
    with pytest.raises(gr.Error) as error:
        drained(forks.fork_api(Session("api"), bundle, "", 1, edits, {"method": "nothing"}))
    assert error.value.message.startswith("lane.method: unknown method")


def test_a_trace_of_another_prompt_or_model_is_refused(shown):
    other = Trace.from_json(shown[0].to_json())
    other.model = "someone-else"
    frames = drained(forks.fork_ui(Session(), [other], 0, 1, 0, "take back", None, ""))
    assert frames[-1]["status"].startswith("**Cannot fork**: trace: was decoded by model 'someone-else'")
    other = Trace.from_json(shown[0].to_json())
    other.prompt = "Pick one leader of Ann Bell and Tom Wood, please, now."
    frames = drained(forks.fork_ui(Session(), [other], 0, 1, other.steps[0].committed[0], "take back", None, ""))
    assert frames[-1]["status"].startswith("**Cannot fork**: trace:")


# ---------------------------------------------------------------------------- the shipped example fork

@pytest.fixture(scope="module")
def example():
    return read_traces(FORK_EXAMPLE.read_bytes())


def test_the_shipped_fork_takes_the_lessons_clash_and_answers_right(example):
    from dico.embedded.judge import judge
    *race, fork = example
    lesson = read_traces(EXAMPLE_RUN.read_bytes())
    assert [t.to_json() for t in race] == [t.to_json() for t in lesson]          # the first page's run, unchanged
    parent = parent_of(fork, example)
    assert parent.name == "Top-4 per step" and fork.prompt == LESSON
    at = fork.fork["at"]
    assert at in (widest_step(parent), widest_step(parent) + 1)
    assert len(fork.fork["force"]) + len(fork.fork["remask"]) == 1               # one edit
    assert [(s.committed, s.tokens) for s in fork.steps[:at]] == [(s.committed, s.tokens) for s in parent.steps[:at]]
    assert judge(LESSON, fork.text) is True and judge(LESSON, parent.text) is False
    story = fork_story(example)
    assert f"“{parent.text.strip()}” (wrong) to “{fork.text.strip()}” (right)" in story
    for pos in changed_positions(parent, fork):
        assert f"{pos} (‘" in story


@pytest.mark.slow
def test_the_shipped_fork_is_what_the_library_decodes(example, predictor):
    *_, fork = example
    parent = parent_of(fork, example)
    again = dico.fork(predictor, parent, at=fork.fork["at"], force={int(p): t for p, t in fork.fork["force"].items()},
                      remask=fork.fork["remask"])
    assert again.text == fork.text and [s.committed for s in again.steps] == [s.committed for s in fork.steps]


def test_the_fork_story_says_when_nothing_changed(shown, predictor):
    parent = shown[0]
    pos = parent.steps[-1].committed[0]
    same = dico.fork(predictor, parent, at=len(parent.steps), remask=[pos])
    story = fork_story([parent, same])
    assert "took back" in story and f"at position {pos}" in story
    assert ("every position ends as in its parent" in story) == (same.text == parent.text)
    assert "(its parent is not on screen)" in fork_story([same])


# ---------------------------------------------------------------------------- word constraints, the page, the API

def test_run_takes_word_constraints_every_lane_starts_from(app_module, predictor):
    from dico_ui import handlers
    last = drained(handlers.run_api(Session("words"), LESSON, "dico-tiny", "non-ar", GEN, 16, ["topk", "fast"], "",
                                    True, "0:The, 3:leader"))[-1]
    fixed = {str(p): t for p, t in dico.constraints.encode_fixed(predictor, {0: "The", 3: "leader"}, GEN).items()}
    assert [t.constraints for t in last["traces"]] == [fixed, fixed]
    assert all(t.tokens_before(0)[int(p)] == tok for t in last["traces"] for p, tok in fixed.items())
    for given, field in (("0:The,0:A", "constraints: offset 0 is given twice"),
                         (f"{GEN}:The", "constraints: offset"), ("The", "constraints: 'The' is not offset:word")):
        with pytest.raises(gr.Error) as error:
            drained(handlers.run_api(Session("words"), LESSON, "dico-tiny", "non-ar", GEN, 16, ["topk"], "", True,
                                     given))
        assert error.value.message.startswith(field), error.value.message


def test_the_page_wires_the_fork_panel_and_the_api_names_fork(app_module):
    demo = app_module.demo
    assert "fork" in [f.api_name for f in demo.fns.values() if f.show_api]
    ids = {getattr(block, "elem_id", None) for block in demo.blocks.values()}
    assert {"constraints", "fork-panel", "fork-position", "fork-token", "fork-force", "fork-take-back"} <= ids


def test_the_example_fork_opens_without_a_model(example, monkeypatch):
    out = forks.open_example()
    assert [t.name for t in out["traces"]] == [t.name for t in example] and out["prompt"] == LESSON
    assert "answer changed" in out["status"] and out["step"]["value"] == example[-1].fork["at"]
    assert 'verdict right' in out["answers"] and 'verdict wrong' in out["answers"]
    monkeypatch.setattr(forks, "FORK_EXAMPLE", ROOT / "nothing.json")
    assert forks.open_example()["status"].startswith("**Cannot open the example fork**: file:")


def test_the_step_where_they_part_is_marked_in_both_runs_figures(example):
    import visuals
    from visuals._common import FORK
    *race, fork = example
    at = fork.fork["at"]

    def forks_drawn(fig, axis="y"):
        return [(s[f"{axis}0"], s[f"{axis}ref"]) for s in fig.layout.shapes if s.name == FORK]
    assert forks_drawn(visuals.trajectory_figure(fork)) == [(at - 0.5, "y")]
    assert forks_drawn(visuals.trajectory_figure(race[0])) == []                   # a run that is no fork, alone
    both = visuals.trajectories_side_by_side(example)
    parent = [t.name for t in example].index(fork.fork["parent"])
    assert sorted(forks_drawn(both)) == sorted([(at - 0.5, f"y{parent + 1 if parent else ''}"),
                                                (at - 0.5, f"y{len(example)}")])
    assert FORK in [d.name for d in both.data]                                      # and named in the legend
    assert forks_drawn(visuals.comparison_figure(example), "x") == [(at, "x")]
    assert forks_drawn(visuals.comparison_figure(race), "x") == []


def test_the_served_api_forks_a_downloaded_bundle(app_url, shown, predictor):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from dico_ui.outputs import RESULTS
    client = Client(app_url, verbose=False)
    assert "/fork" in client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    out = dict(zip(RESULTS, client.predict(bundle_json(shown), "Top-4 per step", 1, {"force": {"3": "Lake"}}, None,
                                           api_name="/fork")))
    assert out["status"].startswith("Done"), out["status"]
    bundle = read_traces(Path(out["download"]).read_bytes())
    expected = dico.fork(predictor, shown[0], at=1, force={3: "Lake"})
    assert [t.name for t in bundle] == [t.name for t in shown] + [expected.name]
    assert bundle[-1].text == expected.text and bundle[-1].fork == expected.fork
    with pytest.raises(AppError, match="remask: must list positions"):
        client.predict(bundle_json(shown), "", 1, {"remask": 3}, None, api_name="/fork")


@pytest.mark.e2e
def test_in_a_browser_the_example_fork_opens_and_the_panel_offers_candidates(page, app_url, artifacts):
    expect = pytest.importorskip("playwright.sync_api").expect
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(app_url, timeout=120_000)
    page.get_by_role("tab", name="Step by step").click()
    page.locator("#fork-example").click()
    expect(page.locator("#status")).to_contain_text("example fork", timeout=120_000)
    expect(page.locator("#answers .lane")).to_have_count(5)
    expect(page.locator("#answers .lane").nth(4).locator(".verdict")).to_have_text("right")
    expect(page.locator("#step-plot .js-plotly-plot")).to_be_visible(timeout=60_000)
    position = page.locator("#fork-position input")
    position.fill("7")
    position.press("Tab")
    page.locator("#fork-candidates").click()
    expect(page.locator("#fork-note")).to_contain_text("Position 7", timeout=180_000)
    expect(page.locator("#fork-token label")).to_have_count(forks.CANDIDATES)
    page.locator("#fork-panel").screenshot(path=str(artifacts / "fork-panel.png"))
    assert errors == []


def test_a_fork_lane_is_forked_again_at_its_own_step_with_both_edits(example, predictor):
    """A fork's own edit comes back when it is replayed (its candidates at its step see the forced token); a fork
    of it at that step is its parent's fork with both edits, at a later step it is refused, naming the step."""
    *_, fork = example
    parent, at = parent_of(fork, example), fork.fork["at"]
    assert candidates(predictor, fork, at, 7, k=3) != candidates(predictor, parent, at, 7, k=3)
    both = drained(forks.fork_ui(Session(), example, len(example) - 1, at, 8, "force", 459, ""))[-1]["traces"][-1]
    assert both.fork["parent"] == parent.name and both.fork["force"] == {**fork.fork["force"], "8": 459}
    assert both.text == dico.fork(predictor, parent, at=at, force={5: 414, 8: 459}).text
    later = drained(forks.fork_ui(Session(), example, len(example) - 1, at, 8, "take back", None, ""))
    assert later[-1]["status"].startswith("**Cannot fork**: at: ") and f"is itself a fork at step {at};" in \
        later[-1]["status"]


def test_tokens_written_by_hand_show_in_the_race_and_the_step_view(example, shown, predictor):
    from dico_ui import render
    *_, fork = example
    at = fork.fork["at"]
    forced = next(iter(fork.fork["force"]))
    cell = render.cells(fork, at)[int(forced)]
    assert cell.text == fork.token_text(fork.fork["force"][forced]) and cell.step == at - 1
    assert render.answer_complete(fork, fork.nfe - 1) == fork.answer_nfe
    assert render.cells(fork, at - 1)[int(forced)].text is None                  # not before the fork's step
    fixed = dico.generate(predictor, LESSON, "topk", gen_length=GEN, settings={"k": 4}, constraints={0: "The"})
    first = render.cells(fixed, 0)[0]
    assert first.text == fixed.token_text(fixed.constraints["0"]) and first.step == -1
    assert render.answer_complete(fixed, fixed.nfe - 1) == fixed.answer_nfe


def test_the_about_text_says_what_the_edit_changed(example):
    from dico_ui.about import about_text
    about = about_text(example)
    assert fork_story(example) in about and "the answer changed from" in about
    assert "fork" not in fork_story(example[:-1]) and fork_story(example[:-1]) == ""


def test_the_step_view_figure_shows_a_forced_token_from_its_step(example):
    import visuals
    *_, fork = example
    at, (pos, token) = fork.fork["at"], next(iter(fork.fork["force"].items()))
    texts = next(d for d in visuals.step_view_figure(fork, at).data if d.name == "tokens")
    assert fork.token_text(token).strip() in texts.text[int(pos)] and "by hand" in texts.customdata[int(pos)]
    before = next(d for d in visuals.step_view_figure(fork, at - 1).data if d.name == "tokens")
    assert "by hand" not in before.customdata[int(pos)]
