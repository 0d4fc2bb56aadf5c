"""KV caches through LLaDA's and Dream's own modules (``dico.remote_cache``).

The models are tiny stand-ins loaded through ``trust_remote_code`` whose code follows the published
``modeling_llada.py`` and ``modeling_dream.py`` (``tests/remote_standin.py``): the cached forward drives their
modules as it would drive the released models' (tests/conftest.py: remote_models). The checks every kind of model
passes (refreshing every pass is exact, a cached pass over an unchanged sequence gives the uncached logits, batched
rows decode as alone) are in tests/test_cache.py, parametrized over the model kind.
"""
import math

import pytest
import torch

import dico
from dico.loop import Decoding
from dico.remote_cache import attach
from dico.settings import CACHE_KINDS, MODES
from tests.standins import TEST_DEVICE, llada_standin, remote_model_folder
from tests.tolerances import assert_reordered_close

GEN, BLOCK = 16, 8
KINDS = CACHE_KINDS[1:]
PROMPT = "w1 w2 w3 w4 w5"
METHODS = [("vanilla", {}), ("vanilla", {"steps": GEN // 2}), ("fast", {}), ("fast-factor", {}), ("dico", {})]


def decisions(trace) -> dict:
    return {"text": trace.text, "nfe": trace.nfe, "steps": [(s.phase, s.committed, s.tokens) for s in trace.steps]}


def run(predictor, method, mode, prompt=PROMPT, **settings):
    return dico.generate(predictor, prompt, method, mode=mode, gen_length=GEN,
                         block_length=BLOCK if mode == "semi-ar" else None, **settings)


def test_llada_and_dream_get_a_cached_forward_at_load(remote_models):
    assert all(hasattr(p.model, "dico_cached_forward") for p in remote_models.values())


@pytest.mark.parametrize("name", ["llada-1", "dream-1"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", MODES)
def test_with_one_layer_nothing_is_stale_so_every_cached_pass_is_exact(remote_models, name, kind, mode):
    """One layer's keys and values depend on their token and position only: a cache that recomputes what changed
    (and, for Dream, the position before each computed one, whose raw logits predict it) gives exact logits at
    every masked position at every pass, a block's first position included, refreshing only when a block starts."""
    predictor = remote_models[name]
    run_ = Decoding(predictor, PROMPT, "dico", mode=mode, gen_length=GEN, block_length=BLOCK,
                    settings={"cache": kind, "cache_refresh": 0})
    partial = 0
    while not run_.done:
        logits, _ = run_.forward()
        expected = predictor.forward(run_.ids)[0][0]
        start, end = run_.window
        masked = run_.m + start + torch.nonzero(run_.masked[start:end]).flatten()      # what the rules read
        assert_reordered_close(logits[masked], expected[masked])
        partial += not run_.cache.refreshed
        run_.step(logits)
    assert partial > 0


@pytest.mark.parametrize("name", ["llada", "dream"])
def test_between_refreshes_a_pass_computes_fewer_positions(remote_models, name):
    plain = run(remote_models[name], "vanilla", "semi-ar")
    shift = name == "dream"                          # Dream computes the position before the block too
    dual = run(remote_models[name], "vanilla", "semi-ar", cache="dual")
    assert [s.token_forwards for s in dual.steps if not s.refresh] == [BLOCK + shift] * (GEN - 2)
    assert dual.token_forwards < plain.token_forwards


@pytest.mark.parametrize("name", ["llada", "dream"])
def test_a_prefix_cache_computing_the_prompt_is_exact_in_a_single_block(remote_models, name):
    """One block, the prompt computed every pass: nothing the prefix cache reuses is stale (Dream's shift included)."""
    one_block = dict(mode="semi-ar", gen_length=GEN, block_length=GEN)
    for method, extra in METHODS:
        plain = dico.generate(remote_models[name], PROMPT, method, **one_block, **extra)
        fresh = dico.generate(remote_models[name], PROMPT, method, cache="prefix", cache_prompt=False, **one_block,
                              **extra)
        assert decisions(fresh) == decisions(plain), method
        assert fresh.token_forwards == plain.token_forwards


@pytest.mark.parametrize("name", ["llada", "dream"])
def test_a_refresh_pass_gives_the_attention_maps_of_an_uncached_pass(remote_models, name):
    plain = run(remote_models[name], "fast", "non-ar", capture_attention=True)
    cached = run(remote_models[name], "fast", "non-ar", capture_attention=True, cache="delayed", cache_refresh=1)
    assert decisions(cached) == decisions(plain)
    def grid(trace):                                # a row never masked in a stage (None) as nan
        width = 1 + GEN
        return torch.tensor([[[math.nan] * width if row is None else row for row in stage]
                             for stage in trace.attention.matrix], dtype=torch.float64)
    assert cached.attention.steps == plain.attention.steps
    torch.testing.assert_close(grid(cached), grid(plain), rtol=0, atol=1e-5, equal_nan=True)


def test_a_model_of_another_structure_keeps_no_cached_forward_and_is_told_so(tmp_path, remote_folders):
    marker = llada_standin()                        # LLaDA's interface without its modules
    with pytest.raises(ValueError, match="cache: model 'llada-standin' has no cached forward"):
        dico.generate(marker, "w20 w21", "fast", gen_length=8, cache="dual")
    assert marker.model.calls == 0
    alibi = dico.load_model(remote_model_folder(tmp_path / "alibi", "llada", end_token_id=None, alibi=True),
                            trust_remote_code=True)                 # positions this forward does not compute
    assert not hasattr(alibi.model, "dico_cached_forward")
    with pytest.raises(ValueError, match="has no cached forward"):
        run(alibi, "fast", "semi-ar", cache="dual")
    assert run(alibi, "fast", "semi-ar").nfe > 0                     # without a cache it decodes as before
    predictor = dico.load_model(remote_folders["dream"], trust_remote_code=True)
    del predictor.model.model.layers[1].mlp                          # a layer it does not know
    assert not attach(predictor.model, "dream") and not attach(predictor.model, "llada")


@pytest.mark.parametrize("name", ["llada", "dream"])
def test_in_bfloat16_the_cache_computes_in_the_models_dtype(remote_folders, name):
    predictor = dico.load_model(remote_folders[name], trust_remote_code=True, device=TEST_DEVICE, dtype="bfloat16")
    plain = run(predictor, "dico", "semi-ar")
    cached = run(predictor, "dico", "semi-ar", cache="dual", cache_refresh=1)
    assert decisions(cached) == decisions(plain)
    run_ = Decoding(predictor, PROMPT, "dico", mode="semi-ar", gen_length=GEN, block_length=BLOCK,
                    settings={"cache": "dual", "cache_refresh": 0})
    run_.forward()
    assert run_.cache.stores[0].logits.dtype == run_.cache.stores[0].keys[0].dtype == torch.bfloat16
