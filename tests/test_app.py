"""The app's handlers, called as the page calls them, without a server: the race, the one response renderer,
Stop, errors, the first impression, replays and the rules the app layer keeps (settings from specs only)."""
import json
import re
from pathlib import Path

import pytest

import dico
from dico.embedded import tasks
from dico.embedded.scope import task_shape
from dico.lanes import MAX_LANES
from dico.settings import METHODS, SETTINGS, DiCoSettings, decodes_in, specs
from near_ties import first_difference, steps_of

gr = pytest.importorskip("gradio")

from dico_ui import handlers as h  # noqa: E402
from dico_ui import render  # noqa: E402
from dico_ui.race import LaneFailed, race, replay  # noqa: E402
from dico_ui.request import CONTROLS, SHARED, parse_request, settings_from_controls, settings_from_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = json.loads((ROOT / "assets" / "examples.json").read_text())["examples"]
WORD = EXAMPLES[0]["prompt"]
LIST = next(e["prompt"] for e in EXAMPLES if e["family"] == "list")
OUTSIDE = next(e["prompt"] for e in EXAMPLES if e["target"] is None)


class Session:
    """What gradio hands a handler as gr.Request: only the session id is used."""
    def __init__(self, name="test"):
        self.session_hash = name


def lanes(html: str) -> int:
    return len(re.findall(r'class="lane(?: [^"]*)?"', html))          # "lane", "lane done", "lane done wrong"


def defaults():
    return [spec.default for _, spec in CONTROLS]


def run(prompt=WORD, gen_length=48, methods=("vanilla", "fast", "dico"), mode="non-ar", settings=None,
        session="test", model="dico-tiny"):
    return h.run_ui(Session(session), prompt, model, mode, float(gen_length), 16.0, list(methods), True,
                    *(settings or defaults()))


@pytest.fixture(scope="module")
def finished(app_module, predictor):
    frames = list(run())
    return frames, frames[-1]


def test_a_run_clears_the_page_streams_the_race_then_draws_everything(finished):
    frames, result = finished
    assert "answers" not in frames[0] and "traces" not in frames[0]     # nothing replaced before the run starts
    first = next(f for f in frames if "traces" in f)
    assert first["traces"] == [] and "decoding…" in first["answers"]      # old results go with the race's first frame
    live = [f for f in frames[1:-1] if "decoding…" in f.get("answers", "")]
    assert live, "the race streams while decoding"
    assert result["status"].startswith("Done")
    assert [t.method for t in result["traces"]] == ["vanilla", "fast", "dico"]
    for name in ("trajectory", "phases", "clusters", "side_by_side", "masked", "attention", "step_view"):
        assert result[name] is not None, name
    assert Path(result["download"]).exists()


def test_the_race_decodes_what_the_library_decodes(finished, predictor):
    for trace in finished[1]["traces"]:
        alone = dico.generate(predictor, WORD, trace.method, gen_length=48)
        assert [(s.committed, s.tokens) for s in trace.steps] == [(s.committed, s.tokens) for s in alone.steps]


def test_the_race_interleaves_one_step_of_each_method_per_round(predictor):
    req = parse_request(LIST, ["vanilla", "topk", "fast", "fast-factor", "dico"], gen_length=32)
    for frame in race(predictor, req):
        if frame.finished:
            break
        for lane in frame.lanes:
            assert lane.k + 1 == (frame.round if lane.state == "decoding" else lane.trace.nfe)
    assert {lane.state for lane in frame.lanes} == {"done"}


