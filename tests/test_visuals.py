"""The figures say what the trace says, on traces the real decoder made (``tests/golden/traces``).

Every expectation is derived from the trace itself (its steps, ``answer_length``, ``answer_nfe``,
``block_length``), so a regenerated golden set (``python tests/golden/make_golden.py``) keeps the tests meaningful.
"""
from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import visuals
from dico.settings import METHOD_LABELS
from dico.trace import PHASES, Trace
from visuals import (
    METHOD_COLORS,
    OKABE_ITO,
    PHASE_COLORS,
    accuracy_nfe_figure,
    attention_figure,
    cluster_figure,
    comparison_figure,
    comparison_table,
    method_id,
    phase_figure,
    step_text,
    step_view_figure,
    stream_figure,
    trajectories_side_by_side,
    trajectory_figure,
)

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = {p.stem: p for p in sorted((ROOT / "tests" / "golden" / "traces").glob("*.json"))}
SEMI_AR = [name for name in GOLDEN if name.endswith("semi-ar")]
DICO = [name for name in GOLDEN if "-dico-" in name]


@pytest.fixture(scope="module")
def golden() -> dict[str, Trace]:
    return {name: Trace.load(path) for name, path in GOLDEN.items()}


@pytest.fixture(params=list(GOLDEN))
def trace(request, golden) -> Trace:
    return copy.deepcopy(golden[request.param])


@pytest.fixture
def runs(golden) -> list[Trace]:
    """One prompt decoded by three methods, non-AR, as the comparison tab gets them."""
    return [copy.deepcopy(golden[f"word0-{m}-non-ar"]) for m in ("fast", "vanilla", "dico")]


def by_name(fig, name):
    return [d for d in fig.data if d.name == name]


def shapes(fig, name):
    return [s for s in fig.layout.shapes if s.name == name]


def segments(xs) -> list[list[float]]:
    """A None-separated coordinate list split into its segments."""
    out, cur = [], []
    for v in list(xs) + [None]:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(v)
    return out


def decoded_before(trace: Trace) -> np.ndarray:
    """(S, N) True where the position was committed by an earlier step: what the heatmap must leave blank."""
    when = np.array([-1 if w is None else w for w in trace.commit_step()])
    index = np.array([s.index for s in trace.steps])[:, None]
    return (when[None, :] >= 0) & (when[None, :] < index)


def block_edges(trace: Trace) -> list[float]:
    """Where a semi-AR figure must draw a boundary: before every block but the first."""
    return [b - 0.5 for b in range(trace.block_length, trace.gen_length, trace.block_length)]


def title_of(fig) -> str:
    """A figure's title as one line of text (titles are wrapped to a phone's width)."""
    return re.sub(r"</?sup>", "", fig.layout.title.text.replace("<br>", " "))


def padding_total(trace: Trace) -> int:
    return sum(len(trace.padding_commits(s)) for s in trace.steps)


def test_the_golden_set_covers_what_the_figures_draw(golden):
    # the revising methods (eb, klass, wino, saber) join the golden set with their traces; the hand-made trace of
    # test_a_revising_step_* draws their take-backs meanwhile
    assert {"vanilla", "topk", "fast", "dico"} <= {t.method for t in golden.values()} <= set(METHOD_LABELS)
    assert SEMI_AR and DICO and any(golden[n].attention for n in DICO)
    assert all(padding_total(t) > 0 for t in golden.values())        # the figures show padding apart


# ---------------------------------------------------------------------------------------- trajectory

def test_trajectory_heatmap_is_blank_exactly_where_decoded(trace):
    fig = trajectory_figure(trace)
    heat = fig.data[0]
    z = np.asarray(heat.z, dtype=float)
    assert heat.type == "heatmap" and z.shape == (len(trace.steps), trace.gen_length)
    assert np.array_equal(np.isnan(z), decoded_before(trace))
    assert np.allclose(z, np.array([s.confidence for s in trace.steps], dtype=float), atol=1e-3, equal_nan=True)
    r, j = np.argwhere(~np.isnan(z))[-1]                        # hover names the predicted token
    assert visuals._common.show(trace.token_text(trace.steps[r].prediction[j])) in np.asarray(heat.text)[r, j]
    assert tuple(fig.layout.yaxis.range) == (len(trace.steps) - 0.5, -0.5)     # step 0 at the top, as in the paper
    assert str(trace.nfe) in title_of(fig)


