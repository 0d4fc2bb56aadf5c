"""The benchmark's trade-off figure: accuracy against forward passes, from ``python -m dico.bench`` rows."""
from __future__ import annotations

import plotly.graph_objects as go

from visuals._common import (
    LEGEND_BELOW,
    TEMPLATE,
    axis_ids,
    lane_colors,
    method_color,
    method_id,
    method_name,
    notice,
    titled,
)

MODE_SYMBOLS = {"non-ar": "circle", "semi-ar": "square"}
NFE_TITLE = "mean NFE (log scale; fewer is faster)"
# A grid line at every power of 2, a label at every power of 4: labels that fit a phone's half-width panel.
NFE_TICKS = dict(tickvals=[2 ** i for i in range(11)], ticktext=[str(2 ** i) if i % 2 == 0 else "" for i in range(11)])
REQUIRED = ("method", "mode", "task", "accuracy", "nfe_mean")


def row_label(row: dict) -> str:
    """The display label of a row: its ``label``, an older row's label stored in ``method``, or the id's label."""
    if row.get("label"):
        return str(row["label"])
    return method_name(row["method"]) if method_id(row["method"]) == row["method"] else str(row["method"])


def _check(rows: list[dict], required: tuple) -> None:
    for i, row in enumerate(rows):
        missing = [k for k in required if k not in row]
        if missing:
            raise ValueError(f"rows[{i}]: missing {', '.join(missing)}")


