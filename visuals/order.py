"""The decode order: when each position of each lane's response was last written, side by side, so Vanilla's
habit (one token a step, in an order of its own), Fast-dLLM's bursts and DiCo's clusters show at a glance. A pure
function of traces (``Trace.decode_order``, derived from the steps)."""
from __future__ import annotations

import plotly.graph_objects as go

from dico.trace import Trace
from visuals._common import (
    EDITED,
    EDITED_MARKER,
    LEGEND_BELOW,
    REVISED,
    REVISED_MARKER,
    TEMPLATE,
    notice,
    run_name,
    show,
)

ORDER_SCALE = "Viridis"         # early (dark) to late (yellow) in the lane's own run


def _share(step: int | None, steps: int) -> float | None:
    """A step as the share of its lane's run (0: its first step, 1: its last), so lanes of 3 and 96 steps compare;
    a token fixed by hand before the run (-1) counts as 0."""
    if step is None:
        return None
    return max(step, 0) / max(steps - 1, 1)


def decode_order_figure(traces: list[Trace]) -> go.Figure:
    """A row a lane, a column a response position: the colour says when the position was last written, as a share
    of the lane's steps (hover: the step and the token); crosses mark positions taken back at some step, triangles
    positions whose token was edited; blank cells ended masked."""
    shown = [t for t in traces if t.steps]
    if not shown:
        return notice("No run with steps to show the decode order of.", "Decode order")
    names = [show(run_name(t), 28) for t in shown]
    z, text = [], []
    back_x, back_y, back_text, edit_x, edit_y, edit_text = [], [], [], [], [], []
    for t, name in zip(shown, names):
        order = t.decode_order()
        steps = len(t.steps)
        z.append([_share(k, steps) for k in order["written_at"]])
        text.append([_hover(t, p, k, order["writes"][p], steps) for p, k in enumerate(order["written_at"])])
        for pairs, xs, ys, texts, what in ((order["taken_back"], back_x, back_y, back_text, "taken back"),
                                           (order["edited"], edit_x, edit_y, edit_text, "edited")):
            by_position: dict[int, list[int]] = {}
            for p, k in pairs:
                by_position.setdefault(p, []).append(k)
            for p, ks in by_position.items():
                xs.append(p)
                ys.append(name)
                texts.append(f"{name}, position {p}: {what} at step{'s' if len(ks) > 1 else ''} "
                             + ", ".join(map(str, ks)))
    width = max(t.gen_length for t in shown)
    fig = go.Figure(go.Heatmap(z=[row + [None] * (width - len(row)) for row in z], y=names, x=list(range(width)),
                               text=text, hoverinfo="text", colorscale=ORDER_SCALE, zmin=0, zmax=1, xgap=1, ygap=3,
                               colorbar=dict(title=dict(text="share of the lane's steps", side="right"),
                                             tickvals=[0, 0.5, 1], ticktext=["first", "half-way", "last"])))
    for xs, ys, texts, label, marker in ((back_x, back_y, back_text, REVISED, REVISED_MARKER),
                                         (edit_x, edit_y, edit_text, EDITED, EDITED_MARKER)):
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=label, marker=marker, text=texts,
                                     hoverinfo="text"))
    fig.update_layout(template=TEMPLATE, height=140 + 46 * len(shown), legend=LEGEND_BELOW,
                      title="Decode order: when each position was last written (dark early, yellow late)",
                      xaxis=dict(title="response position", range=[-0.5, width - 0.5]),
                      yaxis=dict(autorange="reversed", type="category"), margin=dict(l=150, r=110, b=90))
    return fig


def _hover(t: Trace, p: int, k: int | None, writes: int, steps: int) -> str:
    where = "padding" if p >= t.answer_length else "answer"
    if k is None:
        return f"position {p} ({where}): ends masked"
    token = t.token_text(t.response[p]) if t.response and p < len(t.response) else ""
    when = "fixed by hand before the run" if k < 0 else f"written at step {k} of {steps}"
    again = f", written {writes} times" if writes > 1 else ""
    return f"position {p} ({where}): {token.strip()!r} {when}{again}"