def test_a_lane_at_the_pass_limit_ends_there_and_the_race_is_done(app_module, predictor, monkeypatch):
    """The loop ends a run at its pass limit (PASS_LIMIT x gen_length passes: a rule that would loop); in the race
    that lane ends there, said as such, and the race is done, not failed: the other lanes decode as they would
    alone. (With one limit for every lane, no lane of the race outlasts it.)"""
    import dico.loop
    monkeypatch.setattr(dico.loop, "PASS_LIMIT", 0.5)             # 8 passes at gen_length 16, where Vanilla needs 16
    methods = ["vanilla", {"method": "topk", "settings": {"k": 4}}, "fast", "dico"]
    *_, last = race(predictor, parse_request(LIST, methods, gen_length=16))
    assert [lane.state for lane in last.lanes] == ["limit", "done", "done", "done"] and not last.stopped
    vanilla, *others = last.traces
    assert vanilla.nfe == last.round == 8 and vanilla.limit_reached and not vanilla.stopped
    for trace in others:
        alone = dico.generate(predictor, LIST, trace.method, gen_length=16, settings=trace.settings_given())
        assert [(s.committed, s.tokens) for s in trace.steps] == [(s.committed, s.tokens) for s in alone.steps]
    *_, result = run(prompt=LIST, gen_length=16, methods=methods)
    assert result["status"].startswith("Done (Vanilla stopped at the pass limit) in "), result["status"]
    assert "stopped at the pass limit (step 8)" in result["answers"]
    assert list(result["table"].iloc[:, 0]) == ["Vanilla (pass limit)", "Top-4 per step", "Fast-dLLM", "DiCo"]
    assert h.race_status(last).count("stopped at the pass limit") == 1


def test_a_lanes_failure_is_one_short_line_without_the_values_it_carries(predictor):
    trace = dico.generate(predictor, WORD, "topk", gen_length=8)
    assert str(LaneFailed("Vanilla", 9, StopIteration(trace))) == "Vanilla step 9: StopIteration"
    long = str(LaneFailed("DiCo", 3, RuntimeError("tensor([" + "0.1, " * 200 + "])\nsecond line")))
    assert long.startswith("DiCo step 3: RuntimeError: tensor([0.1, ") and long.endswith("…") and len(long) < 240


def test_live_frames_render_exactly_as_the_finished_trace_replays(predictor):
    """One renderer: the response at step k streamed live equals the same step drawn from the final trace."""
    seen = {}
    for frame in race(predictor, parse_request(WORD, ["fast", "dico"], gen_length=48)):
        for lane in frame.lanes:
            seen[(lane.method, lane.k)] = render.response_html(lane.trace, lane.k, predictor.token_text)
    traces = {lane.method: lane.trace for lane in frame.lanes}
    for (method, k), html in seen.items():
        assert render.response_html(traces[method], k) == html
        assert html in render.step_html(traces[method], k)              # the step view draws the same


def test_tokens_are_coloured_by_commit_confidence_and_padding_is_marked(finished):
    trace = finished[1]["traces"][-1]
    last = trace.nfe - 1
    html = render.response_html(trace, last)
    cells = render.cells(trace, last)
    committed_at = {p: s.confidence[p] for s in trace.steps for p in s.committed}
    for cell in cells:
        assert cell.conf == committed_at[cell.pos] and cell.padding == (cell.pos >= trace.answer_length)
    first = next(c for c in cells if not c.padding)
    assert f"background:{render.conf_color(first.conf)[0]}" in html
    assert html.count('class="tok pad') == trace.gen_length - trace.answer_length
    assert html.count(" new") == len(trace.steps[last].committed)
    middle = render.response_html(trace, 2)
    masked_then = sum(1 for c in render.cells(trace, 2) if c.text is None)
    assert middle.count("tok mask") == masked_then > 0


def test_answer_complete_is_the_traces_answer_nfe(finished):
    for trace in finished[1]["traces"]:
        assert render.answer_complete(trace, trace.nfe - 1) == trace.answer_nfe
        before = trace.answer_nfe - 2
        assert before < 0 or render.answer_complete(trace, before) is None
    lanes = finished[1]["answers"]
    for trace in finished[1]["traces"]:
        assert f"answer complete at step <b>{trace.answer_nfe}</b>" in lanes
    first = min(t.answer_nfe for t in finished[1]["traces"])
    assert f'answer complete at step <b>{first}</b> <span class="place">1st</span>' in lanes


def test_comparison_and_about_quote_answer_and_padding(finished):
    result = finished[1]
    table = result["table"]
    for trace, row in zip(result["traces"], table.itertuples(index=False)):
        assert (row[1], row[2], row[3], row[4]) == (trace.nfe, trace.answer_nfe, trace.answer_length,
                                                    trace.gen_length - trace.answer_length)
    about = result["about"]
    for trace in result["traces"]:
        assert f"| {render.label(trace.method)} | {trace.nfe} | {trace.answer_nfe} |" in about
    assert "${" not in about
    for _, spec in CONTROLS:
        assert f"`{spec.name}`" in about


