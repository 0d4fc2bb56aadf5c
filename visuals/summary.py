"""Figures that summarise runs over steps: phases and commits per step, and the comparison of methods.

Both separate answer commits from end-of-text padding: most of the parallelism on screen is padding,
and the step at which the answer is complete (``answer_nfe``) is the number that says which method is faster.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dico.trace import Trace
from visuals._common import (
    BLOCK_COLOR,
    FORK,
    FORK_LINE,
    LEGEND_BELOW,
    PHASE_COLORS,
    REFRESH_COLOR,
    REVISED,
    REVISED_COLOR,
    TEMPLATE,
    Grid,
    cache_kind,
    fork_lines,
    int_ticks,
    notice,
    refresh_steps,
    run_colors,
    run_name,
    titled,
)

STEP_X = dict(title="step (one forward pass each)", showgrid=False)
PADDING_PATTERN = dict(shape="/", fgcolor="#555555", size=6, solidity=0.3)


def _per_step(numerator: int, steps: int) -> float:
    return round(numerator / steps, 2) if steps > 0 else 0.0


def _phase_bars(g: Grid, decoded: np.ndarray) -> list[dict]:
    """Per phase: the band on top, its answer commits (solid) and its padding commits (hatched)."""
    data = []
    for phase, color in PHASE_COLORS.items():
        rows = np.flatnonzero(g.phases == phase)
        if not len(rows):
            continue
        bar = dict(type="bar", x=g.steps[rows], legendgroup=phase, customdata=decoded[rows])
        data.append(dict(bar, y=np.ones(len(rows)), width=1, yaxis="y", showlegend=False, name=phase,
                         marker=dict(color=color, line_width=0), hovertemplate=f"step %{{x}}: {phase}<extra></extra>"))
        data.append(dict(bar, y=g.answer_counts[rows], yaxis="y2", name=phase, marker=dict(color=color, line_width=0),
                         hovertemplate=f"step %{{x}} ({phase})<br>%{{y}} answer token(s) committed"
                                       "<br>%{customdata}% of the response decoded after it<extra></extra>"))
        data.append(dict(bar, y=g.counts[rows] - g.answer_counts[rows], yaxis="y2", name=f"{phase} padding",
                         showlegend=False, marker=dict(color=color, line=dict(color=color, width=1),
                                                       pattern=dict(PADDING_PATTERN, bgcolor="white")),
                         hovertemplate=f"step %{{x}} ({phase})<br>%{{y}} end-of-text padding token(s) committed"
                                       "<extra></extra>"))
    data.append(dict(type="bar", x=[None], y=[None], yaxis="y2", name="padding (hatched)", legendgroup="padding",
                     marker=dict(color="white", line=dict(color="#555555", width=1), pattern=PADDING_PATTERN)))
    return data


def _revised_bars(g: Grid) -> list[dict]:
    """Tokens a revising rule took back at each step, drawn down from zero: commits go up, take-backs go down."""
    if not g.revised.any():
        return []
    return [dict(type="bar", x=g.steps, y=-g.revised, yaxis="y2", name=f"revised: {REVISED}",
                 marker=dict(color=REVISED_COLOR, line_width=0), customdata=g.revised,
                 hovertemplate="step %{x}: %{customdata} token(s) taken back to the mask<extra></extra>")]


def _phase_shapes(trace: Trace, g: Grid) -> list[dict]:
    """A dashed line where each semi-AR block starts and a dotted one after the step that completed the answer."""
    shapes = [dict(type="line", name="block start", x0=x - 0.5, x1=x - 0.5, y0=0, y1=1, xref="x", yref="paper",
                   line=dict(color=BLOCK_COLOR, width=1.2, dash="dash")) for x in g.steps[g.block_starts].tolist()]
    if g.answer_complete and trace.answer_nfe < trace.nfe:
        x = trace.answer_nfe - 0.5
        shapes.append(dict(type="line", name="answer complete", x0=x, x1=x, y0=0, y1=0.86, xref="x", yref="paper",
                           line=dict(color="black", width=1, dash="dot")))
    return shapes


def phase_figure(trace: Trace) -> go.Figure:
    """Which phase each step was in, and how many answer and padding tokens it committed: where the parallelism
    comes from. Padding bars are hatched; in semi-AR a dashed line marks the step each block starts; a revising
    rule's take-backs go below zero. A method without DiCo's phases has one band, named by its rule."""
    if not trace.steps:
        return notice("This run has no steps yet.", run_name(trace))
    g = Grid(trace)
    decoded = np.round(100 * np.array([s.unmasked_fraction for s in trace.steps]), 1)
    data = _phase_bars(g, decoded) + _revised_bars(g)
    refreshed = refresh_steps(trace)
    if refreshed:
        data.append(dict(type="scatter", x=refreshed, y=[0.5] * len(refreshed), yaxis="y", mode="markers",
                         name="cache refresh", marker=dict(symbol="diamond", size=9, color=REFRESH_COLOR,
                                                           line=dict(color="white", width=1)),
                         hovertemplate="step %{x}: a full pass refreshed the KV cache<extra></extra>"))
    shapes = _phase_shapes(trace, g)
    dico = trace.method == "dico"
    done = f"answer complete after {trace.answer_nfe} steps, " if g.answer_complete else ""
    note = (("Top band: the phase of each step (Divide, Conquer, Finalize). " if dico else
             "Top band: the rule of each step. ") + "Bars: tokens committed by that step, solid in the answer, "
            "hatched in the end-of-text padding." + (" Below zero: tokens taken back to the mask." if g.revised.any()
                                                    else "")
            + (" Dashed: a new block starts." if len(g.block_starts) else "")
            + (" Dotted: the answer is complete." if g.answer_complete and trace.answer_nfe < trace.nfe else "")
            + (" ◆: a full pass refreshed the KV cache; the others computed fewer positions." if refreshed else ""))
    return go.Figure(data, dict(
        **titled(f"{run_name(trace)}: {trace.nfe} steps; {done}{_per_step(g.counts.sum(), trace.nfe)} tokens per "
                 f"step, of which {_per_step(g.answer_counts.sum(), trace.nfe)} answer", note, plot=230, b=110),
        xaxis=dict(STEP_X, anchor="y2", range=[-0.5, trace.nfe - 0.5], **int_ticks(trace.nfe)),
        yaxis=dict(domain=[0.9, 1.0], visible=False, range=[0, 1]),
        yaxis2=dict(domain=[0.0, 0.86], title="tokens committed", rangemode="tozero", anchor="x", tickformat="d"),
        barmode="relative", bargap=0.15, template=TEMPLATE, shapes=shapes,
        legend=dict(LEGEND_BELOW, title=dict(text="phase" if dico else "rule"))))


def _masked_fraction(counts: np.ndarray, total: int) -> np.ndarray:
    """Masked fraction before any step, then after each step."""
    return 1.0 - np.concatenate([[0], np.cumsum(counts)]) / max(total, 1)


def comparison_figure(traces: list[Trace]) -> go.Figure:
    """How fast each method empties the masks, of the whole response (solid) and of the answer alone (dashed),
    with a star where the answer is complete: fewer steps to the star means the answer is there sooner."""
    traces = [t for t in traces if t.steps]
    if not traces:
        return notice("No runs to compare yet.")
    data, colors = [], run_colors(traces)
    for i, trace in enumerate(traces):
        g, name, color = Grid(trace), run_name(trace), colors[i]
        x = np.arange(len(trace.steps) + 1)
        dash = "dot" if trace.mode == "semi-ar" else "solid"
        data.append(dict(type="scatter", x=x, y=_masked_fraction(g.counts, trace.gen_length), mode="lines",
                         name=name, legendgroup=name, line=dict(color=color, width=2.5, dash=dash),
                         hovertemplate=f"{name}<br>after %{{x}} steps: %{{y:.0%}} of the response still masked"
                                       "<extra></extra>"))
        if trace.answer_length:
            data.append(dict(type="scatter", x=x, y=_masked_fraction(g.answer_counts, trace.answer_length),
                             mode="lines", name=f"{name}: answer", legendgroup=name, showlegend=False,
                             line=dict(color=color, width=1.5, dash="dash"), opacity=0.8,
                             hovertemplate=f"{name}<br>after %{{x}} steps: %{{y:.0%}} of the answer still masked"
                                           "<extra></extra>"))
        if g.answer_complete:
            data.append(dict(type="scatter", x=[trace.answer_nfe], y=[0], mode="markers+text", legendgroup=name,
                             name=f"{name}: answer complete", showlegend=False, text=[str(trace.answer_nfe)],
                             textposition="top center", textfont=dict(color=color),
                             marker=dict(symbol="star", size=14, color=color, line=dict(color="white", width=1)),
                             hovertemplate=f"{name}<br>answer complete after %{{x}} steps<extra></extra>"))
        starts = g.block_starts
        if len(starts):
            y = _masked_fraction(g.counts, trace.gen_length)[starts]
            data.append(dict(type="scatter", x=starts, y=y, mode="markers", legendgroup=name, showlegend=False,
                             name=f"{name}: block start", marker=dict(symbol="line-ns-open", size=16, color=BLOCK_COLOR,
                                                                     line=dict(width=2)),
                             hovertemplate=f"{name}<br>a new block starts at step %{{x}}<extra></extra>"))
    steps = max(len(t.steps) for t in traces)
    parts = sorted({t.fork["at"] for t in traces if getattr(t, "fork", None)})       # where a fork left its parent
    if parts:
        data.append(dict(type="scatter", x=[None], y=[None], mode="lines", name=FORK, line=FORK_LINE,
                         hoverinfo="skip"))
    return go.Figure(data, dict(
        **titled("Still masked after each step: the whole response (solid) and the answer (dashed)",
                 "★ marks the step the answer is complete (answer NFE); after it a method only fills end-of-text "
                 "padding. Every method starts fully masked (100%); lines that drop faster need fewer forward "
                 "passes. Semi-AR: dotted, with a tick where each block starts.", plot=260, b=110),
        xaxis=dict(title="steps taken (forward passes)", range=[0, steps + 1], **int_ticks(steps + 1)),
        yaxis=dict(title="still masked", tickformat=".0%", range=[-0.03, 1.05]),
        template=TEMPLATE, hovermode="closest", legend=LEGEND_BELOW,
        shapes=fork_lines(parts, "x", "x", "y domain", offset=0.0)))


def comparison_table(traces: list[Trace]) -> list[dict]:
    """One row per run; speed-ups are relative to the Vanilla run (one token a step) if there is one, else to the
    first run (``reference``).

    ``method`` is the run's lane label (``method_id`` the method); ``answer_nfe`` is the step the answer was complete,
    ``answer_tokens_per_step`` the answer's tokens over it, beside ``tokens_per_step`` of the whole response.
    """
    if not traces:
        return []
    base = reference(traces)

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 2) if a > 0 and b > 0 else None

    rows = []
    for t in traces:
        committed = sum(len(s.committed) for s in t.steps)
        answer = sum(len(t.answer_commits(s)) for s in t.steps)
        rows.append(dict(method=t.name, method_id=t.method, mode=t.mode, nfe=t.nfe,
                         answer_nfe=t.answer_nfe, answer_tokens=t.answer_tokens, padding_tokens=t.padding_tokens,
                         tokens_per_step=_per_step(committed, t.nfe),
                         answer_tokens_per_step=_per_step(answer, t.answer_nfe),
                         tokens_per_s=round(t.tokens_per_s, 2), wall_s=round(t.wall_s, 3),
                         token_forwards=t.token_forwards, cache=cache_kind(t),
                         speedup_nfe=ratio(base.nfe, t.nfe), speedup_answer_nfe=ratio(base.answer_nfe, t.answer_nfe),
                         speedup_wall=ratio(base.wall_s, t.wall_s)))
    return rows


def reference(traces: list[Trace]) -> Trace:
    """The run speed-ups are measured against: Vanilla one token a step, else any Vanilla run, else the first."""
    return next((t for t in traces if t.method == "vanilla" and not t.settings.get("steps")),
                next((t for t in traces if t.method == "vanilla"), traces[0]))
