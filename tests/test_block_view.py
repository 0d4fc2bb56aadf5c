"""The step view of a block-causal run (docs/decoding.md §11): the model's blocks drawn where the model cuts them,
counted from absolute position 0 with the prompt, and what its exact cache holds at the shown step. Trace in, figure
out; a trace written before ``model_block`` draws as it always did."""
import json
import re

import pytest

from dico.trace import Trace, TraceError
from visuals._common import block_edges
from visuals.step_view import CACHED, COMPUTED, cache_at, step_view_figure

BLOCK, PROMPT, N = 4, 7, 9          # the prompt ends 3 positions into its second block: the first window is 1 long
WINDOWS = [(0, 1), (1, 5), (5, 9)]


def block_trace(cache: str = "prefix", model_block: int | None = BLOCK) -> Trace:
    """A decode on an SDAR-shaped model, one pass a model block (each pass commits its whole block)."""
    steps, decoded = [], set()
    for i, (a, b) in enumerate(WINDOWS):
        steps.append({"index": i, "phase": "fast", "window": [a, b], "committed": list(range(a, b)),
                      "tokens": [7] * (b - a), "confidence": [None if p in decoded else 0.5 for p in range(N)],
                      "prediction": [None if p in decoded else 7 for p in range(N)],
                      "token_forwards": BLOCK * (1 + (i > 0))})
        decoded.update(range(a, b))
    data = {"schema": "dico-trace/4", "model": "sdar-standin", "method": "fast", "mode": "semi-ar",
            "settings": {"cache": cache}, "prompt": "w1 w2", "prompt_length": PROMPT, "gen_length": N,
            "block_length": BLOCK, "model_block": model_block, "text": "", "nfe": len(steps), "wall_s": 0.0,
            "tokens_per_s": 0.0, "response": [7] * N, "vocab": {"7": " w"}, "steps": steps,
            "token_forwards": sum(s["token_forwards"] for s in steps)}
    return Trace.from_dict(data)


def named(fig, name: str) -> list:
    return [d for d in fig.data if d.name == name]


def prose(fig) -> str:
    """The title and its note as one line (the figure wraps them)."""
    return " ".join(re.sub(r"<br>|</?sup>", " ", fig.layout.title.text).split())


def shapes(fig, name: str) -> list:
    return [s for s in fig.layout.shapes if s.name == name]


def test_the_models_blocks_are_drawn_at_their_absolute_places():
    """Blocks of 4 from position 0 with a 7-token prompt: response offsets 1 and 5 start blocks, not 4 and 8."""
    trace = block_trace()
    assert block_edges(trace).tolist() == [1, 5] == [a for a, _ in WINDOWS[1:]]
    fig = step_view_figure(trace, 1)
    assert sorted(s.x0 for s in shapes(fig, "block boundary")) == [0.5, 4.5]       # the profile: before offsets 1, 5
    (grid,) = named(fig, "block boundary")                  # the text grid, 16 a row: a step shape in front of 1 and 5
    assert {x for x in grid.x if x is not None} == {-0.5, 0.5, 4.5, 15.5}


def test_a_prompt_that_fills_whole_blocks_starts_the_response_on_a_block():
    trace = block_trace()
    trace.prompt_length = 8
    assert block_edges(trace).tolist() == [4, 8]


@pytest.mark.parametrize("k, stored, block, tail", [(0, 4, (0, 1), 3), (1, 8, (1, 5), 0), (2, 12, (5, 9), 0)])
def test_the_cache_at_a_step_is_the_finished_blocks_and_the_pass_computes_the_current_one(k, stored, block, tail):
    assert cache_at(block_trace(), k) == {"stored": stored, "block": block, "tail": tail}