def test_stop_ends_the_race_with_partial_answers_and_run_starts_again(app_module, predictor):
    stream = run(gen_length=96, session="stopper")
    next(stream)                                     # cleared
    first_live = next(stream)
    assert "decoding…" in first_live["answers"]
    assert h.stop(Session("stopper")).startswith("Stopping")
    *_, last = stream
    result = last
    assert result["status"].startswith("Stopped at step 1;")                  # it stopped at the next round
    assert all(t.stopped and t.nfe == 1 for t in result["traces"]) and lanes(result["answers"]) == 3
    assert "stopped at step 1" in result["answers"] and "decoding…" not in result["answers"]
    assert result["trajectory"] is not None                                   # the partial run is drawn
    assert "not complete (stopped at step 1)" in result["status"] and "fewer forward passes" not in result["status"]
    assert h.stop(Session("stopper")).startswith("Stopped: nothing of yours was decoding")
    again = list(run(gen_length=16, session="stopper"))          # Run right after Stop: a new run
    assert again[-1]["status"].startswith("Done")


def test_stop_ends_a_run_still_waiting_in_the_queue(app_module):
    h.clicked(Session("queued"))           # Run clicked; the run waits in the queue...
    h.stop(Session("queued"))              # ...and Stop is pressed before it starts
    frames = list(run(session="queued"))
    assert len(frames) == 1 and frames[0]["status"].startswith("Stopped before it started")
    h.clicked(Session("queued"))           # the next click is a new run
    assert list(run(gen_length=8, session="queued"))[-1]["status"].startswith("Done")


def test_semi_ar_race_with_every_method(app_module, predictor):
    semi_ar = [m for m in METHODS if decodes_in(m, "semi-ar")]
    for race_ in (semi_ar[i:i + MAX_LANES] for i in range(0, len(semi_ar), MAX_LANES)):     # six lanes at most
        *_, result = run(prompt=LIST, gen_length=32, mode="semi-ar", methods=race_)
        assert [t.method for t in result["traces"]] == list(race_)
        assert all(t.mode == "semi-ar" and t.block_length == 16 and not t.stopped for t in result["traces"])
        assert lanes(result["answers"]) == len(race_)


def said(call) -> str:
    """What a page handler says when it cannot do what was asked: the status only, one plain-text toast, no
    raised error (gradio would draw it as red "Error" pills on every output, and they stay)."""
    with pytest.warns(UserWarning) as toasts:
        out = call()
    assert len(toasts) == 1 and "**" not in str(toasts[0].message)
    assert list(out) == ["status"]
    return out["status"]


def refusal(outputs) -> str:
    """The status a refused run says why in: its only output (the page gets one toast too, and keeps the run it
    shows: an error never wipes it, and never sits on the outputs as gradio's red pills)."""
    with pytest.warns(UserWarning) as toasts:
        outputs = list(outputs)
    assert len(toasts) == 1 and "**" not in str(toasts[0].message)           # a toast is plain text
    assert [list(out) for out in outputs] == [["status"]]
    return outputs[0]["status"]


def test_bad_input_is_a_message_naming_the_field_and_keeps_the_run_on_screen(app_module, predictor, caplog):
    assert refusal(run(prompt="   ")).startswith("**Cannot run**: prompt")
    for group, spec in CONTROLS:
        if spec.range and spec.type is int:
            values = defaults()
            values[CONTROLS.index((group, spec))] = spec.range[1] + 1
            assert f"setting {spec.name}: must be in" in refusal(run(settings=values))
            values[CONTROLS.index((group, spec))] = spec.range[0] + 0.5
            assert f"setting {spec.name}: must be a whole number" in refusal(run(settings=values))
            break
    assert "gen_length" in refusal(run(gen_length=1000))
    assert "Lanes: choose at least one method" in refusal(run(methods=()))
    with pytest.raises(gr.Error, match="prompt"):                         # API callers get the error raised
        list(h.run_api(Session(), "   ", "dico-tiny", "non-ar", 48, 16, ["dico"], {}, True))
    assert not [r for r in caplog.records if r.levelname == "ERROR"], "bad input must not log a traceback"