def test_guided_trajectory_shows_what_divide_ranked_by(trace):
    z = np.asarray(trajectory_figure(trace, confidence="guided").data[0].z, dtype=float)
    for r, step in enumerate(trace.steps):
        expected = step.confidence if step.guided_confidence is None else step.guided_confidence
        assert np.allclose(z[r], np.array(expected, dtype=float), atol=1e-3, equal_nan=True)
    if trace.method == "dico" and trace.settings.get("guidance"):
        raw = np.asarray(trajectory_figure(trace).data[0].z, dtype=float)
        assert not np.allclose(z, raw, equal_nan=True)           # guidance changes what Divide sees
    with pytest.raises(ValueError, match="confidence"):
        trajectory_figure(trace, confidence="logit")


def test_answer_and_padding_commits_are_drawn_apart(trace):
    fig = trajectory_figure(trace)
    (answer,) = by_name(fig, "answer commit")
    (padding,) = by_name(fig, "padding commit")
    assert answer.marker.color == OKABE_ITO["vermillion"] and padding.marker.symbol == "circle-open"
    assert padding.marker.color != answer.marker.color
    assert set(zip(answer.x.tolist(), answer.y.tolist())) == {(p, s.index) for s in trace.steps
                                                              for p in trace.answer_commits(s)}
    assert len(padding.x) == padding_total(trace)
    assert set(zip(padding.x.tolist(), padding.y.tolist())) == {(p, s.index) for s in trace.steps
                                                                for p in trace.padding_commits(s)}
    (end,) = shapes(fig, "answer end")
    assert end.x0 == trace.answer_length - 0.5                  # answer | padding
    (complete,) = shapes(fig, "answer complete")
    assert complete.y0 == trace.answer_nfe - 0.5                # under the step that committed the last answer token
    assert f"answer complete after {trace.answer_nfe}" in title_of(fig)


def test_trajectory_outlines_every_cluster_and_seed(trace):
    fig = trajectory_figure(trace)
    spans = [(s.index, a, b) for s in trace.steps for a, b in s.clusters]
    seeds = {(p, s.index) for s in trace.steps for p in s.seeds}
    if not spans:
        assert not by_name(fig, "clusters") and not by_name(fig, "seed")
        return
    (clusters,) = by_name(fig, "clusters")
    xs, ys = segments(clusters.x), segments(clusters.y)
    assert [(round(np.mean(y)), min(x) + 0.5, max(x) - 0.5) for x, y in zip(xs, ys)] == spans
    (seed,) = by_name(fig, "seed")
    assert set(zip(seed.x.tolist(), seed.y.tolist())) == seeds
    bare = trajectory_figure(trace, show_clusters=False)
    assert not by_name(bare, "clusters") and not by_name(bare, "seed")


def _with_divide_shortcut(trace: Trace) -> tuple[Trace, set]:
    """The trace as if its first Divide step with two seeds had committed its second seed above the shortcut."""
    step = next(s for s in trace.steps if s.phase == "divide" and len(s.seeds) > 1)
    step.shortcut, step.seeds = step.seeds[1:], step.seeds[:1]
    return Trace.from_json(trace.to_json()), {(p, step.index) for p in step.shortcut}


@pytest.mark.parametrize("name", DICO)
def test_divide_shortcut_commits_are_drawn_apart_from_the_seeds_with_their_own_legend_entry(golden, name):
    trace, sure = _with_divide_shortcut(copy.deepcopy(golden[name]))
    k = next(p for _, p in sure)
    # the step view: its grid and its profile
    for fig in (trajectory_figure(trace), cluster_figure(trace), step_view_figure(trace, k)):
        (marks,) = [d for d in by_name(fig, "Divide shortcut commit") if d.showlegend is not False]
        assert marks.marker.symbol == "diamond" and marks.marker.color != by_name(fig, "seed")[0].marker.color
    for fig in (trajectory_figure(trace), cluster_figure(trace)):
        (marks,), (seed,) = by_name(fig, "Divide shortcut commit"), by_name(fig, "seed")
        assert set(zip(marks.x.tolist(), marks.y.tolist())) == sure
        assert not sure & set(zip(seed.x.tolist(), seed.y.tolist()))
    assert "above the shortcut" in title_of(step_view_figure(trace, k))
    assert not by_name(trajectory_figure(golden[name]), "Divide shortcut commit")       # none without the setting


def test_colour_bar_title_stays_clear_of_the_toolbar(trace):
    """Plotly's toolbar sits at the top right (Gradio stacks it down the side): the bar stands at the bottom,
    at most 55% of the plot's height, its title on its side."""
    for fig in (trajectory_figure(trace), step_view_figure(trace, 0), step_view_figure(trace, 0, profile=False)):
        bar, (low, high) = fig.layout.coloraxis.colorbar, fig.layout.yaxis.domain or (0, 1)
        assert bar.title.side == "right" and bar.yanchor == "bottom"
        assert bar.y >= low - 1e-9 and bar.y + bar.len <= high - 0.4 * (high - low) + 1e-9   # the panel it colours
        assert fig.layout.template.layout.title.pad.t >= 30 and fig.layout.margin.t >= 100


