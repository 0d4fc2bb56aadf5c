"""The page's event handlers: plain functions of component values, unit-tested without a server.

Every handler returns (or streams) its outputs keyed by name: ``{"status": ..., "answers": ...}``; a name left out
is left as it is on the page (``dico_ui.outputs`` names them, ``dico_ui.wiring`` maps names to components). A run
checks its request first (a bad value is said in the status and one toast, and the page keeps what it shows), then
clears the previous results with its first frame, streams the race and finally draws every figure from the traces:
the path a fork and a measurement take too (``dico_ui.stream``); a ``RunJob`` is what a run does its own way.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

import visuals
from dico.block import BLOCK_KIND
from dico.observe import WITHIN, dependency, layer_locality, layer_maps, locality, stage_of
from dico.trace import MAX_JSON_BYTES, read_traces
from dico_ui import render, runs
from dico_ui.limits import LIMITS
from dico_ui.models import (
    EMBEDDED_NAME,
    HUB_MODELS,
    MODEL_NOTES,
    describe,
    get_predictor,
    gpu,
    is_warm,
    mark_warm,
    one_thread_in_a_forked_worker,
)
from dico_ui.outputs import RESULTS, banner, cleared, figure, friendly, results  # noqa: F401  (RESULTS: tests)
from dico_ui.race import Frame, race, replay
from dico_ui.request import CONTROLS, RunRequest, api_request, check, fit_to_model, measures_by_default, page_request
from dico_ui.runs import clicked, closed, stop  # noqa: F401  (wired in dico_ui.wiring)
from dico_ui.stream import End, Job, Timed, admitted, failure
from dico_ui.text import clean

log = logging.getLogger("dico_ui")
EXAMPLE_RUN = Path(__file__).resolve().parent.parent / "assets" / "ui" / "example_run.json"  # dico_ui.examples makes it
MAX_SPEED = 50              # replay speed limit, steps per second
EXPIRED = ("This page's run is no longer kept on the server (a run is kept "
           f"{LIMITS.session_ttl_s / 60:.0f} minutes after it finishes); press Run to decode again.")


# ============================================================================ the run

@gpu
def decode_race(req):
    """The only function that runs the model (on ZeroGPU it gets the GPU in a worker process; its argument, a frozen
    ``RunRequest``, pickles). It never decides to stop: the caller closes it, which a worker process sees too."""
    one_thread_in_a_forked_worker()
    yield from race(get_predictor(req.model), req)


class RunJob(Job):
    """A race of lanes (``dico_ui.stream`` streams it): the page cleared by its first frame, the lanes live with the
    prompt's note, then every figure drawn from the traces. On a block diffusion model the request is fitted to its
    blocks first (``request.fit_to_model``), and the status says so from start to end."""

    def __init__(self, req: RunRequest):
        req, self.fitted = fit_to_model(req, get_predictor(req.model))
        predictor, warnings, outside = check(req, runs.pass_s)
        super().__init__(predictor, warnings)
        self.req, self.outside, self.cold = req, outside, ""

    def start(self) -> dict:
        self.cold = "" if is_warm(self.req.model) else " (first run on this model: its timing includes warming up)"
        return {"status": "Starting…" + self.fitted_line() + "".join(f"  \n⚠ {clean(w)}" for w in self.warnings)}

    def fitted_line(self) -> str:
        return f"  \n{clean(self.fitted)}" if self.fitted else ""

    def first(self, frame: Frame) -> dict:
        return {**cleared(""), **self.live(frame)}           # the last run's figures go once this one decodes

    def frames(self):
        return decode_race(self.req)

    def live(self, frame: Frame) -> dict:
        lanes = [(lane.trace, lane.k, lane.state) for lane in frame.lanes if lane.trace is not None]
        return {"status": race_status(frame, describe(self.predictor)),
                "answers": render.lanes_html(lanes, self.token_text, banner(self.outside))}

    def drawn(self, frame: Frame, end: End) -> dict:
        mark_warm(self.req.model)
        traces = frame.traces
        if not end.failed and not self.cold:            # a measured clash's passes took time too
            passes = sum(t.nfe + (t.clash or {}).get("passes", 0) for t in traces)
            runs.paced(end.seconds, passes, traces[0].prompt_length + self.req.gen_length)
        took = f"in {end.seconds:.1f} s on {clean(describe(self.predictor))}{self.cold}"
        return results(traces, f"{ending(frame, end)} {took}.{self.fitted_line()}  \n"
                       + render.summary(traces, self.outside), self.outside)


def ending(frame: Frame, end: End) -> str:
    """How a race ended, the start of its status."""
    if frame.measuring:                 # ended after every lane's decode, while measuring one lane's clash
        why = (f"failed ({failure(end.failed)})" if end.failed else "stopped at the time limit ("
               f"{LIMITS.run_seconds:.0f} s a run on this shared server)" if end.why == "time" else "stopped")
        return (f"Measuring the clash of {clean(frame.measuring)} {why}: every lane had finished decoding; the lanes "
                "not measured say so. Ran")
    if end.failed:
        return (f"**The run failed**: {failure(end.failed)}. The partial answers (up to step "
                f"{max(t.nfe for t in frame.traces)}) stay on screen; press Run to try again. Ran")
    if end.why == "time":
        return (f"Stopped at the time limit ({LIMITS.run_seconds:.0f} s a run on this shared server) at step "
                f"{frame.round}; the partial answers and figures stay on screen. Ran")
    if frame.stopped:
        return (f"Stopped at step {frame.round}; the partial answers and figures stay on screen, press Run to start "
                "again. Ran")
    limited = [clean(lane.label) for lane in frame.lanes if lane.state == "limit"]
    return "Done" + (f" ({', '.join(limited)} stopped at the pass limit)" if limited else "")


def race_status(frame: Frame, where: str = "") -> str:
    lines = []
    for lane in frame.lanes:
        if lane.trace is None:
            continue
        state = {"decoding": "decoding", "done": "finished", "stopped": "stopped",
                 "limit": "stopped at the pass limit"}[lane.state]
        lines.append(f"{clean(lane.label)}: step {lane.k + 1}, {state}")
    measuring = (f"  \nMeasuring the clash of {clean(frame.measuring)}'s steps (extra passes, apart from its "
                 "steps)…" if frame.measuring else "")
    return f"Racing{' on ' + clean(where) if where else ''}: " + " · ".join(lines) + measuring


@friendly("Cannot run", page=True)
def run_ui(request: gr.Request, prompt, model, mode, gen_length, block_length, lanes, capture_attention, *values):
    """The Run button: the lane rows (``lane_controls.collect``), then the generated settings controls' values in
    ``request.CONTROLS`` order, then the word constraints every lane starts from ("0:The, 5:leader"; optional) and
    whether to measure each lane's clash after the decode (optional; left out: on for the embedded models). Lanes are
    named as the page names them ("Lane 2: label")."""
    settings, rest = values[:len(CONTROLS)], dict(zip(("constraints", "measure_clash"), values[len(CONTROLS):]))
    yield from admitted(request, lambda: RunJob(page_request(prompt, model, mode, gen_length, block_length, lanes,
                                                             capture_attention, settings, **rest)), True, "run")


@friendly("Cannot run")
def run_api(request: gr.Request, prompt, model, mode, gen_length, block_length, methods, settings, capture_attention,
            constraints=None, measure_clash=None):
    """API ``/run``: ``methods`` per lane a method or ``{"method", "label", "settings"}`` (at most 6, two may share
    a method); ``settings`` one JSON object (or its text) per method, which its lanes start from; ``constraints``
    words fixed before decoding, every lane starting from them ("0:The, 5:leader" or {"0": "The"}; "" none);
    ``measure_clash`` each lane's clash a step after the decode (``trace.clash``; extra passes, at most
    ``race.CLASH_BUDGET`` a run; None or left out: on for the embedded models, off for a large one)::

        Client(url).predict(prompt, "dico-tiny", "non-ar", 96, 32, ["vanilla", {"method": "topk", "settings":
                            {"k": 4}}, "fast"], {"fast": {"threshold": 0.9}}, True, "0:The", api_name="/run")
    """
    yield from admitted(request, lambda: RunJob(api_request(prompt, model, mode, gen_length, block_length, methods,
                                                            settings, capture_attention, constraints, measure_clash)),
                        False, "run")


# ============================================================================ replays, step view, models

def _replayed(path) -> dict:
    """Every result output drawn from a trace file (a bundle or one trace) without a model, and the prompt box
    filled with the file's prompt."""
    if not path:
        raise ValueError("file: no file was uploaded")
    path = Path(path)
    if path.stat().st_size > MAX_JSON_BYTES:
        raise ValueError(f"file: is {path.stat().st_size / 2**20:.1f} MiB, over the {MAX_JSON_BYTES // 2**20} MiB "
                         "limit")
    traces = read_traces(path.read_bytes())
    prompt = traces[0].prompt
    shown = prompt if len(prompt) <= 80 else prompt[:79].rstrip() + "…"
    status = (f"Replayed {len(traces)} trace(s) of the prompt “{clean(shown)}” (from the file "
              f"{clean(path.name)}).  \n" + render.summary(traces))
    return {**results(traces, status), "prompt": prompt}