def test_shared_sampling_settings_reach_every_chosen_method():
    values = defaults()
    out = settings_from_controls(["vanilla", "dico"], values)
    shared = [spec.name for group, spec in CONTROLS if group == SHARED]
    assert set(out) == {"vanilla", "dico"} and all(set(shared) <= set(v) for v in out.values())
    assert set(out["dico"]) == {s.name for s in specs(DiCoSettings)}


def _control(group, name):
    return CONTROLS.index(next((g, s) for g, s in CONTROLS if g == group and s.name == name))


def test_the_authors_code_checkbox_fills_every_dico_control_left_at_its_default_and_changed_ones_win():
    values = defaults()
    values[_control("dico", "authors_code")] = True
    out = settings_from_controls(["vanilla", "dico"], values)
    assert out["dico"] == {"authors_code": True}
    assert DiCoSettings.from_dict(out["dico"]) == DiCoSettings.from_dict({"authors_code": True})
    assert out["vanilla"]["mask_in_softmax"] is False                  # the preset is DiCo's alone
    values[_control("dico", "seeds")] = 8.0
    values[_control(SHARED, "mask_in_softmax")] = True
    assert settings_from_controls(["dico"], values)["dico"] == {"authors_code": True, "seeds": 8,
                                                                 "mask_in_softmax": True}


def test_the_authors_code_checkbox_is_labelled_as_the_page_says_and_lists_what_it_sets():
    from dico_ui.layout import setting_control
    switch = CONTROLS[_control("dico", "authors_code")]
    control = setting_control(*switch)
    assert control.label == "DiCo · as the authors' code decodes"
    assert "short_right_growth = True" in control.info and "seeds = 4" in control.info


def test_the_api_applies_the_authors_code_preset_and_the_trace_records_it(app_module, predictor):
    frames = list(h.run_api(Session(), WORD, "dico-tiny", "semi-ar", 48.0, 16.0, ["dico"],
                            '{"dico": {"authors_code": true}}', False))
    trace = frames[-1]["traces"][0]
    assert trace.settings["authors_code"] is True and trace.settings["short_right_growth"] is True
    alone = dico.generate(predictor, WORD, "dico", mode="semi-ar", gen_length=48, block_length=16, authors_code=True)
    assert [(s.phase, s.committed) for s in trace.steps] == [(s.phase, s.committed) for s in alone.steps]


def test_api_settings_json_is_checked_by_the_library():
    assert settings_from_json("") == {}
    assert settings_from_json('{"fast": {"threshold": 0.5}}') == {"fast": {"threshold": 0.5}}
    for bad, message in (("{", "not valid JSON"), ('{"fast": 1}', "object of objects"),
                         ('{"nope": {}}', "unknown method"), ('{"fast": {"nope": 1}}', "nope")):
        with pytest.raises(ValueError, match=message):
            settings_from_json(bad)


def test_prompts_outside_the_tasks_get_a_banner_not_praise(app_module, predictor):
    *_, last = run(prompt=OUTSIDE, gen_length=16)
    result = last
    assert 'class="banner"' in result["answers"] and "outside" in result["status"]
    assert "no word problem" in result["status"]                 # says why (dico.embedded.scope.outside)
    assert "fewer forward passes" not in result["status"]
    assert task_shape(WORD) == "word" and task_shape(LIST) == "list" and task_shape(OUTSIDE) is None
    for example in EXAMPLES:
        if example["family"] in tasks.FAMILIES:
            assert task_shape(example["prompt"]) == example["family"], example["prompt"]


def test_every_family_has_an_example_from_its_held_out_split_and_choices_say_why_they_can_mix():
    """A pick or team example is its held-out item (in scope, its target right by the checker), and its note says
    why committing several tokens at once can mix its answers; the page labels every example by its family."""
    from dico.embedded.scope import outside, trained_families
    from dico.models import train_log
    from dico_ui.layout import example_label

    assert {e["family"] for e in EXAMPLES} >= set(trained_families(train_log(None)))
    for example in (e for e in EXAMPLES if e["family"] in ("pick", "team")):
        item = next(i for i in tasks.make_split(example["family"]) if i.prompt == example["prompt"])
        assert (list(item.offered), item.count) == (example["offered"], example["count"])
        answer = ("I pick {}." if item.family == "pick" else "The leader is {}." if item.count == 1 else
                  "The team is {}.").format(example["target"])
        assert tasks.check(item, answer) and outside(example["prompt"]) == []
        assert "one step" in example["note"] or "same step" in example["note"]
    for example in EXAMPLES:
        assert example_label(example).startswith(example["family"].capitalize() + " · ")


