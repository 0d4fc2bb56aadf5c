"""The page's event handlers: plain functions of component values, unit-tested without a server.

Every result-producing handler returns (or streams) the ``RESULTS`` outputs in order. A run first clears
the previous results (so an error never leaves stale figures), checks the request through the library,
then streams the race and finally draws every figure from the traces.
"""
from __future__ import annotations

import functools
import inspect
import logging
import tempfile
import time
import uuid
from pathlib import Path

import gradio as gr

import visuals
from dico.trace import MAX_JSON_BYTES, Trace, bundle_json, read_traces
from dico_ui import render
from dico_ui.about import about_text
from dico_ui.models import EMBEDDED_NAME, HUB_MODELS, describe, get_predictor, gpu, is_warm, mark_warm
from dico_ui.race import Frame, race, replay
from dico_ui.request import build_request, check, settings_from_controls, settings_from_json
from dico_ui.text import clean

log = logging.getLogger("dico_ui")
RESULTS = ("status", "answers", "trajectory", "phases", "clusters", "side_by_side", "masked", "table", "attention",
           "step_run", "step", "step_view", "step_text", "download", "about", "traces")
EXAMPLE_RUN = Path(__file__).resolve().parent.parent / "assets" / "ui" / "example_run.json"
DOWNLOADS = Path(tempfile.gettempdir()) / "dico-explorer"
STREAM_INTERVAL = 0.15      # s between streamed frames: enough to watch, few enough for a slow connection
MAX_SPEED = 50              # replay speed limit, steps per second
# Stop is cooperative: a run stops when its session pressed Stop after the run was asked for (its click, or its
# start for API calls); a run still queued when Stop was pressed ends as soon as it starts. No thread is killed.
_clicks: dict[str, float] = {}    # session -> when Run (or Replay) was last clicked
_stops: dict[str, float] = {}     # session -> when Stop was last pressed
_live: dict[str, Frame] = {}      # session -> the race on screen


# ============================================================================ errors

