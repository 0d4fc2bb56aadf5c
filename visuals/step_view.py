"""The response after step k: laid out like text, coloured by confidence, with the scores step k decided on.

``step_view_figure`` is the replay slider's figure; ``stream_figure`` is the same picture without the profile,
small enough to redraw at every step while a method decodes (confidence-coloured streaming).
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dico.trace import Trace
from visuals._common import (
    ANSWER_COLOR,
    BLOCK_COLOR,
    CLUSTER_COLOR,
    COLORBAR,
    CONFIDENCE_AXIS,
    EDITED,
    EDITED_COLOR,
    LEGEND_BELOW,
    MASK,
    OKABE_ITO,
    PADDING_COLOR,
    REVISED,
    REVISED_COLOR,
    SEED_COLOR,
    SHORTCUT,
    SHORTCUT_MARKER,
    TEMPLATE,
    Grid,
    answer_end_line,
    block_edges,
    block_lines,
    boxes,
    check_confidence,
    edited,
    labels,
    remasked,
    titled,
)

SEED_MARKER = dict(symbol="star", size=10, color=SEED_COLOR, line=dict(color="black", width=1))
ROW_PX, PROFILE_PX, GAP_PX, BOTTOM_PX = 30, 210, 80, 140
# A block-causal run's exact cache at the shown step (docs/decoding.md §11.2): what is stored, what the pass computed.
CACHED, COMPUTED = "cached: keys and values kept exactly", "computed this pass"
CACHED_FILL = dict(shape="/", fgcolor="rgba(140, 140, 140, 0.75)", size=7, solidity=0.12)
CACHED_LINE = dict(color=OKABE_ITO["grey"], width=1.5)
COMPUTED_LINE = dict(color=OKABE_ITO["sky"], width=2.5)


def _check_step(trace: Trace, k) -> int:
    n = len(trace.steps)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < n:
        raise ValueError(f"k = {k!r} is not a step of this run: choose 0..{n - 1}" if n else
                         f"k = {k!r}: this run has no steps")
    return int(k)


def step_text(trace: Trace, k: int) -> str:
    """The response as it stood after step k, masked positions written as '_'."""
    row, token = Grid(trace).state(_check_step(trace, k))
    return "".join(trace.token_text(int(t)) if r >= 0 else "_" for t, r in zip(token, row))


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


def cache_at(trace: Trace, k: int) -> dict | None:
    """What a block-causal run's exact cache (``model_block`` set, cache ``prefix``) holds at step k: ``stored``, the
    absolute positions [0, stored) whose keys and values are kept (the prompt's whole blocks and the finished response
    blocks), and ``block``, the response offsets [a, b) of the current block, computed by this pass (in the first
    block the prompt's last ``tail`` positions too). None for any other run: an approximate cache is not drawn."""
    block = getattr(trace, "model_block", None)
    if not block or trace.settings.get("cache") != "prefix":
        return None
    a, b = trace.steps[k].window
    tail = (trace.prompt_length + a) % block             # > 0 only in the block the prompt ends in
    return {"stored": trace.prompt_length + a - tail, "block": (a, b), "tail": tail}


def default_cols(trace: Trace) -> int:
    """16 cells a row (24 past 256 positions), or a divisor of the block so semi-AR blocks start a row."""
    cols = 16 if trace.gen_length <= 256 else 24
    block = trace.block_length if trace.mode == "semi-ar" else None
    if block and block % cols:
        cols = next((c for c in (16, 12, 8) if block % c == 0), cols)
    return cols


def _standing(trace: Trace, g: Grid, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """After step k: which positions stand committed, their token ids, the row that committed each and the confidence
    it was committed at (a revising rule may have taken earlier commits back)."""
    row, token = g.state(k)
    standing = np.array([-1 if t is None else t for t in trace.tokens_before(k)])   # edits by hand up to step k
    standing[trace.steps[k].committed] = trace.steps[k].tokens
    for p, _, new in edited(trace.steps[k]):
        standing[p] = new
    standing[remasked(trace.steps[k])] = -1
    row[standing < 0] = -1                                # a fork took it back
    done = standing >= 0
    conf = np.full(trace.gen_length, np.nan)
    conf[row >= 0] = g.conf[row[row >= 0], np.flatnonzero(row >= 0)]
    conf[done & (row < 0)] = 1.0                          # written by hand: a word constraint, a fork's forced token
    return done, standing, row, conf


def _text_layers(trace: Trace, g: Grid, k: int, cols: int, confidence: str) -> list[dict]:
    """The text grid: committed cells coloured by commit confidence, masked ones shaded faintly by step k's score,
    the tokens (or the mask symbol) written on them; a token step k took back is shown struck through."""
    n, nrows = trace.gen_length, -(-trace.gen_length // cols)
    done, token, row, conf = _standing(trace, g, k)
    scores = g.scores(confidence)[k]
    grid_cells = lambda v: np.concatenate([v, np.full(nrows * cols - n, np.nan)]).reshape(nrows, cols)  # noqa: E731
    pos = np.arange(n)
    text = np.where(done, labels(trace, token, width=8 if cols <= 16 else 6), MASK)
    back = {p: t for r, p, t, _ in g.taken_back() if r == k}
    if back:
        struck = labels(trace, np.array(list(back.values())), width=8 if cols <= 16 else 6)
        text = text.astype(object)
        text[list(back)] = [f"<s>{word}</s>" for word in struck]
    part = np.where(g.answer, "answer", "padding")
    status = np.where(done, "committed at step " + g.steps[np.maximum(row, 0)].astype(str) + " (" + part
                      + "), confidence " + np.char.mod("%.3f", np.nan_to_num(conf)),
                      f"still masked, {'confidence' if confidence == 'raw' else 'score'} at step {k} "
                      + np.char.mod("%.3f", np.nan_to_num(scores)))
    status = np.where(done & (row < 0), "written by hand (a word constraint or a fork's edit)", status)
    ink = np.where(~done, "#555555", np.where(conf < 0.6, "white", "black"))   # readable on Viridis
    replaced = {p: (r, old, new) for r, p, old, new in g.replaced() if r <= k}   # the last edit of each position
    replaced = {p: e for p, e in replaced.items() if row[p] == e[0]}             # that still stands after step k
    if replaced:
        status = status.astype(object)
        for p, (r, old, new) in replaced.items():
            status[p] = (f"{EDITED} at step {g.steps[r]}: {trace.token_text(old).strip()!r} → "
                         f"{trace.token_text(new).strip()!r}")
        ink[[p for p, (r, _, _) in replaced.items() if r == k]] = EDITED_COLOR
    if back:
        status = status.astype(object)
        status[list(back)] = [f"{REVISED} at step {k}" for _ in back]
        ink[list(back)] = REVISED_COLOR
    return [dict(type="heatmap", z=grid_cells(conf), coloraxis="coloraxis", hoverinfo="skip", xgap=1, ygap=1,
                 name="committed"),
            dict(type="heatmap", z=grid_cells(np.where(done, np.nan, scores)), coloraxis="coloraxis", opacity=0.35,
                 hoverinfo="skip", xgap=1, ygap=1, name="still masked"),
            dict(type="scatter", x=pos % cols, y=pos // cols, mode="text", name="tokens", text=text.astype(str),
                 textfont=dict(color=ink, size=11), showlegend=False, customdata=status.astype(str),
                 hovertemplate="position %{pointNumber}: %{customdata}<extra></extra>")]


def _step_boxes(trace: Trace, g: Grid, k: int, cols: int) -> list[dict]:
    """Outlines of step k's commits (vermillion: answer, grey dashed: padding), its take-backs (purple), its
    clusters, and stars on its seeds and Divide shortcut commits."""
    step, data = trace.steps[k], []
    now = np.array(step.committed, dtype=int)
    back = np.array(remasked(step), dtype=int)
    replaced = np.array([p for p, _, _ in edited(step)], dtype=int)
    for name, p, line in ((f"committed at step {k}", now[g.answer[now]], dict(color=ANSWER_COLOR, width=3)),
                          (f"padding committed at step {k}", now[~g.answer[now]],
                           dict(color=PADDING_COLOR, width=2, dash="dash")),
                          (f"{REVISED} at step {k}", back, dict(color=REVISED_COLOR, width=2.5, dash="dot")),
                          (f"{EDITED} at step {k}", replaced, dict(color=EDITED_COLOR, width=2.5))):
        if len(p):
            bx, by = boxes(np.stack([p // cols, p % cols, p % cols], 1), half=0.42)
            data.append(dict(type="scatter", x=bx, y=by, mode="lines", line=line, hoverinfo="skip", name=name))
    if step.clusters:
        bx, by = boxes(_wrapped(step.clusters, cols), half=0.5)
        data.append(dict(type="scatter", x=bx, y=by, mode="lines", hoverinfo="skip", name="cluster",
                         line=dict(color=CLUSTER_COLOR, width=1.5, dash="dot")))
    for name, at, marker in (("seed", step.seeds, SEED_MARKER), (SHORTCUT, step.shortcut, SHORTCUT_MARKER)):
        if at:
            at = np.array(at)
            data.append(dict(type="scatter", x=at % cols + 0.36, y=at // cols - 0.3, mode="markers", name=name,
                             marker=marker, hoverinfo="skip"))
    return data


def _cache_layers(trace: Trace, k: int, cols: int) -> list[dict]:
    """A block-causal cached run: the finished response blocks hatched (stored, exact), the current block outlined
    (the one block this pass computed); later blocks are neither, as the model never sees them before their turn."""
    cache = cache_at(trace, k)
    if cache is None:
        return []
    a, b = cache["block"]
    data = []
    if a:
        bx, by = boxes(_wrapped([[0, a - 1]], cols), half=0.5)
        data.append(dict(type="scatter", x=bx, y=by, mode="lines", fill="toself", fillcolor="rgba(0, 0, 0, 0)",
                         fillpattern=CACHED_FILL, line=CACHED_LINE, hoverinfo="skip", name=CACHED))
    bx, by = boxes(_wrapped([[a, b - 1]], cols), half=0.5)
    data.append(dict(type="scatter", x=bx, y=by, mode="lines", line=COMPUTED_LINE, hoverinfo="skip", name=COMPUTED))
    return data


def _cache_note(trace: Trace, k: int) -> str:
    cache = cache_at(trace, k)
    if cache is None:
        return ""
    (a, b), tail, stored = cache["block"], cache["tail"], cache["stored"]
    kept = f"the prompt's first {stored} positions" if not a else f"the prompt and response 0–{a - 1}"
    return (f" Cache (model blocks of {trace.model_block}): {kept} {CACHED} (hatched); {COMPUTED}: block "
            f"{a}–{b - 1}" + (f" with the prompt's last {tail}" if tail else "")
            + f", {trace.steps[k].token_forwards} positions through the model (blocks stored on the way included).")


def _edges(trace: Trace, cols: int) -> list[dict]:
    n, data = trace.gen_length, []
    for name, at, line in (("block boundary", block_edges(trace), dict(color=BLOCK_COLOR, width=2, dash="dash")),
                           ("answer end", [trace.answer_length] if 0 < trace.answer_length < n else [],
                            dict(color=ANSWER_COLOR, width=2, dash="dot"))):
        if len(at):
            ex, ey = _edge(at, cols)
            data.append(dict(type="scatter", x=ex, y=ey, mode="lines", line=line, hoverinfo="skip", name=name))
    return data


def _title(trace: Trace, g: Grid, k: int, confidence: str) -> tuple[str, str]:
    step, n = trace.steps[k], trace.gen_length
    done = _standing(trace, g, k)[0]
    now = np.array(step.committed, dtype=int)
    answer_now, back, replaced = int(g.answer[now].sum()), len(remasked(step)), len(edited(step))
    clusters = ", ".join(f"[{a}, {b}]" for a, b in step.clusters[:8]) + (" …" if len(step.clusters) > 8 else "")
    seeds = ", ".join(map(str, step.seeds[:12])) + (" …" if len(step.seeds) > 12 else "")
    if step.shortcut:
        seeds += f" (+ {len(step.shortcut)} above the shortcut)"
    title = (f"After step {k} ({step.phase}): {len(now)} committed ({answer_now} answer, {len(now) - answer_now} "
             f"padding)" + (f", {back} taken back" if back else "") + (f", {replaced} replaced" if replaced else "")
             + f", {int((~done).sum())} of {n} still masked")
    note = (f"seeds: {seeds or 'none'} · clusters: {clusters or 'none'}. Colour: confidence when committed; "
            f"{MASK}: still masked, shaded by its {'confidence' if confidence == 'raw' else 'score'} at step {k}."
            + (" Struck through: a token taken back to the mask at this step." if back else "")
            + (" Blue: a written token this step replaced with another (a token edit)." if replaced else "")
            + _cache_note(trace, k))
    return title, note


def step_view_figure(trace: Trace, k: int, cols: int | None = None, confidence: str = "raw",
                     profile: bool = True) -> go.Figure:
    """The response after step k: committed tokens coloured by the confidence they were committed at, still-masked
    positions shaded faintly by the score step k saw (raw, or ``confidence="guided"``), step k's commits boxed
    (vermillion: answer, grey dashed: padding) and its take-backs (a revising rule's re-masks) struck through in
    purple. With ``profile``, a panel below plots step k's confidence along the response, and on a Divide step
    its trajectory guidance and the guided confidence seeds were ranked by.
    """
    k, confidence = _check_step(trace, k), check_confidence(confidence)
    g, n = Grid(trace), trace.gen_length
    cols = cols or default_cols(trace)
    nrows = -(-n // cols)
    data = (_text_layers(trace, g, k, cols, confidence) + _cache_layers(trace, k, cols) + _step_boxes(trace, g, k, cols)
            + _edges(trace, cols))
    grid_px = ROW_PX * nrows + 40
    plot = grid_px + (GAP_PX + PROFILE_PX if profile else 0)
    head = titled(*_title(trace, g, k, confidence), b=BOTTOM_PX, r=110)
    layout = dict(
        head, coloraxis={**CONFIDENCE_AXIS, "colorbar": {**COLORBAR, "y": 1 - grid_px / plot,      # beside the grid
                                                          "len": COLORBAR["len"] * grid_px / plot}},
        xaxis=dict(title="offset in row", range=[-0.5, cols - 0.5], showgrid=False, zeroline=False, dtick=1),
        yaxis=dict(title="row start", range=[nrows - 0.5, -0.5], showgrid=False, zeroline=False,
                   tickvals=list(range(nrows)), ticktext=[str(r * cols) for r in range(nrows)],
                   domain=[1 - grid_px / plot, 1]),
        # at least 320 px: plotly.js leaves the plot blank when the colour bar does not fit its height
        template=TEMPLATE, height=max(320, plot + head["margin"]["t"] + BOTTOM_PX), legend=LEGEND_BELOW)
    if profile:
        data += _profile(trace, g, k)
        layout.update(xaxis2=dict(title="response position", range=[-0.5, n - 0.5], anchor="y2", showgrid=False),
                      yaxis2=dict(title=f"confidence at step {k}", range=[0, 1.05], anchor="x2",
                                  domain=[0, PROFILE_PX / plot]),
                      shapes=_profile_shapes(trace, k))
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


def _profile_shapes(trace: Trace, k: int) -> list[dict]:
    a, b = trace.steps[k].window
    window = dict(type="rect", name="window", layer="below", x0=a - 0.5, x1=b - 0.5, y0=0, y1=1, xref="x2",
                  yref="y2 domain", line_width=0, fillcolor=OKABE_ITO["sky"], opacity=0.08)
    cached = []
    if cache_at(trace, k) is not None:          # a block-causal cached run: the window is the block this pass computed
        window.update(name=COMPUTED, opacity=0.18)
        if a:
            cached = [dict(type="rect", name=CACHED, layer="below", x0=-0.5, x1=a - 0.5, y0=0, y1=1, xref="x2",
                           yref="y2 domain", line_width=0, fillcolor="rgba(153, 153, 153, 0.25)",
                           label=dict(text="cached", textposition="top left", font=dict(size=10)))]
    return cached + [window] + block_lines(trace, "x", "x2", "y2 domain") + answer_end_line(trace, "x2", "y2 domain")


def stream_figure(trace: Trace, k: int | None = None, cols: int | None = None, confidence: str = "raw") -> go.Figure:
    """The response while it decodes (after step k, default the latest): the step view without its profile."""
    if not trace.steps:
        raise ValueError("k: this run has no steps yet")
    return step_view_figure(trace, len(trace.steps) - 1 if k is None else k, cols, confidence, profile=False)
