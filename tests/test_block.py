"""Block diffusion models (dico.block): recognised by their config, their block-causal mask, the exact cache of their
finished blocks, the CPU fallbacks for their imports, and decoding on them a block at a time.

The model is an SDAR-shaped stand-in (dico/bench/sdar_standin.py, written after SDAR's published modeling_sdar.py) with
random weights, loaded through trust_remote_code as the release is."""
import hashlib
import json
import sys

import pytest
import torch
import transformers.utils

import dico
from accelerator import accelerator
from dico.block import (
    BlockStore,
    _flash_attn_func,
    _rms_norm_fn,
    block_causal_mask,
    first_window_end,
    release_imports,
    response_length,
)
from dico.models import ModelError
from standins import SDAR_STANDIN, block_model_folder, refused_before_any_pass
from tolerances import assert_reordered_close

BLOCK = 4
STANDIN = SDAR_STANDIN
ALIGNED, UNALIGNED = "w1 w2 w3", "w1 w2"          # chat-formatted: 8 and 7 prompt tokens


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    torch.set_num_threads(1)
    return block_model_folder(tmp_path_factory.mktemp("sdar") / "sdar-standin")


@pytest.fixture(scope="module")
def sdar(folder):
    return dico.load_model(folder, trust_remote_code=True, dtype="float32")


# ------------------------------------------------------------------------------------------- loading

def test_a_block_diffusion_checkpoint_is_recognised_by_its_config(sdar, folder, tmp_path):
    assert (sdar.kind, sdar.block) == ("block", BLOCK)
    assert sdar.mask_id == sdar.tokenizer.convert_tokens_to_ids("<|MASK|>")     # its tokenizer's, as SDAR reads it
    assert not sdar.supports_attention
    wide = block_model_folder(tmp_path / "wide", block_size=8)
    assert dico.load_model(wide, trust_remote_code=True).block == 8


def test_its_code_needs_trust_remote_code_unless_the_id_is_known(folder):
    with pytest.raises(ModelError, match="ships its own code"):
        dico.load_model(folder)


def test_loading_supplies_flash_attn_and_loss_kwargs_and_takes_them_away_again(sdar, folder):
    """The stand-in imports both unconditionally, as SDAR's file does; neither exists here (no CUDA package,
    transformers 4.57 has no LossKwargs). Nothing of the fallbacks stays behind, and the model's file is unchanged."""
    assert "flash_attn" not in sys.modules and not hasattr(transformers.utils, "LossKwargs")
    shipped = (folder / "modeling_standin.py").read_bytes()
    assert hashlib.sha256(shipped).digest() == hashlib.sha256(STANDIN.read_bytes()).digest()
    with release_imports():
        import flash_attn
        assert flash_attn.flash_attn_func is _flash_attn_func and hasattr(transformers.utils, "LossKwargs")
    assert "flash_attn" not in sys.modules and not hasattr(transformers.utils, "LossKwargs")


def test_a_release_without_a_driver_is_named_and_refused_before_any_code_runs(tmp_path, monkeypatch):
    """Every release the project recognises is driven today; one that is not would be refused with its reason."""
    import dico.block
    monkeypatch.setattr(dico.block, "RELEASES", (dico.block.BlockRelease("Some v3", ("some_v3",), "bd_size", 32, None,
                                                                         "no tested driver"),))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "some_v3", "architectures": ["SomeV3"]}))
    with pytest.raises(ModelError, match="is Some v3, a block diffusion model.*cannot decode it yet: no tested driver"):
        dico.load_model(tmp_path, trust_remote_code=True)


# ------------------------------------------------------------------------------------------- the fallbacks

def test_the_flash_attention_fallback_is_attention_over_grouped_heads():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 5, 4, 8, generator=g), torch.randn(2, 9, 2, 8, generator=g), torch.randn(2, 9, 2, 8,
                                                                                                        generator=g)
    heads = [torch.repeat_interleave(t.transpose(1, 2), 2, dim=1) for t in (k, v)]           # b, 4, 9, d
    scores = q.transpose(1, 2) @ heads[0].transpose(-1, -2) * 0.3                            # b, 4, 5, 9
    expected = (scores.softmax(-1) @ heads[1]).transpose(1, 2)
    assert_reordered_close(_flash_attn_func(q, k, v, softmax_scale=0.3), expected)
    causal = torch.ones(5, 9, dtype=torch.bool).tril(4)        # flash-attn's causal: the last query sees every key
    expected = (scores.masked_fill(~causal, -torch.inf).softmax(-1) @ heads[1]).transpose(1, 2)
    assert_reordered_close(_flash_attn_func(q, k, v, softmax_scale=0.3, causal=True), expected)


def test_the_rms_norm_fallback_normalises_in_float32_and_returns_the_input_dtype():
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    w = torch.rand(16)
    out = _rms_norm_fn(x, w, None, eps=1e-6)
    ref = x.float() / (x.float().pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref.to(torch.bfloat16))


# ------------------------------------------------------------------------------------------- the mask and passes

@pytest.mark.parametrize("length, block", [(12, 4), (10, 4), (7, 1), (9, 16)])
def test_the_mask_is_the_one_sdar_builds(length, block):
    """SDAR's generate: a lower-triangular blocks x blocks matrix, each entry spread over block x block positions."""
    blocks = -(-length // block)
    built = torch.tril(torch.ones(blocks, blocks)).repeat_interleave(block, 0).repeat_interleave(block, 1)
    assert torch.equal(block_causal_mask(length, block), built[:length, :length].bool())


def test_a_block_sees_itself_and_the_blocks_before_it_never_a_later_one(sdar):
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 15, 16, 5, 5, 5, 5]])
    base, _ = sdar.forward(ids)
    later = ids.clone()
    later[0, 8:] = torch.tensor([20, 21, 22, 23])
    same_block = ids.clone()
    same_block[0, 7] = 30
    assert torch.equal(sdar.forward(later)[0][0, :8], base[0, :8])
    assert not torch.allclose(sdar.forward(same_block)[0][0, 4:7], base[0, 4:7])