def test_toasts_strip_bidi_controls_and_escape_html(app_module, predictor):
    """A toast that repeats what the user typed (here a model name) can neither reverse nor inject markup."""
    with pytest.warns(UserWarning) as caught:
        list(run(model="dico\u202e<b>zzqx</b>", gen_length=8))
    text = " ".join(str(w.message) for w in caught)
    assert "\u202e" not in text and "<b>" not in text and "zzqx" in text


def test_the_page_opens_on_the_shipped_example_run(app_module):
    result = h.first_impression()
    assert result["prompt"] == result["traces"][0].prompt
    assert [t.label for t in result["traces"]] == ["Vanilla", "Top-4 per step", "Fast-dLLM", "DiCo"]
    assert all(result[name] is not None for name in ("trajectory", "phases", "side_by_side", "attention"))
    assert "finished example run" in result["status"] and lanes(result["answers"]) == 4
    box = next(b for b in app_module.demo.blocks.values() if getattr(b, "elem_id", None) == "prompt")
    assert box.value == result["prompt"]        # a Run pressed before the example loaded decodes what will show


def test_the_shipped_example_run_is_what_the_decoder_does(predictor, logit_noise):
    """`python -m dico_ui.examples` must be rerun when decoding changes: the shipped traces are the decoder's, up to
    the order among near-tied positions (another CPU's last bits may reorder those)."""
    shipped = h.read_traces(h.EXAMPLE_RUN.read_bytes())
    for trace in shipped:
        again = dico.generate(predictor, trace.prompt, trace.method, gen_length=trace.gen_length)
        assert first_difference(steps_of(trace), trace.text, again) is None


def test_replay_the_race_walks_the_same_frames(app_module):
    traces = h.read_traces(h.EXAMPLE_RUN.read_bytes())
    frames = list(h.replay_race(Session("replay"), traces, h.MAX_SPEED))
    assert len(frames) == max(t.nfe for t in traces) and frames[-1]["status"].endswith("(end)")
    assert frames[-1]["answers"] == render.lanes_html([(t, t.nfe - 1, "done") for t in traces])
    assert [f.round for f in replay(traces)] == list(range(1, len(frames) + 1))


def test_an_error_leaves_the_example_run_replayable_and_says_so_in_plain_words(app_module, tmp_path):
    """A bad value or a garbage upload is said in the status and one toast; nothing else changes (the
    example run stays, Replay the race still replays it), and Replay's own errors do not raise either."""
    opened = h.first_impression()
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json at all")
    assert said(lambda: h.replay_upload(str(garbage))).startswith("**Cannot replay this file**: ")
    refusal(run(prompt="   "))                                 # the page's traces are not in any output: kept
    frames = list(h.replay_race(Session("after-error"), opened["traces"], h.MAX_SPEED))
    assert frames[-1]["status"].endswith("(end)")
    assert "replay speed: must be in (0, 50]" in said(lambda: list(h.replay_race(Session("r"), opened["traces"], 0))[0])
    assert "no longer kept" in said(lambda: list(h.replay_race(Session("r"), [], 10))[0])


def test_upload_replays_a_download_and_names_broken_fields(finished, tmp_path):
    result = h.replay_upload(finished[1]["download"])
    assert [t.to_dict() for t in result["traces"]] == [t.to_dict() for t in finished[1]["traces"]]
    assert result["prompt"] == WORD and f"of the prompt “{WORD[:60]}" in result["status"]    # in the box too
    broken = tmp_path / "broken.json"
    data = json.loads(Path(finished[1]["download"]).read_text())
    data["traces"][1]["nfe"] = -1
    broken.write_text(json.dumps(data))
    assert re.search(r"bundle.traces\[1\].*nfe", said(lambda: h.replay_upload(str(broken))))
    assert "file: no file" in said(lambda: h.replay_upload(None))
    with pytest.raises(gr.Error, match=r"bundle.traces\[1\].*nfe"):       # API callers get the error raised
        h.replay_api(str(broken))


