"""The page's event handlers: plain functions of component values, unit-tested without a server.

Every result-producing handler returns (or streams) the ``RESULTS`` outputs in order. A run first clears
the previous results (so an error never leaves stale figures), checks the request through the library,
then streams the race and finally draws every figure from the traces.
"""
from __future__ import annotations

import functools
import inspect
import logging
import time
from pathlib import Path

import gradio as gr

import visuals
from dico.trace import MAX_JSON_BYTES, Trace, read_traces
from dico_ui import render, runs
from dico_ui.about import about_text
from dico_ui.downloads import write_bundle
from dico_ui.limits import LIMITS
from dico_ui.models import EMBEDDED_NAME, HUB_MODELS, describe, get_predictor, gpu, is_warm, mark_warm
from dico_ui.race import Frame, LaneFailed, race, replay, settle
from dico_ui.request import build_request, check, settings_from_controls, settings_from_json
from dico_ui.runs import clicked, closed, stop  # noqa: F401  (wired in layout)
from dico_ui.text import clean

log = logging.getLogger("dico_ui")
RESULTS = ("status", "answers", "trajectory", "phases", "clusters", "side_by_side", "masked", "table", "attention",
           "step_run", "step", "step_view", "step_text", "download", "about", "traces")
EXAMPLE_RUN = Path(__file__).resolve().parent.parent / "assets" / "ui" / "example_run.json"
STREAM_INTERVAL = 0.15      # s between streamed frames: enough to watch, few enough for a slow connection
MAX_SPEED = 50              # replay speed limit, steps per second
EXPIRED = ("This page's run is no longer kept on the server (a run is kept "
           f"{LIMITS.session_ttl_s / 60:.0f} minutes after it finishes); press **Run** to decode again.")


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
            gr.update(choices=[(f"{t.name}: {t.nfe} steps", j) for j, t in enumerate(traces)], value=i),
            gr.update(minimum=0, maximum=max(last, 1), value=last, interactive=bool(last)),
            _figure("step view", visuals.step_view_figure, main, last) if main.steps else None,
            render.step_html(main, last), write_bundle(traces), about_text(traces, outside), traces)


def banner(outside: str) -> str:
    return f'<div class="banner" role="alert">⚠ {clean(outside)}</div>' if outside else ""


# ============================================================================ the run

@gpu
def decode_race(req):
    """The only function that runs the model (on ZeroGPU it gets the GPU in a worker process; its argument is plain
    data). It never decides to stop: the caller closes it, which a worker process sees too."""
    yield from race(get_predictor(req.model), req)


def _refuse(message: str, title: str, raise_errors: bool):
    """A run that cannot start: said in the status, where the eye is after pressing Run; API callers also get
    it raised, the page as a toast (an error raised right after a yield can reach the browser before that
    yield does, leaving the old status on screen)."""
    yield (f"**{title}**: {clean(message)}",) + tuple(gr.skip() for _ in RESULTS[1:])
    if raise_errors:
        raise gr.Error(clean(message), title=title, print_exception=False)
    gr.Warning(clean(message), title=title)


def _stream(request, make_request, raise_errors: bool = True):
    """Join the line, check the request, wait for a decoder, clear the page, stream the race, then draw
    everything from the traces. A run past the line's size is refused at once with the wait it would have had."""
    session = runs.session_of(request)
    since = runs.asked(session)
    if runs.stopped_since(session, since):
        yield ("Stopped before it started: Stop was pressed while this run waited in the queue.",) + \
            tuple(gr.skip() for _ in RESULTS[1:])
        return
    ticket = runs.LINE.join(session)
    if ticket is None:
        yield from _refuse(runs.busy(), "Busy", raise_errors)
        return
    try:
        try:
            req = make_request()
            predictor, warnings, outside = check(req)
        except ValueError as exc:                    # an error never leaves the previous run's figures
            yield cleared("Checking the request…")
            yield from _refuse(str(exc), "Cannot run", raise_errors)
            return
        for warning in warnings:
            gr.Warning(clean(warning))
        while True:
            turn = runs.LINE.wait(ticket, timeout=1.0)
            why = runs.ended(session, since)             # asked after the turn too: a Stop meanwhile still counts
            if why == "gone":
                runs.forget_session(session)
                return
            if why:
                yield ("Stopped before it started: you left the line.",) + tuple(gr.skip() for _ in RESULTS[1:])
                return
            if turn:
                break
            yield (runs.waiting(ticket),) + tuple(gr.skip() for _ in RESULTS[1:])    # the last run stays meanwhile
        yield cleared("Starting…")
        yield from _race(session, since, req, predictor, outside)
    finally:
        runs.LINE.leave(ticket)