def test_the_cached_pass_computes_what_the_whole_sequence_pass_computes(sdar):
    """The finished blocks' keys and values are exact: a pass over one block against them gives the block's logits
    of the block-causal pass over the whole sequence, up to the order of float sums (other shapes)."""
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 15, 16, 17, 5, 5, 5, 5, 5, 5, 5]])
    store = BlockStore()
    for start in (8, 12):
        cached = store.forward(sdar, ids, torch.arange(start, start + BLOCK))
        assert_reordered_close(cached[0, start:start + BLOCK], sdar.forward(ids)[0][0, start:start + BLOCK])
        ids[0, start:start + BLOCK] = torch.tensor([20, 21, 22, 23])
    assert store.stored == 12                       # the prompt's blocks by prefill, then block [8, 12) once
    ids[0, 9] = 40                                  # a token of a stored block rewritten (a fork): stored again
    store.drop_from(8)
    cached = store.forward(sdar, ids, torch.arange(12, 16))
    assert_reordered_close(cached[0, 12:16], sdar.forward(ids)[0][0, 12:16])


# ------------------------------------------------------------------------------------------- decoding on it

@pytest.mark.parametrize("prompt", [ALIGNED, UNALIGNED])
def test_windows_are_the_models_blocks_and_the_response_ends_with_a_block(sdar, prompt):
    trace = dico.generate(sdar, prompt, "vanilla", mode="semi-ar", gen_length=8, block_length=BLOCK)
    m = trace.prompt_length
    assert trace.gen_length == response_length(m, 8, BLOCK) and (m + trace.gen_length) % BLOCK == 0
    first = first_window_end(m, BLOCK)
    ends = sorted({tuple(s.window) for s in trace.steps})
    assert ends[0] == (0, first) and all((m + end) % BLOCK == 0 for _, end in ends)
    assert all(end - start <= BLOCK for start, end in ends)


@pytest.mark.parametrize("request_, field", [({"mode": "non-ar"}, "mode"),
                                             ({"mode": "semi-ar", "block_length": 8}, "block_length"),
                                             ({"mode": "semi-ar", "block_length": BLOCK, "gen_length": "auto"},
                                              "gen_length"),
                                             ({"mode": "semi-ar", "block_length": BLOCK, "cache": "dual"}, "cache")])
def test_what_a_block_diffusion_model_cannot_do_is_refused_before_any_pass(sdar, request_, field):
    refused_before_any_pass(sdar, field, ALIGNED, "vanilla", **({"gen_length": 8} | request_))


def test_a_padded_batch_decodes_each_row_as_alone(sdar):
    """Rows padded on the right: the block mask and the padding mask together keep each row's logits its own."""
    from dico.batch import generate_batch
    prompts = [UNALIGNED, "w1 w2 w3 w4 w5", "w3"]
    rows = generate_batch(sdar, prompts, "fast", mode="semi-ar", block_length=BLOCK, gen_length=8, batch_size=3)
    alone = [dico.generate(sdar, p, "fast", mode="semi-ar", block_length=BLOCK, gen_length=8) for p in prompts]
    assert [t.response for t in rows] == [t.response for t in alone]


def test_wino_whose_mirror_would_see_later_blocks_is_refused(sdar):
    with pytest.raises(ValueError, match="^method: wino .*block diffusion"):
        dico.generate(sdar, ALIGNED, "wino", mode="semi-ar", gen_length=8, block_length=BLOCK)


BLOCKWISE = ["vanilla", "topk", "fast", "fast-factor", "dico", "eb", "klass", "llada21", "hierarchy", "credit"]


@pytest.mark.parametrize("method", BLOCKWISE)
def test_every_blockwise_decoder_runs_and_its_exact_cache_changes_nothing(sdar, method):
    """Decoders that only write inside the window decode the same tokens with the finished blocks cached, and
    compute fewer positions."""
    plain = dico.generate(sdar, UNALIGNED, method, mode="semi-ar", gen_length=12, block_length=BLOCK)
    cached = dico.generate(sdar, UNALIGNED, method, mode="semi-ar", gen_length=12, block_length=BLOCK,
                           cache="prefix")
    assert sdar.mask_id not in plain.response
    assert cached.response == plain.response and cached.nfe == plain.nfe
    assert cached.token_forwards < plain.token_forwards


RUNS = [("fast", "none", {}), ("fast", "prefix", {}), ("sdar", "prefix", {"random_seed": 3})]


def test_a_block_model_decodes_on_the_accelerator_as_on_the_cpu(sdar, folder):
    """With its cache and without; SDAR's draw too (its generator where the model runs)."""
    with accelerator():
        gpu = dico.load_model(folder, trust_remote_code=True, device="cuda", dtype="float32")
        on_gpu = [dico.generate(gpu, UNALIGNED, m, mode="semi-ar", gen_length=8, block_length=BLOCK, cache=c, **o)
                  for m, c, o in RUNS]
    on_cpu = [dico.generate(sdar, UNALIGNED, m, mode="semi-ar", gen_length=8, block_length=BLOCK, cache=c, **o)
              for m, c, o in RUNS]
    assert [t.response for t in on_gpu] == [t.response for t in on_cpu]
    assert all(t.device == "cuda" for t in on_gpu)
