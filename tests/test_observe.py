"""Measurements of the paper's observations as functions of a trace (dico.observe, docs/observations.md): the clash of
a parallel step, dependency among masked tokens, and how local either is. They replay the trace's states, count
their own passes and never change the decode."""
import json
import math
from pathlib import Path

import pytest
import torch

import dico
from dico.observe import (
    Replayed,
    attention_locality,
    clash,
    dependency,
    layer_locality,
    layer_maps,
    locality,
    stage_of,
    step_clash,
)
from dico.trace import read_traces
from standins import dream_standin, llada_standin, random_predictor

EXAMPLE = Path(__file__).resolve().parent.parent / "assets" / "ui" / "example_run.json"


@pytest.fixture(scope="module")
def lesson():
    return {t.method: t for t in read_traces(EXAMPLE.read_bytes())}


def test_the_lessons_broken_step_clashes_by_nats_and_the_careful_steps_do_not(predictor, lesson):
    """Top-4 per step commits "S" "ara" "G" "ill" together at step 23: each likely alone, unlikely together."""
    topk, fast = lesson["topk"], lesson["fast"]
    model = Replayed(predictor, topk)
    assert step_clash(model, topk, 23) > 5.0
    assert model.passes == 4                           # one pass a token of the step: its state and three more
    fast_clash = clash(predictor, fast, limit=12)      # its 12 most confident tokens a step (a wide step costs)
    assert all(v is None or abs(v) < 0.1 for v in fast_clash)
    assert fast_clash.passes == sum(min(len(s.committed), 12) for s in fast.steps if len(s.committed) >= 2)


def test_a_step_of_one_token_has_no_clash_and_costs_no_pass(predictor, lesson):
    measured = clash(predictor, lesson["vanilla"])
    assert list(measured) == [None] * lesson["vanilla"].nfe and measured.passes == 0


def test_measuring_never_changes_the_decode(predictor, lesson):
    trace = lesson["dico"]
    before = trace.to_json()
    clash(predictor, trace, limit=3)
    dependency(predictor, trace, trace.nfe - 1)
    assert trace.to_json() == before


def test_clash_is_the_chain_rule_written_out(monkeypatch):
    """On a model whose output depends on its input: the marginals summed on the state before the step, minus the
    joint by the chain rule, most confident first, each conditional one pass on the state so far."""
    import dico.observe
    monkeypatch.setattr(dico.observe, "ROWS_PER_PASS", 1)       # the stand-in's logits hash its whole batch
    predictor = random_predictor(seed=3)
    trace = dico.generate(predictor, "a b c", "topk", k=3, gen_length=9)
    k = 0
    step = trace.steps[k]
    order = sorted(zip(step.committed, step.tokens), key=lambda pt: (-step.confidence[pt[0]], pt[0]))
    prompt = predictor.encode_prompt(trace.prompt)
    state = [predictor.mask_id] * trace.gen_length

    def log_p(pos, token):
        logits, _ = predictor.forward(torch.tensor([prompt + state]))
        row = logits[0, len(prompt) + pos].double()
        row[predictor.mask_id] = -math.inf
        return float(torch.log_softmax(row, -1)[token])
    marginals = sum(log_p(p, t) for p, t in order)
    joint = 0.0
    for p, t in order:
        joint += log_p(p, t)
        state[p] = t
    assert clash(predictor, trace)[k] == pytest.approx(marginals - joint, abs=1e-9)
    assert clash(predictor, trace, limit=2).passes == sum(min(len(s.committed), 2) for s in trace.steps
                                                          if len(s.committed) >= 2)


@pytest.mark.parametrize("standin", [llada_standin, dream_standin], ids=["llada", "dream"])
def test_llada_and_dream_code_paths_measure_a_model_whose_tokens_are_independent_as_zero(standin):
    """The stand-ins' logits ignore the input (but for noise that differs by a row's place in the batch): no step
    clashes and no write moves another position."""
    predictor = standin()
    trace = dico.generate(predictor, "a b", "topk", k=3, gen_length=9, mode="non-ar")
    assert all(v is None or abs(v) < 1e-2 for v in clash(predictor, trace))
    found = dependency(predictor, trace, 1)
    positions, matrix = found
    assert positions == [p for p, t in enumerate(trace.tokens_before(1)) if t is None]
    assert found.passes == len(positions) + 1
    assert all(abs(v) < 1e-2 for row in matrix for v in row)