def _race(session: str, since: float, req, predictor, outside: str):
    """Stream the race; close it between two steps when it must end (Stop, page closed, time limit, a fault)."""
    token_text = functools.lru_cache(maxsize=4096)(predictor.token_text)
    skip = tuple(gr.skip() for _ in RESULTS[2:])
    cold = "" if is_warm(req.model) else " (first run on this model: its timing includes warming up)"
    started, shown = time.perf_counter(), 0.0
    frame, why, failed = None, None, None
    frames = decode_race(req)
    try:
        while not (why := runs.ended(session, since, started if frame else None)):    # a run shows a step
            try:
                frame = next(frames)
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001 - a fault ends this run only; the partial answers stay
                log.exception("the race failed")
                failed = exc
                break
            if frame.finished:
                break
            if time.perf_counter() - shown < STREAM_INTERVAL:
                continue
            shown = time.perf_counter()
            lanes = [(lane.trace, lane.k, lane.state) for lane in frame.lanes if lane.trace is not None]
            yield (race_status(frame, describe(predictor)), render.lanes_html(lanes, token_text, banner(outside))) \
                + skip
    finally:
        frames.close()
    if why == "gone":          # nobody will see the figures: draw none; gradio just revived the session, drop it
        runs.forget_session(session)
        return
    mark_warm(req.model)
    if frame is not None and not frame.finished:
        frame = settle(frame, predictor)
    if frame is None or not frame.traces:
        yield cleared(f"**The run failed** before its first step: {failure(failed)}" if failed else
                      "Stopped before the first step.")
        return
    took = f"in {time.perf_counter() - started:.1f} s on {clean(describe(predictor))}{cold}"
    if failed:
        verb = (f"**The run failed**: {failure(failed)}. The partial answers (up to step "
                f"{max(t.nfe for t in frame.traces)}) stay on screen; press Run to try again. Ran")
    elif why == "time":
        verb = (f"Stopped at the time limit ({LIMITS.run_seconds:.0f} s a run on this shared server) at step "
                f"{frame.round}; the partial answers and figures stay on screen. Ran")
    else:
        verb = (f"Stopped at step {frame.round}; the partial answers and figures stay on screen, press Run to start "
                "again. Ran" if frame.stopped else "Done")
    yield results(frame.traces, f"{verb} {took}.  \n" + render.summary(frame.traces, outside), outside)


def failure(exc: Exception | None) -> str:
    """What failed, for the user: the lane and step when a lane's step raised, and the error's kind."""
    if isinstance(exc, LaneFailed):
        return (f"{clean(exc.label)} failed at step {exc.step} "
                f"({type(exc.error).__name__}: {clean(str(exc.error))[:200]})")
    return f"{type(exc).__name__}: {clean(str(exc))[:200]}"


def race_status(frame: Frame, where: str = "") -> str:
    lines = []
    for lane in frame.lanes:
        if lane.trace is None:
            continue
        state = {"decoding": "decoding", "done": "finished", "stopped": "stopped"}[lane.state]
        lines.append(f"{clean(lane.label)}: step {lane.k + 1}, {state}")
    return f"Racing{' on ' + clean(where) if where else ''}: " + " · ".join(lines)


@friendly("Cannot run")
def run_ui(request: gr.Request, prompt, model, mode, gen_length, block_length, methods, capture_attention, *settings):
    """The Run button: the generated settings controls' values, in ``request.CONTROLS`` order, after the rest."""
    yield from _stream(request, lambda: build_request(prompt, model, mode, gen_length, block_length, methods,
                                                      settings_from_controls(methods or [], settings),
                                                      capture_attention), raise_errors=False)


@friendly("Cannot run")
def run_api(request: gr.Request, prompt, model, mode, gen_length, block_length, methods, settings, capture_attention):
    """API ``/run``: ``methods`` per lane a method or ``{"method", "label", "settings"}`` (at most 6, two may share
    a method); ``settings`` one JSON object (or its text) per method, which its lanes start from::

        Client(url).predict(prompt, "dico-tiny", "non-ar", 96, 32, ["vanilla", {"method": "topk", "settings":
                            {"k": 4}}, "fast"], {"fast": {"threshold": 0.9}}, True, api_name="/run")
    """
    yield from _stream(request, lambda: build_request(prompt, model, mode, gen_length, block_length, methods,
                                                      settings_from_json(settings), capture_attention))


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
    except (OSError, ValueError) as exc:
        log.warning("no example run from %s (python -m dico_ui.examples makes it): %s", EXAMPLE_RUN, exc)
        return cleared("_The example run shipped with this copy could not be read, so the page opens empty._ "
                       "Press **Run** to decode.") + (gr.skip(),)
    status = ("A finished example run, replayed from traces shipped with the app: " + render.run_caption(traces[0])
              + ". Press **Replay the race** to watch it again, or **Run** to decode it yourself.  \n"
              + render.summary(traces))
    return results(traces, status) + (traces[0].prompt,)


@friendly("Cannot replay the race")
def replay_race(request: gr.Request, traces, speed):
    """The race of the traces on screen again, at ``speed`` steps per second; Stop ends it."""
    session = runs.session_of(request)
    since = runs.asked(session)
    if not traces:
        raise ValueError(f"replay: {EXPIRED}")
    speed = float(speed or 0)
    if not 0 < speed <= MAX_SPEED:
        raise ValueError(f"speed: must be in (0, {MAX_SPEED}] steps per second, got {speed:g}")
    for frame in replay(traces):
        if runs.ended(session, since):
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
        gr.Warning(EXPIRED)
        return gr.skip(), gr.skip(), gr.skip()
    last = max(len(trace.steps) - 1, 0)
    view, text = show_step(run_index, last, traces)
    return gr.update(maximum=max(last, 1), value=last, interactive=bool(last)), view, text


PLAY, PAUSE = "▶ Play", "⏸ Pause"


def toggle_play(playing, k, run_index, traces):
    """Start or stop stepping through the run; starting at the last step rewinds to step 0."""
    trace = _trace_at(traces, run_index)
    if trace is None and not playing:
        gr.Warning(EXPIRED)
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