def friendly(title: str):
    """User errors (ValueError: the library's named-field messages) become a toast without a logged traceback;
    anything else is logged once and reported without details."""
    def error(exc: Exception) -> gr.Error:
        if isinstance(exc, gr.Error):
            return exc
        if isinstance(exc, ValueError):
            return gr.Error(clean(exc), title=title, print_exception=False)
        log.exception("%s: unexpected error", title)
        return gr.Error(f"Something went wrong on the server ({type(exc).__name__}); it has been logged. Change "
                        "the input and try again.", title=title, print_exception=False)

    def wrap(fn):
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def stream(*args, **kwargs):
                try:
                    yield from fn(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - nothing reaches the user as a traceback
                    raise error(exc) from None
            return stream

        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                raise error(exc) from None
        return call
    return wrap


def _figure(name: str, fn, *args):
    """A figure from visuals, or none (and a logged error) if this trace cannot be drawn."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a figure must never take the page down
        log.exception("figure %s failed", name)
        return None


# ============================================================================ results

def cleared(status: str) -> tuple:
    """Every result output emptied: a new run or an error never shows the previous run's figures."""
    return (status, "", None, None, None, None, None, render.table_frame([]), None, gr.update(choices=[], value=None),
            gr.update(value=0, maximum=1, interactive=False), None, "", None, about_text([]), [])


def results(traces: list[Trace], status: str, outside: str = "") -> tuple:
    """Every result output (RESULTS order) for finished (or stopped, or uploaded) traces."""
    traces = render.method_order(traces)
    main = next((t for t in traces if t.method == "dico"), traces[0])
    i = traces.index(main)
    with_attention = next((t for t in traces if t.attention is not None), main)
    last = max(len(main.steps) - 1, 0)
    lanes = [(t, t.nfe - 1, "stopped" if t.stopped else "done") for t in traces]
    return (status, render.lanes_html(lanes, banner=banner(outside)),
            _figure("trajectory", visuals.trajectory_figure, main),
            _figure("phase", visuals.phase_figure, main),
            _figure("cluster", visuals.cluster_figure, main),
            _figure("side-by-side", visuals.trajectories_side_by_side, traces),
            _figure("masked fraction", visuals.comparison_figure, traces),
            render.table_frame(traces),
            _figure("attention", visuals.attention_figure, with_attention),
            gr.update(choices=[(f"{render.label(t.method)}: {t.nfe} steps", j) for j, t in enumerate(traces)], value=i),
            gr.update(minimum=0, maximum=max(last, 1), value=last, interactive=bool(last)),
            _figure("step view", visuals.step_view_figure, main, last) if main.steps else None,
            render.step_html(main, last), write_bundle(traces), about_text(traces, outside), traces)


def banner(outside: str) -> str:
    return f'<div class="banner" role="alert">⚠ {clean(outside)}</div>' if outside else ""


def write_bundle(traces: list[Trace]) -> str:
    """The run's traces as one JSON file to download; files older than an hour are removed."""
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    for old in DOWNLOADS.glob("dico-traces-*.json"):
        if time.time() - old.stat().st_mtime > 3600:
            old.unlink(missing_ok=True)
    path = DOWNLOADS / f"dico-traces-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.json"
    path.write_text(bundle_json(traces))
    return str(path)


# ============================================================================ the run

@gpu
def decode_race(req, session: str, since: float):
    """The only function that runs the model (on ZeroGPU it gets the GPU; its arguments are plain data)."""
    predictor = get_predictor(req.model)
    yield from race(predictor, req, should_stop=lambda: stopped_since(session, since))


def _session(request) -> str:
    return getattr(request, "session_hash", None) or "local"


def clicked(request: gr.Request):
    """Run or Replay was clicked (before the queue): a Stop after this moment stops that run, queued or running."""
    _clicks[_session(request)] = time.monotonic()


def stopped_since(session: str, since: float) -> bool:
    return _stops.get(session, float("-inf")) >= since


def _asked(session: str) -> float:
    """When the run starting now was asked for: its click, or now (API calls have no click)."""
    return _clicks.pop(session, None) or time.monotonic()


def _stream(request, make_request, raise_errors: bool = True):
    """Clear the page, check the request, stream the race, then draw everything from the traces. A bad request
    is said in the status; API callers also get it raised, the page gets it as a toast (an error raised right
    after a yield can reach the browser before that yield does, leaving the old status on screen)."""
    session = _session(request)
    since = _asked(session)
    if stopped_since(session, since):
        yield ("Stopped before it started: Stop was pressed while this run waited in the queue.",) + \
            tuple(gr.skip() for _ in RESULTS[1:])
        return
    yield cleared("Checking the request…")
    try:
        req = make_request()
        predictor, warnings, outside = check(req)
    except ValueError as exc:        # said in the status too, where the eye is after pressing Run
        yield (f"**Cannot run**: {clean(exc)}",) + tuple(gr.skip() for _ in RESULTS[1:])
        if raise_errors:
            raise
        gr.Warning(clean(exc), title="Cannot run")
        return
    for warning in warnings:
        gr.Warning(clean(warning))
    token_text = functools.lru_cache(maxsize=None)(predictor.token_text)
    skip = tuple(gr.skip() for _ in RESULTS[2:])
    cold = "" if is_warm(req.model) else " (first run on this model: its timing includes warming up)"
    started, shown = time.perf_counter(), 0.0
    frame = None
    try:
        for frame in decode_race(req, session, since):
            _live[session] = frame
            if frame.finished or time.perf_counter() - shown < STREAM_INTERVAL:
                continue
            shown = time.perf_counter()
            lanes = [(lane.trace, lane.k, lane.state) for lane in frame.lanes if lane.trace is not None]
            yield (race_status(frame, describe(predictor)), render.lanes_html(lanes, token_text, banner(outside))) \
                + skip
    finally:
        _live.pop(session, None)
    mark_warm(req.model)
    if not frame.traces:
        yield cleared("Stopped before the first step.")
        return
    verb = (f"Stopped at step {frame.round}; the partial answers and figures stay on screen, press Run to start "
            "again. Ran" if frame.stopped else "Done")
    status = (f"{verb} in {time.perf_counter() - started:.1f} s on {clean(describe(predictor))}{cold}.  \n"
              + render.summary(frame.traces, outside))
    yield results(frame.traces, status, outside)


def race_status(frame: Frame, where: str = "") -> str:
    lines = []
    for lane in frame.lanes:
        if lane.trace is None:
            continue
        state = {"decoding": "decoding", "done": "finished", "stopped": "stopped"}[lane.state]
        lines.append(f"{render.label(lane.method)}: step {lane.k + 1}, {state}")
    return f"Racing{' on ' + clean(where) if where else ''}: " + " · ".join(lines)


@friendly("Cannot run")
def run_ui(request: gr.Request, prompt, model, mode, gen_length, block_length, methods, capture_attention, *settings):
    """The Run button: the generated settings controls' values, in ``request.CONTROLS`` order, after the rest."""
    yield from _stream(request, lambda: build_request(prompt, model, mode, gen_length, block_length, methods,
                                                      settings_from_controls(methods or [], settings),
                                                      capture_attention), raise_errors=False)


@friendly("Cannot run")
def run_api(request: gr.Request, prompt, model, mode, gen_length, block_length, methods, settings, capture_attention):
    """API ``/run``: the settings as one JSON object (a dict or its JSON text), one entry per method; settings left
    out keep their defaults::

        Client(url).predict(prompt, "dico-tiny", "non-ar", 96, 32, ["vanilla", "fast", "dico"],
                            {"fast": {"threshold": 0.9}}, True, api_name="/run")
    """
    yield from _stream(request, lambda: build_request(prompt, model, mode, gen_length, block_length, methods,
                                                      settings_from_json(settings), capture_attention))


def stop(request: gr.Request):
    """Stop: this session's running race ends after its current round and draws what it has (status "Stopped at
    step k", partial answers and figures); a run or replay still queued ends as soon as it starts."""
    session = _session(request)
    _stops[session] = time.monotonic()
    if session in _live:
        return "Stopping after the current step…"
    return "Stopped: nothing of yours was decoding; a queued run is cancelled before it starts."


# ============================================================================ replays, step view, models

@friendly("Cannot replay this file")
def replay_upload(path):
    """Draw every figure from an uploaded trace file (a bundle or one trace) without a model."""
    if not path:
        raise ValueError("file: no file was uploaded")
    path = Path(path)
    if path.stat().st_size > MAX_JSON_BYTES:
        raise ValueError(f"file: is {path.stat().st_size / 2**20:.1f} MiB, over the {MAX_JSON_BYTES // 2**20} MiB "
                         "limit")
    traces = read_traces(path.read_bytes())
    return results(traces, f"Replayed {len(traces)} trace(s) from **{clean(path.name)}**.  \n"
                   + render.summary(traces))


def first_impression():
    """The page opens on a finished example run, drawn from traces shipped in assets/ui (no model needed): every
    result output, then the prompt box filled with the example's prompt."""
    try:
        traces = read_traces(EXAMPLE_RUN.read_bytes())
    except (OSError, ValueError):
        log.warning("no example run at %s (python -m dico_ui.examples makes it)", EXAMPLE_RUN)
        return cleared("Press **Run** to decode.") + (gr.skip(),)
    status = ("A finished example run, replayed from traces shipped with the app: " + render.run_caption(traces[0])
              + ". Press **Replay the race** to watch it again, or **Run** to decode it yourself.  \n"
              + render.summary(traces))
    return results(traces, status) + (traces[0].prompt,)


@friendly("Cannot replay the race")
def replay_race(request: gr.Request, traces, speed):
    """The race of the traces on screen again, at ``speed`` steps per second; Stop ends it."""
    session = _session(request)
    since = _asked(session)
    if not traces:
        raise ValueError("replay: there is no run on screen yet; press Run first")
    speed = float(speed or 0)
    if not 0 < speed <= MAX_SPEED:
        raise ValueError(f"speed: must be in (0, {MAX_SPEED}] steps per second, got {speed:g}")
    for frame in replay(render.method_order(traces)):
        if stopped_since(session, since):
            yield f"Replay stopped at step {frame.round}.", gr.skip()
            return
        lanes = [(lane.trace, lane.k, lane.state) for lane in frame.lanes]
        yield f"Replaying the race: step {frame.round}" + (" (end)" if frame.finished else ""), \
            render.lanes_html(lanes)
        if not frame.finished:
            time.sleep(1.0 / speed)      # pacing for the eye, not synchronisation


def _trace_at(traces, run_index):
    if not traces:
        return None
    i = int(run_index or 0)
    return traces[i] if 0 <= i < len(traces) else traces[0]


@friendly("Cannot show this step")
def show_step(run_index, k, traces):
    trace = _trace_at(traces, run_index)
    if trace is None or not trace.steps:
        return None, render.step_html(trace, 0)
    k = max(0, min(int(k or 0), len(trace.steps) - 1))
    return _figure("step view", visuals.step_view_figure, trace, k), render.step_html(trace, k)


@friendly("Cannot show this run")
def choose_run(run_index, traces):
    trace = _trace_at(traces, run_index)
    if trace is None:
        return gr.skip(), None, ""
    last = max(len(trace.steps) - 1, 0)
    view, text = show_step(run_index, last, traces)
    return gr.update(maximum=max(last, 1), value=last, interactive=bool(last)), view, text


PLAY, PAUSE = "▶ Play", "⏸ Pause"


def toggle_play(playing, k, run_index, traces):
    """Start or stop stepping through the run; starting at the last step rewinds to step 0."""
    trace = _trace_at(traces, run_index)
    if playing or trace is None or len(trace.steps) < 2:
        return gr.Timer(active=False), gr.update(value=PLAY), False, gr.skip()
    at_end = int(k or 0) >= len(trace.steps) - 1
    return gr.Timer(active=True), gr.update(value=PAUSE), True, (0 if at_end else gr.skip())


def tick(k, run_index, traces):
    """One frame of Play: the next step, stopping at the last one."""
    trace = _trace_at(traces, run_index)
    if trace is None or int(k or 0) >= len(trace.steps) - 1:
        return gr.skip(), gr.Timer(active=False), gr.update(value=PLAY), False
    return int(k or 0) + 1, gr.skip(), gr.skip(), gr.skip()


def choose_model(model):
    """Load the chosen model and say where it runs; a hub model that cannot load leaves the embedded one chosen."""
    try:
        predictor = get_predictor(model)
    except ValueError as exc:
        gr.Warning(clean(exc))
        return EMBEDDED_NAME, model_note(get_predictor(EMBEDDED_NAME), failed=HUB_MODELS.get(model, model))
    return gr.skip(), model_note(predictor)


def current_model_note() -> str:
    """At page load: where the embedded model runs (loading it if the warm-up has not yet)."""
    try:
        return model_note(get_predictor(EMBEDDED_NAME))
    except ValueError as exc:
        return f"**The embedded model cannot be loaded**: {clean(exc)}"


def model_note(predictor=None, failed: str = "") -> str:
    where = f"Runs on **{clean(describe(predictor))}**." if predictor is not None else ""
    if failed:
        where = f"**{clean(failed)} could not be loaded here**; the embedded model keeps working. " + where
    return where


def show_block_length(mode):
    return gr.update(visible=mode == "semi-ar")