def test_the_step_view_shades_what_the_cache_keeps_and_outlines_the_block_computed():
    trace = block_trace()
    fig = step_view_figure(trace, 2)
    (cached,) = named(fig, CACHED)
    (computed,) = named(fig, COMPUTED)
    assert (min(x for x in cached.x if x is not None), max(x for x in cached.x if x is not None)) == (-0.5, 4.5)
    assert (min(x for x in computed.x if x is not None), max(x for x in computed.x if x is not None)) == (4.5, 8.5)
    assert cached.fillpattern.shape == "/"
    (stored,) = shapes(fig, CACHED)
    (pass_,) = shapes(fig, COMPUTED)
    assert (stored.x0, stored.x1, pass_.x0, pass_.x1) == (-0.5, 4.5, 4.5, 8.5)
    note = prose(fig)
    assert "response 0–4 cached: keys and values kept exactly" in note and "computed this pass: block 5–8" in note


def test_the_first_block_keeps_only_the_prompts_whole_blocks_and_computes_its_tail():
    fig = step_view_figure(block_trace(), 0)
    assert not named(fig, CACHED) and not shapes(fig, CACHED) and len(named(fig, COMPUTED)) == 1
    assert "the prompt's first 4 positions cached" in prose(fig) and "with the prompt's last 3" in prose(fig)


@pytest.mark.parametrize("cache, model_block", [("none", BLOCK), ("prefix", None)])
def test_no_cache_is_drawn_without_a_block_models_exact_cache(cache, model_block):
    """Uncached on the block model, or an ordinary model's approximate prefix cache (refreshed, not exact)."""
    fig = step_view_figure(block_trace(cache, model_block), 2)
    assert not named(fig, CACHED) and not named(fig, COMPUTED) and not shapes(fig, COMPUTED)
    assert "Cache" not in prose(fig)


def test_a_trace_written_before_model_block_draws_as_before():
    """An older file has no model_block: it loads as null and its semi-AR blocks start at block_length multiples."""
    data = json.loads(block_trace().to_json())
    del data["model_block"]
    old = Trace.from_dict(data)
    assert old.model_block is None and block_edges(old).tolist() == [4, 8]
    fig = step_view_figure(old, 2)
    assert sorted(s.x0 for s in shapes(fig, "block boundary")) == [3.5, 7.5]
    assert not named(fig, CACHED) and [s.name for s in fig.layout.shapes if s.type == "rect"] == ["window"]
    assert fig.to_json() == step_view_figure(block_trace("prefix", None), 2).to_json()


@pytest.mark.parametrize("value, mode", [(0, "semi-ar"), ("4", "semi-ar"), (True, "semi-ar"), (4, "non-ar")])
def test_a_model_block_that_cannot_be_is_refused_naming_the_field(value, mode):
    data = json.loads(block_trace().to_json())
    data.update(model_block=value, mode=mode)
    with pytest.raises(TraceError, match="^trace.model_block: "):
        Trace.from_dict(data)


def test_a_decode_on_the_standin_records_its_block_and_the_figure_draws_its_windows(tmp_path):
    """The loop records the model's block; the boundaries drawn are where its windows started, the cache drawn is
    what its passes computed (the prefill and the storing passes counted in the first pass of a block)."""
    import torch

    import dico
    from standins import block_model_folder
    torch.set_num_threads(1)
    sdar = dico.load_model(block_model_folder(tmp_path / "sdar-standin"), trust_remote_code=True, dtype="float32")
    trace = dico.generate(sdar, "w1 w2", "fast", mode="semi-ar", gen_length=12, block_length=BLOCK, cache="prefix")
    assert (trace.model_block, trace.prompt_length) == (BLOCK, PROMPT)
    assert block_edges(trace).tolist() == sorted({s.window[0] for s in trace.steps} - {0})
    for step in trace.steps:
        cache = cache_at(trace, step.index)
        a, b = cache["block"]
        assert (a, b) == tuple(step.window) and cache["stored"] + cache["tail"] == PROMPT + a
        stored_by_it = cache["stored"] if step.index == 0 else BLOCK if step.refresh else 0  # prefill; the last block
        assert step.token_forwards == b - a + cache["tail"] + stored_by_it
    plain = dico.generate(sdar, "w1 w2", "fast", mode="semi-ar", gen_length=12, block_length=BLOCK)
    assert plain.model_block == BLOCK and cache_at(plain, 0) is None
    assert Trace.from_json(trace.to_json()) == trace
