"""The measurements of dico.observe on the page: the race marks a step whose clash is above
``CLASH_MARK``, the step view says a step's clash and maps its dependency on request, the Attention tab prints the
locality of each stage, the Comparison tab each lane's total clash. Measuring is opt-in where it costs passes, and it
never changes a decode."""
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from dico.observe import CLASH_MARK, Replayed, annotate_clash, attention_locality, marked_steps, total_clash
from dico.settings import MODES
from dico.trace import read_traces
from near_ties import first_difference, steps_of

gr = pytest.importorskip("gradio")

from dico_ui import handlers as h  # noqa: E402
from dico_ui import render  # noqa: E402
from dico_ui.race import race  # noqa: E402
from dico_ui.request import CONTROLS, parse_request  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "assets" / "ui" / "example_run.json"
LIST = next(e["prompt"] for e in json.loads((ROOT / "assets" / "examples.json").read_text())["examples"]
            if e["family"] == "list")
# A decoder of each kind: one token a step, fixed parallel, thresholded, DiCo, waiting and revising.
DECODERS = ("vanilla", "topk", "fast", "fast-factor", "dico", "eb", "klass", "wino", "saber")


class Session:
    """What gradio hands a handler as gr.Request: only the session id is used."""
    def __init__(self, name="observe"):
        self.session_hash = name


@pytest.fixture(scope="module")
def lesson():
    """The lesson's example run, as the page opens on it (not measured)."""
    return {t.method: t for t in read_traces(EXAMPLE.read_bytes())}


@pytest.fixture(scope="module")
def measured(lesson, predictor):
    """The lesson's Vanilla and Top-4 per step, their clash measured as the page measures it."""
    return {m: annotate_clash(predictor, read_traces(lesson[m].to_json())[0]) for m in ("vanilla", "topk")}


def run(app_module, prompt, methods, gen_length, measure_clash, session="observe"):
    """The Run button, as the page calls it: the settings controls at their defaults, no constraints."""
    values = [spec.default for _, spec in CONTROLS]
    return list(h.run_ui(Session(session), prompt, "dico-tiny", "non-ar", float(gen_length), 16.0, list(methods),
                         False, *values, "", measure_clash))


def test_the_race_marks_the_lessons_top4_clash_and_never_a_vanilla_step(measured):
    """Top-4 per step commits " S" "ara" " G" "ill" together at step 23: +13.7 nats, marked in its lane and on the
    four tokens; Vanilla commits one token a step, which cannot clash."""
    topk, vanilla = measured["topk"], measured["vanilla"]
    assert list(marked_steps(topk)) == [23] and marked_steps(topk)[23] == pytest.approx(13.7, abs=0.1)
    card = render.lane_html(topk, 23, "done")
    assert "clash above 1 nat at step 23 (+13.7 nats)" in card
    clashing = re.findall(r'class="tok new clash"[^>]*title="position (\d+)', card)
    assert sorted(map(int, clashing)) == sorted(topk.steps[23].committed)
    before = render.lane_html(topk, 22, "decoding")                          # not before the step that clashed
    assert "no clash above 1 nat" in before and 'clash"' not in before
    assert vanilla.clash["values"] == [None] * vanilla.nfe and marked_steps(vanilla) == {}
    card = render.lane_html(vanilla, vanilla.nfe - 1, "done")
    assert "one token a step: no clash" in card and 'clash"' not in card


def test_the_page_marks_the_clash_it_measures_and_the_comparison_holds_each_lanes_total(app_module, lesson):
    """Measuring on: after the decode each lane's clash is measured, its passes reported apart from its steps, the
    decode as it was without measuring; the race marks the lesson's step 23, the Comparison tab gives the total."""
    prompt = lesson["topk"].prompt
    frames = run(app_module, prompt, [{"method": "topk", "settings": {"k": 4}}, "fast"], 96, True)
    assert any("Measuring the clash of " in f.get("status", "") for f in frames[1:-1])
    result = frames[-1]
    topk, fast = result["traces"]
    assert first_difference(steps_of(lesson["topk"]), lesson["topk"].text, topk) is None     # as shipped, up to the
    # order of near-tied positions (another CPU, docs/decoding.md §2.2)
    assert topk.nfe == 24 and topk.clash["passes"] == 96                  # a pass a token of a step, apart
    assert "clash above 1 nat at step 23 (+13.7 nats)" in result["answers"]
    table = result["table"]
    total, worst = table.columns[-2:]
    assert (total, worst) == ("total clash, steps above 1 nat (extra passes)", "worst clash (step)")
    assert list(table[total]) == [f"{total_clash(topk):.2f} nats, 1 step above 1 nat (96 passes)",
                                  f"{total_clash(fast):.2f} nats, 0 steps above 1 nat ({fast.clash['passes']} passes)"]
    assert list(table[worst])[0] == f"{topk.clash['values'][23]:+.2f} nats at step 23 (marked)"
    assert f"Measuring the clash took {96 + fast.clash['passes']} passes" in result["status"]