replay_upload = friendly("Cannot replay this file", page=True)(_replayed)
replay_upload.__doc__ = "The page's upload: a bad file is said in the status and one toast; the page keeps its run."
replay_api = friendly("Cannot replay this file")(_replayed)
replay_api.__doc__ = "API ``/replay``: every result output (and the prompt) from an uploaded trace file."


def first_impression() -> dict:
    """The page opens on a finished example run, drawn from traces shipped in assets/ui (no model needed): every
    result output, and the prompt box filled with the example's prompt."""
    try:
        traces = read_traces(EXAMPLE_RUN.read_bytes())
    except (OSError, ValueError) as exc:
        log.warning("no example run from %s (python -m dico_ui.examples makes it): %s", EXAMPLE_RUN, exc)
        return cleared("_The example run shipped with this copy could not be read, so the page opens empty._ "
                       "Press **Run** to decode.")
    status = ("A finished example run, replayed from traces shipped with the app: " + render.run_caption(traces[0])
              + ". Press **Replay the race** to watch it again, or **Run** to decode it yourself.  \n"
              + render.summary(traces))
    return {**results(traces, status), "prompt": traces[0].prompt}


def example_prompt() -> str:
    """The example run's prompt, which the prompt box holds from the start: a Run pressed before the example run
    has loaded decodes the prompt the page is about to show, not an empty box."""
    try:
        return read_traces(EXAMPLE_RUN.read_bytes())[0].prompt
    except (OSError, ValueError, IndexError):
        return ""


