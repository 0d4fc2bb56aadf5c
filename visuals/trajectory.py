"""Figures of one run over steps and positions: the decoding trajectory and its clusters.

Both share one frame (x range, margins, height), so stacked on a page their position axes line up.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dico.trace import Trace
from visuals._common import (
    ANSWER_COLOR,
    BLOCK_COLOR,
    CLUSTER_COLOR,
    CONFIDENCE_AXIS,
    EDITED,
    EDITED_MARKER,
    FORK,
    FORK_LINE,
    FRAME,
    LEGEND_BELOW,
    PADDING_COLOR,
    PHASE_COLORS,
    REVISED,
    REVISED_MARKER,
    SEED_COLOR,
    SHORTCUT,
    SHORTCUT_HOVER,
    SHORTCUT_MARKER,
    TEMPLATE,
    Grid,
    answer_end_line,
    answer_end_note,
    axis_ids,
    block_edges,
    block_lines,
    boxes,
    check_confidence,
    cluster_spans,
    commit_markers,
    figure,
    fork_lines,
    fork_steps,
    int_ticks,
    labels,
    notice,
    panel_row,
    refresh_ticks,
    run_name,
    seed_points,
    titled,
)

STEP_AXIS = dict(title="step (one forward pass each)", autorange="reversed", showgrid=False, zeroline=False)
POSITION_AXIS = dict(title="response position", showgrid=False, zeroline=False)
SEED_MARKER = dict(symbol="star", size=11, color=SEED_COLOR, line=dict(color="black", width=1))
PLOT_PX = 330           # the plot area of a trajectory; the figure grows with its title
COLOUR_NOTE = {"raw": "Colour: the model's confidence at positions still masked; blank: already decoded.",
               "guided": "Colour: what each step ranked by: guided confidence (confidence × trajectory guidance) on "
                         "Divide steps, raw confidence on the others; blank: already decoded."}
MARKS = "Filled vermillion: answer commits; hollow grey: end-of-text padding commits."


def how_to_read(confidence: str) -> str:
    return f"Each row is one step, read top to bottom. {COLOUR_NOTE[confidence]} {MARKS}"


def position_axis(trace: Trace) -> dict:
    """The response-position axis every position figure uses: one cell per position, no padding."""
    return {**POSITION_AXIS, "range": [-0.5, trace.gen_length - 0.5], "autorange": False,
            **int_ticks(trace.gen_length)}


def step_axis(trace: Trace, steps: int | None = None) -> dict:
    """Step 0 at the top, as in the paper; ``steps`` rows tall (default: this run's)."""
    rows = steps if steps is not None else len(trace.steps)
    return {**STEP_AXIS, "autorange": False, "range": [rows - 0.5, -0.5], **int_ticks(rows)}


def answer_complete_line(trace: Trace, g: Grid, xref: str = "x domain", yref: str = "y") -> list[dict]:
    """A horizontal line under the step that committed the last answer position (answer NFE)."""
    if not g.answer_complete or trace.answer_nfe <= 0:
        return []
    y = trace.answer_nfe - 1 + 0.5
    return [dict(type="line", name="answer complete", layer="above", x0=0, x1=1, y0=y, y1=y, xref=xref, yref=yref,
                 line=dict(color="black", width=1, dash="dot"))]


def _trajectory_traces(trace: Trace, show_clusters: bool, shown: set, axes: dict | None = None,
                       confidence: str = "raw") -> list:
    """Heatmap of confidence plus the commit, seed and cluster layers; ``shown`` dedupes legend entries."""
    g, axes = Grid(trace), axes or {}
    text = labels(trace, g.pred)
    phases = sorted(set(g.phases), key=list(PHASE_COLORS).index)
    if len(phases) > 1:      # per-cell phase only when it varies: keeps vanilla traces at 512 x 512 small
        text = np.where(g.pred >= 0, text + "<br>phase: " + g.phases[:, None], "")
        phase_note = ""
    else:
        phase_note = f"<br>phase: {phases[0]}"
    what = "confidence" if confidence == "raw" else "score ranked by"
    z = np.round(g.scores(confidence), 3).astype(np.float32)
    layers = [dict(type="heatmap", z=z, x=np.arange(trace.gen_length), y=g.steps, text=text, coloraxis="coloraxis",
                   hoverongaps=False, name=run_name(trace), **axes,
                   hovertemplate=f"position %{{x}}, step %{{y}}<br>prediction: %{{text}}<br>{what} %{{z:.3f}}"
                                 + phase_note + "<extra></extra>")]

    def legend(name: str) -> dict:
        first = name not in shown
        shown.add(name)
        return dict(name=name, legendgroup=name, showlegend=first, **axes)

    size = int(np.clip(500 // max(len(g.steps), 1), 3, 6))       # markers shrink with the rows, never vanish
    rows = np.where(g.commit_row >= 0, g.commit_row, 0)
    layers += commit_markers(trace, g, np.arange(trace.gen_length), g.steps[rows] if len(g.steps) else rows, size,
                             legend)
    seed_x, seed_y = seed_points(trace)
    if show_clusters and len(seed_x):
        layers.append(dict(type="scatter", x=seed_x, y=seed_y, mode="markers", marker=SEED_MARKER,
                           hovertemplate="seed at position %{x}, step %{y}<extra></extra>", **legend("seed")))
    sure_x, sure_y = seed_points(trace, "shortcut")
    if show_clusters and len(sure_x):
        layers.append(dict(type="scatter", x=sure_x, y=sure_y, mode="markers", marker=SHORTCUT_MARKER,
                           hovertemplate=SHORTCUT_HOVER, **legend(SHORTCUT)))
    layers += revised_markers(trace, g, legend) + edited_markers(trace, g, legend)
    spans = cluster_spans(trace)
    if show_clusters and len(spans):
        x, y = boxes(spans)
        layers.append(dict(type="scatter", x=x, y=y, mode="lines", line=dict(color=CLUSTER_COLOR, width=1), opacity=0.7,
                           hoverinfo="skip", **legend("clusters")))
    return layers


def revised_markers(trace: Trace, g: Grid, legend) -> list[dict]:
    """Where a revising rule took a committed token back to the mask: an x on the row of the step that did it, and
    a hollow purple ring on the commit it undid (the commit markers show only commits that stand at the end)."""
    back = g.taken_back()
    if not back:
        return []
    rows, pos, tokens, was = (np.array(col) for col in zip(*back))
    text, committed = labels(trace, tokens), g.steps[np.maximum(was, 0)]
    return [dict(type="scatter", x=pos, y=g.steps[rows], mode="markers", marker=REVISED_MARKER, text=text,
                 customdata=committed, hovertemplate="took back %{text} (committed at step %{customdata}) to the mask"
                                                     "<br>position %{x}, step %{y}<extra></extra>", **legend(REVISED)),
            dict(type="scatter", x=pos[was >= 0], y=committed[was >= 0], mode="markers", text=text[was >= 0],
                 marker=dict(symbol="circle-open", size=8, color=REVISED_MARKER["color"], line=dict(width=2)),
                 hovertemplate="committed %{text} here, taken back later<br>position %{x}, step %{y}<extra></extra>",
                 **legend("commit later taken back"))]


def edited_markers(trace: Trace, g: Grid, legend) -> list[dict]:
    """Where an editing rule replaced a written token: a star on the row of the step that did it, the hover saying
    which token gave way to which."""
    edits = g.replaced()
    if not edits:
        return []
    rows, pos, old, new = (np.array(col) for col in zip(*edits))
    text = np.char.add(np.char.add(labels(trace, old), " → "), labels(trace, new))
    return [dict(type="scatter", x=pos, y=g.steps[rows], mode="markers", marker=EDITED_MARKER, text=text,
                 hovertemplate="replaced %{text}<br>position %{x}, step %{y}<extra></extra>", **legend(EDITED))]


def line_keys(trace: Trace, shown: set, traces=()) -> list[dict]:
    """Legend entries for the lines the figure draws as shapes (which have none): block boundaries (dashed),
    the answer's end (dotted vermillion), the step that completed the answer (dotted black) and where a fork and
    its parent part (dash-dot, ``traces``: the runs beside it)."""
    keys = [(FORK, FORK_LINE)] if fork_steps(trace, traces) else []
    if len(block_edges(trace)):
        keys.append(("block boundary (semi-AR)", dict(color=BLOCK_COLOR, width=1.2, dash="dash")))
    if 0 < trace.answer_length < trace.gen_length:
        keys.append(("answer end │ padding", dict(color=ANSWER_COLOR, width=1.5, dash="dot")))
    if Grid(trace).answer_complete and trace.answer_nfe > 0:
        keys.append(("answer complete (after this step)", dict(color="black", width=1, dash="dot")))
    out = [dict(type="scatter", x=[None], y=[None], mode="lines", name=name, line=line, hoverinfo="skip")
           for name, line in keys if name not in shown]
    shown.update(name for name, _ in keys)
    return out


def _marks(trace: Trace, i: int = 0, shared_y: bool = True, traces=()) -> list[dict]:
    """Block boundaries, the answer's end, the step that completed it, the KV cache's refresh passes (a tick at
    the left edge) and where a fork parts from its parent (either of them among ``traces``), on panel i."""
    g, axes = Grid(trace), axis_ids(i, shared_y)
    x, y = axes["xaxis"], axes["yaxis"]
    return (block_lines(trace, "x", x, f"{y} domain") + answer_end_line(trace, x, f"{y} domain")
            + answer_complete_line(trace, g, f"{x} domain", y) + refresh_ticks(trace, f"{x} domain", y)
            + fork_lines(fork_steps(trace, traces), "y", y, f"{x} domain"))


def _status(trace: Trace) -> str:
    g = Grid(trace)
    if trace.stopped:
        return " (stopped early)"
    return f", answer complete after {trace.answer_nfe}" if g.answer_complete else ""


def trajectory_figure(trace: Trace, show_clusters: bool = True, confidence: str = "raw") -> go.Figure:
    """Which positions are decoded when, and how sure the model was: the paper's trajectory figure.

    ``confidence="guided"`` colours Divide steps by the guided confidence their seeds were ranked by.
    """
    check_confidence(confidence)
    if not trace.steps:
        return notice("This run has no steps yet.", run_name(trace))
    shown: set = set()
    data = _trajectory_traces(trace, show_clusters, shown, confidence=confidence) + line_keys(trace, shown)
    return figure(data, dict(
        **titled(f"{run_name(trace)}: {trace.nfe} steps (NFE) for {trace.gen_length} positions{_status(trace)}",
                 how_to_read(confidence), plot=PLOT_PX, t=18, **FRAME),
        coloraxis=CONFIDENCE_AXIS, xaxis=position_axis(trace), yaxis=step_axis(trace), template=TEMPLATE,
        legend=LEGEND_BELOW, shapes=_marks(trace), annotations=answer_end_note(trace)))


def trajectories_side_by_side(traces: list[Trace], show_clusters: bool = True, shared_steps: bool = False,
                              confidence: str = "raw") -> go.Figure:
    """Several runs of one prompt on one colour scale and one position range, in equal-width panels.

    Each panel's step axis fills the height (a 17-step DiCo run beside a 96-step Vanilla one would be a thin
    strip on a shared axis); ``shared_steps=True`` puts every run on the longest run's step axis instead.
    """
    check_confidence(confidence)
    traces = [t for t in traces if t.steps]
    if not traces:
        return notice("No runs with steps to compare.")
    shared: set = set()
    data = [layer for i, t in enumerate(traces)
            for layer in _trajectory_traces(t, show_clusters, shared, axis_ids(i, shared_steps), confidence)]
    layout = panel_row([f"{run_name(t)}: {t.nfe} steps" + (f"<br>answer complete after {t.answer_nfe}"
                                                            if Grid(t).answer_complete else "") for t in traces],
                       gap=0.06, shared_y=shared_steps)
    longest = max(len(t.steps) for t in traces)
    for i, t in enumerate(traces):
        suffix = i + 1 if i else ""
        layout[f"xaxis{suffix}"].update(position_axis(t))
        if not shared_steps or not i:
            layout[f"yaxis{suffix}"] = {**layout.get(f"yaxis{suffix}", {}),
                                        **step_axis(t, longest if shared_steps else None),
                                        "title": STEP_AXIS["title"] if not i else ""}
    shapes = [s for i, t in enumerate(traces) for s in _marks(t, i, shared_steps, traces)]
    data += [key for t in traces for key in line_keys(t, shared, traces)]
    return figure(data, dict(layout, **titled("Decoding trajectories side by side", how_to_read(confidence),
                                              plot=PLOT_PX, t=48, **FRAME),
                             coloraxis=CONFIDENCE_AXIS, template=TEMPLATE, legend=LEGEND_BELOW, shapes=shapes))


def cluster_figure(trace: Trace) -> go.Figure:
    """Only DiCo's seeds and cluster spans over steps, coloured by phase: the Divide/Conquer idea without noise.

    Same frame as ``trajectory_figure`` of the trace, so the two line up position for position and step for step.
    """
    spans, (seed_x, seed_y) = cluster_spans(trace), seed_points(trace)
    if not len(spans) and not len(seed_x):
        if trace.method == "dico":
            return notice("No seed reached the seed threshold in this run, so Divide formed no cluster and DiCo went "
                          "straight to Finalize (the model was unsure everywhere).", run_name(trace))
        return notice(f"{trace.name} does not divide the response into clusters; "
                      "only DiCo has seeds and clusters.", run_name(trace))
    data = []
    for phase in PHASE_COLORS:
        part = cluster_spans(trace, phase)
        if len(part):
            x, y = boxes(part)
            hover = np.repeat([f"step {s}: cluster [{a}, {b}] ({phase})" for s, a, b in part.tolist()], 6)
            data.append(dict(type="scatter", x=x, y=y, mode="lines", fill="toself", name=f"clusters ({phase})",
                             line=dict(color=PHASE_COLORS[phase], width=1), opacity=0.6, hovertext=hover,
                             hoverinfo="text"))
    data.append(dict(type="scatter", x=seed_x, y=seed_y, mode="markers", name="seed", marker=SEED_MARKER,
                     hovertemplate="seed at position %{x}, step %{y}<extra></extra>"))
    sure_x, sure_y = seed_points(trace, "shortcut")
    if len(sure_x):
        data.append(dict(type="scatter", x=sure_x, y=sure_y, mode="markers", name=SHORTCUT, marker=SHORTCUT_MARKER,
                         hovertemplate=SHORTCUT_HOVER))
    shapes = _marks(trace)
    if trace.answer_length < trace.gen_length:       # the padding region, greyed as its commits are elsewhere
        shapes.insert(0, dict(type="rect", name="padding", layer="below", x0=trace.answer_length - 0.5,
                              x1=trace.gen_length - 0.5, y0=0, y1=1, xref="x", yref="y domain", line_width=0,
                              fillcolor=PADDING_COLOR, opacity=0.12))
    return go.Figure(data, dict(
        **titled(f"{run_name(trace)}: seeds and clusters", "Divide picks seed tokens and grows clusters of "
                 "likely-easy positions around them; Conquer decodes clusters in parallel. One box per cluster per "
                 "step (its span after the step); grey background: end-of-text padding.", plot=PLOT_PX, t=18,
                 **FRAME),
        xaxis=position_axis(trace), yaxis=step_axis(trace), template=TEMPLATE, legend=LEGEND_BELOW,
        shapes=shapes, annotations=answer_end_note(trace)))