def test_measuring_is_on_by_default_on_the_embedded_models_and_unticked_spends_no_pass(app_module, monkeypatch):
    """The control is ticked and a request that does not say measures on the embedded models (a large
    model measures on demand); unticked, no pass beyond the decode, and the Comparison tab and the step view say "not
    measured"."""
    control = next(b for b in app_module.demo.blocks.values() if getattr(b, "elem_id", None) == "measure-clash")
    assert control.value is True and "extra passes" in control.label
    assert parse_request(LIST, ["topk"], gen_length=16).measure_clash is True
    assert parse_request(LIST, ["topk"], gen_length=16, model="dico-tiny-long").measure_clash is True
    assert parse_request(LIST, ["topk"], gen_length=16, model="GSAI-ML/LLaDA-8B-Instruct").measure_clash is False
    assert h.choose_model("dico-tiny")["measure_clash"] is True
    spent = []
    monkeypatch.setattr(Replayed, "log_probs", lambda self, *a: spent.append(a) or pytest.fail("a measuring pass"))
    result = run(app_module, LIST, [{"method": "topk", "settings": {"k": 4}}], 16, False)[-1]
    trace = result["traces"][0]
    assert spent == [] and trace.clash is None
    assert list(result["table"].iloc[:, -2:].iloc[0]) == ["not measured", "not measured"]
    assert "clash not measured" in render.step_html(trace, 0) and "Measuring the clash" not in result["status"]


def test_a_races_measuring_is_bounded_and_shared_among_its_lanes(predictor):
    """At most ``CLASH_BUDGET`` passes a run, each lane an even share of what the lanes before it left; the steps
    past a lane's share are left unmeasured, listed, and said in its card and the Comparison tab."""
    from dico_ui import race as racing
    req = parse_request(LIST, [{"method": "topk", "settings": {"k": 2}}, {"method": "topk", "settings": {"k": 4}}],
                        gen_length=16)
    *_, last = race(predictor, req)
    full = [t.clash["passes"] for t in last.traces]
    assert full == [16, 16] and not any("skipped" in t.clash for t in last.traces)
    for trace in last.traces:
        trace.clash = None
    frames = list(racing.measured(predictor, last, budget=20))
    two, four = frames[-1].traces
    assert two.clash["passes"] == 10 and two.clash["skipped"] == [5, 6, 7]      # 10 of 20: five steps of 2
    assert four.clash["passes"] == 8 and four.clash["skipped"] == [2, 3]         # the 10 left: two steps of 4
    assert two.clash["passes"] + four.clash["passes"] <= 20
    assert "3 steps not measured" in render.clash_cell(two) and "budget" in render.step_clash(two, 6)


def test_a_race_stopped_while_measuring_keeps_its_decodes_and_says_what_was_not_measured(predictor):
    """Measuring runs a lane at a time after the decode; closed between lanes (Stop, the time limit), the measured
    lanes keep their clash, the others say "not measured", and the status says the decode had finished."""
    from dico_ui.race import settle
    from dico_ui.stream import End
    frames = race(predictor, parse_request(LIST, [{"method": "topk", "settings": {"k": 4}}, "fast"], gen_length=16,
                                           measure_clash=True))
    frame = next(f for f in frames if f.measuring == "Fast-dLLM")
    frames.close()
    frame = settle(frame, predictor)
    topk, fast = frame.traces
    assert [lane.state for lane in frame.lanes] == ["done", "done"] and not topk.stopped and not fast.stopped
    assert topk.clash is not None and render.clash_cell(fast) == "not measured"
    assert h.ending(frame, End("stop", None, 1.0)).startswith("Measuring the clash of Fast-dLLM stopped: every lane "
                                                               "had finished decoding")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", DECODERS)
