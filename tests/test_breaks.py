"""Which commits broke an answer: a wrong pick or team answer's clashing tokens, found in its trace, and whether one
step committed them together (each from its own marginal) or the model chose the mixture one token at a time."""
import pytest

from dico.bench.breaks import choice_positions, clash, read, token_spans
from dico.bench.tables import breaks_markdown
from dico.embedded import tasks
from dico.trace import Step, Trace


def _decoded(predictor, item, text, steps_of):
    """A trace of ``text`` whose positions were committed at the steps ``steps_of(positions of each choice)``
    gives."""
    ids = predictor.tokenizer(text, add_special_tokens=False)["input_ids"]
    trace = Trace(model="m", method="topk", mode="non-ar", settings={}, prompt=item.prompt, prompt_length=1,
                  gen_length=len(ids), block_length=None, text=text, response=ids, answer_length=len(ids),
                  vocab={str(i): predictor.tokenizer.convert_ids_to_tokens(i) for i in ids})
    slots = choice_positions(item.family, *token_spans(predictor.tokenizer, ids))
    when = steps_of([positions for _, positions in slots])
    for index in sorted(set(when.values())):
        committed = [p for p, s in when.items() if s == index]
        trace.steps.append(Step(index=index, phase="vanilla", window=[], committed=committed,
                                tokens=[ids[p] for p in committed], confidence=[0.5] * len(ids),
                                prediction=[None] * len(ids)))
    return trace, slots


def test_each_choice_of_an_answer_maps_to_the_tokens_that_spell_it(predictor):
    item = tasks.make_split("team", "test", 40)[0]
    text = f"The {'leader' if item.count == 1 else 'team'} is {' and '.join(item.offered[:item.count])}."
    ids = predictor.tokenizer(text, add_special_tokens=False)["input_ids"]
    text_back, spans = token_spans(predictor.tokenizer, ids)
    slots = choice_positions("team", text_back, spans)
    assert [name for name, _ in slots] == list(item.offered[:item.count])
    for name, positions in slots:
        assert "".join(text_back[a:b] for a, b in (spans[p] for p in positions)).strip() == name
    assert choice_positions("team", "The leader is", spans) is None             # not an answer sentence


def test_a_repeat_committed_by_one_step_is_a_parallel_break_and_one_made_later_is_the_models_own(predictor):
    item = next(i for i in tasks.make_split("pick", "test", 40) if i.count == 2)
    first = item.offered[0]
    text = f"I pick {first} and {first}."
    assert not tasks.check(item, text)

    def one_step(slots):                  # every token at step 1 except the choices, committed together at step 0
        positions = {p for slot in slots for p in slot}
        return {p: 0 if p in positions else 1 for p in range(len(predictor.tokenizer(text, add_special_tokens=False)
                                                                   ["input_ids"]))}

    trace, slots = _decoded(predictor, item, text, one_step)
    assert clash(item, slots) == ("repeat", slots[0][1] + slots[1][1])
    found = read(predictor, item, trace)
    assert (found["right"], found["kind"], found["together"], found["step"]["index"]) == (False, "repeat", True, 0)
    assert "".join(found["step"]["tokens"]).replace("Ġ", "").replace(" ", "") == first + first

    def one_at_a_time(slots):             # each token its own step: the second choice saw the first
        return {p: p for p in range(len(predictor.tokenizer(text, add_special_tokens=False)["input_ids"]))}

    trace, _ = _decoded(predictor, item, text, one_at_a_time)
    assert read(predictor, item, trace)["together"] is False


def test_a_mixture_of_two_people_is_named_as_one_not_offered(predictor):
    item = next(i for i in tasks.make_split("team", "test", 40) if i.count == 1)
    (a_first, _), (_, b_last) = (name.split() for name in item.offered[:2])
    text = f"The leader is {a_first} {b_last}."
    ids = predictor.tokenizer(text, add_special_tokens=False)["input_ids"]
    kind, positions = clash(item, choice_positions("team", *token_spans(predictor.tokenizer, ids)))
    assert kind == "mixed" and len(positions) >= 2
    assert clash(item, None) == ("malformed", [])


def test_the_table_shows_the_break_with_its_step_and_confidences():
    row = {"family": "pick", "mode": "non-ar", "label": "Top-4 per step", "n": 2, "right": 0, "nfe_mean": 24.0,
           "repeat": 2, "mixed": 0,
           "malformed": 0, "wrong_together": 2, "right_together": 0,
           "example": {"text": "I pick bats and bats.", "kind": "repeat", "together": True,
                       "step": {"index": 3, "phase": "vanilla", "tokens": ["bats", "bats"],
                                "confidence": [0.49, 0.47]}}}
    assert ("| pick | non-ar | Top-4 per step | 0/2 [0-66%] | 24.0 | 2 / 0 / 0 | 2 of 2 | 0 of 0 | "
            "“I pick bats and bats.”: step 3 committed `bats` (0.49) + `bats` (0.47) |") in breaks_markdown([row], "t")