def test_cluster_figure_lines_up_with_the_trajectory(trace):
    traj, clusters = trajectory_figure(trace), cluster_figure(trace)
    if not clusters.data:
        expected = "formed no cluster" if trace.method == "dico" else "only DiCo"
        assert expected in clusters.layout.annotations[0].text
        return
    for key in ("range",):
        assert tuple(traj.layout.xaxis[key]) == tuple(clusters.layout.xaxis[key]) == (-0.5, trace.gen_length - 0.5)
        assert tuple(traj.layout.yaxis[key]) == tuple(clusters.layout.yaxis[key])
    def plot_px(fig):
        return fig.layout.height - fig.layout.margin.t - fig.layout.margin.b

    assert (traj.layout.margin.l, traj.layout.margin.r) == (clusters.layout.margin.l, clusters.layout.margin.r)
    assert plot_px(traj) == plot_px(clusters)
    outlines = [d for d in clusters.data if d.name.startswith("clusters")]
    assert sum(len(segments(d.x)) for d in outlines) == sum(len(s.clusters) for s in trace.steps)
    for d in outlines:
        assert d.line.color == PHASE_COLORS[re.search(r"\((\w+)\)", d.name).group(1)]
    (padding,) = shapes(clusters, "padding")
    assert padding.x0 == trace.answer_length - 0.5


def test_side_by_side_gives_every_run_an_equal_readable_panel(runs):
    fig = trajectories_side_by_side(runs)
    heats = [d for d in fig.data if d.type == "heatmap"]
    assert len(heats) == len(runs) and {h.coloraxis for h in heats} == {"coloraxis"}
    axes = [fig.layout[h.xaxis.replace("x", "xaxis")] for h in heats]
    widths = [round(a.domain[1] - a.domain[0], 6) for a in axes]
    assert len(set(widths)) == 1                                # no squashed panel
    assert {tuple(a.range) for a in axes} == {(-0.5, runs[0].gen_length - 0.5)}
    for h, run in zip(heats, runs):                             # each step axis fills its panel
        assert tuple(fig.layout[h.yaxis.replace("y", "yaxis")].range) == (run.nfe - 0.5, -0.5)
    shown = [d.name for d in fig.data if d.showlegend]
    assert len(shown) == len(set(shown)) and {"answer commit", "padding commit"} <= set(shown)
    shared = trajectories_side_by_side(runs, shared_steps=True)
    assert {d.yaxis for d in shared.data if d.type == "heatmap"} == {"y"}
    assert tuple(shared.layout.yaxis.range) == (max(r.nfe for r in runs) - 0.5, -0.5)


# ---------------------------------------------------------------------------------------- semi-AR blocks

@pytest.mark.parametrize("name", SEMI_AR)
def test_every_semi_ar_figure_draws_its_block_boundaries(golden, name):
    trace = golden[name]
    edges = block_edges(trace)
    assert edges
    for fig in (trajectory_figure(trace), cluster_figure(trace), trajectories_side_by_side([trace]),
                step_view_figure(trace, 0)):
        if fig.data:
            assert sorted(s.x0 for s in shapes(fig, "block boundary")) == edges
    if trace.attention is not None:
        fig = attention_figure(trace)
        lines = shapes(fig, "block boundary")
        panels = sum(d.type == "heatmap" for d in fig.data)
        assert sorted(s.x0 for s in lines if s.x0 == s.x1 and s.xref.startswith("x") and s.yref.endswith("domain")) \
            == sorted(edges * panels)
    view = stream_figure(trace, 0)
    (grid,) = by_name(view, "block boundary")
    assert len(segments(grid.x)) == len(edges)
    starts = [s.index for prev, s in zip(trace.steps, trace.steps[1:]) if s.window != prev.window]
    assert sorted(s.x0 + 0.5 for s in shapes(phase_figure(trace), "block start")) == starts
    ticks = [d for d in comparison_figure([trace]).data if d.name.endswith("block start")]
    assert list(ticks[0].x) == starts


def test_non_ar_figures_draw_no_block_boundaries(runs):
    for fig in (trajectory_figure(runs[2]), cluster_figure(runs[2]), phase_figure(runs[2])):
        assert not shapes(fig, "block boundary") and not shapes(fig, "block start")


# ---------------------------------------------------------------------------------------- phases

def test_phase_colours_are_okabe_ito_and_cover_every_phase():
    assert set(PHASE_COLORS) == set(PHASES)
    assert set(PHASE_COLORS.values()) <= set(OKABE_ITO.values()) and len(set(PHASE_COLORS.values())) == len(PHASES)