def test_step_view_follows_the_slider_and_play_stops_at_the_end(finished):
    traces = finished[1]["traces"]
    dico_index = [t.method for t in traces].index("dico")
    view = h.show_step(dico_index, 3, traces)
    assert view["step_view"] is not None and render.response_html(traces[dico_index], 3) in view["step_text"]
    last = traces[dico_index].nfe - 1
    assert h.tick(last, dico_index, traces)["playing"] is False
    assert h.tick(0, dico_index, traces) == {"step": 1}


def test_a_hub_model_that_cannot_load_leaves_the_embedded_model_working(app_module, predictor, monkeypatch):
    import dico_ui.models as models
    monkeypatch.setattr(models, "gpu_available", lambda: False)
    with pytest.warns(UserWarning, match="needs a GPU"):
        out = h.choose_model(next(iter(models.HUB_MODELS)))
    assert out["model"] == "dico-tiny" and "could not be loaded" in out["model_note"] and "cpu" in out["model_note"]

    def fail(*args, **kwargs):
        raise dico.ModelError("model: cannot load it (no network)")
    monkeypatch.setattr(models, "gpu_available", lambda: True)
    monkeypatch.setattr(models, "load_model", fail)
    with pytest.warns(UserWarning, match="embedded model dico-tiny keeps working"):
        out = h.choose_model(next(iter(models.HUB_MODELS)))
    assert out["model"] == "dico-tiny"


def test_dico_settings_are_named_only_by_the_library():
    """The app layer generates its controls from specs; no DiCo setting name is written in it."""
    shared = {s.name for group, s in CONTROLS if group == SHARED}
    names = {s.name for s in specs(SETTINGS["dico"])} - shared
    files = [ROOT / "app.py", *sorted((ROOT / "dico_ui").glob("*.py"))]
    for path in files:
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", path.read_text()))
        assert not names & words, f"{path.name} names {names & words}"


def test_the_kv_cache_is_a_shared_control_reaching_every_method(app_module, predictor):
    values = defaults()
    names = [spec.name for _, spec in CONTROLS]
    values[names.index("cache")] = "dual"
    *_, last = run(mode="semi-ar", gen_length=32, settings=values)
    traces = last["traces"]
    assert traces and all(t.settings["cache"] == "dual" and 0 < t.token_forwards < t.nfe * 96 for t in traces)
    values[names.index("cache")] = "everything"
    assert "setting cache: must be one of none, prefix, dual, delayed" in refusal(run(settings=values))


# ---------------------------------------------------------------------------- lanes

def rows_of(*lanes):
    """The lane rows' values as the page sends them: the count, then method, knob, label per row."""
    from dico.lanes import MAX_LANES
    flat = [c for lane in lanes for c in lane] + ["vanilla", None, ""] * (MAX_LANES - len(lanes))
    return [len(lanes), *flat]


def shown(out) -> list:
    """The rows' values after a lane handler, as the page sends them back: updates read as their values."""
    from dico.lanes import MAX_LANES
    rows = [out[f"{kind}-{i}"] for i in range(MAX_LANES) for kind in ("method", "knob", "label")]
    return [out["count"]] + [v.get("value") if isinstance(v, dict) else v for v in rows]


