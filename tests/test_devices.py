"""Decoding where the model runs on an accelerator, seen without one: ``tests/accelerator.py`` emulates
``cuda:0`` on the CPU with CUDA's refusals (no mixing with CPU tensors, no ``.numpy()``). Every method, mode
and attention capture must decode to exactly what the CPU decodes, with one small transfer to the host per
step (docs/decoding.md §2.1).
"""
from __future__ import annotations

import pytest
import torch

import dico
from accelerator import DEVICE, TRANSFERS, OnAccelerator, accelerator
from dico.models import default_device_dtype
from standins import remote_model_folder

torch.set_num_threads(1)

PROMPT = "Tom has 5 apples. He buys 3 more. How many apples does Tom have now?"
RUN = dict(gen_length=32, block_length=16)
MODES = ("non-ar", "semi-ar")


def commits(trace: dico.Trace) -> list:
    return [[s.phase, s.committed, s.tokens, s.seeds, s.clusters, s.remasked] for s in trace.steps]


@pytest.fixture(scope="module")
def cpu():
    return dico.load_model(dtype="float32")


@pytest.fixture(scope="module")
def gpu():
    with accelerator():
        return dico.load_model(device="cuda", dtype="float32")      # float32, to compare with the CPU exactly


def decode_both(cpu, gpu, method, mode="non-ar", prompt=PROMPT, **options):
    want = dico.generate(cpu, prompt, method, mode=mode, **RUN, **options)
    with accelerator():
        got = dico.generate(gpu, prompt, method, mode=mode, **RUN, **options)
    return want, got


# ============================================================================ the emulation itself

def test_the_emulated_accelerator_refuses_what_cuda_refuses():
    with accelerator():
        x = torch.zeros(3).to("cuda")
        assert isinstance(x, OnAccelerator) and x.device == DEVICE and (x + 1).device == DEVICE
        with pytest.raises(RuntimeError, match="same device"):
            x + torch.ones(3)
        with pytest.raises(RuntimeError, match="same device"):
            torch.where(torch.ones(3, dtype=torch.bool), x, x)
        with pytest.raises(TypeError, match="numpy"):
            x.numpy()
        assert isinstance(x + torch.tensor(2.0), OnAccelerator)          # a 0-dim CPU tensor mixes, as in CUDA
        assert type(x.cpu()) is torch.Tensor and torch.arange(2, device="cuda").device == DEVICE


def test_the_model_runs_on_the_accelerator(gpu):
    assert all(isinstance(p, OnAccelerator) for p in gpu.model.parameters())
    with accelerator():
        logits, _ = gpu.forward(torch.tensor([gpu.encode_prompt(PROMPT)]))
    assert isinstance(logits, OnAccelerator)


# ============================================================================ the same decodes

@pytest.mark.slow
@pytest.mark.parametrize("mode, method", [(mode, m) for m in dico.METHODS for mode in MODES
                                          if dico.settings.decodes_in(m, mode)])
def test_every_method_and_mode_decodes_as_on_the_cpu_with_attention_maps(cpu, gpu, method, mode):
    maps = method != "wino"                                  # WINO's mirrored pass returns no attention maps
    want, got = decode_both(cpu, gpu, method, mode, capture_attention=maps)
    assert commits(got) == commits(want) and got.text == want.text
    assert not maps or got.attention.matrix == want.attention.matrix
    assert got.device == "cuda" and want.device == "cpu"


@pytest.mark.parametrize("method, options", [
    ("vanilla", dict(temperature=0.8, top_p=0.9, top_k=50, random_seed=3, steps=16)),
    ("vanilla", dict(remasking="random", steps=8, random_seed=1)),
    ("vanilla", dict(remasking="topk_margin", steps=8, temperature=0.5)),
    ("vanilla", dict(remasking="entropy", steps=8)),
    ("vanilla", dict(remasking="origin", steps=8, random_seed=2)),
    ("fast", dict(cfg_scale=1.0, mask_in_softmax=True, ban_eos=True)),
    ("dico", dict(temperature=0.7, eos_last=True, grow_through_commits=True, conquer_fallback="window",
                  merge_after_conquer=True)),
])
def test_sampling_options_decode_as_on_the_cpu(cpu, gpu, method, options):
    want, got = decode_both(cpu, gpu, method, **options)
    assert commits(got) == commits(want) and got.text == want.text


def test_each_step_brings_one_small_transfer_to_the_host(gpu):
    TRANSFERS.clear()
    with accelerator():
        trace = dico.generate(gpu, PROMPT, "dico", **RUN)
    assert [("cpu", 3 * RUN["gen_length"])] * trace.nfe == TRANSFERS         # conf, pred, margin in one copy
    TRANSFERS.clear()
    with accelerator():
        trace = dico.generate(gpu, PROMPT, "vanilla", **RUN, steps=8, remasking="entropy", capture_attention=True)
    n = RUN["gen_length"]
    assert [("cpu", 4 * n)] * trace.nfe + [("cpu", 3 * n * (n + 1))] == TRANSFERS   # + the stage maps, once


