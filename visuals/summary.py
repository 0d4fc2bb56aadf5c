"""Figures that summarise runs: phases per step, attention by stage, method comparison, the benchmark."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dico.trace import Trace
from visuals._common import (PHASE_COLORS, TEMPLATE, Grid, axis_ids, method_color, method_name, notice, panel_row,
                             ranges, run_name, subtitle)

STEP_X = dict(title="step (one forward pass each)", showgrid=False)


def phase_figure(trace: Trace) -> go.Figure:
    """Which phase each step was in, and how many tokens it committed: where the parallelism comes from."""
    if not trace.steps:
        return notice("This run has no steps yet.", run_name(trace))
    g = Grid(trace)
    decoded = np.round(100 * np.array([s.unmasked_fraction for s in trace.steps]), 1)
    data = []
    for phase, color in PHASE_COLORS.items():
        rows = np.flatnonzero(g.phases == phase)
        if not len(rows):
            continue
        bar = dict(type="bar", x=g.steps[rows], marker=dict(color=color, line_width=0), name=phase, legendgroup=phase)
        data.append(dict(bar, y=np.ones(len(rows)), width=1, yaxis="y", showlegend=False,
                         hovertemplate=f"step %{{x}}: {phase}<extra></extra>"))
        data.append(dict(bar, y=g.counts[rows], yaxis="y2", customdata=decoded[rows],
                         hovertemplate=f"step %{{x}} ({phase})<br>%{{y}} token(s) committed"
                                       "<br>%{customdata}% of the response decoded after it<extra></extra>"))
    return go.Figure(data, dict(
        title=subtitle(f"{run_name(trace)}: {trace.nfe} steps, {g.counts.mean():.1f} tokens per step on average",
                       "Top band: the phase of each step. Bars: tokens committed (unmasked) by that step."),
        xaxis=dict(STEP_X, anchor="y2"), yaxis=dict(domain=[0.9, 1.0], visible=False, range=[0, 1]),
        yaxis2=dict(domain=[0.0, 0.86], title="tokens committed", rangemode="tozero", anchor="x"),
        barmode="stack", bargap=0.15, template=TEMPLATE, height=380, legend=dict(title=dict(text="phase"))))


def attention_figure(trace: Trace, percentile: float = 99.0) -> go.Figure:
    """Where still-masked positions look, early / middle / late in the run (one shared colour scale)."""
    att = trace.attention
    if att is None:
        return notice("Attention was not captured for this run; enable capture (\"capture attention\") and run "
                      "again.<br>Only models that return attention maps support it.", "Attention of masked positions")
    n = trace.gen_length
    mats = []
    for rows in att.matrix:
        m = np.full((n, n + 1), np.nan)
        kept = [q for q, row in enumerate(rows) if row is not None]
        if kept:
            m[kept] = np.array([rows[q] for q in kept], dtype=float)
        mats.append(np.clip(m, 0.0, None))
    stack = np.stack(mats)
    values, keys = stack[np.isfinite(stack)], stack[:, :, 1:][np.isfinite(stack[:, :, 1:])]
    # The prompt column sums many keys and would wash out the rest: cap the colour at a high percentile.
    top = float(np.percentile(keys, percentile)) if keys.size else 0.0
    top = top if top > 0 else float(values.max()) if values.size and values.max() > 0 else 1.0
    layout = panel_row([f"{stage}: steps {ranges(steps)}" for stage, steps in zip(att.stages, att.steps)])
    data = [dict(type="heatmap", z=np.round(m, 4).astype(np.float32), coloraxis="coloraxis", hoverongaps=False,
                 name=stage, hovertemplate="masked query position %{y}<br>key %{x} (0 = prompt, k = response position "
                 "k−1)<br>mean attention %{z:.4f}<extra></extra>", **axis_ids(i))
            for i, (stage, m) in enumerate(zip(att.stages, mats))]
    for i in range(len(mats)):
        layout[f"xaxis{i + 1 if i else ''}"].update(title="key position (0 = prompt)", showgrid=False, zeroline=False)
    split = ("Stages split the run by the unmasked fraction when the step ran: early < 1/3 ≤ middle < 2/3 ≤ late ("
             + "; ".join(f"{s}: {len(st)} steps" for s, st in zip(att.stages, att.steps))
             + f").<br>Colour capped at {top:.3g} ({percentile:g}th percentile of response keys); hover for exact "
               "values. Rows blank where the position was not masked in that stage.")
    return go.Figure(data, dict(
        layout, title=subtitle(f"{run_name(trace)}: attention of still-masked positions, by stage", split),
        yaxis=dict(title="masked query position", autorange="reversed", showgrid=False, zeroline=False),
        coloraxis=dict(colorscale="Viridis", cmin=0.0, cmax=top, colorbar=dict(title=dict(text="mean attention"))),
        template=TEMPLATE, height=500, margin=dict(t=150)))


def _masked_fraction(trace: Trace) -> np.ndarray:
    """Masked fraction before any step, then after each step."""
    counts = Grid(trace).counts
    return 1.0 - np.concatenate([[0], np.cumsum(counts)]) / trace.gen_length


def comparison_figure(traces: list[Trace]) -> go.Figure:
    """How fast each method empties the masks: fewer steps to reach 0 means fewer forward passes."""
    if not traces:
        return notice("No runs to compare yet.")
    data = []
    for i, trace in enumerate(traces):
        masked = _masked_fraction(trace)
        data.append(dict(
            type="scatter", x=np.arange(len(masked)), y=np.round(masked, 4), mode="lines",
            name=f"{run_name(trace)}: {trace.nfe} steps",
            line=dict(color=method_color(trace.method, i), width=2.5, shape="hv",
                      dash="dash" if trace.mode == "semi-ar" else "solid"),
            hovertemplate=f"{run_name(trace)}<br>after %{{x}} steps: %{{y:.0%}} still masked<extra></extra>"))
    return go.Figure(data, dict(title=subtitle("Masked fraction of the response after each step",
                                     "Every method starts fully masked (100%) and stops at 0%; lines that drop faster "
                                     "need fewer forward passes."),
                      xaxis=dict(title="steps taken (forward passes)", rangemode="tozero"),
                      yaxis=dict(title="still masked", tickformat=".0%", range=[0, 1.02]),
                      template=TEMPLATE, height=420, hovermode="closest"))


def comparison_table(traces: list[Trace]) -> list[dict]:
    """One row per run; speed-ups are relative to the Vanilla run if there is one, else to the first run."""
    if not traces:
        return []
    base = next((t for t in traces if t.method == "vanilla"), traces[0])

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 2) if a > 0 and b > 0 else None

    return [dict(method=method_name(t.method), mode=t.mode, nfe=t.nfe, tokens_per_s=round(t.tokens_per_s, 2),
                 wall_s=round(t.wall_s, 3), speedup_nfe=ratio(base.nfe, t.nfe),
                 speedup_wall=ratio(base.wall_s, t.wall_s))
            for t in traces]


MODE_SYMBOLS = {"non-ar": "circle", "semi-ar": "square"}


def accuracy_nfe_figure(rows: list[dict]) -> go.Figure:
    """The benchmark's trade-off: accuracy against forward passes; up and to the left is better."""
    if not rows:
        return notice("No benchmark results yet.", "Accuracy against forward passes")
    for i, row in enumerate(rows):
        missing = [k for k in ("method", "mode", "task", "accuracy", "nfe_mean") if k not in row]
        if missing:
            raise ValueError(f"rows[{i}]: missing {', '.join(missing)}")
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    layout, data, shown = panel_row(tasks, gap=0.04), [], set()
    for method, mode in dict.fromkeys((r["method"], r["mode"]) for r in rows):
        name = f"{method_name(method)} ({mode})"
        for i, task in enumerate(tasks):
            sel = [r for r in rows if (r["method"], r["mode"], r["task"]) == (method, mode, task)]
            if sel:
                data.append(dict(
                    type="scatter", x=[r["nfe_mean"] for r in sel], y=[r["accuracy"] for r in sel], mode="markers",
                    name=name, legendgroup=name, showlegend=name not in shown, **axis_ids(i),
                    marker=dict(size=13, color=method_color(method, methods.index(method)),
                                symbol=MODE_SYMBOLS.get(mode, "diamond"), line=dict(color="white", width=1)),
                    hovertemplate=f"{name}<br>{task}<br>accuracy %{{y:.1%}}<br>mean NFE %{{x:.1f}}<extra></extra>"))
                shown.add(name)
    for i in range(len(tasks)):
        layout[f"xaxis{i + 1 if i else ''}"].update(title="mean NFE (forward passes; fewer is faster)",
                                                    rangemode="tozero")
    return go.Figure(data, dict(
        layout, title=subtitle("Accuracy against forward passes", "Colour: method; shape: mode (circle = non-AR, "
                               "square = semi-AR). Up and to the left is better."),
        yaxis=dict(title="accuracy", tickformat=".0%", range=[0, 1.02]), template=TEMPLATE, height=420,
        margin=dict(t=110)))