def test_lane_rows_add_remove_take_presets_and_become_the_lanes_run_takes(app_module):
    from dico_ui import lane_controls as lc
    values = rows_of(("vanilla", None, ""), ("fast", None, ""))
    assert lc.collect(*values) == [{"method": "vanilla"}, {"method": "fast"}]
    added = lc.add_lane(*values)
    assert added["count"] == 3 and added["method-2"] == "topk" and added["knob-2"]["visible"] and \
        added["knob-2"]["label"] == "k"
    assert lc.collect(*shown(added)[:7], "fast", 0.7, "eager", *shown(added)[10:]) == \
        [{"method": "vanilla"}, {"method": "fast"},
         {"method": "fast", "settings": {"threshold": 0.7}, "label": "eager"}]
    removed = lc.remove_lane(0, *values)
    assert removed["count"] == 1 and removed["method-0"] == "fast" and removed["lane_note"] == ""
    assert [removed[f"row-{i}"]["visible"] for i in range(6)] == [True] + [False] * 5
    last = lc.remove_lane(0, *rows_of(("dico", None, "")))                  # the last lane stays, and says why
    assert last["count"] == 1 and "at least one lane" in last["lane_note"]
    full = rows_of(*[("topk", k, "") for k in (1, 2, 3, 4, 5, 6)])
    at_six = lc.add_lane(*full)                                             # Add is off, and says why
    assert at_six["count"] == 6 and at_six["add"]["interactive"] is False
    assert at_six["add"]["value"] == "6 lanes at most"
    sixth = lc.add_lane(*rows_of(*[("topk", k, "") for k in (1, 2, 3, 4, 5)]))
    assert "remove one" in at_six["lane_note"] and sixth["count"] == 6 and "remove one" in sixth["lane_note"]
    preset = lc.apply_preset("Vanilla vs Top-4 per step", *values)
    assert lc.collect(*shown(preset)) == [{"method": "vanilla"}, {"method": "topk", "settings": {"k": 4}}]
    assert not lc.choose_method("dico")["visible"] and lc.choose_method("topk")["label"] == "k"
    for name in lc.PRESETS:        # every preset is a race the library accepts
        dico.parse_lanes(lc.collect(*shown(lc.apply_preset(name, *values))))


def test_a_page_race_of_two_lanes_of_one_method_names_each_by_its_label(app_module, predictor):
    lanes_ = [{"method": "vanilla"}, {"method": "topk", "settings": {"k": 4.0}},
              {"method": "topk", "settings": {"k": 2.0}}]
    *_, last = run(prompt=LIST, gen_length=16, methods=lanes_)
    result = last
    assert [t.label for t in result["traces"]] == ["Vanilla", "Top-4 per step", "Top-2 per step"]
    assert [t.nfe for t in result["traces"]] == [16, 4, 8]
    assert list(result["table"]["lane"]) == ["Vanilla", "Top-4 per step", "Top-2 per step"]
    assert all(f'<b class="lane-label">{t.label}</b>' in result["answers"] for t in result["traces"])
    refused = refusal(run(methods=[{"method": "topk"}, {"method": "topk"}]))     # named as the page names lanes
    assert "Lane 2: label: 'Top-4 per step' is also the label of Lane 1" in refused
    lanes_ = ["vanilla", "fast", "dico", {"method": "topk"}, {"method": "topk", "settings": {"k": 2}},
              {"method": "fast", "label": "Vanilla"}]
    assert "Lane 6: label: 'Vanilla' is also the label of Lane 1" in refusal(run(methods=lanes_))
    assert "Lane 4 (Top-k per step): k: must be in" in refusal(run(methods=["vanilla", "fast", "dico",
                                                                             {"method": "topk", "settings": {"k": 0}}]))


def test_the_about_text_says_which_tokens_a_revising_lane_took_back_and_whether_its_answer_is_right():
    from dico.trace import Step, Trace
    from dico_ui.about import revisions, taken_back

    def step(i, committed, tokens, remasked=()):
        return Step(index=i, phase="fast", window=[0, 4], committed=committed, tokens=tokens,
                    confidence=[None] * 4, prediction=[None] * 4, remasked=list(remasked))

    trace = Trace(model="m", method="wino", mode="non-ar", settings={}, label="WINO",
                  prompt="Pick one leader of Lily Howard, Don Gill and Sara Lake.", prompt_length=3, gen_length=4,
                  block_length=None, response=[7, 8, 9, 2], answer_length=3, text="The leader is Don Gill.",
                  vocab={"5": " S", "7": " Don", "8": " Gill", "9": ".", "2": "<|eot|>"},
                  steps=[step(0, [0, 1], [5, 8]), step(1, [2, 3], [9, 2], remasked=[0]), step(2, [0], [7])])
    assert taken_back(trace) == [(1, 0, 5)]
    said = revisions(trace)
    assert "took back 1 token in 1 steps" in said and "`S` → `Don` at 0" in said
    assert "its answer is right: so revising repaired it" in said
