"""Lanes: a race lane is a method, its settings and a label. Up to six, two may share a method; everything is
checked before anything runs; every trace records its lane's label, and figures and tables name lanes by it."""
import copy
import json
from pathlib import Path

import pytest

import dico
from dico.lanes import MAX_LANES, Lane, default_label, parse_lanes
from dico.trace import Trace

GOLDEN = Path(__file__).parent / "golden" / "traces"


def test_a_lane_is_a_method_name_or_an_object_and_its_default_label_names_what_sets_it_apart():
    lanes = parse_lanes(["vanilla", {"method": "topk", "settings": {"k": 4}}, {"method": "topk", "settings": {"k": 2}},
                         "fast", {"method": "fast", "settings": {"threshold": 0.7}},
                         {"method": "vanilla", "label": "LLaDA, 24 steps", "settings": {"steps": 24}}])
    assert [lane.label for lane in lanes] == ["Vanilla", "Top-4 per step", "Top-2 per step", "Fast-dLLM",
                                              "Fast-dLLM 0.7", "LLaDA, 24 steps"]
    assert lanes[1] == Lane("topk", "Top-4 per step", dico.settings_for("topk", {"k": 4}))
    assert lanes[5].settings == dico.VanillaSettings(steps=24)       # typed and checked: nothing checks it again
    assert default_label("topk") == "Top-4 per step"                 # k is always said
    assert default_label("vanilla", {"steps": 24}) == "Vanilla, 24 steps"
    assert default_label("fast-factor", {"factor": 2.0}) == "Fast-dLLM (factor 2)"
    assert default_label("dico", {"authors_code": True, "tau1": 0.4}) == "DiCo (authors_code=on, tau1=0.4)"
    assert default_label("fast", {"threshold": 0.7, "cache": "dual"}) == "Fast-dLLM 0.7 (dual cache)"
    assert default_label("dico", {"cache": "delayed", "cache_prompt": False}) == "DiCo (delayed cache, prompt computed)"
    # two lanes of a method at their defaults but one given explicitly: the given value is named
    assert [lane.label for lane in parse_lanes(["fast", {"method": "fast", "settings": {"threshold": 0.95}}])] == \
        ["Fast-dLLM", "Fast-dLLM 0.95"]


def test_a_lane_starts_from_its_methods_settings_and_its_own_lie_over_them():
    (lane,) = parse_lanes([{"method": "fast", "settings": {"threshold": 0.7}}], {"fast": {"threshold": 0.9,
                                                                                          "cache": "dual"}})
    assert lane.settings == dico.FastSettings(threshold=0.7, cache="dual") and lane.label == "Fast-dLLM 0.7"


@pytest.mark.parametrize("lanes,message", [
    (["vanilla"] * (MAX_LANES + 1), r"lanes: 7 lanes, at most 6 race side by side"),
    ([], "lanes: choose at least one method"),
    (["fast", "fast"], r"lanes\[1\].label: 'Fast-dLLM' is also the label of lanes\[0\]"),
    ([{"method": "fast", "label": "x"}, {"method": "dico", "label": "x"}], r"lanes\[1\].label: 'x' is also"),
    (["vanilla", "greedy"], r"lanes\[1\].method: unknown method 'greedy'; choose from vanilla, topk"),
    ([{"method": "topk", "settings": {"threshold": 0.9}}],
     r"lanes\[0\] \(Top-k per step\): threshold: not a setting of 'topk'"),
    ([{"method": "topk", "settings": {"k": 0}}], r"lanes\[0\] \(Top-k per step\): k: must be in \[1, 4096\]"),
    ([{"method": "fast", "label": "  "}], r"lanes\[0\].label: must be a non-empty text"),
    ([{"method": "fast", "colour": "red"}], r"lanes\[0\].colour: not a field of a lane"),
    ([{"method": "fast", "settings": [0.7]}], r"lanes\[0\].settings: must be an object"),
    ([3], r"lanes\[0\]: must be a method name or an object"),
    ([{"method": ["fast"]}], r"lanes\[0\].method: unknown method"),
])
def test_a_bad_lane_is_a_clear_message_naming_it(lanes, message):
    with pytest.raises(ValueError, match=message):
        parse_lanes(lanes)


def test_a_lane_is_named_as_its_caller_names_it():
    """The page says "Lane 2", the API "methods[1]": one parse, the caller's words."""
    def page(i, name=""):
        return f"Lane {i + 1}" + (f": {name}" if name else "")
    with pytest.raises(ValueError, match=r"^Lane 2: label: 'Fast-dLLM' is also the label of Lane 1;"):
        parse_lanes(["fast", "fast"], at=page)
    with pytest.raises(ValueError, match=r"^Lane 1 \(Top-k per step\): k: must be in"):
        parse_lanes([{"method": "topk", "settings": {"k": 0}}], at=page)


