"""What the page shows, by name: every result output drawn from traces (``results``) or emptied (``cleared``),
and errors in the page's words (``friendly``). ``RESULTS`` names the outputs a run fills, in the order the API's
``/run`` returns them; ``dico_ui.wiring`` maps each name to its component."""
from __future__ import annotations

import functools
import inspect
import logging

import gradio as gr

import visuals
from dico.trace import Trace
from dico_ui import render
from dico_ui.about import about_text
from dico_ui.downloads import write_bundle
from dico_ui.race import end_state
from dico_ui.text import clean

log = logging.getLogger("dico_ui")
RESULTS = ("status", "answers", "trajectory", "phases", "clusters", "side_by_side", "masked", "table", "clash_plot",
           "order", "attention",
           "locality", "step_run", "step", "step_view", "step_text", "dependency", "dependency_note", "download",
           "about", "traces")


# ============================================================================ errors

def error_text(title: str, exc: Exception) -> str:
    """What the user reads: a ValueError's named-field message; anything else logged once, told without details."""
    if isinstance(exc, (ValueError, gr.Error)):
        return clean(getattr(exc, "message", None) or exc)
    log.exception("%s: unexpected error", title)
    return (f"Something went wrong on the server ({type(exc).__name__}); it has been logged. Change the input and "
            "try again.")


def friendly(title: str, page: bool = False):
    """User errors become one message without a logged traceback. For the API (``page=False``) it is raised (a
    gr.Error the client receives); on the page (``page=True``) it goes to the status line and one toast, and the
    handler's other outputs keep what they show: a raised error would sit on every output as a red pill."""
    def said(exc: Exception):
        text = error_text(title, exc)
        if not page:
            raise gr.Error(text, title=title, print_exception=False) from None
        gr.Warning(text, title=title)
        return {"status": f"**{title}**: {text}"}

    def wrap(fn):
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def stream(*args, **kwargs):
                try:
                    yield from fn(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - nothing reaches the user as a traceback
                    yield said(exc)
            return stream

        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                return said(exc)
        return call
    return wrap


def figure(name: str, fn, *args):
    """A figure from visuals, or none (and a logged error) if this trace cannot be drawn."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a figure must never take the page down
        log.exception("figure %s failed", name)
        return None


# ============================================================================ results

def cleared(status: str) -> dict:
    """Every result output emptied: a new run never shows the previous run's figures."""
    return dict(status=status, answers="", trajectory=None, phases=None, clusters=None, side_by_side=None,
                masked=None, table=render.table_frame([]), clash_plot=None, order=None, attention=None, locality="",
                step_run=gr.update(choices=[], value=None), step=gr.update(value=0, maximum=1, interactive=False),
                step_view=None, step_text="", dependency=None, dependency_note="", download=None,
                about=about_text([]), traces=[])


def results(traces: list[Trace], status: str, outside: str = "", main: Trace | None = None) -> dict:
    """Every result output for finished (or stopped, or uploaded) traces; the run figures (trajectory, phases,
    clusters, the step view) are ``main``'s, by default the DiCo run's (else the first)."""
    main = main or next((t for t in traces if t.method == "dico"), traces[0])
    with_attention = next((t for t in traces if t.attention is not None), main)
    last = max(len(main.steps) - 1, 0)
    lanes = [(t, t.nfe - 1, end_state(t)) for t in traces]
    return dict(
        status=status, answers=render.lanes_html(lanes, banner=banner(outside)),
        trajectory=figure("trajectory", visuals.trajectory_figure, main),
        phases=figure("phase", visuals.phase_figure, main),
        clusters=figure("cluster", visuals.cluster_figure, main),
        side_by_side=figure("side-by-side", visuals.trajectories_side_by_side, traces),
        masked=figure("masked fraction", visuals.comparison_figure, traces),
        table=render.table_frame(traces),
        clash_plot=figure("clash", visuals.clash_figure, traces),
        order=figure("decode order", visuals.decode_order_figure, traces),
        attention=figure("attention", visuals.attention_figure, with_attention),
        locality=render.attention_locality_md(with_attention),
        step_run=gr.update(choices=[(f"{t.name}: {t.nfe} steps", j) for j, t in enumerate(traces)],
                           value=traces.index(main)),
        # the step view opens on the first step (the whole response still to decide); the last one is nearly empty
        step=gr.update(minimum=0, maximum=max(last, 1), value=0, interactive=bool(last)),
        step_view=figure("step view", visuals.step_view_figure, main, 0) if main.steps else None,
        step_text=render.step_html(main, 0), dependency=None, dependency_note=render.dependency_plan(main, 0)[1],
        download=write_bundle(traces), about=about_text(traces, outside),
        traces=traces)


def banner(outside: str) -> str:
    return f'<div class="banner" role="alert">⚠ {clean(outside)}</div>' if outside else ""