def test_phase_bars_split_answer_from_padding(trace):
    fig = phase_figure(trace)
    band = [d for d in fig.data if d.yaxis == "y"]
    assert sorted(x for d in band for x in d.x.tolist()) == [s.index for s in trace.steps]
    bars = [d for d in fig.data if d.yaxis == "y2" and d.x[0] is not None]
    answer = {x: y for d in bars if not d.name.endswith("padding") for x, y in zip(d.x.tolist(), d.y.tolist())}
    padding = {x: y for d in bars if d.name.endswith("padding") for x, y in zip(d.x.tolist(), d.y.tolist())}
    assert answer == {s.index: len(trace.answer_commits(s)) for s in trace.steps}
    assert padding == {s.index: len(trace.padding_commits(s)) for s in trace.steps}
    for d in bars:
        assert d.marker.color == PHASE_COLORS[d.name.split()[0]]
        assert bool(d.marker.pattern.shape) == d.name.endswith("padding")    # hatched padding
    assert f"answer complete after {trace.answer_nfe} steps" in title_of(fig)


# ---------------------------------------------------------------------------------------- attention

@pytest.mark.parametrize("name", [n for n in DICO])
def test_attention_keys_line_up_with_positions_and_empty_stages_say_so(golden, name):
    trace = golden[name]
    fig = attention_figure(trace)
    heats = {h.name: h for h in fig.data if h.type == "heatmap"}
    notes = [a for a in fig.layout.annotations if a.name == "empty stage"]
    for stage, steps, rows in zip(trace.attention.stages, trace.attention.steps, trace.attention.matrix):
        if not steps:
            assert stage not in heats                           # no blank panel: a note says why
            continue
        h = heats[stage]
        z = np.asarray(h.z, dtype=float)
        assert z.shape == (trace.gen_length, trace.gen_length + 1) and np.nanmin(z, initial=0) >= 0
        assert [bool(np.isnan(row).all()) for row in z] == [row is None for row in rows]
        assert list(h.x[:2]) == [-1, 0] and h.x[-1] == trace.gen_length - 1    # key 1 + j is position j
        axis = fig.layout[h.xaxis.replace("x", "xaxis")]
        assert axis.ticktext[0] == "prompt" and axis.tickvals[0] == -1
    assert len(notes) == sum(not steps for steps in trace.attention.steps)
    assert all("no step ran" in a.text for a in notes)
    assert fig.layout.coloraxis.cmin == 0 and "1/3" in title_of(fig)


def test_a_stage_no_step_ran_in_says_so(golden):
    """An empty middle panel: when one Conquer step takes a run from < 1/3 to >= 2/3 decoded, the middle
    stage has no steps (the shipped model's DiCo non-AR golden run: Divide steps, then one Conquer step
    commits most of the response); a run with a step in every stage draws three panels."""
    empty, full = golden["word0-dico-non-ar"], golden["word0-dico-semi-ar"]
    assert empty.attention.steps[1] == [] and all(full.attention.steps)
    assert "middle: no steps" in [a.text for a in attention_figure(empty).layout.annotations]
    assert "middle: no steps" not in [a.text for a in attention_figure(full).layout.annotations]


def test_attention_without_capture_says_so(golden):
    fig = attention_figure(golden["word0-vanilla-non-ar"])
    assert not fig.data and "enable capture" in fig.layout.annotations[0].text


# ---------------------------------------------------------------------------------------- comparison

def test_comparison_shows_when_each_answer_is_complete(runs):
    fig = comparison_figure(runs)
    for run in runs:
        name = visuals._common.run_name(run)
        (whole,) = by_name(fig, name)
        (answer,) = by_name(fig, f"{name}: answer")
        (star,) = by_name(fig, f"{name}: answer complete")
        assert whole.y[0] == 1 and whole.y[-1] == 0 and whole.x[-1] == run.nfe
        assert np.all(np.diff(whole.y) < 0)                     # every step commits at least one token
        assert list(answer.y).index(0) == run.answer_nfe        # the answer empties at its answer NFE
        assert list(star.x) == [run.answer_nfe] and star.marker.color == whole.line.color