def test_dependency_is_a_kl_matrix_over_the_masked_positions_with_a_zero_diagonal(predictor, lesson):
    trace = lesson["vanilla"]
    positions, matrix = dependency(predictor, trace, 85)
    assert positions == [p for p, t in enumerate(trace.tokens_before(85)) if t is None]
    assert len(matrix) == len(positions) and all(len(row) == len(positions) for row in matrix)
    assert all(matrix[i][i] == 0 for i in range(len(positions))) and all(v >= 0 for row in matrix for v in row)
    assert sum(map(sum, matrix)) > 1.0                       # the names of the pick do move each other
    with pytest.raises(ValueError, match=r"^at: must be a step of the run, 0\.\.95, got 96"):
        dependency(predictor, trace, 96)


def test_locality_compares_the_share_within_w_with_an_even_spread():
    positions = [0, 1, 2, 10]
    matrix = [[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 0, 1, 0]]        # 4 of 6 units within 3 positions
    found = locality(positions, matrix, w=3)
    assert found.within == pytest.approx(4 / 6) and found.even == pytest.approx(6 / 12)
    assert found.mean_distance == pytest.approx((1 * 4 + 8 * 2) / 6) and found.total == 6
    assert locality(positions, matrix, among={0, 1, 2}).within == 1.0
    assert locality([3], [[0]]) is None


def test_attention_locality_by_stage_from_the_captured_maps(predictor):
    trace = dico.generate(predictor, "Take the numbers 4, 9, 2. Add 3 to each number.", "dico", gen_length=32,
                          capture_attention=True)
    found = attention_locality(trace, w=3)
    assert set(found) == {"early", "middle", "late"}
    for stage in found.values():
        assert stage is None or (0 <= stage.within <= 1 and 0 < stage.even <= 1 and 0 <= stage.total <= 1)
    assert stage_of(trace, 0) == "early"
    with pytest.raises(ValueError, match="attention: the trace has no attention maps"):
        attention_locality(dico.generate(predictor, "Add 3 to 4.", "fast", gen_length=8))


def layers_averaged(maps: dict) -> dict:
    """{stage: rows} of the mean over the layers of ``layer_maps``' rows (None rows stay None)."""
    out = {}
    for stage, per_layer in maps.items():
        out[stage] = [None if rows[0] is None else [sum(r[k] for r in rows) / len(rows) for k in range(len(rows[0]))]
                      for rows in zip(*per_layer)]
    return out


def assert_same_rows(got: list, want: list) -> None:
    assert [r is None for r in got] == [r is None for r in want]
    for g, w in zip(got, want):
        if w is not None:
            assert g == pytest.approx(w, abs=1e-4)


def test_the_attention_lens_layer_by_layer_replays_each_step_and_its_layers_average_to_the_decodes_map(predictor):
    trace = dico.generate(predictor, "Take the numbers 4, 9, 2. Add 3 to each number.", "vanilla", gen_length=24,
                          capture_attention=True)
    maps = layer_maps(predictor, trace)
    assert maps.passes == trace.nfe                                  # one pass a step
    layers = len(predictor.model.config.num_hidden_layers * [0])
    assert all(len(per_layer) == layers for per_layer in maps.values())
    for stage, rows in zip(maps, trace.attention.matrix):
        assert_same_rows(layers_averaged(maps)[stage], rows)
    found = layer_locality(predictor, trace, w=3, among=set(range(trace.answer_length)))
    assert found.passes == trace.nfe and set(found) == {"early", "middle", "late"}
    for per_layer in found.values():
        assert len(per_layer) == layers
        assert all(got is None or 0 <= got.within <= 1 for got in per_layer)
    with pytest.raises(ValueError, match="does not return attention maps"):
        layer_maps(random_predictor(seed=1), dico.generate(random_predictor(seed=1), "a b", "vanilla", gen_length=4))


def test_moderate_clusters_count_runs_of_adjacent_masked_answer_positions_in_the_band(lesson):
    """Under one token a step (Vanilla writes the padding first here), the pick's names sit at moderate confidence
    for most of the run: overlooked; Fast-dLLM commits its moderate runs within three steps."""
    from dico.observe import MODERATE, moderate_clusters
    vanilla, fast = moderate_clusters(lesson["vanilla"]), moderate_clusters(lesson["fast"])
    assert vanilla.band == MODERATE and vanilla.steps == 96 and vanilla.runs >= 1
    assert set(vanilla.overlooked) <= set(range(lesson["vanilla"].answer_length)) and vanilla.overlooked
    assert fast.overlooked == [] and fast.soon_share == 1.0
    assert vanilla.mean_length >= 2


