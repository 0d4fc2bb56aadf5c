"""The page's events, one line each, beside the layout that declares the components (``dico_ui.layout``).

Handlers (``dico_ui.handlers``, ``dico_ui.forks``, ``dico_ui.lane_controls``) return their outputs by name;
``keyed`` hands gradio ``{component: value}``, so no handler and no outputs list must agree on an order. ``c`` maps
every name to its component (``layout.build_demo``).
"""
from __future__ import annotations

import functools
import inspect

from gradio.components.plot import PlotData
from plotly.basedatatypes import BaseFigure

from dico_ui import forks, lane_controls, long_examples
from dico_ui import handlers as h
from dico_ui.outputs import RESULTS

# Plots drawn while their tab was hidden keep plotly's default width; a tab switch sends a resize.
RESIZE_PLOTS = "() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 50); }"


def serialised(value):
    """A plotly figure as the JSON gradio sends (``gr.Plot``'s own ``postprocess``), made here in the handler's
    worker thread: gradio postprocesses on its event loop, and the figures of a finished race take it long enough
    there that a burst of clients waited seconds to be told the demo is busy. Anything else is passed as it is."""
    if isinstance(value, BaseFigure):
        return PlotData(type="plotly", plot=value.to_json())
    if isinstance(value, dict) and value.get("__type__") == "update" and isinstance(value.get("value"), BaseFigure):
        return {**value, "value": serialised(value["value"])}
    return value


def keyed(fn, c: dict):
    """``fn`` returning (or streaming) ``{name: value}`` as gradio takes it: ``{component: value}``, its figures
    already JSON (``serialised``)."""
    def by_component(out: dict) -> dict:
        return {c[name]: serialised(value) for name, value in out.items()}

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            for out in fn(*args, **kwargs):
                yield by_component(out)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return by_component(fn(*args, **kwargs))
    return call


def decoding(c: dict) -> dict:
    """How every event that decodes (a run, a fork) is queued. always_last: Run pressed while a stopped run is still
    winding down starts once that one ends (the default, "once", would drop the click). concurrency_limit=None:
    every run reaches its handler at once, which keeps the app's own line (dico_ui.runs.LINE: LIMITS.decoders decode,
    LIMITS.queue admitted) and tells the rest it is busy; one concurrency_id for them all."""
    return dict(show_progress="minimal", show_progress_on=[c["status"]], concurrency_limit=None,
                concurrency_id="decode", trigger_mode="always_last")


def wire(demo, c: dict) -> None:
    """Every event of the page. Inside ``demo``'s ``with`` block (gradio attaches events to the open Blocks)."""
    slots = c["slots"]
    c = {**c, **slots.named}
    results = [c[name] for name in RESULTS]          # a run fills these (the API's /run returns them in this order)
    quiet = dict(queue=False, show_api=False)
    live = decoding(c)
    page_run = [c[n] for n in ("prompt", "model", "mode", "gen_length", "block_length", "lanes", "capture_attention")]
    optional = [c["constraints"], c["measure_clash"]]            # run_ui takes them after the settings controls
    # Each click is stamped before it queues, so Stop can end a run that is still waiting (see runs.stop); the
    # lane rows become the lanes, then the run reads them.
    for trigger in (c["run"].click, c["prompt"].submit):
        trigger(h.clicked, None, None, **quiet) \
            .then(lane_controls.collect, slots.inputs, c["lanes"], **quiet) \
            .then(keyed(h.run_ui, c), page_run + c["controls"] + optional, results, show_api=False, **live)
    c["api"].click(keyed(h.run_api, c), c["api_run"], results, api_name="run", **live)
    c["api_replay"].click(keyed(h.replay_api, c), [c["api_file"]], results + [c["prompt"]], api_name="replay")
    c["stop"].click(h.stop, None, [c["status"]], **quiet)
    c["takeaway_button"].click(keyed(h.take_away_ui, c), [c["traces"]], [c["takeaway"], c["status"]],
                               show_api=False, show_progress="minimal", concurrency_limit=2)
    c["api_takeaway"].click(keyed(h.take_away_api, c), c["api_takeaway_in"], [c["takeaway"]], api_name="take_away",
                            concurrency_limit=2)
    c["upload"].upload(keyed(h.replay_upload, c), [c["upload"]], results + [c["prompt"]], show_api=False,
                       show_progress="minimal")
    c["replay"].click(h.clicked, None, None, **quiet) \
        .then(keyed(h.replay_race, c), [c["traces"], c["speed"]], [c["status"], c["answers"]], show_api=False,
              show_progress="hidden", concurrency_limit=4, trigger_mode="always_last")
    wire_lanes(slots, c)
    wire_step_view(c)
    wire_fork_panel(c, results)
    c["model"].input(keyed(h.choose_model, c), [c["model"]], [c["model"], c["model_note"], c["measure_clash"],
                                                              c["mode"], c["block_length"]], show_api=False)
    c["mode"].change(keyed(h.show_block_length, c), [c["mode"]], [c["block_length"]], **quiet)
    demo.load(keyed(h.first_impression, c), None, results + [c["prompt"]], show_api=False)
    demo.unload(h.closed)
    demo.load(keyed(h.current_model_note, c), None, [c["model_note"]], show_api=False, show_progress="hidden")
    for tab in c["plot_tabs"]:
        tab.select(None, None, None, js=RESIZE_PLOTS, **quiet)


