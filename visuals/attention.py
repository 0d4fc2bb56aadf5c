"""Attention of still-masked positions by stage of the run (early, middle, late)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dico.trace import Trace
from visuals._common import (
    COLORBAR,
    TEMPLATE,
    answer_end_line,
    axis_ids,
    block_lines,
    notice,
    panel_row,
    ranges,
    run_name,
    titled,
)

EMPTY_STAGE = "no step ran in this stage:<br>one step took the run<br>past it"


def _matrices(trace: Trace) -> list[np.ndarray]:
    """(N, N + 1) per stage, NaN rows where the position was not masked during the stage."""
    n, out = trace.gen_length, []
    for rows in trace.attention.matrix:
        m = np.full((n, n + 1), np.nan)
        kept = [q for q, row in enumerate(rows) if row is not None]
        if kept:
            m[kept] = np.array([rows[q] for q in kept], dtype=float)
        out.append(np.clip(m, 0.0, None))
    return out


def key_ticks(n: int) -> dict:
    """Key x = -1 is the whole prompt (the matrix's column 0), x = j is response position j (column 1 + j)."""
    step = 10 if n <= 64 else 20 if n <= 160 else 50
    values = [-1] + list(range(0, n, step))[1:] if step < n else [-1]
    return dict(tickvals=values, ticktext=["prompt"] + [str(v) for v in values[1:]])


def attention_figure(trace: Trace, percentile: float = 99.0) -> go.Figure:
    """Where still-masked positions look, early / middle / late in the run (one shared colour scale).

    Keys and queries are both response positions on the same scale (so the diagonal is a position attending to
    itself), with the whole prompt summed into one column at the left. A stage no step ran in says so.
    """
    att = trace.attention
    if att is None:
        return notice("Attention was not captured for this run; enable capture (\"capture attention\") and run "
                      "again.<br>Every model kind supports it (LLaDA and Dream through recomputing hooks).",
                      "Attention of masked positions")
    n, mats = trace.gen_length, _matrices(trace)
    stack = np.stack(mats)
    values, keys = stack[np.isfinite(stack)], stack[:, :, 1:][np.isfinite(stack[:, :, 1:])]
    # The prompt column sums many keys and would wash out the rest: cap the colour at a high percentile.
    top = float(np.percentile(keys, percentile)) if keys.size else 0.0
    top = top if top > 0 else float(values.max()) if values.size and values.max() > 0 else 1.0
    titles = [f"{stage}: steps {ranges(steps)}" if steps else f"{stage}: no steps"
              for stage, steps in zip(att.stages, att.steps)]
    layout, data, shapes = panel_row(titles, gap=0.05), [], []
    for i, (stage, steps, m) in enumerate(zip(att.stages, att.steps, mats)):
        axes = axis_ids(i)
        suffix = axes["xaxis"][1:]
        layout[f"xaxis{suffix}"].update(range=[-1.5, n - 0.5], showgrid=False, zeroline=False, **key_ticks(n))
        if not steps or np.isnan(m).all():
            layout["annotations"].append(dict(text=EMPTY_STAGE, x=n / 2, y=n / 2, xref=axes["xaxis"], yref="y",
                                              showarrow=False, font=dict(size=13, color="#555555"),
                                              name="empty stage"))
            continue
        data.append(dict(type="heatmap", z=np.round(m, 4).astype(np.float32), x=np.arange(-1, n), y=np.arange(n),
                         coloraxis="coloraxis", hoverongaps=False, name=stage,
                         hovertemplate="masked query position %{y}<br>key %{x} (−1: the whole prompt)"
                                       "<br>mean attention %{z:.4f}<extra></extra>", **axes))
        x = axes["xaxis"]
        shapes += (block_lines(trace, "x", x, "y domain") + block_lines(trace, "y", "y", f"{x} domain")
                   + answer_end_line(trace, x, "y domain"))
    split = ("Stages split the run by the unmasked fraction when the step ran: early < 1/3 ≤ middle < 2/3 ≤ late ("
             + "; ".join(f"{s}: {len(st)} steps" for s, st in zip(att.stages, att.steps))
             + f"). Colour capped at {top:.3g} ({percentile:g}th percentile of response keys); left column: the "
               "whole prompt; rows blank where the position was not masked in that stage.")
    # one x title under the panels (a title per panel overlapped its neighbours' on a narrow screen)
    layout["annotations"].append(dict(text="key: response position", x=0.5, y=0, xref="paper", yref="paper",
                                      xanchor="center", yanchor="top", yshift=-30, showarrow=False))
    return go.Figure(data, dict(
        layout, **titled(f"{run_name(trace)}: attention of still-masked positions, by stage", split, plot=300, t=40,
                         b=80, r=120),
        yaxis=dict(title="masked query position", range=[n - 0.5, -0.5], showgrid=False, zeroline=False),
        coloraxis=dict(colorscale="Viridis", cmin=0.0, cmax=top,
                       colorbar={**COLORBAR, "title": dict(text="mean attention", side="right")}),
        template=TEMPLATE, shapes=shapes))
