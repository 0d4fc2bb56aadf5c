"""The page's event handlers: plain functions of component values, unit-tested without a server.

Every handler returns (or streams) its outputs keyed by name: ``{"status": ..., "answers": ...}``; a name left out
is left as it is on the page (``dico_ui.outputs`` names them, ``dico_ui.wiring`` maps names to components). A run
checks its request first (a bad value is said in the status and one toast, and the page keeps what it shows), then
clears the previous results, streams the race and finally draws every figure from the traces: the path a fork
takes too (``dico_ui.stream``); a ``RunJob`` is what a run does its own way.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import gradio as gr

import visuals
from dico.trace import MAX_JSON_BYTES, read_traces
from dico_ui import render, runs
from dico_ui.limits import LIMITS
from dico_ui.models import EMBEDDED_NAME, HUB_MODELS, describe, get_predictor, gpu, is_warm, mark_warm
from dico_ui.outputs import RESULTS, banner, cleared, figure, friendly, results  # noqa: F401  (RESULTS: tests)
from dico_ui.race import Frame, race, replay
from dico_ui.request import CONTROLS, RunRequest, api_request, check, page_request
from dico_ui.runs import clicked, closed, stop  # noqa: F401  (wired in dico_ui.wiring)
from dico_ui.stream import End, Job, admitted, failure
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
    yield from race(get_predictor(req.model), req)


class RunJob(Job):
    """A race of lanes (``dico_ui.stream`` streams it): the page cleared when it starts, the lanes live with the
    prompt's note, then every figure drawn from the traces."""

    def __init__(self, req: RunRequest):
        predictor, warnings, outside = check(req, runs.pass_s)
        super().__init__(predictor, warnings)
        self.req, self.outside, self.cold = req, outside, ""

    def start(self) -> dict:
        self.cold = "" if is_warm(self.req.model) else " (first run on this model: its timing includes warming up)"
        return cleared("Starting…" + "".join(f"  \n⚠ {clean(w)}" for w in self.warnings))

    def frames(self):
        return decode_race(self.req)

    def live(self, frame: Frame) -> dict:
        lanes = [(lane.trace, lane.k, lane.state) for lane in frame.lanes if lane.trace is not None]
        return {"status": race_status(frame, describe(self.predictor)),
                "answers": render.lanes_html(lanes, self.token_text, banner(self.outside))}

    def drawn(self, frame: Frame, end: End) -> dict:
        mark_warm(self.req.model)
        traces = frame.traces
        if not end.failed and not self.cold:
            runs.paced(end.seconds, sum(t.nfe for t in traces), traces[0].prompt_length + self.req.gen_length)
        took = f"in {end.seconds:.1f} s on {clean(describe(self.predictor))}{self.cold}"
        return results(traces, f"{ending(frame, end)} {took}.  \n" + render.summary(traces, self.outside),
                       self.outside)


def ending(frame: Frame, end: End) -> str:
    """How a race ended, the start of its status."""
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
    return f"Racing{' on ' + clean(where) if where else ''}: " + " · ".join(lines)


@friendly("Cannot run", page=True)
def run_ui(request: gr.Request, prompt, model, mode, gen_length, block_length, lanes, capture_attention, *values):
    """The Run button: the lane rows (``lane_controls.collect``), then the generated settings controls' values in
    ``request.CONTROLS`` order, then the word constraints every lane starts from ("0:The, 5:leader"; optional).
    Lanes are named as the page names them ("Lane 2: label")."""
    settings, constraints = values[:len(CONTROLS)], (values[len(CONTROLS):] or ("",))[0]
    yield from admitted(request, lambda: RunJob(page_request(prompt, model, mode, gen_length, block_length, lanes,
                                                             capture_attention, settings, constraints)), True, "run")


@friendly("Cannot run")
def run_api(request: gr.Request, prompt, model, mode, gen_length, block_length, methods, settings, capture_attention,
            constraints=None):
    """API ``/run``: ``methods`` per lane a method or ``{"method", "label", "settings"}`` (at most 6, two may share
    a method); ``settings`` one JSON object (or its text) per method, which its lanes start from; ``constraints``
    words fixed before decoding, every lane starting from them ("0:The, 5:leader" or {"0": "The"}; "" none)::

        Client(url).predict(prompt, "dico-tiny", "non-ar", 96, 32, ["vanilla", {"method": "topk", "settings":
                            {"k": 4}}, "fast"], {"fast": {"threshold": 0.9}}, True, "0:The", api_name="/run")
    """
    yield from admitted(request, lambda: RunJob(api_request(prompt, model, mode, gen_length, block_length, methods,
                                                            settings, capture_attention, constraints)), False, "run")


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
    if trace is None or not trace.steps:
        return {"step_view": None, "step_text": render.step_html(trace, 0)}
    k = max(0, min(int(k or 0), len(trace.steps) - 1))
    return {"step_view": figure("step view", visuals.step_view_figure, trace, k),
            "step_text": render.step_html(trace, k)}


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
    """Load the chosen model and say where it runs; a hub model that cannot load leaves the embedded one chosen."""
    try:
        predictor = get_predictor(model)
    except ValueError as exc:
        gr.Warning(clean(exc))
        return {"model": EMBEDDED_NAME,
                "model_note": model_note(get_predictor(EMBEDDED_NAME), failed=HUB_MODELS.get(model, model))}
    return {"model_note": model_note(predictor)}


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
    return where


def show_block_length(mode) -> dict:
    return {"block_length": gr.update(visible=mode == "semi-ar")}