def test_a_lane_from_the_page_form_with_a_preset_switch_names_what_the_preset_did_not_fill():
    """With DiCo's authors_code switch on, a form's values left at their defaults are not "given" (the preset fills
    them) and the values changed win (every entry's preset rule: tests/test_one_path.py)."""
    from dico.settings import AUTHORS_CODE, DiCoSettings, given_in_form, specs
    form = {spec.name: spec.default for spec in specs(DiCoSettings)} | {"authors_code": True, "tau1": 0.4}
    (lane,) = parse_lanes([{"method": "dico", "settings": given_in_form(DiCoSettings, form)}])
    assert lane.settings.tau1 == 0.4 and lane.settings.seeds == AUTHORS_CODE["seeds"] and lane.settings.authors_code
    assert lane.label == "DiCo (authors_code=on, tau1=0.4)"
    (given,) = parse_lanes([{"method": "dico", "settings": {"authors_code": True, "seeds": 0}}])
    assert given.settings.seeds == 0                                 # given explicitly: it wins over the preset


def test_a_lane_pickles_as_it_is_for_zerogpus_worker_process():
    import pickle
    lanes = parse_lanes(["vanilla", {"method": "dico", "settings": {"authors_code": True, "tau1": 0.4}}])
    again = pickle.loads(pickle.dumps(lanes))
    assert again == lanes and again[1].settings.authors_code and again[1].settings.short_right_growth


def test_every_trace_records_its_lanes_label_and_settings(predictor, tmp_path):
    prompt = "Here is a list: 4, 9, 13. Make every item smaller by 3. Keep the order."
    lanes = parse_lanes(["fast", {"method": "fast", "settings": {"threshold": 0.5}}, {"method": "topk"}])
    traces = [dico.generate(predictor, prompt, lane.method, gen_length=16, settings=lane.settings, label=lane.label)
              for lane in lanes]
    assert [t.label for t in traces] == ["Fast-dLLM", "Fast-dLLM 0.5", "Top-4 per step"]
    assert traces[1].settings["threshold"] == 0.5 and traces[2].settings["k"] == 4
    path = tmp_path / "t.json"
    traces[1].save(path)
    assert Trace.load(path).label == "Fast-dLLM 0.5" == Trace.load(path).name
    # a Vanilla lane with steps keeps LLaDA's meaning: steps passes for the whole answer
    (llada,) = parse_lanes([{"method": "vanilla", "settings": {"steps": 8}}])
    trace = dico.generate(predictor, prompt, llada.method, gen_length=16, settings=llada.settings, label=llada.label)
    assert trace.nfe == 8 and all(len(s.committed) == 2 for s in trace.steps) and trace.label == "Vanilla, 8 steps"
    # without a lane, the label still says what sets the run apart
    assert dico.generate(predictor, prompt, "fast", gen_length=8, threshold=0.6).label == "Fast-dLLM 0.6"
    assert dico.generate(predictor, prompt, "topk", gen_length=8, k=2).label == "Top-2 per step"


def test_trace_files_from_before_lanes_load_with_the_methods_label():
    for path in sorted(GOLDEN.glob("*.json")):
        data = Trace.load(path).to_dict()
        data.pop("label")
        old = Trace.from_dict(copy.deepcopy(data))
        assert old.label == {"vanilla": "Vanilla", "fast": "Fast-dLLM", "fast-factor": "Fast-dLLM (factor)",
                             "dico": "DiCo", "topk": "Top-4 per step"}[old.method], path.name
    data["settings"]["threshold"], data["method"] = 0.7, "fast"
    data["settings"] = {k: v for k, v in data["settings"].items() if k in dico.FastSettings.__dataclass_fields__}
    assert Trace.from_dict(data).label == "Fast-dLLM 0.7"
    data["label"] = 3
    with pytest.raises(dico.TraceError, match="trace.label: must be a string"):
        Trace.from_dict(data)


