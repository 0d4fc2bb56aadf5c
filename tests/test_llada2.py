"""LLaDA 2.x (inclusionAI's LLaDA2.0 / LLaDA2.1 MoE) as a block-causal model: loaded by its config, driven through its
own forward (a 4-D additive block mask), its finished blocks kept exactly, LLaDA 2.1's own generate as method
``llada21`` (``model_card``) and LLaDA 2.0's as ``sdar`` (``llada20``) pass for pass.

The model is a LLaDA 2.x-shaped stand-in (tests/llada2_standin.py, written after the published modeling_llada2_moe.py:
a tiny mixture of experts) with random weights, loaded through trust_remote_code as the release is. The reference
below is written for these tests from LLaDA 2.1's published ``generate`` (its model card's modeling_llada2_moe.py, as
ZHZisZZ/dllm carries it, Apache-2.0): the block mask as an additive float mask over whole blocks, then per block
(from the one the prompt ends in) passes over everything up to the block's end, no cache: greedy tokens and their
probabilities (softmax of the float32 logits, the mask token included), mask-to-token (the block's masked positions
above ``threshold``, else the most confident one), token-to-token (the block's written, non-prompt positions whose
token would change, above ``editing_threshold``), both written at once; once the block has no mask each pass counts
a post-edit step, the one past ``max_post_steps`` ends the block before its pass, and a pass that writes nothing with
no mask left ends it after."""
import pytest
import torch
import torch.nn.functional as F

import dico
from accelerator import accelerator
from dico.block import BlockStore, block_causal_mask
from dico.models import KNOWN_REMOTE, ModelError
from standins import llada2_model_folder, refused_before_any_pass
from tolerances import assert_reordered_close

BLOCK = 32                                         # its config names none: its generate's default
ALIGNED = " ".join(f"w{i}" for i in range(1, 28))  # chat-formatted: 32 prompt tokens, the prompt fills a block
UNALIGNED = "w1 w2"                                # 7 prompt tokens


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    torch.set_num_threads(1)
    return llada2_model_folder(tmp_path_factory.mktemp("llada2") / "llada2-standin", seed=0)


@pytest.fixture(scope="module")
def llada2(folder):
    return dico.load_model(folder, trust_remote_code=True, dtype="float32")


