"""The benchmark's trade-off figure: accuracy against forward passes, from ``python -m dico.bench`` rows."""
from __future__ import annotations

import plotly.graph_objects as go

from visuals._common import (LEGEND_BELOW, TEMPLATE, axis_ids, lane_colors, method_id, method_name, notice, panel_row,
                             subtitle)

MODE_SYMBOLS = {"non-ar": "circle", "semi-ar": "square"}
REQUIRED = ("method", "mode", "task", "accuracy", "nfe_mean")


def row_label(row: dict) -> str:
    """The display label of a row: its ``label``, an older row's label stored in ``method``, or the id's label."""
    if row.get("label"):
        return str(row["label"])
    return method_name(row["method"]) if method_id(row["method"]) == row["method"] else str(row["method"])


def accuracy_nfe_figure(rows: list[dict]) -> go.Figure:
    """Accuracy against mean forward passes, one panel per task; up and to the left is better.

    Colour is the lane: a method's colour for its first label, a spare colour for its other labels (rows carry the
    id in ``method`` and the label in ``label``; older rows with the label in ``method`` are read too), shape the
    mode. Rows with ``answer_nfe_mean`` also get a hollow marker at the answer's
    NFE, joined to the full NFE: the forward passes after it only fill end-of-text padding.
    """
    if not rows:
        return notice("No benchmark results yet.", "Accuracy against forward passes")
    for i, row in enumerate(rows):
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise ValueError(f"rows[{i}]: missing {', '.join(missing)}")
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    lanes = list(dict.fromkeys((r["method"], row_label(r)) for r in rows))
    colors = dict(zip((label for _, label in lanes), lane_colors(lanes)))
    layout, data, shown = panel_row(tasks, gap=0.06), [], set()
    for label, mode in dict.fromkeys((row_label(r), r["mode"]) for r in rows):
        name = f"{label} ({mode})"
        for i, task in enumerate(tasks):
            sel = [r for r in rows if (row_label(r), r["mode"], r["task"]) == (label, mode, task)]
            if not sel:
                continue
            method = method_id(sel[0]["method"])
            color, symbol = colors[label], MODE_SYMBOLS.get(mode, "diamond")
            data.append(dict(
                type="scatter", x=[r["nfe_mean"] for r in sel], y=[r["accuracy"] for r in sel], mode="markers",
                name=name, legendgroup=name, showlegend=name not in shown, meta=method, **axis_ids(i),
                marker=dict(size=13, color=color, symbol=symbol, line=dict(color="white", width=1)),
                hovertemplate=f"{name}<br>{task}<br>accuracy %{{y:.1%}}<br>mean NFE %{{x:.1f}}<extra></extra>"))
            shown.add(name)
            answered = [r for r in sel if r.get("answer_nfe_mean") is not None]
            if answered:
                xs = [v for r in answered for v in (r["answer_nfe_mean"], r["nfe_mean"], None)]
                ys = [v for r in answered for v in (r["accuracy"], r["accuracy"], None)]
                data.append(dict(
                    type="scatter", x=xs, y=ys, mode="lines+markers", name=f"{name}: answer NFE", legendgroup=name,
                    showlegend=False, meta=method, **axis_ids(i), line=dict(color=color, width=1, dash="dot"),
                    marker=dict(size=[11, 0, 0] * len(answered), color=color, symbol=f"{symbol}-open"),
                    hovertemplate=f"{name}<br>{task}<br>answer complete after %{{x:.1f}} forward passes on average"
                                  "<extra></extra>"))
    answer_note = (" Hollow: mean answer NFE (answer complete), dotted to the full NFE."
                   if any(r.get("answer_nfe_mean") is not None for r in rows) else "")
    for i in range(len(tasks)):
        layout[f"xaxis{i + 1 if i else ''}"].update(title="mean NFE (forward passes; fewer is faster)",
                                                    rangemode="tozero")
    return go.Figure(data, dict(
        layout, title=subtitle("Accuracy against forward passes", "Colour: method; shape: mode (circle = non-AR, "
                               f"square = semi-AR). Up and to the left is better.{answer_note}"),
        yaxis=dict(title="accuracy", tickformat=".0%", range=[0, 1.02]), template=TEMPLATE, height=560,
        margin=dict(t=130, b=150), legend=LEGEND_BELOW))
