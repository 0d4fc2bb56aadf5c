"""Figures of one run over steps: the decoding trajectory, its clusters, and the response after step k."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dico.trace import Trace
from visuals._common import (CLUSTER_COLOR, COMMIT_COLOR, CONFIDENCE_AXIS, MASK, PHASE_COLORS, SEED_COLOR, TEMPLATE,
                             UNDER_COLORBAR, Grid, axis_ids, boxes, cluster_spans, figure, labels, method_name, notice,
                             panel_row, run_name, seed_points, subtitle)

STEP_AXIS = dict(title="step (one forward pass each)", autorange="reversed", showgrid=False, zeroline=False)
POSITION_AXIS = dict(title="response position", showgrid=False, zeroline=False)
SEED_MARKER = dict(symbol="star", size=11, color=SEED_COLOR, line=dict(color="black", width=1))
HOW_TO_READ = ("Each row is one step, read top to bottom. Colour: the model's confidence at positions still masked; "
               "blank: already decoded.")


def _trajectory_traces(trace: Trace, show_clusters: bool, shown: set, axes: dict | None = None) -> list:
    """Heatmap of confidence plus the committed, seed and cluster layers; ``shown`` dedupes legend entries."""
    g, axes = Grid(trace), axes or {}
    text = labels(trace, g.pred)
    phases = sorted(set(g.phases), key=list(PHASE_COLORS).index)
    if len(phases) > 1:      # per-cell phase only when it varies: keeps vanilla traces at 512 x 512 small
        text = np.where(g.pred >= 0, text + "<br>phase: " + g.phases[:, None], "")
        phase_note = ""
    else:
        phase_note = f"<br>phase: {phases[0]}"
    layers = [dict(type="heatmap", z=np.round(g.conf, 3).astype(np.float32), x=np.arange(trace.gen_length), y=g.steps,
                   text=text, coloraxis="coloraxis", hoverongaps=False, name=run_name(trace),
                   hovertemplate="position %{x}, step %{y}<br>prediction: %{text}<br>confidence %{z:.3f}"
                                 + phase_note + "<extra></extra>", **axes)]

    def legend(name: str) -> dict:
        first = name not in shown
        shown.add(name)
        return dict(name=name, legendgroup=name, showlegend=first, **axes)

    done = np.flatnonzero(g.commit_row >= 0)
    rows = g.commit_row[done]
    hover = np.stack([g.commit_conf[done].round(3).astype(str), g.phases[rows]], axis=1)     # (confidence, phase)
    size = int(np.clip(500 // max(len(g.steps), 1), 3, 6))       # markers shrink with the rows, never vanish
    layers.append(dict(
        type="scatter", x=done, y=g.steps[rows], mode="markers",
        marker=dict(color=COMMIT_COLOR, size=size, line_width=0),
        text=labels(trace, g.token[done]), customdata=hover,
        hovertemplate="committed %{text} at position %{x}, step %{y}<br>confidence %{customdata[0]}"
                      "<br>phase: %{customdata[1]}<extra></extra>", **legend("committed")))
    seed_x, seed_y = seed_points(trace)
    if show_clusters and len(seed_x):
        layers.append(dict(type="scatter", x=seed_x, y=seed_y, mode="markers", marker=SEED_MARKER,
                           hovertemplate="seed at position %{x}, step %{y}<extra></extra>", **legend("seed")))
    spans = cluster_spans(trace)
    if show_clusters and len(spans):
        x, y = boxes(spans)
        layers.append(dict(type="scatter", x=x, y=y, mode="lines", line=dict(color=CLUSTER_COLOR, width=1), opacity=0.7,
                           hoverinfo="skip", **legend("clusters")))
    return layers


def trajectory_figure(trace: Trace, show_clusters: bool = True) -> go.Figure:
    """Which positions are decoded when, and how sure the model was: the paper's trajectory figure."""
    if not trace.steps:
        return notice("This run has no steps yet.", run_name(trace))
    stopped = " (stopped early)" if trace.stopped else ""
    return figure(_trajectory_traces(trace, show_clusters, set()), dict(
        title=subtitle(f"{run_name(trace)}: {trace.nfe} steps (NFE) for {trace.gen_length} positions{stopped}",
                       HOW_TO_READ),
        coloraxis=CONFIDENCE_AXIS, xaxis=POSITION_AXIS, yaxis=STEP_AXIS, template=TEMPLATE, height=560,
        legend=UNDER_COLORBAR))


def trajectories_side_by_side(traces: list[Trace], show_clusters: bool = True) -> go.Figure:
    """Several runs of one prompt on one step axis and one colour scale, so step counts compare at a glance."""
    traces = [t for t in traces if t.steps]
    if not traces:
        return notice("No runs with steps to compare.")
    shown: set = set()
    data = [layer for i, t in enumerate(traces) for layer in _trajectory_traces(t, show_clusters, shown, axis_ids(i))]
    layout = panel_row([f"{run_name(t)}: {t.nfe} steps" for t in traces])
    for i in range(len(traces)):
        layout[f"xaxis{i + 1 if i else ''}"].update(POSITION_AXIS)
    return figure(data, dict(layout, title=subtitle("Decoding trajectories side by side", HOW_TO_READ),
                             yaxis=STEP_AXIS, coloraxis=CONFIDENCE_AXIS, template=TEMPLATE, height=560,
                             legend=UNDER_COLORBAR, margin=dict(t=110)))


