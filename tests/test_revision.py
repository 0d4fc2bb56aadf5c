"""Revision in the loop (docs/decoding.md §7): a step may take committed tokens back to the mask.

The loop applies a step's commits, then its take-backs, records both (``Step.remasked``), and always ends: a rule
that would loop stops at the pass limit (PASS_LIMIT x gen_length), and the trace says so. The caches stay right
(a taken-back token's stale keys and values force a refresh where the pass would not recompute them); batched rows
decode as alone; WINO's verifying pass is counted in ``token_forwards``; older traces load without revision.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import dico
from dico import Trace, generate, generate_batch
from dico.loop import Decoding
from dico.rules import Choice, Rule
from dico.settings import PASS_LIMIT
from standins import RULE_PROMPT, scripted

GOLDEN = Path(__file__).parent / "golden" / "traces"
PICK = "Pick one leader of Lily Howard, Don Gill and Sara Lake."
TEAM = "We have bikes, drums and bats. Pick two of them."
WORD = "Jeremiah counts 18 plums. He finds 4 more. How many plums does Jeremiah have now?"


class TakesOneBackEveryStep(Rule):
    """A rule that never finishes: commit the first masked position, take back the first decoded one."""
    settings = dico.settings.VanillaSettings()

    def choose(self, s):
        first = int(torch.nonzero(s.masked).flatten()[0])
        decoded = torch.nonzero(~s.masked & ~s.fixed).flatten().tolist()
        return Choice([first], "vanilla", remask=decoded[:1] or [first])


def test_a_rule_that_would_loop_ends_at_the_pass_limit_and_the_trace_says_so():
    predictor = scripted(lambda step, ids: [0.9] * 6, 6)
    run = Decoding(predictor, RULE_PROMPT, "vanilla", gen_length=6)
    run.rule = TakesOneBackEveryStep()
    while not run.done:
        logits, _ = run.forward()
        run.step(logits)
    trace = run.trace
    assert trace.nfe == PASS_LIMIT * 6 and trace.limit_reached and not trace.stopped
    assert all(len(s.committed) == 1 and len(s.remasked) == 1 for s in trace.steps)
    assert Trace.from_json(trace.to_json()) == trace


def test_a_take_back_of_a_masked_position_is_refused():
    predictor = scripted(lambda step, ids: [0.9] * 4, 4)
    run = Decoding(predictor, RULE_PROMPT, "vanilla", gen_length=4)

    class Bad(TakesOneBackEveryStep):
        def choose(self, s):
            return Choice([0], "vanilla", remask=[3])

    run.rule = Bad()
    logits, _ = run.forward()
    with pytest.raises(RuntimeError, match="took back positions that are masked or fixed"):
        run.step(logits)


SLOW = pytest.mark.slow


@pytest.mark.parametrize("method, mode", [("saber", "non-ar"), ("wino", "semi-ar"), pytest.param("saber", "semi-ar",
                                          marks=SLOW), pytest.param("wino", "non-ar", marks=SLOW)])
def test_revising_rules_record_their_take_backs_and_end_with_every_position_decoded(predictor, method, mode):
    trace = generate(predictor, TEAM, method, mode=mode, gen_length=32, block_length=16)
    tokens: dict[int, int] = {}
    for step in trace.steps:
        assert set(step.committed).isdisjoint(tokens)
        tokens.update(zip(step.committed, step.tokens))
        assert set(step.remasked) <= set(tokens)
        for p in step.remasked:
            del tokens[p]
    assert not trace.limit_reached and sorted(tokens) == list(range(32))
    assert trace.response == [tokens[p] for p in range(32)]
    assert Trace.from_json(trace.to_json()) == trace
    if method == "saber":
        assert trace.remasks() > 0


def test_wino_counts_its_mirrored_window_in_the_work_of_every_pass(predictor):
    trace = generate(predictor, PICK, "wino", mode="semi-ar", gen_length=32, block_length=16)
    assert all(s.token_forwards == trace.prompt_length + 32 + 16 for s in trace.steps)


@SLOW
@pytest.mark.parametrize("method", ["eb", "klass", "wino", "saber"])
def test_a_batch_decodes_each_row_as_alone(predictor, method):
    prompts = [PICK, TEAM, "Tom has 5 apples. He buys 3 more apples. How many apples does Tom have now?"]
    batch = generate_batch(predictor, prompts, method, batch_size=3, mode="semi-ar", gen_length=32, block_length=16)
    for prompt, got in zip(prompts, batch):
        alone = generate(predictor, prompt, method, mode="semi-ar", gen_length=32, block_length=16)
        assert [(s.committed, s.tokens, s.remasked) for s in got.steps] == \
            [(s.committed, s.tokens, s.remasked) for s in alone.steps]
        assert got.text == alone.text


@SLOW
@pytest.mark.parametrize("method, prompt", [("saber", TEAM), ("llada21", WORD)])     # takes back; edits
@pytest.mark.parametrize("cache", ["prefix", "dual", "delayed"])
def test_with_a_refresh_every_pass_a_revising_or_editing_rule_decodes_exactly_as_without_a_cache(predictor, cache,
                                                                                                method, prompt):
    plain = generate(predictor, prompt, method, mode="semi-ar", gen_length=32, block_length=16)
    cached = generate(predictor, prompt, method, mode="semi-ar", gen_length=32, block_length=16, cache=cache,
                      cache_refresh=1)
    assert [(s.committed, s.tokens, s.remasked, s.edited) for s in cached.steps] == \
        [(s.committed, s.tokens, s.remasked, s.edited) for s in plain.steps]
    if method == "llada21":
        assert plain.replaced() > 0


def test_a_token_taken_back_outside_the_computed_block_forces_a_refresh(predictor):
    trace = generate(predictor, TEAM, "saber", mode="semi-ar", gen_length=32, block_length=16, cache="dual")
    behind = [k for k, s in enumerate(trace.steps[:-1]) if any(p < s.window[0] for p in s.remasked)]
    for k in behind:
        assert trace.steps[k + 1].refresh
    from dico.cache import Cache
    cache = Cache("dual", 0, 4, 8)
    masked = torch.tensor([False] * 4 + [True] * 4)
    cache.plan(masked, (4, 8))
    cache.plan(masked, (4, 8))
    assert not cache.refreshed
    cache.taken_back(torch.tensor([1]))
    cache.plan(torch.tensor([False, True, False, False] + [True] * 4), (4, 8))
    assert cache.refreshed


@pytest.mark.parametrize("options, field", [
    ({"cache": "dual"}, "cache"), ({"capture_attention": True}, "capture_attention"),
    ({"cfg_scale": 1.0}, "cfg_scale"), ({"threshold": 1.5}, "threshold"), ({"keep": -0.1}, "keep"),
])
def test_wino_refuses_what_its_verifying_pass_cannot_do_naming_the_field(predictor, options, field):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        generate(predictor, PICK, "wino", gen_length=16, **options)


@pytest.mark.parametrize("method, options, field", [
    ("eb", {"gamma": -1}, "gamma"), ("klass", {"history": 0}, "history"), ("klass", {"kl": 0}, "kl"),
    ("klass", {"steps": 5}, "steps"), ("saber", {"n": 0}, "n"),
])
def test_out_of_range_settings_name_their_field(predictor, method, options, field):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        generate(predictor, PICK, method, mode="semi-ar", gen_length=32, block_length=16, **options)


def test_a_trace_from_before_revision_loads_with_no_take_backs():
    raw = json.loads((GOLDEN / "word0-dico-non-ar.json").read_text())
    assert raw["schema"] == "dico-trace/2"
    trace = Trace.from_dict(raw)
    assert all(step.remasked == [] for step in trace.steps) and not trace.limit_reached


def test_a_trace_that_takes_back_a_position_it_never_decoded_is_refused():
    raw = json.loads((GOLDEN / "word0-dico-non-ar.json").read_text())
    decoded_later = raw["steps"][-1]["committed"][0]
    raw["steps"][0]["remasked"] = [decoded_later] if decoded_later not in raw["steps"][0]["committed"] else []
    with pytest.raises(dico.trace.TraceError, match=r"steps\[0\]\.remasked"):
        Trace.from_dict(raw)