def test_a_break_an_edit_wrote_says_so_when_its_run_named_no_tokens():
    from dico.bench.tables import _said
    example = {"text": "I pick does, dolls and cones.", "step": {"index": 22, "phase": "edit", "tokens": [],
                                                                  "confidence": []}}
    assert _said(example) == ("“I pick does, dolls and cones.”: step 22 wrote them by editing (runs before the "
                              "breaks bench read edits name no tokens)")
    example["step"] |= {"tokens": [" does", " dolls"], "confidence": [None, 0.91]}
    assert _said(example).endswith(": step 22 committed `does` (edited) + `dolls` (0.91)")


def test_the_table_names_a_dico_phase_and_no_other():
    """DiCo's Divide, Conquer and Finalize say which part of the method committed the clash; "vanilla" and "fast"
    (a count of top tokens, a threshold) are no phase, and beside an EB-Sampler row read as another method."""
    def said(label, phase):
        step = {"index": 4, "phase": phase, "tokens": ["J", "ate"], "confidence": [0.65, 0.48]}
        row = {"family": "team", "mode": "semi-ar", "label": label, "n": 1, "right": 0, "nfe_mean": 14.0,
               "repeat": 0, "mixed": 1, "malformed": 0, "wrong_together": 1, "right_together": 0,
               "example": {"text": "The team is Rose Tate and Jose Tate.", "kind": "mixed", "together": True,
                           "step": step}}
        return breaks_markdown([row], "t")

    assert "step 4 (divide) committed `J` (0.65)" in said("DiCo", "divide")
    assert "step 4 committed `J` (0.65)" in said("EB-Sampler", "vanilla")
    assert "(fast)" not in said("KLASS", "fast")


def test_breaks_refuses_families_without_choices(capsys):
    from dico.bench.cli import main

    assert main(["breaks", "--families", "word", "--no-progress"]) == 2
    assert "error: families: breaks reads answers with several valid forms" in capsys.readouterr().err


@pytest.mark.subprocess
def test_cells_in_processes_give_the_rows_of_one_process(predictor, tmp_path):
    """``--jobs 2`` decodes each (family, mode) cell in its own process; greedy decoding makes the rows the same,
    in the same order."""
    import json

    from dico.bench.breaks import LANES, breaks
    from dico.bench.cli import main

    methods = ("llada21", "remdm")                  # an editing lane; a lane decoded non-AR only
    args = ["breaks", "--families", "team", "--items", "2", "--no-progress", "--batch-size", "2",
            "--methods", ",".join(methods)]
    assert main(args + ["--jobs", "2", "--json", str(tmp_path / "b.json")]) == 0
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    expected = breaks(predictor, ("team",), ("non-ar", "semi-ar"), 2, [lane for lane in LANES if lane[1] in methods],
                      batch_size=2, progress=False)
    assert [(r["mode"], r["label"], r["right"], r["nfe_mean"]) for r in rows] == \
        [(r["mode"], r["label"], r["right"], r["nfe_mean"]) for r in expected]
    assert main(["breaks", "--jobs", "0", "--no-progress"]) == 2


def test_breaks_saves_each_cell_and_a_rerun_decodes_only_the_cells_missing(predictor, tmp_path, monkeypatch):
    """``--parts``: each (family, mode) cell is saved as it finishes; the same command run again reads it back
    instead of decoding, and another lane set (another key) decodes again."""
    import json

    import dico.bench.breaks as breaks_module
    from dico.bench.cli import main

    args = ["breaks", "--families", "pick", "--items", "1", "--no-progress", "--methods", "topk", "--batch-size", "1",
            "--parts", str(tmp_path / "parts")]
    assert main(args + ["--json", str(tmp_path / "a.json")]) == 0
    assert len(list((tmp_path / "parts").glob("part-*.json"))) == 2          # non-AR and semi-AR
    decoded = []
    real = breaks_module.breaks
    monkeypatch.setattr(breaks_module, "breaks", lambda *a, **k: decoded.append(a[2]) or real(*a, **k))
    assert main(args + ["--json", str(tmp_path / "b.json")]) == 0
    assert decoded == []                                                     # both cells read back
    rows = [json.loads((tmp_path / f"{x}.json").read_text())["rows"] for x in "ab"]
    assert rows[0] == rows[1] and [r["label"] for r in rows[0]] == ["Top-2 per step", "Top-4 per step"] * 2
    assert main(args[:-4] + ["--methods", "fast", "--parts", str(tmp_path / "parts")]) == 0
    assert decoded == [("non-ar",), ("semi-ar",)]                            # other lanes: decoded again


