"""The figures say what the trace says: checked against the trace itself, never against fixture quirks.

Every check derives its expectation from the trace (``commit_step``, ``steps``), so the same tests
can run on real traces from the decoding loop: add them to ``TRACES``.
"""
from __future__ import annotations

import copy
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixtures.make_fixture import synthetic_trace  # noqa: E402

import visuals  # noqa: E402
from dico.trace import PHASES, Trace  # noqa: E402
from visuals import (OKABE_ITO, PHASE_COLORS, accuracy_nfe_figure, attention_figure, cluster_figure,  # noqa: E402
                     comparison_figure, comparison_table, phase_figure, step_text, step_view_figure,
                     trajectories_side_by_side, trajectory_figure)

TRACES = {
    "vanilla": dict(method="vanilla", gen_length=48, seed=1),
    "fast": dict(method="fast", gen_length=48, seed=1),
    "dico": dict(method="dico", gen_length=64, seed=2, with_attention=True),
    "dico-semi-ar": dict(method="dico", gen_length=64, seed=3, with_attention=True, block_length=16),
}


@pytest.fixture(scope="module", params=list(TRACES))
def trace(request) -> Trace:
    return synthetic_trace(**TRACES[request.param])


@pytest.fixture(scope="module")
def runs() -> list[Trace]:
    """One prompt decoded by three methods, as the comparison tab gets them."""
    return [synthetic_trace(m, 64, seed=5) for m in ("fast", "vanilla", "dico")]


def by_name(fig, name):
    return [d for d in fig.data if d.name == name]


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


# ---------------------------------------------------------------------------------------- the fixture

def test_fixture_follows_the_schema(trace):
    assert Trace.from_json(trace.to_json()) == trace           # the library's own validation accepts it
    assert trace.nfe == len(trace.steps) and len(trace.response) == trace.gen_length
    seen: set[int] = set()
    for i, step in enumerate(trace.steps):
        assert step.index == i and step.committed and not seen & set(step.committed)
        masked = [p not in seen for p in range(trace.gen_length)]
        assert [c is not None for c in step.confidence] == masked
        assert all(0 <= c <= 1 for c in step.confidence if c is not None)
        assert all(step.window[0] <= p < step.window[1] for p in step.committed)
        seen |= set(step.committed)
    assert seen == set(range(trace.gen_length))
    used = {t for s in trace.steps for t in s.tokens + [p for p in s.prediction if p is not None]} | set(trace.response)
    assert {str(t) for t in used} <= trace.vocab.keys()
    phases = {s.phase for s in trace.steps}
    assert phases <= ({"divide", "conquer", "finalize"} if trace.method == "dico" else {trace.method})
    if trace.method == "dico":
        assert "divide" in phases and any(s.seeds for s in trace.steps) and any(s.clusters for s in trace.steps)
    if trace.method == "vanilla":
        assert all(len(s.committed) == 1 for s in trace.steps)


# ---------------------------------------------------------------------------------------- trajectory

def test_trajectory_heatmap_is_blank_exactly_where_decoded(trace):
    fig = trajectory_figure(trace)
    heat = fig.data[0]
    z = np.asarray(heat.z, dtype=float)
    assert heat.type == "heatmap" and z.shape == (len(trace.steps), trace.gen_length)
    assert np.array_equal(np.isnan(z), decoded_before(trace))
    conf = np.array([s.confidence for s in trace.steps], dtype=float)
    assert np.allclose(z, conf, atol=1e-3, equal_nan=True)
    assert list(heat.y) == [s.index for s in trace.steps]
    r, j = np.argwhere(~np.isnan(z))[-1]                        # hover names the predicted token
    assert visuals._common.show(trace.token_text(trace.steps[r].prediction[j])) in np.asarray(heat.text)[r, j]
    assert fig.layout.yaxis.autorange == "reversed"             # step 0 at the top, as in the paper
    assert fig.layout.coloraxis.colorbar.title.text == "confidence"
    assert str(trace.nfe) in fig.layout.title.text


def test_trajectory_marks_every_commit_at_its_step(trace):
    (committed,) = by_name(trajectory_figure(trace), "committed")
    assert committed.marker.color == OKABE_ITO["vermillion"]
    got = set(zip(committed.x.tolist(), committed.y.tolist()))
    assert got == {(p, s.index) for s in trace.steps for p in s.committed}