def generate_reference(model, prompt_ids, mask_id, gen_length, block, threshold, editing_threshold, max_post_steps):
    """LLaDA 2.1's generate at temperature 0 with batch 1 and one token at least a pass (``num_to_transfer`` 1): the
    final ids and, per pass, (positions committed, tokens) and the edits [position, before, after], positions
    absolute. Its mask is cast to the model's dtype (its code casts to bfloat16, the released weights' dtype)."""
    m = len(prompt_ids)
    blocks = -(-(m + gen_length) // block)
    total = blocks * block
    allowed = torch.tril(torch.ones(blocks, blocks)).repeat_interleave(block, 0).repeat_interleave(block, 1)
    additive = allowed[None, None].log().to(model.dtype)                                  # 0 / -inf
    x = torch.full((1, total), mask_id, dtype=torch.long)
    x[0, :m] = torch.tensor(prompt_ids)
    passes = []
    for b in range(m // block, blocks):
        start, end = b * block, (b + 1) * block
        cur = x[:, :end]                                                   # a view: writes land in x
        prompt_in_block = torch.zeros(block, dtype=torch.bool)
        prompt_in_block[:max(0, min(m - start, block))] = True
        post = 0
        while True:
            old = cur[:, -block:].clone()
            active = cur[:, -block:] == mask_id
            if not active.any():
                post += 1
            if post > max_post_steps:
                break
            logits = model(cur, attention_mask=additive[:, :, :end, :end],
                           position_ids=torch.arange(end)[None]).logits[:, -block:]
            x0 = logits.argmax(-1)
            p = torch.gather(F.softmax(logits, dim=-1), -1, x0[..., None])[..., 0]
            transfer = torch.zeros_like(active)
            if active.any():
                conf = torch.where(active, p, -torch.inf)
                high = (conf[0] > threshold) & active[0]
                if int(high.sum()) >= 1:
                    transfer[0] = high
                else:
                    transfer[0, torch.topk(conf[0], k=1).indices] = True
            editable = ~active & ~prompt_in_block[None]
            edit = editable & (torch.where(editable, p, -torch.inf) > editing_threshold) & (x0 != old)
            final = transfer | edit
            assert not (x0[final] == mask_id).any(), "the stand-in never predicts the mask token"
            cur[:, -block:][final] = x0[final]
            where = torch.nonzero(transfer[0]).flatten()
            edits = [[start + int(i), int(old[0, i]), int(x0[0, i])] for i in torch.nonzero(edit[0]).flatten()]
            passes.append(((start + where).tolist(), x0[0, where].tolist(), edits))
            if not active.any() and not edit.any():
                break
    return x[0].tolist(), passes


def ours(trace):
    m = trace.prompt_length
    return [([m + p for p in s.committed], s.tokens, [[m + e[0], e[1], e[2]] for e in s.edited])
            for s in trace.steps]


# ------------------------------------------------------------------------------------------- loading and passes

def test_a_llada2_checkpoint_loads_as_a_block_model_of_32(llada2):
    assert llada2.kind == "block" and llada2.block == BLOCK and llada2.release.name == "LLaDA 2.x"
    assert llada2.model.config._attn_implementation == "sdpa"        # the path that takes an additive 4-D mask
    assert llada2.mask_id == llada2.tokenizer.mask_token_id
    assert type(llada2.model.model.layers[1].mlp).__name__ == "LLaDA2MoeSparseMoeBlock"   # the experts run


def test_a_block_sees_itself_and_the_blocks_before_it_never_a_later_one(llada2):
    """Up to the order of float sums: each expert runs on the tokens routed to it, so tokens of a later block change
    the shape of an expert's product for the earlier ones."""
    ids = torch.tensor([[2] + list(range(10, 41)) + [5] * 32])                              # 32 + 32
    base, _ = llada2.forward(ids)
    later = ids.clone()
    later[0, 32:] = 20
    same_block = ids.clone()
    same_block[0, 31] = 30
    assert_reordered_close(llada2.forward(later)[0][0, :32], base[0, :32])
    assert not torch.allclose(llada2.forward(same_block)[0][0, :31], base[0, :31])


def test_the_driver_hands_its_forward_the_generates_additive_mask(llada2):
    """The whole-sequence pass gives what the model gives for the mask LLaDA 2.1's generate builds (``.log()`` of the
    block mask), up to the order of float sums."""
    ids = torch.tensor([[2] + list(range(10, 50)) + [5] * 23])                              # 64
    blocks = torch.tril(torch.ones(2, 2)).repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    theirs = llada2.model(ids, attention_mask=blocks[None, None].log(), position_ids=torch.arange(64)[None]).logits
    assert_reordered_close(llada2.forward(ids)[0], theirs)
    assert torch.equal(block_causal_mask(64, BLOCK), blocks.bool())


def test_the_cached_pass_computes_what_the_whole_sequence_pass_computes(llada2):
    """Its attention appends every call's keys and values; a pass that must not store leaves the cache as it was."""
    ids = torch.tensor([[2] + list(range(10, 50)) + [5] * 55])                              # 96
    store = BlockStore()
    for start in (32, 64):
        cached = store.forward(llada2, ids, torch.arange(start, start + BLOCK))
        assert store.past.get_seq_length() == store.stored == start
        assert_reordered_close(cached[0, start:start + BLOCK], llada2.forward(ids)[0][0, start:start + BLOCK])
        ids[0, start:start + BLOCK] = 20 + torch.arange(BLOCK) % 30


# ------------------------------------------------------------------------------------------- LLaDA 2.1's generate

CASES = [(UNALIGNED, 0.5, 0.3, 16), (ALIGNED, 0.5, 0.3, 16), (UNALIGNED, 0.3, 0.5, 2), (UNALIGNED, 0.6, 0.2, 0)]


@pytest.mark.parametrize("cache", ["none", "prefix"])
@pytest.mark.parametrize("prompt, threshold, editing, post", CASES)
def test_llada21_as_its_model_card_decodes_as_llada21s_own_generate_pass_for_pass(llada2, prompt, threshold, editing,
                                                                                  post, cache):
    """Threshold 0.5 / editing 0.3 edits often on random weights (the largest probabilities are 0.2 to 0.7) and
    reaches the post-edit limit in some blocks; so does a limit of 2; a limit of 0 ends a block with its last mask."""
    settings = dict(model_card=True, threshold=threshold, edit_threshold=editing, max_post_edit_steps=post)
    trace = dico.generate(llada2, prompt, "llada21", mode="semi-ar", gen_length=64, block_length=BLOCK, cache=cache,
                          **settings)
    ids, passes = generate_reference(llada2.model, llada2.encode_prompt(prompt), llada2.mask_id, 64, BLOCK,
                                     threshold, editing, post)
    m = trace.prompt_length
    assert ids[m:] == trace.response
    assert ours(trace) == passes
    if editing < 0.5:
        assert any(edits for _, _, edits in passes)                   # token-to-token was exercised


def test_the_model_cards_preset_is_its_generates_defaults(llada2):
    """Threshold 0.95, editing 0.9, 16 post-edit passes, the mask token in the softmax: on random weights one token a
    pass, as its generate decodes."""
    trace = dico.generate(llada2, UNALIGNED, "llada21", mode="semi-ar", gen_length=32, block_length=BLOCK,
                          model_card=True)
    assert (trace.settings["threshold"], trace.settings["edit_threshold"], trace.settings["mask_in_softmax"]) == \
        (0.95, 0.9, True)
    ids, passes = generate_reference(llada2.model, llada2.encode_prompt(UNALIGNED), llada2.mask_id, 32, BLOCK,
                                     0.95, 0.9, 16)
    assert ours(trace) == passes and ids[trace.prompt_length:] == trace.response


def test_without_it_a_block_that_reaches_the_limit_spends_one_more_pass_as_sglang_does(llada2):
    """SGLang's joint threshold (the default) writes what the generate writes and ends such a block one pass later,
    with a pass that writes nothing."""
    settings = dict(threshold=0.3, edit_threshold=0.5, max_post_edit_steps=2, mask_in_softmax=True)
    sglang = dico.generate(llada2, UNALIGNED, "llada21", mode="semi-ar", gen_length=64, block_length=BLOCK, **settings)
    card = dico.generate(llada2, UNALIGNED, "llada21", mode="semi-ar", gen_length=64, block_length=BLOCK,
                         model_card=True, **settings)
    written = [p for p in ours(sglang) if p != ([], [], [])]
    assert sglang.response == card.response and written == [p for p in ours(card) if p != ([], [], [])]
    assert sglang.nfe > card.nfe



def generate20_reference(model, prompt_ids, mask_id, eos_id, gen_length, block, steps, threshold):
    """LLaDA 2.0's generate at temperature 0 (its model card's, as ZHZisZZ/dllm carries it): per block at most
    ``steps`` passes, each committing the pass's share of the block (``get_num_transfer_tokens``), or every masked
    position above ``threshold`` when they are at least that share; it stops after the block that holds an
    end-of-text token. The ids to the end of the last block decoded, and per pass (positions, tokens)."""
    m = len(prompt_ids)
    steps = min(steps, gen_length)                                         # minimal_topk 1
    base, extra = divmod(block, steps)
    shares = [base + (i < extra) for i in range(steps)]
    blocks = -(-(m + gen_length) // block)
    allowed = torch.tril(torch.ones(blocks, blocks)).repeat_interleave(block, 0).repeat_interleave(block, 1)
    additive = allowed[None, None].log().to(model.dtype)
    x = torch.full((1, blocks * block), mask_id, dtype=torch.long)
    x[0, :m] = torch.tensor(prompt_ids)
    passes, end = [], 0
    for b in range(m // block, blocks):
        start, end = b * block, (b + 1) * block
        cur = x[:, :end]
        for step in range(steps):
            active = cur[:, -block:] == mask_id
            if not active.any():
                break
            logits = model(cur, attention_mask=additive[:, :, :end, :end],
                           position_ids=torch.arange(end)[None]).logits[:, -block:]
            probs = F.softmax(logits, dim=-1)
            x0 = probs.argmax(-1)
            conf = torch.where(active, torch.gather(probs, -1, x0[..., None])[..., 0], -torch.inf)
            transfer = torch.zeros_like(active)
            high = conf[0] > threshold
            if int(high.sum()) >= shares[step]:
                transfer[0] = high
            else:
                transfer[0, torch.topk(conf[0], k=min(shares[step], int(active.sum()))).indices] = True
            assert not (x0[transfer] == mask_id).any(), "the stand-in never predicts the mask token"
            cur[:, -block:][transfer] = x0[transfer]
            where = torch.nonzero(transfer[0]).flatten()
            passes.append(((start + where).tolist(), x0[0, where].tolist()))
        if (x[0, m:end] == eos_id).any():
            break
    return x[0, :end].tolist(), passes


@pytest.mark.parametrize("cache", ["none", "prefix"])
@pytest.mark.parametrize("prompt, steps, threshold", [(UNALIGNED, 32, 0.95), (UNALIGNED, 8, 0.3), (ALIGNED, 8, 0.3)])
def test_sdar_as_llada20_decodes_as_llada20s_own_generate_pass_for_pass(llada2, prompt, steps, threshold, cache):
    """Its generate stops after a block holding end-of-text; the decode here goes on, so the passes and the text are
    compared to there. Steps 8 commit shares of 4, or more when enough are above the threshold."""
    trace = dico.generate(llada2, prompt, "sdar", mode="semi-ar", gen_length=64, block_length=BLOCK, cache=cache,
                          llada20=True, steps=steps, threshold=threshold)
    ids, passes = generate20_reference(llada2.model, llada2.encode_prompt(prompt), llada2.mask_id,
                                       llada2.tokenizer.eos_token_id, 64, BLOCK, steps, threshold)
    m = trace.prompt_length
    assert [(c, t) for c, t, _ in ours(trace)][:len(passes)] == passes
    assert trace.response[:len(ids) - m] == ids[m:]
    if steps == 8:
        assert any(len(c) > 4 for c, _ in passes)                   # the threshold's branch was taken


def test_llada20_is_greedy_and_refuses_a_temperature(llada2):
    trace = dico.generate(llada2, UNALIGNED, "sdar", mode="semi-ar", gen_length=32, block_length=BLOCK, llada20=True)
    assert (trace.settings["threshold"], trace.settings["steps"], trace.settings["mask_in_softmax"]) == \
        (0.95, 32, True)
    with pytest.raises(ValueError, match="^llada20: "):
        dico.generate(llada2, UNALIGNED, "sdar", mode="semi-ar", gen_length=32, block_length=BLOCK, llada20=True,
                      temperature=1.0)

# ------------------------------------------------------------------------------------------- other decoders, refusals

# PC-Sampler runs too given its token-frequency table, which the stand-in has none of
BLOCKWISE = ["vanilla", "topk", "fast", "fast-factor", "dico", "eb", "klass", "llada21", "t2m", "hierarchy", "credit",
             "sdar"]


@pytest.mark.parametrize("method", BLOCKWISE)
def test_every_blockwise_decoder_runs_and_its_exact_cache_changes_nothing(llada2, method):
    """The same tokens with the finished blocks cached, fewer positions computed."""
    plain = dico.generate(llada2, UNALIGNED, method, mode="semi-ar", gen_length=32, block_length=BLOCK)
    cached = dico.generate(llada2, UNALIGNED, method, mode="semi-ar", gen_length=32, block_length=BLOCK,
                           cache="prefix")
    assert llada2.mask_id not in plain.response and len(plain.response) == 57     # to the end of the second block
    assert cached.response == plain.response and cached.nfe == plain.nfe
    assert cached.token_forwards < plain.token_forwards


@pytest.mark.parametrize("request_, field", [({"mode": "non-ar"}, "mode"),
                                             ({"mode": "semi-ar", "block_length": 16}, "block_length"),
                                             ({"mode": "semi-ar", "block_length": BLOCK, "gen_length": "auto"},
                                              "gen_length"),
                                             ({"mode": "semi-ar", "block_length": BLOCK, "cache": "dual"}, "cache")])
def test_what_it_cannot_do_is_refused_before_any_pass(llada2, request_, field):
    refused_before_any_pass(llada2, field, UNALIGNED, "llada21", **({"gen_length": 32} | request_))



def test_a_padded_batch_decodes_each_row_as_alone(llada2):
    """Rows padded on the right: the block mask and the padding mask go into its additive mask together."""
    from dico.batch import generate_batch
    prompts = [UNALIGNED, "w1 w2 w3 w4 w5", "w3"]
    rows = generate_batch(llada2, prompts, "fast", mode="semi-ar", block_length=BLOCK, gen_length=32, batch_size=3)
    alone = [dico.generate(llada2, p, "fast", mode="semi-ar", block_length=BLOCK, gen_length=32) for p in prompts]
    assert [t.response for t in rows] == [t.response for t in alone]

def test_a_config_naming_no_block_reads_as_32_and_its_code_runs_behind_the_allow_list(tmp_path):
    from dico.block import RELEASES, block_size_of, release_of
    config = {"model_type": "llada2_moe", "architectures": ["LLaDA2MoeModelLM"]}
    release = release_of(config)
    assert release is RELEASES[1] and release.driven and block_size_of(config, release) == 32
    (tmp_path / "config.json").write_text('{"model_type": "llada2_moe", "architectures": ["LLaDA2MoeModelLM"]}')
    with pytest.raises(ModelError, match="trust_remote_code"):
        dico.load_model(tmp_path)
    assert {"inclusionAI/LLaDA2.0-mini", "inclusionAI/LLaDA2.1-mini"} <= KNOWN_REMOTE     # their code is allowed


def test_it_decodes_on_the_accelerator_as_on_the_cpu(llada2, folder):
    """With its cache and without (its cache cropped on the accelerator too), and LLaDA 2.1's own generate."""
    runs = [("fast", "none", {}), ("fast", "prefix", {}), ("llada21", "prefix", {"model_card": True})]
    with accelerator():
        gpu = dico.load_model(folder, trust_remote_code=True, device="cuda", dtype="float32")
        on_gpu = [dico.generate(gpu, UNALIGNED, m, mode="semi-ar", gen_length=32, block_length=BLOCK, cache=c, **o)
                  for m, c, o in runs]
    on_cpu = [dico.generate(llada2, UNALIGNED, m, mode="semi-ar", gen_length=32, block_length=BLOCK, cache=c, **o)
              for m, c, o in runs]
    assert [t.response for t in on_gpu] == [t.response for t in on_cpu]
    assert [t.nfe for t in on_gpu] == [t.nfe for t in on_cpu] and all(t.device == "cuda" for t in on_gpu)


def test_the_released_dtype_bfloat16_takes_its_mask_in_bfloat16(folder):
    """SDPA needs the additive mask in the model's dtype (its generate casts to bfloat16). Pass for pass against the
    reference is not asserted in bfloat16: a cached and an uncached pass differ in shape, and bfloat16's rounding of
    reordered sums may then break a near tie either way (exact ties go to the first token, as torch.argmax does)."""
    half = dico.load_model(folder, trust_remote_code=True, dtype="bfloat16")
    masks = []
    hook = half.model.model.register_forward_pre_hook(lambda _, args, kw: masks.append(kw["attention_mask"]),
                                                      with_kwargs=True)
    try:
        runs = [dico.generate(half, UNALIGNED, "llada21", mode="semi-ar", gen_length=32, block_length=BLOCK, cache=c,
                              model_card=True) for c in ("none", "prefix")]
    finally:
        hook.remove()
    assert all(half.mask_id not in t.response and len(t.response) == 57 for t in runs)
    assert masks and all(m.dtype == torch.bfloat16 and m.dim() == 4 for m in masks)


# ------------------------------------------------------------------------------------------- the race on the page

def test_the_race_runs_its_lanes_in_its_own_blocks(app_module, llada2, monkeypatch):
    """Offered in the model menu as a hub model is (loaded, warm, a GPU said present): the page's default non-AR
    request decodes semi-AR in its blocks of 32, each lane as a decode alone, LLaDA 2.1's joint threshold among them."""
    pytest.importorskip("gradio")
    import dico_ui.models as models
    from dico_ui import handlers as h
    from dico_ui.request import CONTROLS
    name = "llada2-standin"
    monkeypatch.setitem(models.HUB_MODELS, name, f"{name}, block diffusion")
    monkeypatch.setitem(models._models, name, llada2)
    monkeypatch.setattr(models, "gpu_available", lambda: True)
    models.mark_warm(name)
    session = type("Session", (), {"session_hash": "llada2"})()
    lanes = ["vanilla", "fast", "dico", "llada21"]
    result = list(h.run_ui(session, UNALIGNED, name, "non-ar", 32.0, 32.0, lanes, True,
                           *[spec.default for _, spec in CONTROLS]))[-1]
    assert result["status"].startswith("Done") and f"its own blocks of {BLOCK}" in result["status"]
    assert [t.method for t in result["traces"]] == lanes
    for trace in result["traces"]:
        assert (trace.mode, trace.block_length, trace.model_block) == ("semi-ar", BLOCK, BLOCK)
        alone = dico.generate(llada2, UNALIGNED, trace.method, mode="semi-ar", block_length=BLOCK, gen_length=32)
        assert trace.response == alone.response
