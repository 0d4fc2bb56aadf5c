"""KV caches: exact where they must be, counted, and refreshed as the settings say.

With ``cache_refresh=1`` every pass is a full refresh, so every method decodes exactly as without a cache: this
checks the cached forward (the project's own pass over BERT's modules) against transformers' own. Between
refreshes a cached pass reuses stale keys and values; over an unchanged sequence it must still give the uncached
logits, and the first layer's keys and values of an unchanged token never change.
"""
import json
from dataclasses import dataclass

import pytest
import torch

import dico
from dico.batch import generate_batch
from dico.cache import Cache, KVStore
from dico.embedded import tasks
from dico.loop import Decoding
from dico.settings import CACHE_KINDS, MODES, settings_for
from tests.standins import TEST_DEVICE, partial_cached_pass, random_predictor
from tests.tolerances import reordered

GEN, BLOCK = 32, 16
KINDS = CACHE_KINDS[1:]


def every_method(gen: int) -> list[tuple[str, dict]]:
    """Every method, Vanilla twice: one token a step, and LLaDA's steps (two tokens a step here)."""
    return [("vanilla", {}), ("vanilla", {"steps": gen // 2}), ("topk", {"k": 3}), ("fast", {}), ("fast-factor", {}),
            ("dico", {})]


METHODS = every_method(GEN)


@pytest.fixture(scope="module")
def predictor():
    torch.set_num_threads(1)
    return dico.load_model(attention=False, device=TEST_DEVICE, dtype="float32")


@pytest.fixture(scope="module")
def prompt():
    return tasks.make_split("word", "test", 1)[0].prompt


def decisions(trace) -> dict:
    """What a decode decides: text, passes, and each step's phase, commits and tokens."""
    return {"text": trace.text, "nfe": trace.nfe,
            "steps": [(s.phase, s.committed, s.tokens) for s in trace.steps]}


def run(predictor, prompt, method, mode, **settings):
    return dico.generate(predictor, prompt, method, mode=mode, gen_length=GEN,
                         block_length=BLOCK if mode == "semi-ar" else None, **settings)


# ---------------------------------------------------------------------------------- on every kind of model
# The checks every cached forward passes, on the embedded BERT (the project's own pass over its modules,
# dico.cache) and on LLaDA's and Dream's own modules (dico.remote_cache; the tiny stand-ins of tests/conftest.py:
# remote_models, whose own tests are in tests/test_remote_cache.py).

@dataclass
class Subject:
    """A model, the prompts it decodes here (the first alone; all of them as one batch) and the lengths."""
    predictor: object
    prompts: list[str]
    gen: int
    block: int

    def run(self, method, mode, prompt=None, **settings):
        return dico.generate(self.predictor, prompt or self.prompts[0], method, mode=mode, gen_length=self.gen,
                             block_length=self.block if mode == "semi-ar" else None, **settings)

    def decoding(self, method, mode, **settings) -> Decoding:
        return Decoding(self.predictor, self.prompts[0], method, mode=mode, gen_length=self.gen,
                        block_length=self.block, settings=settings)


@pytest.fixture(params=["embedded", "llada", "llada-options", "dream"])
def subject(request) -> Subject:
    if request.param == "embedded":
        prompts = [item.prompt for item in tasks.make_split("word", "test", 2) + tasks.make_split("list", "test", 1)]
        return Subject(request.getfixturevalue("predictor"), prompts, GEN, BLOCK)
    predictor = request.getfixturevalue("remote_models")[request.param]
    return Subject(predictor, ["w1 w2 w3 w4 w5", "w3 w4 w5 w6 w7 w8", "w9 w10 w11 w12"], 16, 8)


@pytest.mark.parametrize("mode", MODES)
def test_refreshing_every_pass_decodes_exactly_as_no_cache(subject, mode):
    for method, extra in every_method(subject.gen):
        plain = subject.run(method, mode, **extra)
        for kind in KINDS:
            cached = subject.run(method, mode, cache=kind, cache_refresh=1, **extra)
            assert decisions(cached) == decisions(plain), (method, extra, kind)
            assert all(s.refresh for s in cached.steps)
            assert cached.token_forwards == plain.token_forwards == plain.nfe * (plain.prompt_length + subject.gen)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", MODES)
def test_a_cached_pass_over_an_unchanged_sequence_gives_the_uncached_logits(subject, kind, mode):
    run_ = subject.decoding("fast", mode, cache=kind, cache_refresh=0)
    positions, logits = partial_cached_pass(subject.predictor, run_)
    window = torch.arange(run_.m + run_.window[0], run_.m + run_.window[1])
    assert set(window.tolist()) <= set(positions.tolist()) or kind == "delayed"
    expected = subject.predictor.forward(run_.ids)[0][0]
    assert logits.dtype == expected.dtype == torch.float32
    for where in (positions, window):                   # Dream: the block's first position too
        torch.testing.assert_close(logits[where], expected[where], **reordered(expected[where]))


@pytest.mark.parametrize("kind", ["dual", "delayed"])
def test_batched_rows_decode_as_each_prompt_alone(subject, kind):
    for refresh in (1, 0):
        settings = {"cache": kind, "cache_refresh": refresh}
        alone = [decisions(subject.run("dico", "semi-ar", p, **settings)) for p in subject.prompts]
        batched = generate_batch(subject.predictor, subject.prompts, "dico", batch_size=3, mode="semi-ar",
                                 gen_length=subject.gen, block_length=subject.block, **settings)
        assert [decisions(t) for t in batched] == alone, refresh
        assert [t.token_forwards for t in batched] == [sum(s.token_forwards for s in t.steps) for t in batched]


# ---------------------------------------------------------------------------------- the embedded model's cache

@pytest.mark.parametrize("kind", KINDS)
def test_first_layer_keys_and_values_of_unchanged_tokens_never_change(predictor, prompt, kind):
    run_ = Decoding(predictor, prompt, "dico", mode="semi-ar", gen_length=GEN, block_length=BLOCK,
                    settings={"cache": kind, "cache_refresh": 0})
    first = None
    since: dict[int, tuple] = {}                    # response position -> its first-layer (k, v) once decoded
    while not run_.done:
        logits, _ = run_.forward()
        store = run_.cache.stores[0]
        keys, values = store.keys[0], store.values[0]                                   # h, l, d
        if first is None:
            first = keys[:, :run_.m].clone(), values[:, :run_.m].clone()
        torch.testing.assert_close(keys[:, :run_.m], first[0], rtol=0, atol=1e-6)
        torch.testing.assert_close(values[:, :run_.m], first[1], rtol=0, atol=1e-6)
        for pos, (k, v) in since.items():
            torch.testing.assert_close(keys[:, run_.m + pos], k, rtol=0, atol=1e-6)
            torch.testing.assert_close(values[:, run_.m + pos], v, rtol=0, atol=1e-6)
        computed = set(run_.cache.positions.tolist())
        for pos in range(GEN):                      # decoded before this pass and computed with its token
            if not run_.masked[pos] and pos not in since and run_.m + pos in computed:
                since[pos] = keys[:, run_.m + pos].clone(), values[:, run_.m + pos].clone()
        run_.step(logits)
    assert since, "no decoded token's keys were ever checked"


@pytest.mark.parametrize("kind", KINDS)
def test_between_refreshes_a_pass_computes_only_its_kinds_positions(predictor, prompt, kind):
    trace = run(predictor, prompt, "vanilla", "semi-ar", cache=kind)
    m, length = trace.prompt_length, trace.prompt_length + GEN
    starts = [s.index for s in trace.steps if s.index == 0 or s.window != trace.steps[s.index - 1].window]
    assert [s.index for s in trace.steps if s.refresh] == starts == [0, BLOCK]     # a refresh at each block start
    for step in trace.steps:
        if step.refresh:
            assert step.token_forwards == length
            continue
        masked = sum(c is not None for c in step.confidence)
        expected = {"prefix": length - m - step.window[0], "dual": BLOCK,
                    "delayed": masked + 1}[kind]                    # the masks and the token decoded last pass
        assert step.token_forwards == expected, (kind, step.index)
    assert trace.token_forwards == sum(s.token_forwards for s in trace.steps) < trace.nfe * length


@pytest.mark.parametrize("kind", KINDS)
def test_without_the_prompt_kept_every_pass_computes_the_prompt_too(predictor, prompt, kind):
    kept = run(predictor, prompt, "vanilla", "semi-ar", cache=kind)
    fresh = run(predictor, prompt, "vanilla", "semi-ar", cache=kind, cache_prompt=False)
    m = fresh.prompt_length
    assert [s.refresh for s in fresh.steps] == [s.refresh for s in kept.steps]
    for step in fresh.steps:
        if not step.refresh:
            masked = sum(c is not None for c in step.confidence)
            expected = {"prefix": GEN - step.window[0], "dual": BLOCK, "delayed": masked + 1}[kind]
            assert step.token_forwards == m + expected, (kind, step.index)


@pytest.mark.parametrize("method,extra", METHODS[2:], ids=["topk", "fast", "fast-factor", "dico"])
def test_a_prefix_cache_without_the_prompt_kept_is_exact_in_a_single_block(predictor, prompt, method, extra):
    """In one block the prefix cache's only stale positions are the prompt's: computing it every pass leaves
    nothing stale, so the decode is the uncached one, commit for commit."""
    one_block = dict(mode="semi-ar", gen_length=GEN, block_length=GEN, **extra)
    plain = dico.generate(predictor, prompt, method, **one_block)
    fresh = dico.generate(predictor, prompt, method, cache="prefix", cache_prompt=False, **one_block)
    kept = dico.generate(predictor, prompt, method, cache="prefix", **one_block)
    assert decisions(fresh) == decisions(plain)
    assert fresh.token_forwards == plain.token_forwards and kept.token_forwards < plain.token_forwards


def test_refresh_every_n_passes_and_only_at_the_start_in_non_ar(predictor, prompt):
    never = run(predictor, prompt, "vanilla", "non-ar", cache="delayed")
    assert [s.index for s in never.steps if s.refresh] == [0]
    every = run(predictor, prompt, "vanilla", "non-ar", cache="delayed", cache_refresh=8)
    assert [s.index for s in every.steps if s.refresh] == list(range(0, GEN, 8))


def test_guidance_keeps_a_cache_for_the_unprompted_sequence_too(predictor, prompt):
    plain = run(predictor, prompt, "fast", "non-ar", cfg_scale=1.0)
    cached = run(predictor, prompt, "fast", "non-ar", cfg_scale=1.0, cache="prefix", cache_refresh=1)
    assert decisions(cached) == decisions(plain)
    assert plain.token_forwards == 2 * plain.nfe * (plain.prompt_length + GEN)
    delayed = run(predictor, prompt, "fast", "non-ar", cfg_scale=1.0, cache="delayed")
    assert delayed.token_forwards < 2 * delayed.nfe * (delayed.prompt_length + GEN)


def test_the_trace_records_the_work_and_old_traces_read_as_uncached(predictor, prompt):
    trace = run(predictor, prompt, "dico", "semi-ar", cache="dual")
    back = dico.Trace.from_json(trace.to_json())
    assert back == trace and back.settings["cache"] == "dual"
    old = json.loads(trace.to_json())
    old.pop("token_forwards")
    old["settings"] = {k: v for k, v in old["settings"].items() if not k.startswith("cache")}
    for step in old["steps"]:
        step.pop("refresh"), step.pop("token_forwards")
    loaded = dico.Trace.from_dict(old)
    assert loaded.token_forwards == loaded.nfe * (loaded.prompt_length + GEN)
    assert not any(s.refresh for s in loaded.steps)
    wrong = json.loads(trace.to_json()) | {"token_forwards": 1}
    with pytest.raises(dico.TraceError, match="token_forwards"):
        dico.Trace.from_dict(wrong)


@pytest.mark.parametrize("values,message", [({"cache": "full"}, "cache: must be one of none, prefix, dual, delayed"),
                                            ({"cache_refresh": -1}, "cache_refresh: must be in"),
                                            ({"cache_refresh": 0.5}, "cache_refresh: must be a whole number")])
def test_a_bad_cache_setting_is_a_clear_message_naming_it(values, message):
    for method in dico.METHODS:
        with pytest.raises(ValueError, match=message):
            settings_for(method, values)


def test_a_model_without_a_cached_forward_is_told_so_before_any_pass():
    predictor = random_predictor()
    with pytest.raises(ValueError, match="cache: model 'random' has no cached forward"):
        dico.generate(predictor, "w20 w21", "fast", gen_length=8, cache="dual")
    assert predictor.model.calls == []


def test_a_cache_plans_dreams_shift_one_position_earlier():
    cache = Cache("dual", 0, prompt_length=4, gen_length=8, shift=1)
    masked = torch.ones(8, dtype=torch.bool)
    assert cache.plan(masked, (4, 8)).tolist() == list(range(12))                   # first pass: refresh
    assert cache.plan(masked, (4, 8)).tolist() == list(range(7, 12))               # block 8..11 and position 7
    assert isinstance(cache.stores[0], KVStore)


def test_the_figures_mark_refresh_passes_and_name_the_cache(predictor, prompt):
    from visuals import comparison_table, phase_figure, trajectory_figure
    cached = run(predictor, prompt, "fast", "semi-ar", cache="dual")
    plain = run(predictor, prompt, "fast", "semi-ar")
    refreshed = [s.index for s in cached.steps if s.refresh]
    marks = [d for d in phase_figure(cached).data if d.name == "cache refresh"]
    assert len(marks) == 1 and list(marks[0].x) == refreshed
    ticks = [s for s in trajectory_figure(cached).layout.shapes if s.name == "cache refresh"]
    assert sorted(t.y0 for t in ticks) == refreshed
    assert not [d for d in phase_figure(plain).data if d.name == "cache refresh"]
    assert "dual cache" in phase_figure(cached).layout.title.text
    rows = comparison_table([plain, cached])
    assert [r["cache"] for r in rows] == ["none", "dual"] and rows[1]["token_forwards"] < rows[0]["token_forwards"]