def test_measuring_never_changes_a_decode(predictor, method, mode):
    """Each decoder, both modes, through the race the page runs: with measuring on, the steps and the text are the
    ones decoded without it and the NFE is its steps; measuring costs a pass a token of each step that committed
    two or more (its most confident ``limit``), counted apart."""
    def decoded(measure):
        req = parse_request(LIST, [method], mode=mode, gen_length=16, block_length=8, measure_clash=measure)
        *_, last = race(predictor, req)
        assert last.lanes[0].state == "done"
        return last.traces[0]

    plain, measured = decoded(False), decoded(True)
    assert plain.clash is None and measured.clash is not None
    assert [(s.committed, s.tokens, s.remasked, s.edited) for s in measured.steps] == \
        [(s.committed, s.tokens, s.remasked, s.edited) for s in plain.steps]
    assert measured.text == plain.text and measured.nfe == plain.nfe == len(plain.steps)
    wide = [len(s.committed) + len(s.edited) >= 2 for s in plain.steps]      # an edit writes a token too
    limit = measured.clash["limit"]
    assert [v is not None for v in measured.clash["values"]] == wide
    assert measured.clash["passes"] == sum(min(len(s.committed) + len(s.edited), limit)
                                           for s, w in zip(plain.steps, wide) if w)


def test_the_step_view_says_the_steps_clash(measured, lesson):
    topk, vanilla = measured["topk"], measured["vanilla"]
    assert "clash <b>+13.70</b> nats, above 1 nat" in h.show_step(1, 23, [vanilla, topk])["step_text"]
    assert "one token: no clash" in h.show_step(0, 5, [vanilla, topk])["step_text"]
    unmeasured = read_traces(lesson["dico"].to_json())[0]
    unmeasured.clash = None                                     # the shipped runs carry it; a run may not
    assert "clash not measured" in h.show_step(0, 5, [unmeasured])["step_text"]
    assert "clash <b>" in h.show_step(0, 5, [lesson["dico"]])["step_text"]


def test_the_dependency_map_is_asked_for_says_its_cost_and_draws_a_heatmap(app_module, lesson):
    """One pass on the state before the step and one per masked position, said before and after; the map is a
    heatmap over the masked answer positions, and the run is left as it was."""
    topk = lesson["topk"]
    before = topk.to_json()
    view = h.show_step(0, 23, [topk])
    assert view["dependency"] is None and "costs 5 forward passes" in view["dependency_note"]
    *_, out = h.dependency_map(Session(), 0, 23, [topk])
    assert out["dependency"].data[0].type == "heatmap"
    assert "Dependency before step 23 of Top-4 per step" in out["dependency_note"]
    assert "5 forward passes, apart from the run's steps" in out["dependency_note"] and topk.to_json() == before


def test_a_dependency_map_over_the_cap_is_refused_with_its_cost_in_one_line(app_module, lesson, monkeypatch):
    monkeypatch.setattr(render, "LIMITS", replace(render.LIMITS, dependency_masked=8))
    monkeypatch.setattr(h, "measure_dependency", lambda *a: pytest.fail("a refused map ran the model"))
    with pytest.warns(UserWarning) as toasts:
        outputs = list(h.dependency_map(Session(), 0, 0, [lesson["topk"]]))
    assert len(toasts) == 1 and [list(out) for out in outputs] == [["status"]]
    assert outputs[0]["status"] == ("**Cannot map the dependency**: 96 positions are masked before step 0; a "
                                    "dependency map costs a forward pass each, and this server maps at most 8: "
                                    "choose a later step.")
    with pytest.warns(UserWarning):
        assert "no longer kept" in list(h.dependency_map(Session(), 0, 0, []))[0]["status"]


def test_a_measurement_that_faults_ends_as_a_run_does_naming_the_fault_and_leaving_the_line(app_module, lesson,
                                                                                           predictor, monkeypatch,
                                                                                           caplog):
    """The dependency map waits, decodes and ends on a run's path (``stream.admitted``): a model error is said under
    the map and logged for the operator, nothing is drawn, and its place in the line is given back."""
    from dico_ui import runs

    def faulty(*args, **kwargs):
        raise RuntimeError("injected fault")
    monkeypatch.setattr(predictor, "forward", faulty)
    *_, out = h.dependency_map(Session("faulty-map"), 0, 23, [lesson["topk"]])
    assert out == {"dependency_note": "The dependency map failed: RuntimeError: injected fault; nothing was drawn."}
    assert "injected fault" in caplog.text and runs.LINE.holds("faulty-map") is None