def test_the_floor_commits_a_step_while_its_clash_stays_within_the_bound(predictor, monkeypatch):
    from dico.observe import floor
    found = floor(predictor, "Pick one leader of Lily Howard, Don Gill and Sara Lake.", gen_length=24)
    assert sum(found.per_step) == 24 and found.nfe == len(found.per_step) < 24
    assert found.passes >= found.nfe and "Gill" in found.text and not ("Sara" in found.text and "Don" in found.text)
    assert 1 <= found.answer_nfe <= found.nfe
    assert found.token_forwards == found.passes * (len(predictor.encode_prompt(
        "Pick one leader of Lily Howard, Don Gill and Sara Lake.")) + 24)
    strict = floor(predictor, "Pick one leader of Lily Howard, Don Gill and Sara Lake.", gen_length=6, bound=-1.0)
    assert strict.per_step == [1] * 6 and strict.passes == 6 + 5    # nothing joins a step below a negative bound


def test_table1_and_the_frontier_read_every_rows_passes_against_the_floor(predictor):
    """Item 9: the floor is a row of Table 1 (``--methods floor``) and a point of the frontier, decoded on the same
    items; each row of its cell shows its passes over the floor's, and the floor, a bound, has no AUP."""
    from dico.bench import benchmark, frontier
    from dico.bench.core import FLOOR_ROW
    from dico.bench.tables import frontier_markdown, markdown

    assert benchmark.table_configs("floor") == [FLOOR_ROW] and FLOOR_ROW in benchmark.table_configs(None)
    rows = benchmark.run(predictor, [("Top-2 per step", "topk", {"k": 2}), FLOOR_ROW], ("pick",), ("non-ar",), 2,
                         ((16, 8),), 2, progress=False)
    vanilla, top2, bound = rows
    assert bound["method"] == "floor" and bound["n"] == 2 and bound["nfe_mean"] < top2["nfe_mean"] == 8
    assert bound["passes_mean"] > bound["nfe_mean"] and bound["answer_nfe_mean"] <= bound["nfe_mean"]
    table = markdown(rows, "Table 1").splitlines()
    assert table[2].endswith("| non-ar AUP | non-ar NFE / floor |")
    assert table[4].endswith(f"| {16 / bound['nfe_mean']:.1f} |")     # Vanilla: 16 passes
    assert table[5].endswith(f"| {8 / bound['nfe_mean']:.1f} |")      # Top-2: 8
    assert table[6].endswith("| - | 1.0 |")                             # the floor: no AUP, its own passes
    assert "NFE / floor = the row's mean passes over the floor's" in table[-1]
    points = frontier.frontier(predictor, ("pick",), ("non-ar",), 2, gen_length=16, batch_size=2, progress=False,
                               chosen=("topk", "floor"))
    assert [p["sweep"] for p in points][-1] == "Floor" and points[-1]["nfe_mean"] == bound["nfe_mean"]
    drawn = frontier_markdown(points, "frontier").splitlines()
    assert drawn[2].endswith("| NFE / floor |") and drawn[4].endswith(f"| {16 / bound['nfe_mean']:.1f} |")
    assert markdown(rows[:2], "Table 1").count("floor") == 0           # a table without the floor reads as before


@pytest.mark.slow
def test_the_observe_bench_measures_a_family_and_draws_its_tables(predictor):
    """``python -m dico.bench observe``'s cells on one item: both lenses by stage, Observation III, the floor, and a
    method's clash against its answer; its table renders from the rows."""
    from dico.bench.observe import cell
    from dico.bench.tables import kind, observe_markdown
    rows = cell(predictor, ("observe", "pick", "non-ar"), 1, 1) + cell(predictor, ("clash", 1, "pick", "non-ar"), 1, 1)
    assert rows[0]["n"] == 1 and any(k.startswith("dependency answer") for k in rows[0]["lenses"])
    assert any(k.startswith("attention answer") for k in rows[0]["lenses"])
    assert any(k.startswith("attention layer 3 answer") for k in rows[0]["lenses"])     # the model's 4 layers
    assert rows[1]["label"] == "Top-4 per step" and rows[1]["wrong_marked"] == rows[1]["wrong"]
    assert kind({"rows": rows}) == "observe"
    assert "| pick | non-ar | Top-4 per step |" in observe_markdown(rows, "t")