def test_comparison_table_puts_answer_numbers_beside_the_totals(runs):
    rows = comparison_table(runs)
    vanilla = runs[1]
    assert [r["method"] for r in rows] == ["Fast-dLLM", "Vanilla", "DiCo"]
    assert [r["method_id"] for r in rows] == ["fast", "vanilla", "dico"]
    for row, run in zip(rows, runs):
        assert row["nfe"] == run.nfe and row["answer_nfe"] == run.answer_nfe
        assert row["tokens_per_step"] == round(run.gen_length / run.nfe, 2)
        assert row["answer_tokens_per_step"] == round(run.answer_length / run.answer_nfe, 2)
        assert row["answer_tokens"] + row["padding_tokens"] == run.gen_length
        assert row["speedup_nfe"] == round(vanilla.nfe / run.nfe, 2)
        assert row["speedup_answer_nfe"] == round(vanilla.answer_nfe / run.answer_nfe, 2)
    assert rows[1]["speedup_nfe"] == rows[1]["speedup_answer_nfe"] == rows[1]["speedup_wall"] == 1.0
    without = comparison_table([runs[2], runs[0]])
    assert without[0]["speedup_nfe"] == 1.0 and without[1]["speedup_nfe"] == round(runs[2].nfe / runs[0].nfe, 2)


def test_stopped_run_keeps_its_masks(runs):
    trace = runs[2]
    trace.steps, trace.nfe, trace.stopped = trace.steps[:3], 3, True
    trace.set_answer(trace.answer_length)
    assert comparison_figure([trace]).data[0].y[-1] > 0
    assert not by_name(comparison_figure([trace]), "DiCo: answer complete")     # it never was
    assert "stopped" in title_of(trajectory_figure(trace))
    assert not shapes(trajectory_figure(trace), "answer complete")
    assert "_" in step_text(trace, 2)
    step_view_figure(trace, 2).to_json()


def test_a_run_without_steps_draws_empty_states(runs):
    trace = runs[1]
    trace.steps, trace.nfe = [], 0
    for fig in (trajectory_figure(trace), phase_figure(trace), cluster_figure(trace), comparison_figure([trace]),
                trajectories_side_by_side([trace])):
        assert fig.layout.annotations and not fig.data
    with pytest.raises(ValueError, match="k"):
        step_text(trace, 0)
    with pytest.raises(ValueError, match="k"):
        stream_figure(trace)


# ---------------------------------------------------------------------------------------- one step

@pytest.mark.parametrize("k", [-1, "last+1", 1.0, True, None])
def test_step_view_rejects_bad_k(golden, k):
    trace = golden["word0-fast-non-ar"]
    k = len(trace.steps) if k == "last+1" else k
    with pytest.raises(ValueError, match="k"):
        step_view_figure(trace, k)
    with pytest.raises(ValueError, match="k"):
        step_text(trace, k)


def test_step_text_after_the_last_step_is_the_response(trace):
    assert step_text(trace, len(trace.steps) - 1) == "".join(trace.token_text(t) for t in trace.response)
    first = trace.steps[0]
    expected = "".join(trace.token_text(first.tokens[first.committed.index(p)]) if p in first.committed else "_"
                       for p in range(trace.gen_length))
    assert step_text(trace, 0) == expected