def test_a_measurement_past_the_time_limit_stops_before_its_next_pass(app_module, lesson, predictor, monkeypatch):
    """The locality layer by layer is one model call of a pass a step: past the run's time limit (here 0 s) the
    next pass is not computed, the measurement says so under its table and leaves the line."""
    from dico_ui import runs
    forward, passes = predictor.forward, []
    monkeypatch.setattr(predictor, "forward", lambda *a, **k: passes.append(1) or forward(*a, **k))
    monkeypatch.setattr(runs, "LIMITS", replace(runs.LIMITS, run_seconds=0.0))
    *_, out = h.layers_view(Session("slow-layers"), [lesson["dico"]])
    assert out["locality"].endswith("The locality layer by layer stopped at the time limit (0 s a run on this shared "
                                    "server); nothing was drawn.")
    assert out["locality"].startswith(render.stage_locality_md(lesson["dico"])) and passes == []
    assert runs.LINE.holds("slow-layers") is None


def test_the_attention_tab_prints_the_locality_of_each_stage(app_module, lesson):
    dico_run = lesson["dico"]
    said = h.first_impression()["locality"]
    answer = attention_locality(dico_run, among=set(range(dico_run.answer_length)))
    every = attention_locality(dico_run)
    for stage in ("early", "late"):
        for name, found in (("answer", answer[stage]), ("all positions", every[stage])):
            assert (f"| {stage} | {name} | {found.within:.2f} | {found.even:.2f} | {found.mean_distance:.1f} | "
                    f"{found.total:.2f} |") in said
    assert render.attention_locality_md(lesson["topk"]) == ""          # no attention captured: nothing to print


def test_the_locality_layer_by_layer_is_asked_for_says_its_cost_and_prints_every_layer(app_module, lesson,
                                                                                       predictor):
    """The Attention tab says what the per-layer lens costs (the run's steps replayed); asked for, it prints each
    layer's locality beside the stages' (the layers' mean, as before), as ``dico.observe.layer_locality`` measures
    it, and leaves the run as it was."""
    from dico.observe import layer_locality

    dico_run = lesson["dico"]
    before = dico_run.to_json()
    n = len(dico_run.steps)
    assert f"the {n} steps of DiCo replayed, {n} forward passes" in h.first_impression()["locality"]
    *waiting, out = h.layers_view(Session(), [lesson["topk"], dico_run])       # the run that captured attention
    said = out["locality"]
    assert said.startswith(render.stage_locality_md(dico_run))
    assert f"**Layer by layer** ({n} forward passes apart from the run's" in said
    answer = layer_locality(predictor, dico_run, among=set(range(dico_run.answer_length)))
    every = layer_locality(predictor, dico_run)
    assert len(every["early"]) == 4                                     # the embedded model's layers
    for stage in ("early", "late"):
        for layer in (0, 3):
            for name, found in (("answer", answer[stage][layer]), ("all positions", every[stage][layer])):
                assert (f"| {stage} | {layer} | {name} | {found.within:.2f} | {found.even:.2f} | "
                        f"{found.mean_distance:.1f} | {found.total:.2f} |") in said
    assert dico_run.to_json() == before


def test_the_locality_layer_by_layer_is_refused_without_attention_or_over_the_cap(app_module, lesson, monkeypatch):
    monkeypatch.setattr(h, "measure_layers", lambda *a: pytest.fail("a refused measurement ran the model"))
    with pytest.warns(UserWarning):
        outputs = list(h.layers_view(Session(), [lesson["topk"]]))
    assert outputs == [{"status": "**Cannot measure the layers**: This run captured no attention: tick “capture "
                                  "attention” and run again."}]
    monkeypatch.setattr(render, "LIMITS", replace(render.LIMITS, layer_steps=4))
    with pytest.warns(UserWarning):
        outputs = list(h.layers_view(Session(), [lesson["dico"]]))
    assert len(outputs) == 1 and "DiCo took 6 steps" in outputs[0]["status"] and "at most 4." in outputs[0]["status"]
    assert "at most 4" in render.attention_locality_md(lesson["dico"])


def test_the_race_marks_what_the_figures_mark():
    """The steps the race marks (``marked_steps``) are the steps the clash figure draws large, on either side of the
    threshold: just above it marked, at it or below not, unmeasured steps neither."""
    import visuals.observe
    from dico import Trace
    trace = Trace.from_json((Path(__file__).parent / "golden" / "traces" / "word0-topk-non-ar.json").read_text())
    values = [None, CLASH_MARK + 1e-3, CLASH_MARK, CLASH_MARK - 1e-3, 13.7, 0.0]
    trace.clash = {"values": (values * len(trace.steps))[:len(trace.steps)], "passes": 0, "limit": None}
    drawn = visuals.observe.clash_figure([trace]).data[0]
    large = [int(x) for x, size in zip(drawn.x, drawn.marker.size) if size > min(drawn.marker.size)]
    assert large == sorted(marked_steps(trace)) and {1, 4} <= set(large) and not {0, 2, 3, 5} & set(large)