def cluster_figure(trace: Trace) -> go.Figure:
    """Only DiCo's seeds and cluster spans over steps, coloured by phase: the Divide/Conquer idea without noise."""
    spans, (seed_x, seed_y) = cluster_spans(trace), seed_points(trace)
    if not len(spans) and not len(seed_x):
        if trace.method == "dico":
            return notice("No seed reached tau1 in this run, so Divide formed no cluster and DiCo went straight "
                          "to Finalize (the model was unsure everywhere).", run_name(trace))
        return notice(f"{method_name(trace.method)} does not divide the response into clusters; "
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
    return go.Figure(data, dict(
        title=subtitle(f"{run_name(trace)}: seeds and clusters", "Divide picks seed tokens and grows clusters of "
                       "likely-easy positions around them; Conquer decodes clusters in parallel. "
                       "One box per cluster per step (its span after the step)."),
        xaxis={**POSITION_AXIS, "range": [-0.5, trace.gen_length - 0.5]},
        yaxis={**STEP_AXIS, "autorange": False, "range": [trace.steps[-1].index + 0.5, -0.5]}, template=TEMPLATE,
        height=500))


def _check_step(trace: Trace, k) -> int:
    n = len(trace.steps)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < n:
        raise ValueError(f"k = {k!r} is not a step of this run: choose 0..{n - 1}" if n else
                         f"k = {k!r}: this run has no steps")
    return int(k)


def step_text(trace: Trace, k: int) -> str:
    """The response as it stood after step k, masked positions written as '_'."""
    k = _check_step(trace, k)
    g = Grid(trace)
    done = (g.commit_row >= 0) & (g.commit_row <= k)
    return "".join(trace.token_text(int(t)) if d else "_" for t, d in zip(g.token, done))


def _wrapped(spans: list[list[int]], cols: int) -> np.ndarray:
    """Inclusive spans cut at row ends, as (row, first column, last column) rows for ``boxes``."""
    pieces = [(r, max(a, r * cols) - r * cols, min(b, r * cols + cols - 1) - r * cols)
              for a, b in spans for r in range(a // cols, b // cols + 1)]
    return np.array(pieces, dtype=int).reshape(-1, 3)


def step_view_figure(trace: Trace, k: int, cols: int | None = None) -> go.Figure:
    """The response after step k laid out like text: what is decoded, how sure it was, what step k added."""
    k = _check_step(trace, k)
    g, step, n = Grid(trace), trace.steps[k], trace.gen_length
    cols = cols or (16 if n <= 256 else 24)
    nrows = -(-n // cols)
    done = (g.commit_row >= 0) & (g.commit_row <= k)
    conf = np.where(done, g.commit_conf, np.nan)
    cells = np.full(nrows * cols, np.nan)
    cells[:n] = conf
    pos = np.arange(n)
    x, y = pos % cols, pos // cols
    text = np.where(done, labels(trace, g.token, width=8 if cols <= 16 else 6), MASK)
    status = np.where(done, "committed at step " + g.commit_row.astype(str) + ", confidence "
                      + np.char.mod("%.3f", np.nan_to_num(conf)), "still masked")
    ink = np.where(~done, "#999999", np.where(conf < 0.6, "white", "black"))   # readable on Viridis
    data = [dict(type="heatmap", z=cells.reshape(nrows, cols), coloraxis="coloraxis", hoverinfo="skip", xgap=1, ygap=1),
            dict(type="scatter", x=x, y=y, mode="text", text=text, textfont=dict(color=ink, size=11), showlegend=False,
                 customdata=status, hovertemplate="position %{pointNumber}: %{customdata}<extra></extra>")]
    now = np.flatnonzero(g.commit_row == k)
    if len(now):
        bx, by = boxes(np.stack([now // cols, now % cols, now % cols], 1), half=0.42)
        data.append(dict(type="scatter", x=bx, y=by, mode="lines", line=dict(color=COMMIT_COLOR, width=3),
                         hoverinfo="skip", name=f"committed at step {k}"))
    if step.clusters:
        bx, by = boxes(_wrapped(step.clusters, cols), half=0.5)
        data.append(dict(type="scatter", x=bx, y=by, mode="lines", hoverinfo="skip", name="cluster",
                         line=dict(color=CLUSTER_COLOR, width=1.5, dash="dot")))
    if step.seeds:
        seeds = np.array(step.seeds)
        data.append(dict(type="scatter", x=seeds % cols + 0.36, y=seeds // cols - 0.3, mode="markers", name="seed",
                         marker={**SEED_MARKER, "size": 10}, hoverinfo="skip"))
    clusters = ", ".join(f"[{a}, {b}]" for a, b in step.clusters[:8]) + (" …" if len(step.clusters) > 8 else "")
    seeds = ", ".join(map(str, step.seeds[:12])) + (" …" if len(step.seeds) > 12 else "")
    note = (f"seeds: {seeds or 'none'} · clusters: {clusters or 'none'}. "
            f"Colour: confidence when committed; {MASK}: still masked.")
    return go.Figure(data, dict(
        title=subtitle(f"After step {k} ({step.phase}): {len(now)} committed, {int((~done).sum())} of {n} still masked",
                       note),
        coloraxis={**CONFIDENCE_AXIS, "colorbar": {**CONFIDENCE_AXIS["colorbar"],
                                                    "title": "confidence<br>when committed"}},
        xaxis=dict(title="offset in row", range=[-0.5, cols - 0.5], showgrid=False, zeroline=False, dtick=1),
        yaxis=dict(title="row start (response position)", range=[nrows - 0.5, -0.5], showgrid=False, zeroline=False,
                   tickvals=list(range(nrows)), ticktext=[str(r * cols) for r in range(nrows)]),
        # at least 320 px: plotly.js 3.8 leaves the plot blank when the colour bar does not fit its height
        template=TEMPLATE, height=max(320, 140 + 30 * nrows), legend=UNDER_COLORBAR))
