"""Fast-dLLM v2 (dico.block's FastDLLMv2Driver, dico.fast_dllm_v2): recognised by its config, driven through its own
forward, and decoded by ``fast-v2`` as its published generate decodes, pass for pass.

The model is a stand-in written after the release's modeling.py (tests/fast_v2_standin.py; NVlabs/Fast-dLLM v2/ and
the model card Efficient-Large-Model/Fast_dLLM_v2_7B, Apache-2.0) with random weights, loaded through
trust_remote_code as the release is. Its config names its block in ``bd_size`` (8 here, sub-blocks of 4) and its
tokenizer names no mask token: the mask is the ``|<MASK>|`` of its special tokens, as the release's."""
import hashlib
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import dico
from accelerator import accelerator
from dico.block import BlockStore, release_imports
from dico.models import ModelError
from standins import fast_v2_model_folder, refused_before_any_pass
from tolerances import assert_reordered_close

BLOCK, SUB = 8, 4
STANDIN = Path(__file__).with_name("fast_v2_standin.py")
PROMPTS = {"short": "w1", "aligned": "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11", "unaligned": "w1 w2 w3 w4 w5 w6 w7"}
# chat-formatted: 6 prompt tokens (inside the first block), 16 (two whole blocks: the first token is an AR step of the
# prefill pass), 12 (one block and 4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    torch.set_num_threads(1)
    return fast_v2_model_folder(tmp_path_factory.mktemp("fast-v2") / "fast-v2-standin", seed=2)


@pytest.fixture(scope="module")
def v2(folder):
    return dico.load_model(folder, trust_remote_code=True, dtype="float32")


def raw(model, ids, **kwargs):
    """The release's own logits (AR-shifted: [i] predicts position i + 1)."""
    return model(input_ids=ids, **kwargs).logits


# ------------------------------------------------------------------------------------------- loading

def test_a_fast_dllm_v2_checkpoint_is_recognised_by_its_config(v2, folder):
    assert (v2.kind, v2.block, v2.release.name) == ("block", BLOCK, "Fast-dLLM v2")
    assert v2.mask_id == v2.tokenizer.convert_tokens_to_ids("|<MASK>|")      # a special token, not mask_token
    assert v2.tokenizer.mask_token is None
    assert v2.stop_ids() >= {v2.tokenizer.convert_tokens_to_ids("<|im_end|>")}
    with pytest.raises(ModelError, match="ships its own code"):
        dico.load_model(folder)


def test_loading_supplies_einops_and_takes_it_away_again(v2, folder):
    """The release's file imports einops unconditionally (it is not installed here) and never calls it at inference;
    nothing of the fallback stays behind, and the model's file is unchanged."""
    assert "einops" not in sys.modules
    shipped = (folder / "modeling.py").read_bytes()
    assert hashlib.sha256(shipped).digest() == hashlib.sha256(STANDIN.read_bytes()).digest()
    with release_imports():
        import einops
        with pytest.raises(NotImplementedError, match="einops"):
            einops.rearrange(torch.zeros(2), "a -> a")
    assert "einops" not in sys.modules


# ------------------------------------------------------------------------------------------- its passes

def test_logits_are_aligned_to_positions_from_its_ar_shifted_ones(v2):
    """Position i takes the release's logits at i - 1 (the first position its own), under its block-causal mask."""
    ids = torch.tensor([[5 + i % 20 for i in range(20)]])
    ours, _ = v2.forward(ids)
    theirs = raw(v2.model, ids, block_size=BLOCK)
    assert torch.equal(ours[0, 1:], theirs[0, :-1]) and torch.equal(ours[0, 0], theirs[0, 0])


def test_a_block_sees_itself_and_the_blocks_before_it_never_a_later_one(v2):
    ids = torch.tensor([[5 + i for i in range(24)]])
    base, _ = v2.forward(ids)
    later, same = ids.clone(), ids.clone()
    later[0, 17] = 30                      # in the third block: the first two blocks' logits (and 16's) stay
    same[0, 12] = 30                       # in the second block: its other positions change
    assert torch.equal(v2.forward(later)[0][0, :17], base[0, :17])
    assert not torch.allclose(v2.forward(same)[0][0, 9:12], base[0, 9:12])