def test_a_measured_clash_travels_with_the_trace_and_is_drawn(predictor, lesson):
    """``annotate_clash`` records the values on the trace (a saved trace keeps them, an old one loads without);
    the figures draw it and the dependency map."""
    import visuals
    from dico.observe import annotate_clash
    topk = read_traces(lesson["topk"].to_json())[0]
    annotate_clash(predictor, topk, limit=2)
    back = read_traces(topk.to_json())[0]
    assert back.clash == topk.clash and back.clash["limit"] == 2 and len(back.clash["values"]) == 24
    unmeasured = {k: v for k, v in json.loads(lesson["vanilla"].to_json()).items() if k != "clash"}
    assert read_traces(json.dumps(unmeasured))[0].clash is None
    assert len(visuals.clash_figure([back]).data) == 1
    positions, matrix = dependency(predictor, lesson["dico"], 0)
    assert visuals.dependency_figure(lesson["dico"], 0, positions, matrix).data[0].type == "heatmap"
    broken = json.loads(topk.to_json())
    broken["clash"]["values"] = broken["clash"]["values"][:3]
    with pytest.raises(Exception, match="trace.clash.values"):
        read_traces(json.dumps(broken))


def _edited_trace(predictor):
    """A hand-written run of 6 positions: step 0 commits four tokens, step 1 commits one and edits three of them
    (an editing rule's step, LLaDA 2.1's token-to-token)."""
    from dico.trace import Step, Trace
    n, mask = 6, [None] * 6
    step0 = Step(0, "fast", [0, n], [0, 1, 2, 3], [11, 12, 13, 14], [0.9, 0.8, 0.7, 0.6, 0.3, 0.2], list(range(6)))
    step1 = Step(1, "fast", [0, n], [4], [15], [None, None, None, None, 0.5, 0.2], mask[:4] + [15, 16],
                 edited=[[0, 11, 21], [2, 13, 23], [3, 14, 24]])
    return Trace(model=predictor.name, method="llada21", mode="non-ar", settings={}, prompt="a b c",
                 prompt_length=len(predictor.encode_prompt("a b c")), gen_length=n, block_length=None,
                 nfe=2, steps=[step0, step1])


def test_a_steps_clash_covers_its_edits_as_the_chain_rule_written_out(monkeypatch):
    """A step that commits one token and edits three is measured on all four. On the state before
    it (an edited position holds its old token), the marginals of the four written tokens summed, minus their joint
    by the chain rule written most confident first: a commit's confidence as the trace recorded it, an edit's the
    probability of its new token on that state (what the editing rule read); one pass a token."""
    import dico.observe
    monkeypatch.setattr(dico.observe, "ROWS_PER_PASS", 1)       # the stand-in's logits hash its whole batch
    predictor = random_predictor(seed=5)
    trace = _edited_trace(predictor)
    prompt = predictor.encode_prompt(trace.prompt)
    before = [11, 12, 13, 14, None, None]
    assert trace.tokens_before(1) == before

    def log_p(state, pos, token):
        ids = prompt + [predictor.mask_id if t is None else t for t in state]
        logits, _ = predictor.forward(torch.tensor([ids]))
        row = logits[0, len(prompt) + pos].double()
        row[predictor.mask_id] = -math.inf
        return float(torch.log_softmax(row, -1)[token])
    written = [(4, 15), (0, 21), (2, 23), (3, 24)]
    confidence = {4: 0.5} | {p: math.exp(log_p(before, p, t)) for p, t in written[1:]}
    order = sorted(written, key=lambda pt: (-confidence[pt[0]], pt[0]))
    marginals = sum(log_p(before, p, t) for p, t in order)
    joint, state = 0.0, list(before)
    for p, t in order:
        joint += log_p(state, p, t)
        state[p] = t
    measured = clash(predictor, trace)
    assert measured[1] == pytest.approx(marginals - joint, abs=1e-9)      # one float64 sum of the same logits
    assert measured.passes == 4 + 4 and measured[1] != 0.0
    assert clash(predictor, trace, limit=2).passes == 2 + 2


def test_a_budget_of_passes_leaves_the_steps_past_it_unmeasured(predictor, lesson):
    """``budget``: the steps are measured in order while they fit; a step that would pass it stays None and is
    listed, and the values measured are those measured without a budget."""
    from dico.observe import annotate_clash, clash_cost
    topk = lesson["topk"]
    assert clash_cost(topk) == 96                                         # 24 steps of 4
    bounded = clash(predictor, topk, limit=8, budget=10)
    assert bounded.passes == 8 and bounded.skipped == list(range(2, 24))
    model = Replayed(predictor, topk)
    assert list(bounded[:2]) == [step_clash(model, topk, k, 8) for k in (0, 1)] and set(bounded[2:]) == {None}
    annotated = annotate_clash(predictor, read_traces(topk.to_json())[0], budget=10)
    assert annotated.clash["skipped"] == list(range(2, 24))
    assert read_traces(annotated.to_json())[0].clash == annotated.clash
    broken = json.loads(annotated.to_json())
    broken["clash"]["skipped"] = [0, 99]
    with pytest.raises(Exception, match="trace.clash.skipped"):
        read_traces(json.dumps(broken))