def test_step_view_colours_commits_shades_masks_and_boxes_this_step(trace):
    k = next((i for i, s in enumerate(trace.steps) if s.clusters and trace.padding_commits(s)), len(trace.steps) // 2)
    step, fig = trace.steps[k], step_view_figure(trace, k)
    (committed,), (masked,) = by_name(fig, "committed"), by_name(fig, "still masked")
    (words,) = by_name(fig, "tokens")
    when = trace.commit_step()
    is_masked = [w is None or w > k for w in when]
    assert [t == "▢" for t in words.text] == is_masked
    n = trace.gen_length
    commit_conf = [np.nan if m else trace.steps[w].confidence[p] for p, (w, m) in enumerate(zip(when, is_masked))]
    assert np.allclose(np.asarray(committed.z, dtype=float).ravel()[:n], commit_conf, equal_nan=True)
    shade = [step.confidence[p] if m else np.nan for p, m in enumerate(is_masked)]
    assert np.allclose(np.asarray(masked.z, dtype=float).ravel()[:n], shade, equal_nan=True)
    assert masked.opacity < 1 and masked.coloraxis == committed.coloraxis
    answer, padding = by_name(fig, f"committed at step {k}"), by_name(fig, f"padding committed at step {k}")
    assert sum(len(segments(d.x)) for d in answer) == len(trace.answer_commits(step))
    assert sum(len(segments(d.x)) for d in padding) == len(trace.padding_commits(step))
    assert all(d.line.color != OKABE_ITO["vermillion"] for d in padding)
    assert step.phase in title_of(fig) and f"{len(step.committed)} committed" in title_of(fig)
    if step.clusters:
        cols = int(fig.layout.xaxis.range[1] + 0.5)
        pieces = sum(b // cols - a // cols + 1 for a, b in step.clusters)
        assert len(segments(by_name(fig, "cluster")[0].x)) == pieces
    assert bool(by_name(fig, "seed")) == bool(step.seeds)
    assert fig.layout.height >= 320                # shorter, plotly.js draws nothing when the colour bar is cut


@pytest.mark.parametrize("name", DICO)
def test_step_view_of_a_divide_step_plots_its_guidance(golden, name):
    trace = golden[name]
    k = next(i for i, s in enumerate(trace.steps) if s.guidance is not None)
    step, fig = trace.steps[k], step_view_figure(trace, k)
    (w,) = by_name(fig, "guidance w")
    (guided,) = by_name(fig, "guided confidence c × w")
    assert np.allclose(np.asarray(w.y, dtype=float), step.guidance)
    assert np.allclose(np.asarray(guided.y, dtype=float), np.array(step.guided_confidence, dtype=float),
                       equal_nan=True)
    assert w.xaxis == "x2" and tuple(fig.layout.xaxis2.range) == (-0.5, trace.gen_length - 0.5)
    (needed,) = [d for d in fig.data if (d.name or "").startswith("seed threshold")]
    assert set(needed.y) == {step.seed_threshold} and step.seed_threshold == trace.settings["tau1"]
    guided_view = step_view_figure(trace, k, confidence="guided")
    shade = np.asarray(by_name(guided_view, "still masked")[0].z, dtype=float).ravel()[:trace.gen_length]
    done = [w is not None and w <= k for w in trace.commit_step()]
    expected = [np.nan if d else g for d, g in zip(done, step.guided_confidence)]
    assert np.allclose(shade, np.array(expected, dtype=float), equal_nan=True)
    conquer = next(i for i, s in enumerate(trace.steps) if s.phase == "conquer")
    assert not by_name(step_view_figure(trace, conquer), "guidance w")


def test_stream_figure_is_the_latest_step_without_the_profile(golden):
    trace = golden["word0-dico-non-ar"]
    fig = stream_figure(trace)
    assert title_of(fig).startswith(f"After step {len(trace.steps) - 1} ")
    assert "xaxis2" not in fig.layout.to_plotly_json() and not by_name(fig, "guidance w")
    assert fig.layout.height < step_view_figure(trace, len(trace.steps) - 1).layout.height


# ---------------------------------------------------------------------------------------- benchmark

def bench_rows() -> list[dict]:
    return json.loads((ROOT / "assets" / "bench" / "table1_gen256.json").read_text())["rows"]


def test_method_ids_are_read_from_ids_labels_and_variant_labels():
    assert [method_id(n) for n in ("dico", "DiCo", "DiCo w/o TG", "DiCo N=4", "Fast-dLLM (0.95)",
                                   "Fast-dLLM (factor)", "Vanilla", "something else")] == \
        ["dico", "dico", "dico", "dico", "fast", "fast-factor", "vanilla", "something else"]


@pytest.mark.parametrize("style", ["labels in method (shipped rows)", "ids with labels"])
def test_benchmark_colours_each_method_by_its_id(style):
    labels = [r.get("label", r["method"]) for r in bench_rows()]      # shipped rows of either format
    bare = [{k: v for k, v in r.items() if k != "label"} for r in bench_rows()]
    if style == "ids with labels":
        rows = [dict(r, method=method_id(label), label=label) for r, label in zip(bare, labels)]
    else:
        rows = [dict(r, method=label) for r, label in zip(bare, labels)]
    fig = accuracy_nfe_figure(rows)
    points = [d for d in fig.data if d.mode == "markers"]
    assert sum(len(d.x) for d in points) == len(rows)
    # a method's colour for its first label; another label of it ("DiCo (authors' code)") gets a colour of its own
    first = {}
    for label in labels:
        first.setdefault(method_id(label), label)
    for d in points:
        label = d.name.rsplit(" (", 1)[0]
        assert method_id(label) == d.meta
        if first[d.meta] == label:
            assert d.marker.color == METHOD_COLORS[d.meta]
        else:
            assert d.marker.color != METHOD_COLORS[d.meta]
    assert any(d.name.startswith("DiCo") and d.marker.color == METHOD_COLORS["dico"] for d in points)
    symbols = {d.name: d.marker.symbol for d in points}
    assert symbols["DiCo (non-ar)"] != symbols["DiCo (semi-ar)"]
    assert fig.layout.yaxis.tickformat == ".0%"


def test_benchmark_draws_answer_nfe_when_rows_have_it():
    rows = [dict(r, answer_nfe_mean=r["nfe_mean"] / 2) for r in bench_rows()]
    fig = accuracy_nfe_figure(rows)
    answered = [d for d in fig.data if d.name.endswith("answer NFE")]
    assert sorted(x for d in answered for x in segments(d.x) for x in x[:1]) == sorted(r["answer_nfe_mean"]
                                                                                       for r in rows)
    assert all(d.marker.symbol.endswith("-open") for d in answered)
    without = [{k: v for k, v in r.items() if k != "answer_nfe_mean"} for r in bench_rows()]
    assert not any(d.name.endswith("answer NFE") for d in accuracy_nfe_figure(without).data)
    with pytest.raises(ValueError, match="nfe_mean"):
        accuracy_nfe_figure([dict(method="dico", mode="non-ar", task="t", accuracy=0.5)])


# ---------------------------------------------------------------------------------------- purity and size

def first_step_view(trace):
    return step_view_figure(trace, 0)


FIGURES = [trajectory_figure, phase_figure, cluster_figure, attention_figure, first_step_view]


def test_figures_are_pure_functions_of_the_trace(trace):
    before = copy.deepcopy(trace)
    loaded = Trace.from_json(trace.to_json())
    for make in FIGURES:
        fig = make(trace)
        assert fig.to_json() == make(loaded).to_json()          # a replayed trace draws the same figure
        assert len(fig.to_json()) < 1e6                         # small enough to stream to a browser
    assert trace == before


def test_visuals_never_import_torch_gradio_or_the_model():
    for path in Path(visuals.__file__).parent.glob("*.py"):
        imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", path.read_text(), flags=re.M)
        assert not {i.split(".")[0] for i in imports} & {"torch", "gradio", "transformers"}, path
        assert {i for i in imports if i.split(".")[0] == "dico"} <= {"dico.trace", "dico.settings"}, path


# ---------------------------------------------------------------------------------------- in a browser

def overlap(a: dict, b: dict) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


@pytest.mark.e2e
def test_drawn_in_a_browser_the_clusters_line_up_with_the_trajectory_and_the_toolbar_clears_the_bar(
        page, artifacts, golden):
    """Clusters out of line with the trajectory, and the toolbar over the colour bar's title: measured where plotly.js
    lays the figures out."""
    trace = golden["word0-dico-non-ar"]
    page.set_viewport_size({"width": 1000, "height": 800})
    frames = {}
    for name, fig in (("trajectory", trajectory_figure(trace)), ("clusters", cluster_figure(trace))):
        path = artifacts / f"visuals-{name}.html"
        fig.update_layout(modebar_orientation="v")              # as Gradio's Plot shows it
        fig.write_html(path, include_plotlyjs=True)
        page.goto(path.as_uri())
        page.wait_for_selector(".main-svg")
        frames[name] = page.evaluate("() => { const l = document.querySelector('.js-plotly-plot')._fullLayout;"
                                     " return [l.xaxis._offset, l.xaxis._length]; }")
        page.hover(".nsewdrag")                                  # the toolbar shows on hover
        page.screenshot(path=str(artifacts / f"visuals-{name}.png"))
        if name == "trajectory":
            assert not overlap(page.locator(".modebar").bounding_box(), page.locator(".cbtitle").bounding_box())
    assert frames["trajectory"] == frames["clusters"]


# ---------------------------------------------------------------------------------------- revision (re-masks)

def revising_trace() -> Trace:
    """Four positions, four steps, built by hand as a revising rule records them (take-backs after the step's
    commits): step 1 commits 'cat' at 2 and takes back 'big' at 1 (committed at step 0); step 2 commits 'small'
    at 1 and 'dog' at 2 and takes 'dog' back in the same step; step 3 commits 'cat' at 2 and '.' at 3."""
    from dico.trace import Step
    vocab = {"1": " a", "2": " big", "3": " cat", "4": " small", "5": ".", "6": " dog"}

    def step(i, committed, tokens, remasked=()):
        return Step(index=i, phase="vanilla", window=[0, 4], committed=committed, tokens=tokens,
                    confidence=[0.9, 0.5, 0.6, 0.7], prediction=[1, 4, 3, 5], remasked=list(remasked))

    steps = [step(0, [0, 1], [1, 2]), step(1, [2], [3], remasked=[1]), step(2, [1, 2], [4, 6], remasked=[2]),
             step(3, [2, 3], [3, 5])]
    trace = Trace(model="hand", method="wino", mode="non-ar", settings={}, prompt="p", prompt_length=1,
                  gen_length=4, block_length=None, text=" a small cat.", nfe=4, vocab=vocab, steps=steps,
                  label="WINO", answer_length=4)
    trace.answer_nfe = 4
    return trace


def test_a_revising_step_is_drawn_where_it_took_tokens_back():
    trace = revising_trace()
    fig = trajectory_figure(trace)
    (marks,) = [d for d in fig.data if d.name == "taken back (re-masked)"]
    assert list(marks.x) == [1, 2] and list(marks.y) == [1, 2]          # position, step of each take-back
    assert [str(t).strip() for t in marks.text] == ["big", "dog"]
    assert list(marks.customdata) == [0, 2]                             # the step that had committed it
    (undone,) = [d for d in fig.data if d.name == "commit later taken back"]
    assert sorted(zip(undone.x, undone.y)) == [(1, 0), (2, 2)]
    answer = by_name(fig, "answer commit")[0]                           # the commits that stand at the end
    assert sorted(zip(answer.x, answer.y)) == [(0, 0), (1, 2), (2, 3), (3, 3)]


def test_the_step_view_strikes_through_what_a_step_took_back():
    trace = revising_trace()
    fig = step_view_figure(trace, 1)
    text = by_name(fig, "tokens")[0]
    assert [t.strip() for t in text.text] == ["a", "<s> big</s>", "cat", "▢"]
    assert text.textfont.color[1] == OKABE_ITO["purple"]
    assert by_name(fig, "taken back (re-masked) at step 1")
    assert "1 taken back" in title_of(fig) and "2 of 4 still masked" in title_of(fig)
    assert step_text(trace, 1) == " a_ cat_" and step_text(trace, 2) == " a small__"
    assert [t.strip() for t in by_name(step_view_figure(trace, 3), "tokens")[0].text] == ["a", "small", "cat", "."]


def test_phase_bars_count_the_revised_tokens_of_each_step():
    fig = phase_figure(revising_trace())
    (revised,) = [d for d in fig.data if d.name.startswith("revised")]
    assert list(revised.x) == [0, 1, 2, 3] and list(revised.y) == [0, -1, -1, 0]
    assert fig.layout.barmode == "relative" and "taken back" in title_of(fig)
    padding = [d for d in fig.data if d.name.endswith(" padding")]
    assert all(not any(d.y) for d in padding)           # every commit, taken back later or not, is in the answer


def test_the_streamed_race_strikes_through_a_taken_back_token():
    from dico_ui import render
    html = render.response_html(revising_trace(), 1)
    assert '<span class="tok revised"' in html and "<s>big</s>" in html and html.count("▢") == 2
    assert "<s>" not in render.response_html(revising_trace(), 3)
    assert "took back 1" in render.step_html(revising_trace(), 2)


def test_step_axes_tick_whole_steps_only(runs):
    trace = runs[2]
    trace.steps, trace.nfe, trace.stopped = trace.steps[:2], 2, True
    for axis in (trajectory_figure(trace).layout.yaxis, phase_figure(trace).layout.xaxis):
        assert axis.tick0 == 0 and axis.dtick == 1 and axis.tickformat == "d"
    assert trajectory_figure(runs[1]).layout.yaxis.dtick == 10                    # 96 Vanilla steps


def test_the_step_view_profile_says_what_its_axis_is(golden):
    fig = step_view_figure(golden["word0-dico-non-ar"], 0)
    assert fig.layout.yaxis2.title.text == "confidence at step 0"


def test_semi_ar_lines_are_named_in_the_legend(golden):
    fig = trajectory_figure(golden["word0-dico-semi-ar"])
    names = {d.name for d in fig.data if d.showlegend is not False}
    assert {"block boundary (semi-AR)", "answer end │ padding"} <= names
    dashes = {d.name: d.line.dash for d in fig.data if d.name in names and getattr(d, "mode", "") == "lines"}
    assert dashes["block boundary (semi-AR)"] == "dash" and dashes["answer end │ padding"] == "dot"


def test_titles_are_wrapped_to_fit_a_phone(trace):
    for fig in (trajectory_figure(trace), phase_figure(trace), cluster_figure(trace), step_view_figure(trace, 0)):
        for line in fig.layout.title.text.split("<br>"):
            assert len(re.sub(r"</?sup>", "", line)) <= 64, line
        assert not fig.data or fig.layout.margin.t >= 34 + 20 * fig.layout.title.text.count("<br>")


def test_the_benchmark_reads_on_a_log_axis_with_one_x_title():
    rows = [dict(method=m, mode="non-ar", task=t, accuracy=0.9, nfe_mean=n) for t in ("word", "list", "pick", "team")
            for m, n in (("vanilla", 96.0), ("dico", 9.0))]
    fig = accuracy_nfe_figure(rows)
    axes = [fig.layout[f"xaxis{i + 1 if i else ''}"] for i in range(4)]
    assert all(a.type == "log" and not a.title.text for a in axes)             # 9 and 96 passes both get room
    assert [a.text for a in fig.layout.annotations].count("mean NFE (log scale; fewer is faster)") == 1
    assert len({tuple(a.domain) for a in axes}) == 2                             # two panels across, two down