def test_trajectory_outlines_every_cluster_and_seed(trace):
    fig = trajectory_figure(trace)
    spans = [(s.index, a, b) for s in trace.steps for a, b in s.clusters]
    seeds = {(p, s.index) for s in trace.steps for p in s.seeds}
    if not spans:
        assert not by_name(fig, "clusters") and not by_name(fig, "seed")
        return
    (clusters,) = by_name(fig, "clusters")
    xs, ys = segments(clusters.x), segments(clusters.y)
    assert len(xs) == len(spans)                                # one outline per cluster per step
    assert [(round(np.mean(y)), min(x) + 0.5, max(x) - 0.5) for x, y in zip(xs, ys)] == spans
    (seed,) = by_name(fig, "seed")
    assert set(zip(seed.x.tolist(), seed.y.tolist())) == seeds
    bare = trajectory_figure(trace, show_clusters=False)
    assert not by_name(bare, "clusters") and not by_name(bare, "seed")


def test_side_by_side_shares_one_colour_scale(runs):
    fig = trajectories_side_by_side(runs)
    heats = [d for d in fig.data if d.type == "heatmap"]
    assert len(heats) == len(runs) and {h.coloraxis for h in heats} == {"coloraxis"}
    assert len({h.xaxis for h in heats}) == len(runs) and {h.yaxis for h in heats} == {"y"}
    assert [h.z.shape[0] for h in heats] == [r.nfe for r in runs]
    shown = [d.name for d in fig.data if d.showlegend]
    assert len(shown) == len(set(shown)) and "committed" in shown


# ---------------------------------------------------------------------------------------- phases and clusters

def test_phase_colours_are_okabe_ito_and_cover_every_phase():
    assert set(PHASE_COLORS) == set(PHASES)
    assert set(PHASE_COLORS.values()) <= set(OKABE_ITO.values()) and len(set(PHASE_COLORS.values())) == len(PHASES)


def test_phase_band_covers_every_step_once(trace):
    fig = phase_figure(trace)
    band = [d for d in fig.data if d.yaxis == "y"]
    bars = [d for d in fig.data if d.yaxis == "y2"]
    steps = sorted(x for d in band for x in d.x.tolist())
    assert steps == [s.index for s in trace.steps]
    for d in band + bars:
        assert d.marker.color == PHASE_COLORS[d.name]
        assert all(trace.steps[x].phase == d.name for x in d.x.tolist())
    counts = {x: y for d in bars for x, y in zip(d.x.tolist(), d.y.tolist())}
    assert counts == {s.index: len(s.committed) for s in trace.steps}


def test_cluster_figure_draws_only_clusters_and_seeds(trace):
    fig = cluster_figure(trace)
    spans = sum(len(s.clusters) for s in trace.steps)
    if not spans:
        expected = "formed no cluster" if trace.method == "dico" else "only DiCo"
        assert not fig.data and expected in fig.layout.annotations[0].text
        return
    outlines = [d for d in fig.data if d.name.startswith("clusters")]
    assert sum(len(segments(d.x)) for d in outlines) == spans
    for d in outlines:
        assert d.line.color == PHASE_COLORS[re.search(r"\((\w+)\)", d.name).group(1)]
    assert {d.name for d in fig.data} - {d.name for d in outlines} == {"seed"}


# ---------------------------------------------------------------------------------------- attention

def test_attention_stages_are_non_negative_and_explained(trace):
    fig = attention_figure(trace)
    if trace.attention is None:
        assert not fig.data and "not captured" in fig.layout.annotations[0].text
        return
    heats = [d for d in fig.data if d.type == "heatmap"]
    assert [h.name for h in heats] == ["early", "middle", "late"]
    for h, rows in zip(heats, trace.attention.matrix):
        z = np.asarray(h.z, dtype=float)
        assert z.shape == (trace.gen_length, trace.gen_length + 1) and np.nanmin(z, initial=0) >= 0
        assert [bool(np.isnan(row).all()) for row in z] == [row is None for row in rows]
    assert {h.coloraxis for h in heats} == {"coloraxis"} and fig.layout.coloraxis.cmin == 0
    assert "1/3" in fig.layout.title.text and "2/3" in fig.layout.title.text
    titles = [a.text for a in fig.layout.annotations]
    for stage, steps in zip(trace.attention.stages, trace.attention.steps):
        assert any(t.startswith(stage) for t in titles) and f"{stage}: {len(steps)} steps" in fig.layout.title.text
    assert fig.layout.xaxis.title.text == "key position (0 = prompt)"
    assert fig.layout.yaxis.title.text == "masked query position"