def test_the_api_measures_on_request_and_the_trace_keeps_it(app_url, app_module, predictor):
    """``/run``'s optional last input: the clash is measured, in the Comparison table and in the downloaded trace;
    false, nothing is measured; left out, the embedded model measures."""
    from gradio_client import Client

    from dico_ui.outputs import RESULTS
    client = Client(app_url, verbose=False)
    topk = [{"method": "topk", "settings": {"k": 4}}]
    out = dict(zip(RESULTS, client.predict(LIST, "dico-tiny", "non-ar", 16, 16, topk, "", False, "", True,
                                           api_name="/run")))
    bundle = json.loads(Path(out["download"]).read_text(encoding="utf-8"))
    trace = read_traces(json.dumps(bundle))[0]
    assert trace.clash["passes"] == 16 and out["table"]["data"][0][-2] == render.clash_cell(trace)
    out = dict(zip(RESULTS, client.predict(LIST, "dico-tiny", "non-ar", 16, 16, topk, "", False, "", False,
                                           api_name="/run")))
    assert out["table"]["data"][0][-2] == "not measured"
    out = dict(zip(RESULTS, client.predict(LIST, "dico-tiny", "non-ar", 16, 16, topk, "", False,
                                           api_name="/run")))            # left out: the embedded model measures
    assert out["table"]["data"][0][-2] != "not measured"


@pytest.mark.e2e
def test_in_a_browser_the_measurements_show_beside_the_run(page, app_url, artifacts):
    """The control is there and on; the Attention tab prints the locality of each stage, and of each layer on
    request; the step view maps the dependency at a step on request; no console error."""
    pytest.importorskip("playwright")
    from playwright.sync_api import expect
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(app_url, timeout=120_000)
    expect(page.locator("#status")).to_contain_text("finished example run", timeout=120_000)
    expect(page.locator("#measure-clash input")).to_be_checked()
    page.get_by_role("tab", name="Attention").click()
    expect(page.locator("#attention-locality table")).to_contain_text("within 3")
    page.locator("#layers-button").click()
    expect(page.locator("#attention-locality")).to_contain_text("Layer by layer (6 forward passes", timeout=120_000)
    expect(page.locator("#attention-locality table").nth(1)).to_contain_text("layer")
    page.get_by_role("tab", name="Step by step").click()
    expect(page.locator("#dependency-note")).to_contain_text("costs 97 forward passes")
    page.locator("#dependency-button").click()
    expect(page.locator("#dependency-plot .js-plotly-plot")).to_be_visible(timeout=120_000)
    expect(page.locator("#dependency-note")).to_contain_text("Dependency before step 0 of DiCo")
    page.screenshot(path=str(artifacts / "dependency-map.png"), full_page=True)
    assert errors == []


def test_the_shipped_runs_carry_their_clash_and_the_page_opens_on_top4s(app_module):
    """The example run, the fork example and the editing example carry each lane's clash (``python -m
    dico_ui.examples --clash``, measured as a page run is), so the page opens with Top-4's broken step marked in its
    lane, in the Comparison tab (total and worst step) and in the clash figure."""
    for name in ("example_run", "fork_example", "edit_example"):
        traces = read_traces((ROOT / "assets" / "ui" / f"{name}.json").read_bytes())
        assert all(t.clash is not None and len(t.clash["values"]) == t.nfe for t in traces), name
    opened = h.first_impression()
    topk = opened["traces"][1]
    assert list(marked_steps(topk)) == [23]
    assert "clash above 1 nat at step 23 (+13.7 nats)" in opened["answers"]
    assert list(opened["table"].iloc[1, -2:]) == [render.clash_cell(topk), render.worst_cell(topk)]
    assert render.worst_cell(topk).endswith("at step 23 (marked)")
    marks = [d for d in opened["clash_plot"].data if d.name == "Top-4 per step"]
    assert len(marks) == 1 and max(marks[0].y) == pytest.approx(13.7, abs=0.1)
    assert opened["order"].data[0].type == "heatmap"
