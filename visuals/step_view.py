"""The response after step k: laid out like text, coloured by confidence, with the scores step k decided on.

``step_view_figure`` is the replay slider's figure; ``stream_figure`` is the same picture without the profile,
small enough to redraw at every step while a method decodes (issue 14, confidence-coloured streaming).
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dico.trace import Trace
from visuals._common import (ANSWER_COLOR, BLOCK_COLOR, CLUSTER_COLOR, COLORBAR, CONFIDENCE_AXIS, LEGEND_BELOW, MASK,
                             OKABE_ITO, PADDING_COLOR, SEED_COLOR, SHORTCUT, SHORTCUT_MARKER, TEMPLATE, Grid,
                             answer_end_line, block_edges, block_lines, boxes, check_confidence, labels, subtitle)

SEED_MARKER = dict(symbol="star", size=10, color=SEED_COLOR, line=dict(color="black", width=1))
ROW_PX, PROFILE_PX, GAP_PX, TOP_PX, BOTTOM_PX = 30, 210, 80, 130, 140


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


def _edge(positions, cols: int) -> tuple[list, list]:
    """x, y of the line in front of each position in the text grid: a step shape where it falls mid-row."""
    xs, ys = [], []
    for p in positions:
        r, c = divmod(int(p), cols)
        if c:
            xs += [-0.5, c - 0.5, c - 0.5, cols - 0.5, None]
            ys += [r + 0.5, r + 0.5, r - 0.5, r - 0.5, None]
        else:
            xs += [-0.5, cols - 0.5, None]
            ys += [r - 0.5, r - 0.5, None]
    return xs, ys


def default_cols(trace: Trace) -> int:
    """16 cells a row (24 past 256 positions), or a divisor of the block so semi-AR blocks start a row."""
    cols = 16 if trace.gen_length <= 256 else 24
    block = trace.block_length if trace.mode == "semi-ar" else None
    if block and block % cols:
        cols = next((c for c in (16, 12, 8) if block % c == 0), cols)
    return cols


def step_view_figure(trace: Trace, k: int, cols: int | None = None, confidence: str = "raw",
                     profile: bool = True) -> go.Figure:
    """The response after step k: committed tokens coloured by the confidence they were committed at, still-masked
    positions shaded faintly by the score step k saw (raw, or ``confidence="guided"``), step k's commits boxed
    (vermillion: answer, grey dashed: padding). With ``profile``, a panel below plots step k's confidence along the
    response, and on a Divide step its trajectory guidance and the guided confidence seeds were ranked by.
    """
    k, confidence = _check_step(trace, k), check_confidence(confidence)
    g, step, n = Grid(trace), trace.steps[k], trace.gen_length
    cols = cols or default_cols(trace)
    nrows = -(-n // cols)
    done = (g.commit_row >= 0) & (g.commit_row <= k)
    scores = g.scores(confidence)[k]
    conf = np.where(done, g.commit_conf, np.nan)
    grid_cells = lambda v: np.concatenate([v, np.full(nrows * cols - n, np.nan)]).reshape(nrows, cols)  # noqa: E731
    pos = np.arange(n)
    x, y = pos % cols, pos // cols
    text = np.where(done, labels(trace, g.token, width=8 if cols <= 16 else 6), MASK)
    part = np.where(g.answer, "answer", "padding")
    status = np.where(done, "committed at step " + g.commit_row.astype(str) + " (" + part + "), confidence "
                      + np.char.mod("%.3f", np.nan_to_num(conf)),
                      f"still masked, {'confidence' if confidence == 'raw' else 'score'} at step {k} "
                      + np.char.mod("%.3f", np.nan_to_num(scores)))
    ink = np.where(~done, "#555555", np.where(conf < 0.6, "white", "black"))   # readable on Viridis
    data = [dict(type="heatmap", z=grid_cells(conf), coloraxis="coloraxis", hoverinfo="skip", xgap=1, ygap=1,
                 name="committed"),
            dict(type="heatmap", z=grid_cells(np.where(done, np.nan, scores)), coloraxis="coloraxis", opacity=0.35,
                 hoverinfo="skip", xgap=1, ygap=1, name="still masked"),
            dict(type="scatter", x=x, y=y, mode="text", name="tokens", text=text, textfont=dict(color=ink, size=11),
                 showlegend=False, customdata=status,
                 hovertemplate="position %{pointNumber}: %{customdata}<extra></extra>")]
    now = np.flatnonzero(g.commit_row == k)
    for name, sel, line in ((f"committed at step {k}", g.answer[now], dict(color=ANSWER_COLOR, width=3)),
                            (f"padding committed at step {k}", ~g.answer[now],
                             dict(color=PADDING_COLOR, width=2, dash="dash"))):
        if sel.any():
            p = now[sel]
            bx, by = boxes(np.stack([p // cols, p % cols, p % cols], 1), half=0.42)
            data.append(dict(type="scatter", x=bx, y=by, mode="lines", line=line, hoverinfo="skip", name=name))
    if step.clusters:
        bx, by = boxes(_wrapped(step.clusters, cols), half=0.5)
        data.append(dict(type="scatter", x=bx, y=by, mode="lines", hoverinfo="skip", name="cluster",
                         line=dict(color=CLUSTER_COLOR, width=1.5, dash="dot")))
    if step.seeds:
        seeds = np.array(step.seeds)
        data.append(dict(type="scatter", x=seeds % cols + 0.36, y=seeds // cols - 0.3, mode="markers", name="seed",
                         marker=SEED_MARKER, hoverinfo="skip"))
    if step.shortcut:
        sure = np.array(step.shortcut)
        data.append(dict(type="scatter", x=sure % cols + 0.36, y=sure // cols - 0.3, mode="markers", name=SHORTCUT,
                         marker=SHORTCUT_MARKER, hoverinfo="skip"))
    for name, at, line in (("block boundary", block_edges(trace), dict(color=BLOCK_COLOR, width=2, dash="dash")),
                           ("answer end", [trace.answer_length] if 0 < trace.answer_length < n else [],
                            dict(color=ANSWER_COLOR, width=2, dash="dot"))):
        if len(at):
            ex, ey = _edge(at, cols)
            data.append(dict(type="scatter", x=ex, y=ey, mode="lines", line=line, hoverinfo="skip", name=name))
    clusters = ", ".join(f"[{a}, {b}]" for a, b in step.clusters[:8]) + (" …" if len(step.clusters) > 8 else "")
    seeds = ", ".join(map(str, step.seeds[:12])) + (" …" if len(step.seeds) > 12 else "")
    if step.shortcut:
        seeds += f" (+ {len(step.shortcut)} above the shortcut)"
    answer_now = int(g.answer[now].sum())
    note = (f"seeds: {seeds or 'none'} · clusters: {clusters or 'none'}.<br>Colour: confidence when committed; "
            f"{MASK}: still masked, shaded by its {'confidence' if confidence == 'raw' else 'score'} at step {k}.")
    grid_px = ROW_PX * nrows + 40
    height = TOP_PX + BOTTOM_PX + grid_px + (GAP_PX + PROFILE_PX if profile else 0)
    plot = height - TOP_PX - BOTTOM_PX
    layout = dict(
        title=subtitle(f"After step {k} ({step.phase}): {len(now)} committed ({answer_now} answer, "
                       f"{len(now) - answer_now} padding), {int((~done).sum())} of {n} still masked", note),
        coloraxis={**CONFIDENCE_AXIS, "colorbar": {**COLORBAR, "y": 1 - grid_px / plot,      # beside the text grid
                                                    "len": COLORBAR["len"] * grid_px / plot}},
        xaxis=dict(title="offset in row", range=[-0.5, cols - 0.5], showgrid=False, zeroline=False, dtick=1),
        yaxis=dict(title="row start", range=[nrows - 0.5, -0.5], showgrid=False, zeroline=False,
                   tickvals=list(range(nrows)), ticktext=[str(r * cols) for r in range(nrows)],
                   domain=[1 - grid_px / plot, 1]),
        # at least 320 px: plotly.js leaves the plot blank when the colour bar does not fit its height
        template=TEMPLATE, height=max(320, height), legend=LEGEND_BELOW, margin=dict(t=TOP_PX, b=BOTTOM_PX, r=110))
    if profile:
        data += _profile(trace, g, k)
        layout.update(xaxis2=dict(title="response position", range=[-0.5, n - 0.5], anchor="y2", showgrid=False),
                      yaxis2=dict(title=f"step {k}", range=[0, 1.05], anchor="x2", domain=[0, PROFILE_PX / plot]),
                      shapes=_profile_shapes(trace, step))
    return go.Figure(data, layout)


def _profile(trace: Trace, g: Grid, k: int) -> list[dict]:
    """Step k along the response: raw confidence of masked positions, and on Divide steps the guidance w and the
    guided confidence c × w that seeds were ranked by."""
    step, pos = trace.steps[k], np.arange(trace.gen_length)
    axes = dict(xaxis="x2", yaxis="y2")
    out = [dict(type="scatter", x=pos, y=g.conf[k], mode="lines+markers", name=f"confidence at step {k}",
                line=dict(color=OKABE_ITO["sky"], width=1), marker=dict(size=4), connectgaps=False,
                hovertemplate="position %{x}: confidence %{y:.3f}<extra></extra>", **axes)]
    if step.guidance is not None:
        out.append(dict(type="scatter", x=pos, y=np.array(step.guidance, dtype=float), mode="lines",
                        name="guidance w", line=dict(color="black", width=1.5, dash="dashdot"),
                        hovertemplate="position %{x}: guidance %{y:.3f}<extra></extra>", **axes))
    if step.guided_confidence is not None:
        out.append(dict(type="scatter", x=pos, y=g.guided[k], mode="lines+markers", name="guided confidence c × w",
                        line=dict(color=OKABE_ITO["blue"], width=1.5), marker=dict(size=4), connectgaps=False,
                        hovertemplate="position %{x}: guided confidence %{y:.3f}<extra></extra>", **axes))
    ranked = g.guided[k] if step.guided_confidence is not None else g.conf[k]
    if step.seeds:
        out.append(dict(type="scatter", x=step.seeds, y=ranked[step.seeds], mode="markers", name="seed",
                        marker=SEED_MARKER, showlegend=False, hoverinfo="skip", **axes))
    if step.shortcut:           # committed for their raw confidence, so drawn on it
        out.append(dict(type="scatter", x=step.shortcut, y=g.conf[k][step.shortcut], mode="markers", name=SHORTCUT,
                        marker=SHORTCUT_MARKER, showlegend=False, hoverinfo="skip", **axes))
    needed = step.seed_threshold if step.phase == "divide" else None
    if needed is not None:
        out.append(dict(type="scatter", x=[-0.5, trace.gen_length - 0.5], y=[needed, needed], mode="lines",
                        name=f"seed threshold {needed:g}", line=dict(color=SEED_COLOR, width=1.5), **axes))
    return out


def _profile_shapes(trace: Trace, step) -> list[dict]:
    a, b = step.window
    window = dict(type="rect", name="window", layer="below", x0=a - 0.5, x1=b - 0.5, y0=0, y1=1, xref="x2",
                  yref="y2 domain", line_width=0, fillcolor=OKABE_ITO["sky"], opacity=0.08)
    return [window] + block_lines(trace, "x", "x2", "y2 domain") + answer_end_line(trace, "x2", "y2 domain")


def stream_figure(trace: Trace, k: int | None = None, cols: int | None = None, confidence: str = "raw") -> go.Figure:
    """The response while it decodes (after step k, default the latest): the step view without its profile."""
    if not trace.steps:
        raise ValueError("k: this run has no steps yet")
    return step_view_figure(trace, len(trace.steps) - 1 if k is None else k, cols, confidence, profile=False)