@friendly("Cannot replay the race", page=True)
def replay_race(request: gr.Request, traces, speed):
    """The race of the traces on screen again, at ``speed`` steps per second; Stop ends it."""
    session = runs.session_of(request)
    since = runs.asked(session)
    if not traces:
        raise ValueError(EXPIRED)
    speed = float(speed or 0)
    if not 0 < speed <= MAX_SPEED:
        raise ValueError(f"replay speed: must be in (0, {MAX_SPEED}] steps per second, got {speed:g}")
    for frame in replay(traces):
        if runs.ended(session, since):
            yield {"status": f"Replay stopped at step {frame.round}."}
            return
        lanes = [(lane.trace, lane.k, lane.state) for lane in frame.lanes]
        yield {"status": f"Replaying the race: step {frame.round}" + (" (end)" if frame.finished else ""),
               "answers": render.lanes_html(lanes)}
        if not frame.finished:
            time.sleep(1.0 / speed)      # pacing for the eye, not synchronisation


def _trace_at(traces, run_index):
    if not traces:
        return None
    i = int(run_index or 0)
    return traces[i] if 0 <= i < len(traces) else traces[0]


def _step(trace, k) -> dict:
    """The step view at step ``k``; a dependency map of another step goes, and what one here would cost is said."""
    if trace is None or not trace.steps:
        return {"step_view": None, "step_text": render.step_html(trace, 0), "dependency": None, "dependency_note": ""}
    k = max(0, min(int(k or 0), len(trace.steps) - 1))
    return {"step_view": figure("step view", visuals.step_view_figure, trace, k),
            "step_text": render.step_html(trace, k), "dependency": None,
            "dependency_note": render.dependency_plan(trace, k)[1]}


def show_step(run_index, k, traces) -> dict:
    """The step view of run ``run_index`` at step ``k``."""
    return _step(_trace_at(traces, run_index), k)


def choose_run(run_index, traces) -> dict:
    """Another run chosen in the step view: its first step."""
    trace = _trace_at(traces, run_index)
    if trace is None:
        gr.Warning(EXPIRED)
        return {}
    last = max(len(trace.steps) - 1, 0)
    return {"step": gr.update(maximum=max(last, 1), value=0, interactive=bool(last)), **_step(trace, 0)}


class Measurement(Job):
    """A measurement on request (the dependency map, the locality layer by layer): one model call of many passes,
    that waits for a decoder in the line of runs as a run does and ends as a run does (Stop while it waits, a
    fault, the time limit between two of its passes); its words go under its figure (``key``, after ``above``: the
    status keeps the run's own). It never changes the run."""
    key, above, name = "", "", ""

    def waiting(self, said: str) -> dict:
        return {self.key: self.above + said}

    def frames(self):
        yield Measured(self.measure(time.monotonic() + runs.LIMITS.run_seconds))

    def measure(self, deadline: float):
        """The model call (``stream.Timed`` past ``deadline``)."""
        raise NotImplementedError

    def ended(self, frame, end: End, noun: str) -> dict:
        if frame is not None:
            return self.drawn(frame, end)
        why = (f"failed: {failure(end.failed)}" if end.failed else f"stopped at the time limit "
               f"({runs.LIMITS.run_seconds:.0f} s a run on this shared server)" if end.why == "time" else "stopped")
        return {self.key: self.above + f"{self.name} {why}; nothing was drawn."}