def _task_panels(tasks: list[str], cols: int = 2, gap: float = 0.08, row_gap: float = 0.18) -> dict:
    """A panel per task, ``cols`` across (two: readable on a phone, still one screen on a projector); panel i has
    axes ``axis_ids(i, shared_y=False)``, a log NFE axis, and the task's name above it. One x title under all."""
    rows = -(-len(tasks) // cols)
    width, height = (1 - gap * (cols - 1)) / cols, (1 - row_gap * (rows - 1)) / rows
    layout: dict = {"annotations": []}
    for i, task in enumerate(tasks):
        r, c = divmod(i, cols)
        left, top, suffix = c * (width + gap), 1 - r * (height + row_gap), i + 1 if i else ""
        layout[f"xaxis{suffix}"] = dict(domain=[left, left + width], anchor=f"y{suffix}", type="log",
                                        tickangle=0, **NFE_TICKS)
        layout[f"yaxis{suffix}"] = dict(domain=[max(0.0, top - height), top], anchor=f"x{suffix}", range=[0, 1.04],
                                        tickformat=".0%", title="accuracy" if c == 0 else None,
                                        showticklabels=c == 0)     # one accuracy scale per row, read at its left
        layout["annotations"].append(dict(text=task, x=left + width / 2, y=top, xref="paper", yref="paper",
                                          xanchor="center", yanchor="bottom", showarrow=False))
    # one x title under every panel (a title per panel overlapped its neighbours')
    layout["annotations"].append(dict(text=NFE_TITLE, x=0.5, y=0, xref="paper", yref="paper", xanchor="center",
                                      yanchor="top", yshift=-30, showarrow=False, font=dict(size=13)))
    return layout


def _lane_points(sel: list[dict], name: str, task: str, axes: dict, color: str, symbol: str) -> list[dict]:
    """One lane's points on one task's panel, and (rows with ``answer_nfe_mean``) a hollow marker at the answer's
    NFE dotted to the full NFE."""
    method = method_id(sel[0]["method"])
    out = [dict(type="scatter", x=[r["nfe_mean"] for r in sel], y=[r["accuracy"] for r in sel], mode="markers",
                name=name, legendgroup=name, meta=method, **axes,
                marker=dict(size=13, color=color, symbol=symbol, line=dict(color="white", width=1)),
                hovertemplate=f"{name}<br>{task}<br>accuracy %{{y:.1%}}<br>mean NFE %{{x:.1f}}<extra></extra>")]
    answered = [r for r in sel if r.get("answer_nfe_mean") is not None]
    if answered:
        out.append(dict(
            type="scatter", x=[v for r in answered for v in (r["answer_nfe_mean"], r["nfe_mean"], None)],
            y=[v for r in answered for v in (r["accuracy"], r["accuracy"], None)], mode="lines+markers",
            name=f"{name}: answer NFE", legendgroup=name, showlegend=False, meta=method, **axes,
            line=dict(color=color, width=1, dash="dot"),
            marker=dict(size=[11, 0, 0] * len(answered), color=color, symbol=f"{symbol}-open"),
            hovertemplate=f"{name}<br>{task}<br>answer complete after %{{x:.1f}} forward passes on average"
                          "<extra></extra>"))
    return out


def accuracy_nfe_figure(rows: list[dict]) -> go.Figure:
    """Accuracy against mean forward passes (log scale), a panel per task, two across; up and to the left is
    better.

    Colour is the lane: a method's colour for its first label, a spare colour for its other labels (rows carry the
    id in ``method`` and the label in ``label``; older rows with the label in ``method`` are read too), shape the
    mode. Rows with ``answer_nfe_mean`` also get a hollow marker at the answer's
    NFE, joined to the full NFE: the forward passes after it only fill end-of-text padding.
    """
    if not rows:
        return notice("No benchmark results yet.", "Accuracy against forward passes")
    _check(rows, REQUIRED)
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    lanes = list(dict.fromkeys((r["method"], row_label(r)) for r in rows))
    colors = dict(zip((label for _, label in lanes), lane_colors(lanes)))
    data = []
    for label, mode in dict.fromkeys((row_label(r), r["mode"]) for r in rows):
        name = f"{label} ({mode})"
        for i, task in enumerate(tasks):
            sel = [r for r in rows if (row_label(r), r["mode"], r["task"]) == (label, mode, task)]
            if sel:
                points = _lane_points(sel, name, task, axis_ids(i, shared_y=False), colors[label],
                                      MODE_SYMBOLS.get(mode, "diamond"))
                points[0]["showlegend"] = not any(d["name"] == name for d in data)
                data += points
    answer_note = (" Hollow: mean answer NFE (answer complete), dotted to the full NFE."
                   if any(r.get("answer_nfe_mean") is not None for r in rows) else "")
    panel_rows = -(-len(tasks) // 2)
    return go.Figure(data, dict(
        _task_panels(tasks), **titled("Accuracy against forward passes", "Colour: method; shape: mode (circle = "
                                      f"non-AR, square = semi-AR). Up and to the left is better.{answer_note}",
                                      plot=260 * panel_rows, t=30, b=170, l=70, r=20),
        template=TEMPLATE, legend=dict(LEGEND_BELOW, y=0.0)))


FRONTIER_REQUIRED = REQUIRED + ("sweep", "label", "accuracy_low", "accuracy_high")
LINE_SYMBOLS = ("circle", "diamond", "square", "triangle-up", "x", "star")


def _panel_grid(modes: list[str], tasks: list[str], gap: float = 0.08, row_gap: float = 0.07) -> dict:
    """Layout of a panel per (task, mode): tasks down, modes across (half a phone's width each); panel
    i = row * len(modes) + column has axes ``axis_ids(i, shared_y=False)``, titled '<task> · <mode>'."""
    width = (1 - gap * (len(modes) - 1)) / len(modes)
    height = (1 - row_gap * (len(tasks) - 1)) / len(tasks)
    layout: dict = {"annotations": []}
    for r, task in enumerate(tasks):
        top = 1 - r * (height + row_gap)
        for c, mode in enumerate(modes):
            i, left = r * len(modes) + c, c * (width + gap)
            suffix = i + 1 if i else ""
            layout[f"xaxis{suffix}"] = dict(domain=[left, left + width], anchor=f"y{suffix}", type="log",
                                            tickangle=0, **NFE_TICKS)
            layout[f"yaxis{suffix}"] = dict(domain=[max(0.0, top - height), top], anchor=f"x{suffix}",
                                            range=[-0.03, 1.04], tickformat=".0%", title="accuracy" if c == 0 else None)
            layout["annotations"].append(dict(text=f"{task} · {mode}", x=left + width / 2, y=top, xref="paper",
                                              yref="paper", xanchor="center", yanchor="bottom", showarrow=False))
    layout["annotations"].append(dict(text="forward passes (log scale)", x=0.5, y=0, xref="paper", yref="paper",
                                      xanchor="center", yanchor="top", yshift=-30, showarrow=False))
    return layout


def frontier_figure(rows: list[dict]) -> go.Figure:
    """The speed-accuracy frontier (``python -m dico.bench frontier`` rows): accuracy against mean forward passes,
    one line per method through its knob's values (naive top-k: the paper's Figure 1; Fast-dLLM's threshold sweep;
    its factor; DiCo's cluster bar), error bars the 95% intervals; a panel per task and mode. Up and to the
    left is better."""
    title = "Speed against accuracy, each method's knob turned"
    if not rows:
        return notice("No frontier results yet: python -m dico.bench frontier writes them.", title)
    _check(rows, FRONTIER_REQUIRED)
    modes = sorted(dict.fromkeys(r["mode"] for r in rows), key=lambda m: (m not in MODE_SYMBOLS, m))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    lines = list(dict.fromkeys(r["sweep"] for r in rows))
    methods = list(dict.fromkeys(method_id(r["method"]) for r in rows))
    layout, data = _panel_grid(modes, tasks), []
    for n, line in enumerate(lines):
        for i, (task, mode) in enumerate((t, m) for t in tasks for m in modes):
            sel = [r for r in rows if (r["sweep"], r["mode"], r["task"]) == (line, mode, task)]
            if not sel:
                continue
            method = method_id(sel[0]["method"])
            color = method_color(method, methods.index(method))
            data.append(dict(
                type="scatter", x=[r["nfe_mean"] for r in sel], y=[r["accuracy"] for r in sel], mode="lines+markers",
                name=line, legendgroup=line, showlegend=not any(d["name"] == line for d in data), meta=method,
                **axis_ids(i, shared_y=False), line=dict(color=color, width=2),
                marker=dict(size=9, color=color, symbol=LINE_SYMBOLS[n % len(LINE_SYMBOLS)],
                            line=dict(color="white", width=1)),
                error_y=dict(type="data", symmetric=False, array=[r["accuracy_high"] - r["accuracy"] for r in sel],
                             arrayminus=[r["accuracy"] - r["accuracy_low"] for r in sel], color=color, thickness=1,
                             width=3),
                customdata=[[r["label"], r["n"], r["accuracy_low"], r["accuracy_high"]] for r in sel],
                hovertemplate=f"%{{customdata[0]}}<br>{task} · {mode}<br>accuracy %{{y:.1%}} (95%: "
                              "%{customdata[2]:.0%}-%{customdata[3]:.0%}, n = %{customdata[1]})<br>mean NFE %{x:.1f}"
                              "<extra></extra>"))
    return go.Figure(data, dict(
        layout, **titled(title, "Each line runs through one knob's values; bars: 95% intervals. Passes on a log "
                         "scale; up and to the left is better.", plot=220 * len(tasks), t=30, b=120, l=70, r=20),
        template=TEMPLATE, legend=LEGEND_BELOW))