def test_attention_without_capture_says_so():
    fig = attention_figure(synthetic_trace("vanilla", 16))
    assert "enable capture" in fig.layout.annotations[0].text


# ---------------------------------------------------------------------------------------- comparison

def test_comparison_masked_fraction_runs_from_one_to_zero(runs):
    fig = comparison_figure(runs)
    assert len(fig.data) == len(runs)
    for line, run in zip(fig.data, runs):
        assert line.y[0] == 1 and line.y[-1] == 0 and line.x[-1] == run.nfe
        assert np.all(np.diff(line.y) < 0)                      # every step commits at least one token


def test_comparison_table_speedups_are_against_vanilla(runs):
    rows = comparison_table(runs)
    vanilla = runs[1]
    assert [r["method"] for r in rows] == ["Fast-dLLM", "Vanilla", "DiCo"]
    assert rows[1]["speedup_nfe"] == 1.0 and rows[1]["speedup_wall"] == 1.0
    for row, run in zip(rows, runs):
        assert row["nfe"] == run.nfe and row["speedup_nfe"] == round(vanilla.nfe / run.nfe, 2)
        assert set(row) == {"method", "mode", "nfe", "tokens_per_s", "wall_s", "speedup_nfe", "speedup_wall"}
    without = comparison_table([runs[2], runs[0]])
    assert without[0]["speedup_nfe"] == 1.0 and without[1]["speedup_nfe"] == round(runs[2].nfe / runs[0].nfe, 2)


def test_stopped_run_keeps_its_masks():
    trace = synthetic_trace("dico", 48, seed=4)
    trace.steps, trace.stopped = trace.steps[:3], True
    trace.nfe = 3
    assert comparison_figure([trace]).data[0].y[-1] > 0
    assert "stopped" in trajectory_figure(trace).layout.title.text
    assert "_" in step_text(trace, 2)
    step_view_figure(trace, 2).to_json()


def test_a_run_without_steps_draws_empty_states():
    trace = synthetic_trace("vanilla", 8)
    trace.steps, trace.nfe = [], 0
    for fig in (trajectory_figure(trace), phase_figure(trace), cluster_figure(trace)):
        assert fig.layout.annotations and not fig.data
    with pytest.raises(ValueError, match="k"):
        step_text(trace, 0)


# ---------------------------------------------------------------------------------------- one step

@pytest.mark.parametrize("k", [-1, "last+1", 1.0, True, None])
def test_step_view_rejects_bad_k(trace, k):
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