# ============================================================================ LLaDA- and Dream-shaped models

@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """LLaDA- and Dream-shaped stand-ins, each loaded on the CPU and on the accelerator: {kind: (cpu, gpu)}."""
    root, pairs = tmp_path_factory.mktemp("remote"), {}
    for kind in ("llada", "dream"):
        folder = remote_model_folder(root / f"{kind}-standin", kind)
        with accelerator():
            gpu = dico.load_model(folder, trust_remote_code=True, device="cuda", dtype="float32")
        pairs[kind] = dico.load_model(folder, trust_remote_code=True), gpu
    return pairs


@pytest.mark.parametrize("kind", ["llada", "dream"])
def test_remote_code_models_decode_and_give_attention_on_the_accelerator(remote, kind):
    cpu, gpu = remote[kind]
    for method in ("vanilla", "dico"):
        want = dico.generate(cpu, "w1 w2 w3", method, gen_length=12, capture_attention=True)
        with accelerator():
            got = dico.generate(gpu, "w1 w2 w3", method, gen_length=12, capture_attention=True)
        assert commits(got) == commits(want) and got.text == want.text
        assert got.attention.matrix == want.attention.matrix


@pytest.mark.parametrize("kind", ["llada", "dream"])
def test_the_attention_lens_layer_by_layer_runs_on_the_accelerator_and_averages_to_the_decodes_map(remote, kind):
    """LLaDA's and Dream's maps are recomputed by hooks (``dico.attention``): kept a layer each when asked."""
    from dico.observe import layer_maps
    from test_observe import assert_same_rows, layers_averaged
    _, gpu = remote[kind]
    with accelerator():
        trace = dico.generate(gpu, "w1 w2 w3", "vanilla", gen_length=12, capture_attention=True)
        maps = layer_maps(gpu, trace)
    assert all(len(per_layer) == len(gpu.hooks.sites) > 1 for per_layer in maps.values())
    for stage, rows in zip(maps, trace.attention.matrix):
        assert_same_rows(layers_averaged(maps)[stage], rows)


# ============================================================================ device and dtype defaults

def test_a_model_loaded_on_the_accelerator_runs_in_bfloat16_by_default_and_decodes():
    with accelerator():
        p = dico.load_model(device="cuda")
        trace = dico.generate(p, PROMPT, "dico", **RUN, capture_attention=True)
    assert p.dtype == torch.bfloat16 == next(p.model.parameters()).dtype
    assert trace.nfe >= 1 and trace.text and trace.attention is not None


def test_cuda_defaults_to_bfloat16_the_cpu_to_float32_and_both_can_be_chosen():
    assert default_device_dtype("cuda") == (torch.device("cuda"), torch.bfloat16)
    assert default_device_dtype("cpu") == (torch.device("cpu"), torch.float32)
    assert default_device_dtype("cuda", "float32") == (torch.device("cuda"), torch.float32)
    assert default_device_dtype("cpu", "bf16") == (torch.device("cpu"), torch.bfloat16)


# ============================================================================ KV caches

@pytest.mark.parametrize("method, mode, kind", [("dico", "semi-ar", "dual"), ("fast", "non-ar", "delayed"),
                                                ("vanilla", "semi-ar", "prefix")])
def test_a_cached_decode_gives_on_the_accelerator_what_it_gives_on_the_cpu(cpu, gpu, method, mode, kind):
    want, got = decode_both(cpu, gpu, method, mode, cache=kind)
    assert commits(got) == commits(want) and got.text == want.text
    assert [s.token_forwards for s in got.steps] == [s.token_forwards for s in want.steps]
    assert any(not s.refresh for s in got.steps)                      # passes that computed only part of it
    TRANSFERS.clear()
    with accelerator():
        trace = dico.generate(gpu, PROMPT, method, mode=mode, **RUN, cache=kind)
    assert [("cpu", 3 * RUN["gen_length"])] * trace.nfe == TRANSFERS     # still one small copy a step


@pytest.mark.parametrize("kind", ["llada", "dream"])
def test_llada_and_dream_decode_with_a_cache_on_the_accelerator_as_on_the_cpu(remote, kind):
    cpu, gpu = remote[kind]
    for mode, cache in (("semi-ar", "dual"), ("non-ar", "delayed")):
        options = dict(mode=mode, gen_length=12, block_length=6, cache=cache)
        want = dico.generate(cpu, "w1 w2 w3", "dico", **options)
        with accelerator():
            got = dico.generate(gpu, "w1 w2 w3", "dico", **options)
        assert commits(got) == commits(want) and got.text == want.text
        assert got.token_forwards == want.token_forwards < got.nfe * (got.prompt_length + 12)
