"""Decoding on a real CUDA GPU. Skipped without one (CI has none); ``tests/gpu_check.sh`` runs it on a GPU machine.

The emulated accelerator (test_devices.py) proves the code never mixes devices and reads one small copy a step;
these prove the GPU's own kernels decode what the CPU decodes. In float32 a GPU sums in another order than the CPU,
as another CPU does, so decodes agree up to near ties (tests/near_ties.py), caches included. In bfloat16, the
default on a GPU, every method, mode and cache kind decodes, and a cache refreshed every pass decodes exactly as
no cache: the embedded model and LLaDA- and Dream-shaped models run through their own code.
"""
from __future__ import annotations

import pytest
import torch

import dico
from dico.embedded import tasks
from dico.settings import METHODS, MODES, decodes_in
from near_ties import first_difference, steps_of
from standins import remote_model_folder

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")

GEN, BLOCK = 32, 16
SERVES = {"non-ar": ("none", "delayed"), "semi-ar": ("none", "prefix", "dual")}    # each mode's cache kinds


@pytest.fixture(scope="module")
def prompts():
    """One held-out prompt of each family: the answers with several valid forms are the ones near ties can flip."""
    return [tasks.make_split(family, "test", 1)[0].prompt for family in tasks.FAMILIES]


@pytest.fixture(scope="module")
def embedded():
    """The embedded model in float32 on the CPU and on the GPU, and in bfloat16 (the GPU's default) on the GPU."""
    torch.set_num_threads(1)
    return {"cpu": dico.load_model(attention=False, dtype="float32"),
            "cuda": dico.load_model(attention=False, device="cuda", dtype="float32"),
            "bf16": dico.load_model(attention=False, device="cuda")}


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """LLaDA- and Dream-shaped models (their own code), each as ``embedded`` holds the embedded model."""
    root, made = tmp_path_factory.mktemp("remote-cuda"), {}
    for kind in ("llada", "dream"):
        folder = remote_model_folder(root / kind, kind, end_token_id=None)
        made[kind] = {"cpu": dico.load_model(folder, trust_remote_code=True, dtype="float32"),
                      "cuda": dico.load_model(folder, trust_remote_code=True, device="cuda", dtype="float32"),
                      "bf16": dico.load_model(folder, trust_remote_code=True, device="cuda")}
    return made


def decisions(trace) -> dict:
    return {"text": trace.text, "nfe": trace.nfe, "steps": [(s.phase, s.committed, s.tokens) for s in trace.steps]}


def decode(predictor, prompt, method, mode, cache, **settings):
    return dico.generate(predictor, prompt, method, mode=mode, gen_length=GEN,
                         block_length=BLOCK if mode == "semi-ar" else None,
                         **({"cache": cache, **settings} if cache != "none" else {}))


def test_the_models_are_where_they_were_asked_to_be(embedded):
    assert embedded["cuda"].device.type == embedded["bf16"].device.type == "cuda"
    assert embedded["bf16"].dtype == torch.bfloat16 and embedded["cuda"].dtype == torch.float32


# every method in every mode it runs (ReMDM refuses semi-AR, as its code ignores the block length)
CASES = [(mode, m) for m in METHODS for mode in MODES if decodes_in(m, mode)]


@pytest.mark.parametrize("mode, method", CASES)
def test_in_float32_the_gpu_decodes_as_the_cpu_up_to_near_ties_with_every_cache(embedded, prompts, method, mode):
    for prompt in prompts:
        for cache in SERVES[mode]:
            want = decode(embedded["cpu"], prompt, method, mode, cache)
            got = decode(embedded["cuda"], prompt, method, mode, cache)
            assert first_difference(steps_of(want), want.text, got) is None, (prompt, cache)
            assert got.token_forwards == want.token_forwards and got.device == "cuda"


@pytest.mark.parametrize("mode, method", CASES)
def test_in_bfloat16_a_cache_refreshed_every_pass_decodes_exactly_as_no_cache(embedded, prompts, method, mode):
    predictor = embedded["bf16"]
    for prompt in prompts:
        plain = decode(predictor, prompt, method, mode, "none")
        for cache in SERVES[mode][1:]:
            assert decisions(decode(predictor, prompt, method, mode, cache, cache_refresh=1)) == decisions(plain)
            cached = decode(predictor, prompt, method, mode, cache)            # and between refreshes it decodes
            assert cached.text and cached.token_forwards < plain.token_forwards


def test_in_bfloat16_most_held_out_answers_stay_right(embedded):
    """bfloat16 moves logits by about 1% of themselves: a few near decisions may go another way, not many."""
    items = [item for family in tasks.FAMILIES for item in tasks.make_split(family, "test", 8)]
    for method in ("vanilla", "fast", "dico"):
        right = {name: sum(tasks.check(item, decode(embedded[name], item.prompt, method, "non-ar", "none").text)
                           for item in items) for name in ("cpu", "bf16")}
        assert right["bf16"] >= right["cpu"] - 3, (method, right)


@pytest.mark.parametrize("kind", ["llada", "dream"])
def test_llada_and_dream_decode_on_the_gpu_as_on_the_cpu_with_their_caches(remote, kind):
    models = remote[kind]
    for mode in MODES:
        for cache in SERVES[mode]:
            for method in ("vanilla", "fast", "dico"):
                want = decode(models["cpu"], "w1 w2 w3", method, mode, cache)
                got = decode(models["cuda"], "w1 w2 w3", method, mode, cache)
                assert first_difference(steps_of(want), want.text, got) is None, (mode, cache, method)
                plain = decode(models["bf16"], "w1 w2 w3", method, mode, "none")
                if cache != "none":
                    refreshed = decode(models["bf16"], "w1 w2 w3", method, mode, cache, cache_refresh=1)
                    assert decisions(refreshed) == decisions(plain), (mode, cache, method)


def test_a_cached_decode_holds_less_gpu_memory_than_its_keys_and_values_bound():
    """The dual cache of gen 256 keeps every layer's keys and values of one sequence: a few MB for the embedded
    model, far under what a pass's activations take; nothing grows with the passes."""
    predictor = dico.load_model(attention=False, device="cuda")
    prompt = tasks.make_split("word", "test", 1)[0].prompt
    peaks = {}
    for cache in ("none", "dual"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        decode_256 = dico.generate(predictor, prompt, "fast", mode="semi-ar", gen_length=256, block_length=32,
                                   **({} if cache == "none" else {"cache": cache}))
        assert decode_256.text
        peaks[cache] = torch.cuda.max_memory_allocated() - base
        assert torch.cuda.memory_allocated() - base < 1 << 20, cache       # freed when the decode ends
    assert peaks["dual"] < 4 * peaks["none"] + (64 << 20), peaks