@dataclass(frozen=True)
class Measured:
    """A measurement's one frame: what it measured."""
    result: object
    finished: bool = True


@gpu
def measure_dependency(trace, at: int, deadline: float):
    """The dependency map's model call (on ZeroGPU in a worker process: a trace pickles, and what comes back)."""
    one_thread_in_a_forked_worker()
    return dependency(Timed(get_predictor(trace.model), deadline), trace, at)


class DependencyMap(Measurement):
    """The step view's dependency map before step ``k`` (``dico.observe.dependency``): one forward pass per masked
    position, refused above ``LIMITS.dependency_masked`` of them."""
    key, name = "dependency_note", "The dependency map"

    def __init__(self, traces, run_index, k):
        trace = _trace_at(traces, run_index)
        if trace is None:
            raise ValueError(EXPIRED)
        self.trace, self.k = trace, max(0, min(int(k or 0), len(trace.steps) - 1))
        self.passes, said = render.dependency_plan(trace, self.k)
        if not self.passes:
            raise ValueError(said or "this run has no steps")
        super().__init__(get_predictor(trace.model))

    def start(self) -> dict:
        return {self.key: f"Mapping the dependency before step {self.k}: {self.passes} forward passes…"}

    def measure(self, deadline: float):
        return measure_dependency(self.trace, self.k, deadline)

    def drawn(self, frame: Measured, end: End) -> dict:
        trace, k, found = self.trace, self.k, frame.result
        near = locality(found.positions, found.matrix, WITHIN, among=set(range(trace.answer_length)))
        where = (f" Among the answer's masked positions, {near.within:.0%} of it lies within {WITHIN} positions (an "
                 f"even spread would put {near.even:.0%} there), at a mean distance of {near.mean_distance:.1f} "
                 f"positions; {near.total:.1f} nats in all." if near is not None else "")
        return {"dependency": figure("dependency", visuals.dependency_figure, trace, k, found.positions, found.matrix),
                "dependency_note": f"Dependency before step {k} of {clean(trace.name)} ({stage_of(trace, k)} stage): "
                                   f"{found.passes} forward passes, apart from the run's steps, in {end.seconds:.1f} "
                                   f"s.{where}"}


@friendly("Cannot map the dependency", page=True)
def dependency_map(request: gr.Request, run_index, k, traces):
    """The step view's dependency map before step ``k`` (``DependencyMap``), decoded in the line of runs."""
    yield from admitted(request, lambda: DependencyMap(traces, run_index, k), True, "map the dependency")


@gpu
def measure_layers(trace, deadline: float):
    """The locality layer by layer's model call (on ZeroGPU in a worker process): one replay, two lenses (the answer's
    positions, all positions)."""
    one_thread_in_a_forked_worker()
    predictor = Timed(get_predictor(trace.model), deadline)
    maps = layer_maps(predictor, trace)
    return (layer_locality(predictor, trace, WITHIN, among=set(range(trace.answer_length)), maps=maps),
            layer_locality(predictor, trace, WITHIN, maps=maps))


class LayersView(Measurement):
    """The Attention tab's locality, layer by layer, of the run it shows (``dico.observe.layer_locality``): the
    run's steps replayed, one forward pass each, refused above ``LIMITS.layer_steps``."""
    key, name = "locality", "The locality layer by layer"

    def __init__(self, traces):
        if not traces:
            raise ValueError(EXPIRED)
        trace = next((t for t in traces if t.attention is not None), None)
        self.passes, said = render.layer_plan(trace)
        if not self.passes:
            raise ValueError(said)
        super().__init__(get_predictor(trace.model))
        self.trace, self.above = trace, render.stage_locality_md(trace) + "\n\n"

    def start(self) -> dict:
        return {self.key: self.above + f"Replaying {self.passes} steps layer by layer…"}

    def measure(self, deadline: float):
        return measure_layers(self.trace, deadline)

    def drawn(self, frame: Measured, end: End) -> dict:
        answer, every = frame.result
        return {self.key: render.layer_locality_md(self.trace, answer, every, end.seconds)}


@friendly("Cannot measure the layers", page=True)
def layers_view(request: gr.Request, traces):
    """The Attention tab's locality layer by layer (``LayersView``), decoded in the line of runs."""
    yield from admitted(request, lambda: LayersView(traces), True, "measure the layers")