def test_the_cached_pass_computes_what_the_whole_sequence_pass_computes(v2):
    """Stored blocks (its update_past_key_values), the next block against them; a block's first position reads the
    last logits of the pass that stored the block before it."""
    ids = torch.tensor([[5 + (3 * i) % 25 for i in range(32)]])
    whole = v2.forward(ids)[0][0]
    store = BlockStore()
    for start in (8, 16, 24):
        cached = store.forward(v2, ids, torch.arange(start, start + BLOCK))
        assert_reordered_close(cached[0, start:start + BLOCK], whole[start:start + BLOCK])
    assert store.stored == 24


def test_a_padded_batch_is_refused_with_one_line(v2):
    from dico.batch import generate_batch
    with pytest.raises(ValueError, match="^batch: Fast-dLLM v2's forward builds its own attention mask") as err:
        generate_batch(v2, [PROMPTS["short"], PROMPTS["unaligned"]], "fast", mode="semi-ar", block_length=BLOCK,
                       gen_length=8, batch_size=2)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------- fast-v2: its generate

def shifted(logits):
    """The generate's shift inside a call: position j reads the call's logits at j - 1, the first its own."""
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def fast_v2_reference(model, prompt_ids, mask_id, total, block, sub, threshold, use_block_cache):
    """Fast-dLLM v2's generate with batch 1, temperature 0 and no stop token, written for these tests from the
    published procedure (the model card's modeling.py ``generate``; NVlabs/Fast-dLLM v2/), the block cache made anew
    at each block as both its generate and its batch decoding do. It stops where the project's response ends (``total``
    positions), before the storing pass of the last block. Returns the ids and, per pass that decodes, the absolute
    positions and tokens it writes and whether it was a sub-block pass (keys and values read from the block cache).
    Asserts that no pass would write the mask token (the generate would, and the position would stay masked)."""
    x = torch.tensor([prompt_ids])
    passes, past = [], None
    if x.shape[1] >= block:                    # the prompt's whole blocks, stored; an aligned prompt's next token
        out = model(input_ids=x[:, :x.shape[1] // block * block], use_cache=True, update_past_key_values=True,
                    block_size=block)
        past = out.past_key_values
        if x.shape[1] % block == 0:
            token = out.logits[:, -1:].argmax(-1)
            passes.append(([x.shape[1]], token[0].tolist(), False))
            x = torch.cat([x, token], dim=1)
    while True:
        x = torch.cat([x, torch.full((1, block - x.shape[1] % block), mask_id)], dim=1)
        kept = None
        while True:
            if not (x[:, -block:] == mask_id).any():
                if x.shape[1] >= total:
                    return x[0].tolist(), passes
                out = model(input_ids=x[:, -block:], use_cache=True, past_key_values=past,
                            update_past_key_values=True, block_size=block)
                past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
                assert int(token) != mask_id
                passes.append(([x.shape[1]], token[0].tolist(), False))
                x = torch.cat([x, token], dim=1)
                break
            for lo in range(0, block, sub):
                hi = lo + sub
                while True:
                    masked = x[:, -block:] == mask_id
                    if not masked[:, lo:hi].any():
                        break
                    from_kept = use_block_cache and kept is not None and x[0, x.shape[1] - block + lo] != mask_id
                    if from_kept:
                        part = x[:, x.shape[1] - block + lo:x.shape[1] - block + hi]
                        logits = shifted(model(input_ids=part, use_cache=True, past_key_values=past,
                                               update_past_key_values=False, use_block_cache=True,
                                               block_past_key_values=kept, replace_position=lo).logits)
                    else:
                        out = model(input_ids=x[:, -block:], use_cache=True, past_key_values=past,
                                    update_past_key_values=False, use_block_cache=use_block_cache)
                        kept = out.block_past_key_values if use_block_cache else None
                        logits = shifted(out.logits)[:, lo:hi]
                    probs = F.softmax(logits, dim=-1)
                    token = probs.argmax(-1)
                    chance = torch.where(masked[:, lo:hi], probs.gather(-1, token[..., None])[..., 0], -torch.inf)
                    pick = chance > threshold
                    pick[0, chance[0].argmax()] = True
                    pick &= masked[:, lo:hi]
                    assert not (token[pick] == mask_id).any(), "a pass would write the mask token"
                    where = torch.nonzero(pick[0]).flatten()
                    base = x.shape[1] - block + lo
                    x[0, base + where] = token[0, where]
                    passes.append(((base + where).tolist(), token[0, where].tolist(), from_kept))


CASES = [(prompt, 16, SUB, 0.3, True) for prompt in PROMPTS] + [("unaligned", 24, SUB, 0.15, True),
                                                              ("unaligned", 16, SUB, 0.3, False),
                                                              ("aligned", 16, 2, 0.15, True),
                                                              ("short", 16, BLOCK, 0.3, True)]


@pytest.mark.parametrize("prompt, gen_length, sub, threshold, block_cache", CASES)
def test_a_fast_v2_decode_is_its_generate_pass_for_pass(v2, prompt, gen_length, sub, threshold, block_cache):
    """Its caches as its generate keeps them (cache prefix; the sub-block cache on or off; sub-blocks of 4, 2 and
    the whole block): the same tokens at the same positions in every pass, AR steps included. Threshold 0.3 and 0.15
    so that some passes commit more than their most probable position (random weights give probabilities of 0.05 to
    0.6)."""
    trace = dico.generate(v2, PROMPTS[prompt], "fast-v2", mode="semi-ar", gen_length=gen_length,
                          block_length=BLOCK, sub_block=sub, threshold=threshold, block_cache=block_cache)
    m = trace.prompt_length
    ids, passes = fast_v2_reference(v2.model, v2.encode_prompt(PROMPTS[prompt]), v2.mask_id, m + trace.gen_length,
                                    BLOCK, sub, threshold, block_cache)
    assert [([m + p for p in s.committed], s.tokens) for s in trace.steps] == [(p, t) for p, t, _ in passes]
    assert ids[m:] == trace.response
    assert any(len(p) > 1 for p, _, _ in passes)                 # the threshold's branch was taken
    assert any(kept for _, _, kept in passes) == block_cache     # and, with it on, the sub-block cache's


@pytest.mark.parametrize("prompt", PROMPTS)
def test_without_the_sub_block_cache_its_caches_are_exact(v2, prompt):
    """The finished blocks kept and every pass over the whole block: the same decode as with no cache at all (the
    AR steps read the whole-sequence pass at the position before), with fewer positions computed; the sub-block cache
    changes the logits (it reads stale keys and values) and computes fewer still."""
    runs = {name: dico.generate(v2, PROMPTS[prompt], "fast-v2", mode="semi-ar", gen_length=24, block_length=BLOCK,
                                sub_block=SUB, threshold=0.15, **options)
            for name, options in [("none", dict(cache="none", block_cache=False)),
                                  ("prefix", dict(block_cache=False)), ("sub", {})]}
    assert [(s.committed, s.tokens) for s in runs["prefix"].steps] == [(s.committed, s.tokens)
                                                                       for s in runs["none"].steps]
    assert runs["sub"].token_forwards < runs["prefix"].token_forwards < runs["none"].token_forwards


# ------------------------------------------------------------------------------------------- other decoders, refusals

BLOCKWISE = ["vanilla", "topk", "fast", "fast-factor", "dico", "eb", "klass", "llada21", "hierarchy", "credit", "sdar"]


@pytest.mark.parametrize("method", BLOCKWISE)
def test_every_blockwise_decoder_runs_on_it_and_its_exact_cache_changes_nothing(v2, method):
    """Decoders that write only inside the window: the same tokens with the finished blocks kept (``BlockCache``
    through its driver), fewer positions computed."""
    plain = dico.generate(v2, PROMPTS["unaligned"], method, mode="semi-ar", gen_length=16, block_length=BLOCK)
    cached = dico.generate(v2, PROMPTS["unaligned"], method, mode="semi-ar", gen_length=16, block_length=BLOCK,
                           cache="prefix")
    assert v2.mask_id not in plain.response
    assert cached.response == plain.response and cached.nfe == plain.nfe
    assert cached.token_forwards < plain.token_forwards


@pytest.mark.parametrize("method, request_, field", [
    ("fast-v2", {"mode": "non-ar"}, "mode"),
    ("vanilla", {"mode": "non-ar"}, "mode"),
    ("fast-v2", {"block_length": 16}, "block_length"),
    ("fast-v2", {"sub_block": 3}, "sub_block"),
    ("fast-v2", {"cache": "none"}, "block_cache"),
    ("fast-v2", {"cache": "dual", "block_cache": False}, "cache"),
    ("fast-v2", {"cfg_scale": 1.0}, "cfg_scale"),
])
def test_what_it_cannot_do_is_refused_before_any_pass_with_one_line(v2, method, request_, field):
    refused_before_any_pass(v2, field, PROMPTS["short"], method,
                            **({"mode": "semi-ar", "block_length": BLOCK, "gen_length": 8} | request_))


def test_on_a_model_without_blocks_fast_v2_is_the_sub_block_threshold_alone():
    """No AR step and no release code: sub-blocks from the window's start, each pass committing inside the first
    one with masks."""
    from standins import scripted
    trace = dico.generate(scripted(lambda step, r: [0.5] * r.numel(), 8), "w20 w21", "fast-v2", mode="semi-ar",
                          gen_length=8, block_length=8, sub_block=4, cache="none", block_cache=False)
    assert [s.committed for s in trace.steps] == [[0], [1], [2], [3], [4], [5], [6], [7]]


RUNS = [("fast-v2", {}), ("fast-v2", {"block_cache": False, "cache": "none"}), ("fast", {"cache": "prefix"})]


def test_it_decodes_on_the_accelerator_as_on_the_cpu(v2, folder):
    """Its two caches and its AR steps where the model runs (the project's accelerator emulation)."""
    options = dict(mode="semi-ar", gen_length=16, block_length=BLOCK, sub_block=SUB, threshold=0.3)
    with accelerator():
        gpu = dico.load_model(folder, trust_remote_code=True, device="cuda", dtype="float32")
        on_gpu = [dico.generate(gpu, PROMPTS["aligned"], m, **(options | o if m == "fast-v2" else
                                                              {"mode": "semi-ar", "gen_length": 16,
                                                               "block_length": BLOCK} | o)) for m, o in RUNS]
    on_cpu = [dico.generate(v2, PROMPTS["aligned"], m, **(options | o if m == "fast-v2" else
                                                         {"mode": "semi-ar", "gen_length": 16,
                                                          "block_length": BLOCK} | o)) for m, o in RUNS]
    assert [t.response for t in on_gpu] == [t.response for t in on_cpu]
    assert all(t.device == "cuda" for t in on_gpu)


def test_a_fork_of_a_fast_v2_run_continues_as_its_parent_and_a_take_back_is_decoded_again(v2):
    """A fork replays the parent's passes, so its block and sub-block caches are the parent's at that step; a token
    taken back makes the block cache anew and is decoded again."""
    from dico.forking import fork
    parent = dico.generate(v2, PROMPTS["unaligned"], "fast-v2", mode="semi-ar", gen_length=16, block_length=BLOCK,
                           sub_block=SUB, threshold=0.3)
    story = [(s.committed, s.tokens) for s in parent.steps]
    for at in sorted({1, parent.nfe // 2, parent.nfe - 1}):
        child = fork(v2, parent, at)
        assert [(s.committed, s.tokens) for s in child.steps] == story and child.response == parent.response
    last = parent.steps[-1].committed[0]
    child = fork(v2, parent, parent.nfe, remask=[last])
    assert child.steps[-1].committed == [last] and child.nfe == parent.nfe + 1


def test_a_prompt_of_exactly_one_block_is_stored_and_its_first_token_is_an_ar_step(v2):
    """Its generate would neither store such a prompt nor read it (decoding the next block without it); here it is
    stored as longer prompts are, and the block's first token is the argmax of the prompt's last position."""
    prompt = "w1 w2 w3"                                                          # 8 tokens: one block
    ids = v2.encode_prompt(prompt)
    assert len(ids) == BLOCK
    trace = dico.generate(v2, prompt, "fast-v2", mode="semi-ar", gen_length=16, block_length=BLOCK, sub_block=SUB)
    logits, _ = v2.forward(torch.tensor([ids + [v2.mask_id]]))
    logits[0, BLOCK, v2.mask_id] = -torch.inf                                   # never a prediction (dico.sampling)
    assert trace.steps[0].committed == [0] and trace.steps[0].tokens == [int(logits[0, BLOCK].argmax())]
