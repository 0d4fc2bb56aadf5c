"""What every figure shares: the palettes, a trace turned into step x position arrays, token labels.

Figures never walk a trace cell by cell; they read the arrays ``Grid`` builds once.
"""
from __future__ import annotations

import html
from functools import cached_property

import numpy as np
import plotly.graph_objects as go

from dico.trace import PHASES, Trace

# Okabe & Ito's colour-blind-safe palette (with its grey). Vermillion always means "committed".
OKABE_ITO = {"grey": "#999999", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
             "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "black": "#000000"}
PHASE_COLORS = dict(zip(PHASES, (OKABE_ITO[c] for c in ("grey", "orange", "sky", "green", "purple"))))
METHOD_COLORS = {"vanilla": OKABE_ITO["grey"], "fast": OKABE_ITO["orange"], "fast-factor": OKABE_ITO["black"],
                 "dico": OKABE_ITO["blue"]}
METHOD_NAMES = {"vanilla": "Vanilla", "fast": "Fast-dLLM", "fast-factor": "Fast-dLLM (factor)", "dico": "DiCo"}
COMMIT_COLOR, SEED_COLOR, CLUSTER_COLOR = OKABE_ITO["vermillion"], OKABE_ITO["yellow"], OKABE_ITO["black"]
# Viridis is perceptually uniform and readable with every common colour-vision deficiency.
CONFIDENCE_AXIS = dict(colorscale="Viridis", cmin=0.0, cmax=1.0,
                       colorbar=dict(title=dict(text="confidence"), len=0.6, y=1.0, yanchor="top"))
# Plotly puts the legend and a colour bar at the same place; stack the legend under the shortened bar.
UNDER_COLORBAR = dict(x=1.02, xanchor="left", y=0.36, yanchor="top")
MASK = "▢"
# A small template of our own: plotly's named templates cost ~25 ms per figure and ~7 kB of JSON each.
_AXIS = dict(showgrid=True, gridcolor="#e8e8e8", zeroline=False, linecolor="#444444", ticks="outside", automargin=True)
TEMPLATE = dict(layout=dict(font=dict(size=13), paper_bgcolor="white", plot_bgcolor="white", xaxis=_AXIS, yaxis=_AXIS,
                            colorway=[OKABE_ITO[c] for c in ("blue", "orange", "green", "purple", "sky", "grey")],
                            hoverlabel=dict(align="left"), title=dict(x=0.02, xanchor="left")))


def method_name(method: str) -> str:
    return METHOD_NAMES.get(method, method)


def method_color(method: str, i: int = 0) -> str:
    spare = ("sky", "green", "purple", "vermillion", "yellow")
    return METHOD_COLORS.get(method, OKABE_ITO[spare[i % len(spare)]])


def run_name(trace: Trace) -> str:
    """How a run is named in legends: method, and mode when it is semi-AR."""
    name = method_name(trace.method)
    return f"{name} (semi-AR, block {trace.block_length})" if trace.mode == "semi-ar" else name


class Grid:
    """One trace as arrays; row r is ``trace.steps[r]``, column j is response position j.

    The step x position matrices (``conf``, ``pred``) are built on first use: summaries never pay for them.
    """

    def __init__(self, trace: Trace):
        self.trace, n, steps = trace, trace.gen_length, trace.steps
        self.steps = np.array([s.index for s in steps], dtype=int)        # (S,) the y coordinate in every figure
        self.phases = np.array([s.phase for s in steps], dtype=str)       # (S,)
        self.counts = np.array([len(s.committed) for s in steps], dtype=int)   # (S,) tokens committed per step
        positions = np.array([p for s in steps for p in s.committed], dtype=int)
        self.commit_row = np.full(n, -1)                                   # (N,) row that committed it, -1: never
        self.commit_row[positions] = np.repeat(np.arange(len(steps)), self.counts)
        self.token = np.full(n, -1)                                        # (N,) committed token id, -1: never
        self.token[positions] = [t for s in steps for t in s.tokens]

    @cached_property
    def conf(self) -> np.ndarray:
        """(S, N) confidence of still-masked positions, NaN where decoded before the step."""
        return np.array([s.confidence for s in self.trace.steps], dtype=float).reshape(len(self.steps), -1)

    @cached_property
    def pred(self) -> np.ndarray:
        """(S, N) predicted token id, -1 where decoded before the step."""
        pred = np.array([s.prediction for s in self.trace.steps], dtype=float).reshape(len(self.steps), -1)
        return np.where(np.isnan(pred), -1, pred).astype(int)

    @cached_property
    def commit_conf(self) -> np.ndarray:
        """(N,) confidence each position had at the step that committed it, NaN if never committed."""
        steps = self.trace.steps
        return np.array([np.nan if r < 0 else steps[r].confidence[j] for j, r in enumerate(self.commit_row.tolist())],
                        dtype=float)





def show(text: str, width: int = 12) -> str:
    """A token's text made visible and safe in hover labels: newlines, blanks and '<' shown, long ones cut."""
    text = text.replace("\n", "↵").replace("\t", "⇥")
    if not text.strip():
        text = text.replace(" ", "␣") or "∅"
    if len(text) > width:
        text = text[:width - 1] + "…"
    return html.escape(text, quote=False)


def labels(trace: Trace, ids: np.ndarray, width: int = 12, missing: str = "") -> np.ndarray:
    """Display labels for an array of token ids (any shape), ``missing`` where the id is -1."""
    unique, inverse = np.unique(ids, return_inverse=True)
    table = np.array([missing if i < 0 else show(trace.token_text(int(i)), width) for i in unique] or [""], dtype=str)
    return table[inverse].reshape(ids.shape)     # a str (not object) array: plotly copies it without a deep copy


def boxes(spans: np.ndarray, half: float = 0.4) -> tuple[list, list]:
    """x, y of one closed outline per (y, first, last) row of ``spans``, None-separated for one Scatter trace."""
    y, a, b = np.asarray(spans, dtype=float).reshape(-1, 3).T
    nan = np.full_like(y, np.nan)
    xs = np.stack([a - 0.5, b + 0.5, b + 0.5, a - 0.5, a - 0.5, nan], axis=1)
    ys = np.stack([y - half, y - half, y + half, y + half, y - half, nan], axis=1)
    return _gapped(xs), _gapped(ys)


def _gapped(values: np.ndarray) -> list:
    return [None if v != v else v for v in np.round(values.ravel(), 2).tolist()]


def cluster_spans(trace: Trace, phase: str | None = None) -> np.ndarray:
    """(K, 3) rows (step, first, last) of every cluster after every step (of one phase, if given)."""
    rows = [(s.index, a, b) for s in trace.steps if phase in (None, s.phase) for a, b in s.clusters]
    return np.array(rows, dtype=int).reshape(-1, 3)


def seed_points(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(positions, steps) of every seed."""
    pairs = np.array([(p, s.index) for s in trace.steps for p in s.seeds], dtype=int).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def ranges(values) -> str:
    """Step lists written compactly: [0, 1, 2, 5] -> '0–2, 5'."""
    values, parts = sorted(values), []
    for v in values:
        if parts and v == parts[-1][1] + 1:
            parts[-1][1] = v
        else:
            parts.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in parts) or "none"


def figure(data: list[dict], layout: dict) -> go.Figure:
    """``go.Figure(data, layout)`` without its deep copy of heatmap text grids (0.4 s for 512 x 512 cells)."""
    data = [dict(d) for d in data]
    texts = {i: d.pop("text") for i, d in enumerate(data) if d.get("type") == "heatmap" and "text" in d}
    fig = go.Figure(data, layout)
    for i, text in texts.items():
        fig.data[i].text = text          # assignment validates but does not deep-copy
    return fig


def notice(message: str, title: str = "") -> go.Figure:
    """The empty state: no axes, one sentence saying why there is nothing to draw."""
    return go.Figure([], dict(title=title, xaxis=dict(visible=False), yaxis=dict(visible=False), template=TEMPLATE,
                              height=300, annotations=[dict(text=message, x=0.5, y=0.5, xref="paper", yref="paper",
                                                            showarrow=False, font=dict(size=14))]))


def panel_row(titles: list[str], gap: float = 0.03) -> dict:
    """Layout of side-by-side panels on one shared y axis; panel i uses xaxis "x{i+1}".

    What ``make_subplots`` does for this case, at a tenth of its cost (it validates every call).
    """
    width = (1 - gap * (len(titles) - 1)) / len(titles)
    layout: dict = {"annotations": []}
    for i, title in enumerate(titles):
        left = i * (width + gap)
        layout[f"xaxis{i + 1 if i else ''}"] = dict(domain=[left, left + width], anchor="y")
        layout["annotations"].append(dict(text=title, x=left + width / 2, y=1.0, xref="paper", yref="paper",
                                          xanchor="center", yanchor="bottom", showarrow=False))
    return layout


def axis_ids(i: int) -> dict:
    """The axes of panel i (0-based) in a ``panel_row`` layout."""
    return dict(xaxis=f"x{i + 1 if i else ''}", yaxis="y")


def subtitle(title: str, note: str) -> str:
    return f"{title}<br><sup>{note}</sup>"