def test_figures_and_tables_name_lanes_by_label_and_colour_a_methods_second_lane_apart():
    import visuals
    from visuals._common import METHOD_COLORS, run_name

    fast = Trace.load(GOLDEN / "word0-fast-non-ar.json")
    eager = copy.deepcopy(fast)
    eager.label = "Fast-dLLM 0.7"
    vanilla = Trace.load(GOLDEN / "word0-vanilla-non-ar.json")
    traces = [vanilla, fast, eager]
    assert [r["method"] for r in visuals.comparison_table(traces)] == ["Vanilla", "Fast-dLLM", "Fast-dLLM 0.7"]
    names = {d.name for d in visuals.comparison_figure(traces).data}
    assert {"Vanilla", "Fast-dLLM", "Fast-dLLM 0.7"} <= names
    assert run_name(eager) == "Fast-dLLM 0.7" and "Fast-dLLM 0.7" in visuals.phase_figure(eager).layout.title.text
    colors = visuals.run_colors(traces)
    assert colors[:2] == [METHOD_COLORS["vanilla"], METHOD_COLORS["fast"]] and colors[2] not in colors[:2]
    rows = [{"method": "vanilla", "label": "Vanilla", "mode": "non-ar", "task": "word", "accuracy": 1.0,
             "nfe_mean": 96.0},
            {"method": "topk", "label": "Top-4 per step", "mode": "non-ar", "task": "word", "accuracy": 0.5,
             "nfe_mean": 24.0},
            {"method": "topk", "label": "Top-8 per step", "mode": "non-ar", "task": "word", "accuracy": 0.2,
             "nfe_mean": 12.0}]
    figure = visuals.accuracy_nfe_figure(rows)
    named = {d.name: d.marker.color for d in figure.data if d.showlegend}
    assert set(named) == {"Vanilla (non-ar)", "Top-4 per step (non-ar)", "Top-8 per step (non-ar)"}
    assert named["Top-4 per step (non-ar)"] != named["Top-8 per step (non-ar)"]
    assert visuals.method_id("Top-4 per step") == "topk"


def test_the_benchmark_takes_top_k_and_vanilla_steps_rows_beside_its_reference(predictor):
    from dico.bench.benchmark import TABLE, run

    configs = [("Vanilla, 8 steps", "vanilla", {"steps": 8}), ("Top-4 per step", "topk", {"k": 4})]
    rows = run(predictor, configs, ("word",), ("non-ar",), 2, lengths=((16, 8),), batch_size=2, progress=False)
    assert [r["label"] for r in rows] == [TABLE[0][0], "Vanilla, 8 steps", "Top-4 per step"]
    assert [r["nfe_mean"] for r in rows] == [16.0, 8.0, 4.0] and rows[2]["speedup_nfe"] == 4.0
    with pytest.raises(ValueError, match="label 'x' names two configs"):
        run(predictor, [("x", "topk", {}), ("x", "fast", {})], ("word",), ("non-ar",), 1, lengths=((16, 8),),
            progress=False)


def test_method_ids_are_spelled_one_way_and_an_old_id_still_names_its_method():
    import re

    from dico.bench import options
    from dico.methods import RULES
    from dico.settings import METHOD_ALIASES, METHOD_LABELS, METHODS, method_id
    assert set(RULES) == set(METHODS) == set(METHOD_LABELS)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", m) for m in METHODS), METHODS      # hyphens, as modes
    assert not set(METHOD_ALIASES) & set(METHODS) and set(METHOD_ALIASES.values()) <= set(METHODS)
    assert method_id("pc_sampler") == "pc-sampler" == method_id("pc-sampler") and method_id(None) is None
    # a lane (the page, /run, a fork's "continue with"), a settings object, the library, the bench's options
    lanes = parse_lanes(["pc_sampler", {"method": "pc_sampler", "settings": {"lambd": 0.25}}],
                        {"pc_sampler": {"clip_alpha": 5.0}})
    assert [lane.method for lane in lanes] == ["pc-sampler", "pc-sampler"]
    assert lanes[0].settings.clip_alpha == 5.0 and lanes[1].settings.lambd == 0.25
    assert dico.settings_for("pc_sampler").method == "pc-sampler"
    assert options.choices("methods", "pc_sampler,vanilla", METHODS, "method") == ("pc-sampler", "vanilla")


def test_a_request_naming_a_method_by_its_old_id_runs_it():
    from dico.__main__ import build_parser, given_settings
    from dico_ui.request import api_request
    prompt = "Here is a list: 4, 9, 13. Make every item smaller by 3. Keep the order."
    req = api_request(prompt, "dico-tiny", "non-ar", 16, 16, ["pc_sampler"], '{"pc_sampler": {"lambd": 0.25}}',
                      False)
    assert req.lanes[0].method == "pc-sampler" and req.lanes[0].settings.lambd == 0.25
    args = build_parser().parse_args(["generate", "--prompt", prompt, "--method", "pc_sampler", "--lambd", "0.25"])
    assert args.method == "pc-sampler" and given_settings(args) == {"lambd": 0.25}


def test_a_trace_file_naming_its_method_by_an_old_id_loads_and_replays(predictor):
    prompt = "Here is a list: 4, 9, 13. Make every item smaller by 3. Keep the order."
    trace = dico.generate(predictor, prompt, "pc_sampler", gen_length=16)          # the library reads it too
    assert trace.method == "pc-sampler" and trace.label == "PC-Sampler"
    data = trace.to_dict()
    data["method"] = "pc_sampler"                                   # as a file written before the respelling
    old = Trace.from_json(json.dumps(data))
    assert old.method == "pc-sampler" and old.name == "PC-Sampler"
    again = dico.fork(predictor, old, at=len(old.steps) // 2)       # its first steps decoded again, checked
    assert again.text == old.text and [s.committed for s in again.steps] == [s.committed for s in old.steps]
