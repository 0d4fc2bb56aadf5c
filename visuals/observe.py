"""The measurements of dico.observe drawn (docs/observations.md): the dependency map at a step, and the clash of a
run's steps. Pure functions of a trace and what was measured on it (plain data: positions and a matrix)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dico.trace import CLASH_MARK, Trace
from visuals._common import TEMPLATE, notice, run_name, show


def dependency_figure(trace: Trace, at: int, positions: list[int], matrix, answer_only: bool = True) -> go.Figure:
    """D[a][b] at step ``at``: how far writing masked position a (row) moves position b (column), in nats; the
    answer's masked positions (all masked positions with ``answer_only`` off)."""
    keep = [i for i, p in enumerate(positions) if not answer_only or p < trace.answer_length]
    if len(keep) < 2:
        return notice(f"Fewer than two masked answer positions before step {at}: nothing depends on anything.",
                      f"Dependency at step {at}")
    shown = [positions[i] for i in keep]
    d = np.asarray(matrix, dtype=float)[np.ix_(keep, keep)]
    before = trace.tokens_before(at)
    names = [f"{p}" for p in shown]
    hover = [[f"write {a} → {b}: {d[i, j]:.3f} nats" for j, b in enumerate(shown)] for i, a in enumerate(shown)]
    fig = go.Figure(go.Heatmap(z=d, x=names, y=names, colorscale="Viridis", zmin=0, text=hover,
                               hoverinfo="text", colorbar=dict(title=dict(text="nats", side="right"))))
    fig.update_layout(template=TEMPLATE, height=420,
                      title=f"{run_name(trace)}: dependency before step {at} ({sum(t is None for t in before)} masked, "
                            f"{len(shown)} in the answer)",
                      xaxis=dict(title="position b (moved)", type="category"),
                      yaxis=dict(title="position a (written)", type="category", autorange="reversed"))
    return fig


def clash_figure(traces: list[Trace]) -> go.Figure:
    """Each measured run's clash a step (nats), steps above ``CLASH_MARK`` marked."""
    measured = [t for t in traces if t.clash is not None]
    if not measured:
        return notice("The clash was not measured for these runs (it costs passes: tick \"Measure the clash\" and run "
                      "again).", "Clash a step")
    fig = go.Figure()
    for t in measured:
        steps = [k for k, v in enumerate(t.clash["values"]) if v is not None]
        values = [t.clash["values"][k] for k in steps]
        fig.add_trace(go.Scatter(x=steps, y=values, mode="markers+lines", name=show(run_name(t), 30),
                                 marker=dict(size=[12 if v > CLASH_MARK else 6 for v in values])))
    fig.add_hline(y=CLASH_MARK, line_dash="dot", annotation_text=f"{CLASH_MARK:g} nats")
    fig.update_layout(template=TEMPLATE, height=360, title="Clash of each step: marginals summed minus the joint",
                      xaxis_title="step", yaxis_title="nats")
    return fig
