"""What every figure shares: the palettes, a trace turned into step x position arrays, token labels, and the
marks every figure draws the same way (answer versus padding commits, block boundaries, where the answer ends).

Figures never walk a trace cell by cell; they read the arrays ``Grid`` builds once.
"""
from __future__ import annotations

import html
import re
from functools import cached_property

import numpy as np
import plotly.graph_objects as go

from dico.settings import METHOD_LABELS
from dico.trace import PHASES, Trace
from visuals._titles import TOOLBAR_PX, int_ticks, subtitle, titled, wrap  # noqa: F401  (shared by every figure)

# Okabe & Ito's colour-blind-safe palette (with its grey). Vermillion always means "committed in the answer";
# end-of-text padding commits are hollow grey: most of the parallelism is padding, and it must show.
OKABE_ITO = {"grey": "#999999", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73", "yellow": "#F0E442",
             "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "black": "#000000"}
PHASE_COLORS = dict(zip(PHASES, (OKABE_ITO[c] for c in ("grey", "orange", "sky", "green", "purple", "yellow"))))
METHOD_COLORS = {"vanilla": OKABE_ITO["grey"], "topk": OKABE_ITO["purple"], "fast": OKABE_ITO["orange"],
                 "fast-factor": OKABE_ITO["black"], "dico": OKABE_ITO["blue"]}
METHOD_NAMES = METHOD_LABELS            # kept for old imports; the labels are declared once, in dico.settings
COMMIT_COLOR, SEED_COLOR, CLUSTER_COLOR = OKABE_ITO["vermillion"], OKABE_ITO["yellow"], OKABE_ITO["black"]
# A token taken back to the mask by a revising rule (``Step.remasked``): reddish purple, the one colour no commit,
# seed, phase or cluster uses for anything else.
REVISED_COLOR, REVISED = OKABE_ITO["purple"], "taken back (re-masked)"
REVISED_MARKER = dict(symbol="x-thin-open", size=9, color=REVISED_COLOR, line=dict(color=REVISED_COLOR, width=2))
# A written token replaced by another (an editing rule, ``Step.edited``): a blue triangle, the one mark for an edit.
EDITED_COLOR, EDITED = OKABE_ITO["blue"], "replaced (token edit)"
EDITED_MARKER = dict(symbol="triangle-up", size=10, color=EDITED_COLOR, line=dict(color="black", width=1))
# A Divide step's commits above the shortcut (the Divide shortcut setting): beside the seeds, not seeds themselves.
SHORTCUT = "Divide shortcut commit"
SHORTCUT_MARKER = dict(symbol="diamond", size=8, color=OKABE_ITO["green"], line=dict(color="black", width=1))
SHORTCUT_HOVER = "committed above the shortcut in Divide: position %{x}, step %{y}<extra></extra>"
ANSWER_COLOR, PADDING_COLOR, BLOCK_COLOR = COMMIT_COLOR, "#7f7f7f", "#444444"
REFRESH_COLOR = "#17becf"           # a pass that recomputed the whole KV cache
# Where a fork and the run it was forked from part (``Trace.fork["at"]``): a black dash-dot line, the one
# dash pattern no other mark uses.
FORK, FORK_LINE = "fork: the runs part here", dict(color=OKABE_ITO["black"], width=2, dash="dashdot")
ANSWER_COMMIT, PADDING_COMMIT = "answer commit", "padding commit"
CONFIDENCES = ("raw", "guided")
# Viridis is perceptually uniform and readable with every common colour-vision deficiency. The bar stands at the
# bottom right of the plot with its title on its side, away from plotly's toolbar, which Gradio stacks down the
# top right corner (where it would cover the bar's title).
COLORBAR = dict(title=dict(text="confidence", side="right"), len=0.55, y=0.0, yanchor="bottom", thickness=16, x=1.0,
                xanchor="left")
CONFIDENCE_AXIS = dict(colorscale="Viridis", cmin=0.0, cmax=1.0, colorbar=COLORBAR)
# Legends run along the bottom of the figure, leaving the right margin to the colour bar alone: plots keep
# their width on a phone, and figures over response positions share one frame (``FRAME``), so their x axes
# line up when stacked on a page.
LEGEND_BELOW = dict(orientation="h", x=0, xanchor="left", yref="container", y=0.0, yanchor="bottom")
UNDER_COLORBAR = LEGEND_BELOW           # the old name
FRAME = dict(l=80, r=110, b=120)       # the top margin follows the title (``titled``)
MASK = "▢"
# A small template of our own: plotly's named templates cost ~25 ms per figure and ~7 kB of JSON each.
_AXIS = dict(showgrid=True, gridcolor="#e8e8e8", zeroline=False, linecolor="#444444", ticks="outside", automargin=True)
TEMPLATE = dict(layout=dict(font=dict(size=13), paper_bgcolor="white", plot_bgcolor="white", xaxis=_AXIS, yaxis=_AXIS,
                            colorway=[OKABE_ITO[c] for c in ("blue", "orange", "green", "purple", "sky", "grey")],
                            hoverlabel=dict(align="left"),
                            # below the band plotly's toolbar floats in
                            title=dict(x=0.02, xanchor="left", yref="container", y=1.0, yanchor="top",
                                       pad=dict(t=TOOLBAR_PX), font=dict(size=15))))


def method_id(name: str) -> str:
    """A method id from an id or a display label, also a variant's label: 'Fast-dLLM (0.95)' -> 'fast',
    'DiCo N=4' -> 'dico', 'Top-4 per step' -> 'topk'. Unknown names come back unchanged."""
    if name in METHOD_LABELS:
        return name
    if re.fullmatch(r"Top-\d+ per step( .*)?", name):
        return "topk"
    for method, label in sorted(METHOD_LABELS.items(), key=lambda kv: -len(kv[1])):   # longest label first
        if name == label or name.startswith(label + " "):
            return method
    return name


def method_name(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def method_color(method: str, i: int = 0) -> str:
    spare = ("sky", "green", "purple", "vermillion", "yellow")
    return METHOD_COLORS.get(method_id(method), OKABE_ITO[spare[i % len(spare)]])


# Lanes beyond the first of a method (two Fast-dLLM lanes) take these, skipping the colours of methods shown.
SPARE_COLORS = tuple(OKABE_ITO[c] for c in ("sky", "green", "yellow")) + ("#8C564B", "#7F7F00", "#5D3A9B")


def lane_colors(lanes: list[tuple[str, str]]) -> list[str]:
    """A colour per lane, given as (method id, label): a method's first lane in the method's colour, any further
    lane of it (another label) in a spare colour no method shown uses; one label keeps one colour."""
    taken = {METHOD_COLORS.get(method_id(m)) for m, _ in lanes}
    spare = iter([c for c in SPARE_COLORS + tuple(METHOD_COLORS.values()) if c not in taken])
    colors: dict[str, str] = {}
    seen: set[str] = set()
    for method, label in lanes:
        m = method_id(method)
        if label not in colors:
            colors[label] = METHOD_COLORS[m] if m in METHOD_COLORS and m not in seen else next(spare, "#999999")
        seen.add(m)
    return [colors[label] for _, label in lanes]


def run_colors(traces: list[Trace]) -> list[str]:
    return lane_colors([(t.method, t.name) for t in traces])


def run_name(trace: Trace) -> str:
    """How a run is named in legends: its lane's label, mode when it is semi-AR, and its KV cache when it has one
    (unless the label already says so)."""
    name = trace.name
    parts = ([f"semi-AR, block {trace.block_length}"] if trace.mode == "semi-ar" else []) + \
        ([f"{cache_kind(trace)} cache"] if cache_kind(trace) != "none" and "cache" not in name else [])
    return f"{name} ({', '.join(parts)})" if parts else name


def cache_kind(trace: Trace) -> str:
    """The run's KV cache kind ('none' for runs without one, and for traces from before the cache)."""
    return str(trace.settings.get("cache", "none"))


def refresh_steps(trace: Trace) -> list[int]:
    """Steps whose pass recomputed the whole KV cache; none for a run without a cache (every pass is full there)."""
    return [s.index for s in trace.steps if s.refresh] if cache_kind(trace) != "none" else []


def refresh_ticks(trace: Trace, xref: str = "x domain", yref: str = "y") -> list[dict]:
    """A short mark at the left edge of each step row whose pass refreshed the KV cache."""
    return [dict(type="line", name="cache refresh", layer="above", x0=0, x1=0.025, y0=y, y1=y, xref=xref, yref=yref,
                 line=dict(color=REFRESH_COLOR, width=3)) for y in refresh_steps(trace)]


def check_confidence(confidence: str) -> str:
    if confidence not in CONFIDENCES:
        raise ValueError(f"confidence = {confidence!r}: choose 'raw' or 'guided'")
    return confidence


def remasked(step) -> list[int]:
    """Positions a step took back to the mask after its commits (revising rules); [] for older traces."""
    return list(getattr(step, "remasked", None) or [])


def revises(trace: Trace) -> bool:
    return any(remasked(s) for s in trace.steps)


def edited(step) -> list[list[int]]:
    """[position, token before, token after] of every token a step replaced (editing rules); [] for older traces."""
    return list(getattr(step, "edited", None) or [])


class Grid:
    """One trace as arrays; row r is ``trace.steps[r]``, column j is response position j.

    ``commit_row`` and ``token`` are each position's last commit that stands at the end (a position taken back
    and never committed again: -1); ``state(k)`` gives them as they stood after step k. The step x position
    matrices (``conf``, ``pred``, ``guided``) are built on first use: summaries never pay for them.
    """

    def __init__(self, trace: Trace):
        self.trace, n, steps = trace, trace.gen_length, trace.steps
        self.steps = np.array([s.index for s in steps], dtype=int)        # (S,) the y coordinate in every figure
        self.phases = np.array([s.phase for s in steps], dtype=str)       # (S,)
        self.counts = np.array([len(s.committed) for s in steps], dtype=int)   # (S,) tokens committed per step
        self.revised = np.array([len(remasked(s)) for s in steps], dtype=int)  # (S,) tokens taken back per step
        self.commit_row, self.token = self.state(len(steps) - 1)          # (N,) row, token id; -1: not standing
        self.answer = np.arange(n) < trace.answer_length                   # (N,) inside the answer
        # (S,) answer commits per step, those a revising rule took back later included
        self.answer_counts = np.array([sum(p < trace.answer_length for p in s.committed) for s in steps], dtype=int)
        self.answer_complete = bool(len(steps)) and bool((self.commit_row[self.answer] >= 0).all())

    def state(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(row that committed it, token id) of every position after row k; -1 where masked then."""
        n, steps = self.trace.gen_length, self.trace.steps[:k + 1]
        row, token = np.full(n, -1), np.full(n, -1)
        if not any(remasked(s) or edited(s) for s in steps):        # no revision: one vectorised write
            counts = np.array([len(s.committed) for s in steps], dtype=int)
            positions = np.array([p for s in steps for p in s.committed], dtype=int)
            row[positions] = np.repeat(np.arange(len(steps)), counts)
            token[positions] = [t for s in steps for t in s.tokens]
            return row, token
        for _ in self._replay(steps, row, token):
            pass
        return row, token

    @staticmethod
    def _replay(steps, row: np.ndarray, token: np.ndarray):
        """Walk ``steps`` writing into ``row`` and ``token``: a step's commits, then its edits (the row that wrote
        the token), then, after yielding (row index, step), its take-backs."""
        for r, s in enumerate(steps):
            row[s.committed], token[s.committed] = r, s.tokens
            for p, _, new in edited(s):
                row[p], token[p] = r, new
            yield r, s
            row[remasked(s)], token[remasked(s)] = -1, -1

    def replaced(self) -> list[tuple[int, int, int, int]]:
        """Every edit as (row that made it, position, token before, token after)."""
        return [(r, p, old, new) for r, s in enumerate(self.trace.steps) for p, old, new in edited(s)]

    def taken_back(self) -> list[tuple[int, int, int, int]]:
        """Every take-back as (row taken back at, position, token id taken back, row that had committed it)."""
        row, token = np.full(self.trace.gen_length, -1), np.full(self.trace.gen_length, -1)
        return [(r, p, int(token[p]), int(row[p])) for r, s in self._replay(self.trace.steps, row, token)
                for p in remasked(s)]

    @cached_property
    def conf(self) -> np.ndarray:
        """(S, N) confidence of still-masked positions, NaN where decoded before the step."""
        return np.array([s.confidence for s in self.trace.steps], dtype=float).reshape(len(self.steps), -1)

    @cached_property
    def guided(self) -> np.ndarray:
        """(S, N) what each step ranked by: guided confidence on Divide steps that recorded it, raw elsewhere."""
        out = self.conf.copy()
        for r, s in enumerate(self.trace.steps):
            if s.guided_confidence is not None:
                out[r] = np.array(s.guided_confidence, dtype=float)
        return out

    def scores(self, confidence: str) -> np.ndarray:
        return self.guided if check_confidence(confidence) == "guided" else self.conf

    @cached_property
    def pred(self) -> np.ndarray:
        """(S, N) predicted token id, -1 where decoded before the step."""
        pred = np.array([s.prediction for s in self.trace.steps], dtype=float).reshape(len(self.steps), -1)
        return np.where(np.isnan(pred), -1, pred).astype(int)

    @cached_property
    def commit_conf(self) -> np.ndarray:
        """(N,) confidence each position had at the step that committed it, NaN if never committed."""
        done = self.commit_row >= 0
        out = np.full(self.trace.gen_length, np.nan)
        out[done] = self.conf[self.commit_row[done], np.flatnonzero(done)]
        return out

    @cached_property
    def block_starts(self) -> np.ndarray:
        """Rows whose window starts a new block (semi-AR), after the first: where a figure over steps marks one."""
        if self.trace.mode != "semi-ar" or not len(self.steps):
            return np.zeros(0, dtype=int)
        starts = np.array([s.window[0] for s in self.trace.steps])
        return np.flatnonzero(np.diff(starts) != 0) + 1


def block_edges(trace: Trace) -> np.ndarray:
    """Response positions where a semi-AR block starts, after the first (none in non-AR). A block-causal model's
    blocks (``trace.model_block``) are counted from absolute position 0, the prompt included, so its first block
    holds only the rest of the block the prompt ends in (``dico.block.first_window_end``, not imported: torch)."""
    block = getattr(trace, "model_block", None)
    if block:
        return np.arange(block - trace.prompt_length % block, trace.gen_length, block)
    if trace.mode != "semi-ar" or not trace.block_length:
        return np.zeros(0, dtype=int)
    return np.arange(trace.block_length, trace.gen_length, trace.block_length)


def block_lines(trace: Trace, axis: str = "x", ref: str = "x", across: str = "y domain",
                offset: float = 0.0) -> list[dict]:
    """One dashed line per block boundary, at position b - 0.5 (+ ``offset``) on ``axis`` (of axis ``ref``),
    spanning the panel along ``across`` (an axis domain)."""
    other = "y" if axis == "x" else "x"
    return [dict(type="line", name="block boundary", layer="above",
                 line=dict(color=BLOCK_COLOR, width=1.2, dash="dash"),
                 **{f"{axis}0": b - 0.5 + offset, f"{axis}1": b - 0.5 + offset, f"{axis}ref": ref,
                    f"{other}0": 0, f"{other}1": 1, f"{other}ref": across})
            for b in block_edges(trace).tolist()]


def fork_steps(trace: Trace, traces=()) -> list[int]:
    """The steps where ``trace`` and a fork part: its own fork's step, and that of each fork of it in ``traces``
    (a fork names its parent by label). Old traces have no ``fork``."""
    own = [trace.fork["at"]] if getattr(trace, "fork", None) else []
    forks = [t.fork["at"] for t in traces if t is not trace and getattr(t, "fork", None)
             and t.fork.get("parent") == trace.name]
    return sorted(set(own + forks))


def fork_lines(steps, axis: str = "y", ref: str = "y", across: str = "x domain", offset: float = -0.5) -> list[dict]:
    """One dash-dot line per fork step k, at k + ``offset`` on ``axis`` (a trajectory's rows: between step k - 1
    and step k; the masked-fraction figure's "steps taken": offset 0), spanning the panel along ``across``."""
    other = "y" if axis == "x" else "x"
    return [dict(type="line", name=FORK, layer="above", line=FORK_LINE,
                 **{f"{axis}0": k + offset, f"{axis}1": k + offset, f"{axis}ref": ref,
                    f"{other}0": 0, f"{other}1": 1, f"{other}ref": across}) for k in steps]


def answer_end_line(trace: Trace, xref: str = "x", yref: str = "y domain") -> list[dict]:
    """A dotted line where the answer ends and the end-of-text padding begins (none if there is no padding)."""
    if not 0 < trace.answer_length < trace.gen_length:
        return []
    x = trace.answer_length - 0.5
    return [dict(type="line", name="answer end", layer="above", x0=x, x1=x, y0=0, y1=1, xref=xref, yref=yref,
                 line=dict(color=ANSWER_COLOR, width=1.5, dash="dot"))]


def answer_end_note(trace: Trace, xref: str = "x") -> list[dict]:
    if not 0 < trace.answer_length < trace.gen_length:
        return []
    return [dict(text="answer │ padding", x=trace.answer_length - 0.5, y=1.0, xref=xref, yref="paper", yanchor="bottom",
                 showarrow=False, font=dict(size=11, color=ANSWER_COLOR))]


def commit_markers(trace: Trace, g: Grid, x, y, size: int, legend) -> list[dict]:
    """Two marker layers: answer commits filled vermillion, padding commits hollow grey. ``x``, ``y`` are (N,)
    coordinates of every position's commit (used where committed); ``legend(name)`` gives the legend keys."""
    out = []
    for name, part, marker in ((ANSWER_COMMIT, g.answer, dict(color=ANSWER_COLOR, size=size, line_width=0)),
                               (PADDING_COMMIT, ~g.answer, dict(color=PADDING_COLOR, size=size, symbol="circle-open",
                                                                line=dict(width=1)))):
        done = np.flatnonzero(part & (g.commit_row >= 0))
        if not len(done):
            continue
        rows = g.commit_row[done]
        hover = np.stack([g.commit_conf[done].round(3).astype(str), g.phases[rows]], axis=1)  # (confidence, phase)
        where = "the answer" if name == ANSWER_COMMIT else "end-of-text padding"
        out.append(dict(type="scatter", x=np.asarray(x)[done], y=np.asarray(y)[done], mode="markers", marker=marker,
                        text=labels(trace, g.token[done]), customdata=hover,
                        hovertemplate=f"committed %{{text}} in {where}<br>position %{{x}}, step %{{y}}"
                                      "<br>confidence %{customdata[0]}<br>phase: %{customdata[1]}<extra></extra>",
                        **legend(name)))
    return out


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


def seed_points(trace: Trace, what: str = "seeds") -> tuple[np.ndarray, np.ndarray]:
    """(positions, steps) of every seed, or with ``what="shortcut"`` of every Divide shortcut commit."""
    pairs = np.array([(p, s.index) for s in trace.steps for p in getattr(s, what)], dtype=int).reshape(-1, 2)
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


def panel_row(titles: list[str], gap: float = 0.03, shared_y: bool = True) -> dict:
    """Layout of equal side-by-side panels; panel i uses xaxis "x{i+1}" and, unless ``shared_y``, its own
    yaxis "y{i+1}". What ``make_subplots`` does for this case, at a tenth of its cost."""
    width = (1 - gap * (len(titles) - 1)) / len(titles)
    layout: dict = {"annotations": []}
    for i, title in enumerate(titles):
        left, suffix = i * (width + gap), i + 1 if i else ""
        layout[f"xaxis{suffix}"] = dict(domain=[left, left + width], anchor="y" if shared_y else f"y{suffix}")
        if not shared_y and i:
            layout[f"yaxis{suffix}"] = dict(anchor=f"x{suffix}")
        layout["annotations"].append(dict(text=title, x=left + width / 2, y=1.0, xref="paper", yref="paper",
                                          xanchor="center", yanchor="bottom", yshift=14, showarrow=False))
    return layout


def axis_ids(i: int, shared_y: bool = True) -> dict:
    """The axes of panel i (0-based) in a ``panel_row`` layout."""
    suffix = i + 1 if i else ""
    return dict(xaxis=f"x{suffix}", yaxis="y" if shared_y else f"y{suffix}")