def test_a_cache_lane_counts_what_the_cache_broke_beside_its_twin(predictor):
    """``--cache`` decodes each lane again with the cache, right after it: right with the cache = right without it,
    less what the cache broke, plus what it mended; a cache refreshed every pass decodes as none and breaks nothing."""
    from dico.bench.breaks import breaks, cached_lanes

    lanes = cached_lanes([("Fast-dLLM", "fast", {})], "prefix") + \
        [("Fast-dLLM, refreshed", "fast", {"cache": "dual", "cache_refresh": 1}),
         ("Fast-dLLM 0.7, dual cache", "fast", {"threshold": 0.7, "cache": "dual"})]      # no twin without a cache
    assert [label for label, _, _ in lanes[:3]] == ["Fast-dLLM", "Fast-dLLM, prefix cache", "Fast-dLLM, refreshed"]
    plain, cached, exact, alone = breaks(predictor, ("team",), ("semi-ar",), 6, lanes, batch_size=3, progress=False)
    assert "broken_by_cache" not in alone
    assert "cache" not in plain and cached["cache"] == "prefix"
    assert cached["right"] == plain["right"] - cached["broken_by_cache"] + cached["mended_by_cache"]
    assert sum(cached["broken"].values()) == cached["broken_by_cache"] >= cached["broken_together"]
    assert (exact["right"], exact["broken_by_cache"], exact["mended_by_cache"]) == (plain["right"], 0, 0)
    assert cached_lanes(lanes[:1], None) == cached_lanes(lanes[:1], "none") == lanes[:1]


def test_the_table_shows_what_a_cache_broke_only_when_a_lane_has_one():
    row = {"family": "team", "mode": "semi-ar", "label": "DiCo", "n": 2, "right": 2, "nfe_mean": 9.0, "repeat": 0,
           "mixed": 0, "malformed": 0, "wrong_together": 0, "right_together": 1, "example": None}
    cached = {**row, "label": "DiCo, prefix cache", "right": 1, "mixed": 1, "cache": "prefix", "broken_by_cache": 1,
              "broken": {"repeat": 0, "mixed": 1, "malformed": 0}, "broken_together": 0, "mended_by_cache": 0,
              "example": {"text": "The leader is Ann Ray.", "kind": "mixed", "together": False}}
    assert "cache broke" not in breaks_markdown([row], "t")
    table = breaks_markdown([row, cached], "t")
    assert "| DiCo | 2/2 [34-100%] | 9.0 | 0 / 0 / 0 | 0 of 0 | 1 of 2 | — | — | — |" in table
    assert "| 1: 0 / 1 / 0 (0) | 0 | “The leader is Ann Ray.” |" in table


def test_breaks_refuses_an_unknown_cache_or_method(capsys):
    from dico.bench.cli import main

    assert main(["breaks", "--cache", "lru", "--no-progress"]) == 2
    assert "error: cache: must be one of none, prefix, dual, delayed, got 'lru'" in capsys.readouterr().err
    assert main(["breaks", "--methods", "fast,beam", "--no-progress"]) == 2
    assert "error: methods: unknown method 'beam'; choose from vanilla, topk, fast, dico, eb, klass, wino, saber" in \
        capsys.readouterr().err


def _revised_trace(predictor, edit: bool = False):
    """A pick answer whose first step committed the same choice twice, the second taken back by step 1 and committed
    as the other offered choice by step 2 (a revising rule's repair; ``edit``: replaced by step 1, an editing rule's
    repair), and the item it answers."""
    for item in (i for i in tasks.make_split("pick", "test", 40) if i.count == 2):
        first, second = item.offered[:2]
        right, wrong = (predictor.tokenizer(f"I pick {first} and {x}.", add_special_tokens=False)["input_ids"]
                        for x in (second, first))
        if len(right) == len(wrong) and tasks.check(item, f"I pick {first} and {second}."):
            break
    changed = [p for p in range(len(right)) if right[p] != wrong[p]]
    slots = choice_positions("pick", *token_spans(predictor.tokenizer, wrong))
    clashing = [p for _, positions in slots for p in positions]
    rest = [p for p in range(len(right)) if p not in clashing]
    trace = Trace(model="m", method="saber", mode="non-ar", settings={}, prompt=item.prompt, prompt_length=1,
                  gen_length=len(right), block_length=None, text=predictor.decode(right), response=right,
                  answer_length=len(right))

    def step(index, committed, tokens, remasked=(), edited=()):
        return Step(index=index, phase="saber", window=[], committed=committed, tokens=tokens,
                    confidence=[0.5] * len(right), prediction=[None] * len(right), remasked=list(remasked),
                    edited=[list(e) for e in edited])

    if edit:
        trace.method = "llada21"
        trace.steps = [step(0, clashing, [wrong[p] for p in clashing]),
                       step(1, rest, [right[p] for p in rest], edited=[(p, wrong[p], right[p]) for p in changed])]
    else:
        trace.steps = [step(0, clashing, [wrong[p] for p in clashing]),
                       step(1, rest, [right[p] for p in rest], changed), step(2, changed, [right[p] for p in changed])]
    return item, trace