def wire_lanes(slots, c: dict) -> None:
    """Add, Remove, presets and each row's method menu."""
    rows = list(slots.named.values())
    quiet = dict(queue=False, show_api=False)
    slots.add.click(keyed(lane_controls.add_lane, c), slots.inputs, rows, **quiet)
    slots.preset.input(keyed(lane_controls.apply_preset, c), [slots.preset] + slots.inputs, rows, **quiet)
    for i, remove in enumerate(slots.removes):
        remove.click(keyed(functools.partial(lane_controls.remove_lane, i), c), slots.inputs, rows, **quiet)
        slots.methods[i].input(lane_controls.choose_method, slots.methods[i], slots.knobs[i], **quiet)


def wire_step_view(c: dict) -> None:
    """The step slider, the run chooser, Play, and the two measurements that decode on request (in the line, as a run
    is): the step's dependency map and the Attention tab's locality layer by layer."""
    small = dict(show_api=False, show_progress="hidden")
    step_view = [c["step_view"], c["step_text"], c["dependency"], c["dependency_note"]]
    c["step"].change(keyed(h.show_step, c), [c["step_run"], c["step"], c["traces"]], step_view, concurrency_limit=4,
                     **small)
    c["step_run"].input(keyed(h.choose_run, c), [c["step_run"], c["traces"]], [c["step"]] + step_view, **small)
    playing = [c["timer"], c["play"], c["playing"], c["step"]]
    c["play"].click(keyed(h.toggle_play, c), [c["playing"], c["step"], c["step_run"], c["traces"]], playing, **small)
    c["timer"].tick(keyed(h.tick, c), [c["step"], c["step_run"], c["traces"]], playing, concurrency_limit=4, **small)
    quiet = dict(queue=False, show_api=False)           # each click stamped before it queues, as a run's (runs.stop)
    c["dependency_button"].click(h.clicked, None, None, **quiet) \
        .then(keyed(h.dependency_map, c), [c["step_run"], c["step"], c["traces"]],
              [c["dependency"], c["dependency_note"], c["status"]], show_api=False,
              **{**decoding(c), "show_progress_on": [c["dependency"]]})
    c["layers_button"].click(h.clicked, None, None, **quiet) \
        .then(keyed(h.layers_view, c), [c["traces"]], [c["locality"], c["status"]], show_api=False,
              **{**decoding(c), "show_progress_on": [c["locality"]]})


def wire_fork_panel(c: dict, results: list) -> None:
    """The fork panel's events and ``/fork``: a fork decodes as a run does (``decoding``), and Stop ends it."""
    live = decoding(c)
    quiet = dict(queue=False, show_api=False)
    here = [c["traces"], c["step_run"], c["step"], c["fork_position"]]
    c["fork_show"].click(keyed(forks.show_candidates, c), [c["step_run"], c["step"], c["fork_position"], c["traces"]],
                         [c["fork_token"], c["fork_note"], c["status"]], show_api=False, show_progress="minimal")
    c["fork_force"].click(h.clicked, None, None, **quiet) \
        .then(keyed(forks.force_ui, c), here + [c["fork_token"], c["fork_word"], c["fork_with"]], results,
              show_api=False, **live)
    c["fork_take_back"].click(h.clicked, None, None, **quiet) \
        .then(keyed(forks.take_back_ui, c), here + [c["fork_with"]], results, show_api=False, **live)
    c["step_run"].change(keyed(forks.lanes_menu, c), [c["traces"]], [c["fork_with"]], **quiet)
    for button, opened in (("fork_example", forks.open_example), ("edit_example", forks.open_edit_example)):
        c[button].click(keyed(opened, c), None, results + [c["prompt"]], show_api=False, show_progress="minimal")
    shown = results + [c[name] for name in ("prompt", "model", "gen_length", "mode", "model_note")]
    for i, button in enumerate(c.get("long_examples", [])):
        button.click(keyed(long_examples.opener(i), c), None, shown, show_api=False, show_progress="minimal")
    c["api_fork"].click(keyed(forks.fork_api, c), c["api_fork_in"], results, api_name="fork", **live)