def test_step_view_shows_masks_commits_seeds_and_clusters(trace):
    k = next((i for i, s in enumerate(trace.steps) if s.clusters), len(trace.steps) // 2)
    step, fig = trace.steps[k], step_view_figure(trace, k)
    heat, words = fig.data[0], fig.data[1]
    when = [w for w in trace.commit_step()]
    masked = [w is None or w > k for w in when]
    assert len(words.text) == trace.gen_length
    assert [t == "▢" for t in words.text] == masked
    cells = np.asarray(heat.z, dtype=float).ravel()[:trace.gen_length]
    commit_conf = [np.nan if m else trace.steps[w].confidence[p] for p, (w, m) in enumerate(zip(when, masked))]
    assert np.allclose(cells, commit_conf, equal_nan=True)
    (now,) = by_name(fig, f"committed at step {k}")
    assert len(segments(now.x)) == len(step.committed)
    assert step.phase in fig.layout.title.text and f"{len(step.committed)} committed" in fig.layout.title.text
    if step.clusters:
        cols = int(fig.layout.xaxis.range[1] + 0.5)
        pieces = sum(b // cols - a // cols + 1 for a, b in step.clusters)
        assert len(segments(by_name(fig, "cluster")[0].x)) == pieces
        assert f"[{step.clusters[0][0]}, {step.clusters[0][1]}]" in fig.layout.title.text
    assert bool(by_name(fig, "seed")) == bool(step.seeds)
    assert fig.layout.height >= 320                # shorter, plotly.js 3.8 draws nothing when the colour bar is cut


# ---------------------------------------------------------------------------------------- benchmark

def test_accuracy_nfe_has_one_point_per_method_mode_and_task():
    rows = [dict(method=m, mode=mode, task=task, accuracy=acc, nfe_mean=nfe)
            for task in ("gsm8k", "math") for (m, mode, acc, nfe) in
            (("vanilla", "non-ar", 0.56, 256), ("fast", "non-ar", 0.57, 87), ("dico", "non-ar", 0.75, 67),
             ("dico", "semi-ar", 0.70, 80))]
    fig = accuracy_nfe_figure(rows)
    points = {(d.name, d.xaxis, x, y) for d in fig.data for x, y in zip(d.x, d.y)}
    assert len(points) == len(rows)
    symbols = {d.name: d.marker.symbol for d in fig.data}
    assert symbols["DiCo (non-ar)"] != symbols["DiCo (semi-ar)"]
    assert fig.layout.yaxis.tickformat == ".0%"
    with pytest.raises(ValueError, match="nfe_mean"):
        accuracy_nfe_figure([dict(method="dico", mode="non-ar", task="t", accuracy=0.5)])


# ---------------------------------------------------------------------------------------- purity and budget

def first_step_view(trace):
    return step_view_figure(trace, 0)


FIGURES = [trajectory_figure, phase_figure, cluster_figure, attention_figure, first_step_view]


def test_figures_are_pure_functions_of_the_trace(trace):
    before = copy.deepcopy(trace)
    loaded = Trace.from_json(trace.to_json())
    for make in FIGURES:
        assert make(trace).to_json() == make(loaded).to_json()  # a replayed trace draws the same figure
    assert trace == before


def test_visuals_never_import_torch_or_gradio():
    for path in Path(visuals.__file__).parent.glob("*.py"):
        imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", path.read_text(), flags=re.M)
        assert not {i.split(".")[0] for i in imports} & {"torch", "gradio", "transformers"}, path
        assert all(i == "dico.trace" for i in imports if i.split(".")[0] == "dico"), path


@settings(max_examples=12, deadline=None)
@given(method=st.sampled_from(["vanilla", "fast", "fast-factor", "dico"]), n=st.integers(4, 40),
       seed=st.integers(0, 10_000), block=st.sampled_from([None, 4, 8]))
def test_any_trace_draws_consistently(method, n, seed, block):
    trace = synthetic_trace(method, n, seed=seed, block_length=block)
    assert Trace.from_json(trace.to_json()) == trace
    z = np.asarray(trajectory_figure(trace).data[0].z, dtype=float)
    assert np.array_equal(np.isnan(z), decoded_before(trace))
    assert comparison_figure([trace]).data[0].y[-1] == 0
    assert step_text(trace, len(trace.steps) - 1) == "".join(trace.token_text(t) for t in trace.response)


def test_gen_length_256_budget():
    """Figures for a 256-position run stay small enough to stream to a browser (sizes asserted, times printed)."""
    runs = [synthetic_trace(m, 256, seed=0, with_attention=True) for m in ("vanilla", "fast", "dico")]
    trajectory_figure(runs[2])                                  # warm plotly's validators
    total, report = 0.0, []
    for run in (runs[0], runs[2]):
        for make in FIGURES:
            t0 = time.perf_counter()
            fig = make(run)
            total += time.perf_counter() - t0
            size = len(fig.to_json())
            report.append(f"{run.method}/{make.__name__}: {size / 1e6:.2f} MB")
            assert size < 2e6
    for make in (trajectories_side_by_side, comparison_figure):
        t0 = time.perf_counter()
        fig = make(runs)
        total += time.perf_counter() - t0
        assert len(fig.to_json()) < 2e6
    print(f"\nbuilt all figures for vanilla + DiCo at gen_length 256 in {total:.3f} s;", "; ".join(report))
    assert total < 5.0                                          # generous: the machine may be busy