def test_a_clash_a_revising_rule_took_back_and_repaired_is_counted(predictor):
    """Step 0 committed "x and x"; the second x went back to the mask and came back as the other choice: the answer
    is right, and its step-0 clash counts as taken back and repaired."""
    from dico.bench.breaks import revised_clashes, revision, together

    item, trace = _revised_trace(predictor)
    assert tasks.check(item, trace.text)
    assert revised_clashes(predictor, item, trace) == [0]
    found = read(predictor, item, trace)
    assert found["right"] and found["revised"] == [0]
    when = trace.commit_step()                      # a commit taken back stands at its last commit
    assert all(when[p] == 2 for p in trace.steps[1].remasked)
    assert together(trace, trace.steps[1].remasked) in (None, trace.steps[2])
    row = revision([found], [trace])
    assert row == {"remasks_mean": float(len(trace.steps[1].remasked)), "clash_taken_back": 1, "repaired": 1}
    assert revision([found], [Trace(model="m", method="topk", mode="non-ar", settings={}, prompt="", prompt_length=1,
                                    gen_length=1, block_length=None)]) == {}


def test_a_clash_an_editing_rule_replaced_is_counted_as_taken_back(predictor):
    """LLaDA 2.1's repair: step 1 replaced the second x of step 0's "x and x" with the other choice. A replacement
    takes the token back and writes another in one step, so the clash counts as taken back and repaired, and the
    row says how many tokens a run were replaced."""
    from dico.bench.breaks import revision

    item, trace = _revised_trace(predictor, edit=True)
    assert tasks.check(item, trace.text) and trace.remasks() == 0 and trace.replaced() > 0
    found = read(predictor, item, trace)
    assert found["right"] and found["revised"] == [0]
    assert revision([found], [trace]) == {"remasks_mean": 0.0, "replaced_mean": float(trace.replaced()),
                                          "clash_taken_back": 1, "repaired": 1}


def test_the_choice_lanes_include_the_other_published_decoders_and_remdm_decodes_non_ar_only(predictor):
    from dico.bench.breaks import LANES, breaks

    assert {"llada21", "t2m", "hierarchy", "credit", "pc-sampler", "prophet", "remdm"} <= {m for _, m, _ in LANES}
    rows = breaks(predictor, ("pick",), ("non-ar", "semi-ar"), 1, [("ReMDM", "remdm", {})], progress=False)
    assert [(r["mode"], r["label"]) for r in rows] == [("non-ar", "ReMDM")]


def test_the_table_shows_take_backs_only_when_a_lane_revised():
    row = {"family": "pick", "mode": "non-ar", "label": "Fast-dLLM", "n": 4, "right": 4, "nfe_mean": 6.0, "repeat": 0,
           "mixed": 0, "malformed": 0, "wrong_together": 0, "right_together": 1, "example": None}
    saber = {**row, "label": "Saber", "remasks_mean": 2.5, "clash_taken_back": 3, "repaired": 2}
    assert "taken back" not in breaks_markdown([row], "t")
    table = breaks_markdown([row, saber], "t")
    assert "| Fast-dLLM | 4/4 [51-100%] | 6.0 | 0 / 0 / 0 | 0 of 0 | 1 of 4 | - | - | — |" in table
    assert "| Saber | 4/4 [51-100%] | 6.0 | 0 / 0 / 0 | 0 of 0 | 1 of 4 | 2.50 | 3 (2 right) | — |" in table
    llada21 = {**row, "label": "LLaDA 2.1", "remasks_mean": 0.0, "replaced_mean": 1.25, "clash_taken_back": 1,
               "repaired": 0}
    assert "| LLaDA 2.1 | 4/4 [51-100%] | 6.0 | 0 / 0 / 0 | 0 of 0 | 1 of 4 | 0.00 + 1.25 replaced | 1 (0 right) |" \
        in breaks_markdown([row, llada21], "t")