PLAY, PAUSE = "▶ Play", "⏸ Pause"


def toggle_play(playing, k, run_index, traces) -> dict:
    """Start or stop stepping through the run; starting at the last step rewinds to step 0."""
    trace = _trace_at(traces, run_index)
    if trace is None and not playing:
        gr.Warning(EXPIRED)
    if playing or trace is None or len(trace.steps) < 2:
        return {"timer": gr.Timer(active=False), "play": gr.update(value=PLAY), "playing": False}
    at_end = int(k or 0) >= len(trace.steps) - 1
    return {"timer": gr.Timer(active=True), "play": gr.update(value=PAUSE), "playing": True,
            **({"step": 0} if at_end else {})}


def tick(k, run_index, traces) -> dict:
    """One frame of Play: the next step, stopping at the last one."""
    trace = _trace_at(traces, run_index)
    if trace is None or int(k or 0) >= len(trace.steps) - 1:
        return {"timer": gr.Timer(active=False), "play": gr.update(value=PLAY), "playing": False}
    return {"step": int(k or 0) + 1}


def choose_model(model) -> dict:
    """Load the chosen model and say where it runs; a hub model that cannot load leaves the embedded one chosen.
    Measuring the clash follows the model: on for an embedded one, off (on demand) for a large one. A block
    diffusion model sets the mode and block length to the one way it decodes (semi-AR, its own blocks)."""
    try:
        predictor = get_predictor(model)
    except ValueError as exc:
        gr.Warning(clean(exc))
        return {"model": EMBEDDED_NAME, "measure_clash": True,
                "model_note": model_note(get_predictor(EMBEDDED_NAME), failed=HUB_MODELS.get(model, model))}
    blocks = {"mode": "semi-ar", "block_length": predictor.block} if model_block(predictor) else {}
    return {"model_note": model_note(predictor), "measure_clash": measures_by_default(model), **blocks}


def current_model_note() -> dict:
    """At page load: where the embedded model runs (loading it if the warm-up has not yet)."""
    try:
        return {"model_note": model_note(get_predictor(EMBEDDED_NAME))}
    except ValueError as exc:
        return {"model_note": f"**The embedded model cannot be loaded**: {clean(exc)}"}


def model_note(predictor=None, failed: str = "") -> str:
    where = f"Runs on **{clean(describe(predictor))}**." if predictor is not None else ""
    if failed:
        where = f"**{clean(failed)} could not be loaded here**; the embedded model keeps working. " + where
    if predictor is not None and predictor.name in MODEL_NOTES:
        where += " " + MODEL_NOTES[predictor.name]
    if model_block(predictor):
        where += (f" A block diffusion model: it decodes semi-AR, one of its own blocks of {predictor.block} a window, "
                  "so a run on it uses them whatever the mode and block length say.")
    return where


def model_block(predictor) -> int | None:
    """A block diffusion model's block (``dico.block``), None for any other model (or none)."""
    return getattr(predictor, "block", None) if getattr(predictor, "kind", None) == BLOCK_KIND else None



def show_block_length(mode) -> dict:
    return {"block_length": gr.update(visible=mode == "semi-ar")}


# ============================================================================ take the race away

def _take_away(traces, lanes: str = "") -> list[str]:
    """The race's animated GIF and offline HTML (``visuals.takeaway``), written beside the downloads (cleaned as they
    are); every check (the lanes, the steps) is made before anything is written."""
    from dico_ui.downloads import DOWNLOADS, PREFIX
    from visuals.takeaway import write_takeaway
    if not traces:
        raise ValueError("traces: there is no race on this page to take away; run or replay one first")
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    stem = DOWNLOADS / f"{PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-race-{time.time_ns() % 10**8:08d}"
    return write_takeaway(list(traces), stem.with_suffix(".gif"), stem.with_suffix(".html"), lanes or None)


@friendly("Cannot take the race away", page=True)
def take_away_ui(traces) -> dict:
    """The take-away button: the race on the page as an animated GIF and one offline HTML file."""
    files = _take_away(traces)
    return {"takeaway": files}


@friendly("Cannot take the race away")
def take_away_api(path, lanes="") -> dict:
    """API ``/take_away``: a trace file (a bundle the app downloaded, or one trace) and the lanes to keep by name,
    comma-separated ("" every lane) -> the GIF and the HTML."""
    if not path:
        raise ValueError("file: no trace file was given")
    return {"takeaway": _take_away(read_traces(Path(path).read_bytes()), lanes)}
