"""Method ``sdar`` decodes as SDAR's ``block_diffusion_generate`` (JetAstra/SDAR generate.py, MIT) does, pass for pass.

The reference below is written for these tests from the published procedure: the block-causal mask over whole
blocks, a prefill pass storing the prompt's whole blocks in the model's own DynamicCache, then per block up to
steps + 1 passes: with no mask left a pass stores the block and ends it, otherwise a pass reads the stored blocks,
draws a token at every position of the block with torch.multinomial (the global generator, seeded by the caller with
torch.manual_seed), and commits the pass's share of the block by its remasking strategy. It runs on the SDAR-shaped
stand-in with random weights (dico/bench/sdar_standin.py) and records each denoising pass's positions and tokens."""
import pytest
import torch
import torch.nn.functional as F
from transformers.cache_utils import DynamicCache

import dico
from dico.sdar import transfer_schedule
from standins import block_model_folder, scripted

BLOCK = 4
ALIGNED, UNALIGNED = "w1 w2 w3", "w1 w2"          # chat-formatted: 8 and 7 prompt tokens


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
    torch.set_num_threads(1)
    folder = block_model_folder(tmp_path_factory.mktemp("sdar") / "sdar-standin", seed=1)
    return dico.load_model(folder, trust_remote_code=True, dtype="float32")


def sdar_reference(model, prompt_ids, mask_id, gen_length, block, steps, remasking, threshold, seed):
    """SDAR's procedure with batch 1 and no stopping ids: the final ids and, per denoising pass, the positions
    (absolute, ascending) and the tokens written. Asserts that none of the corner cases its code handles unlike a
    step here occurs (a chosen position already written, a drawn mask token)."""
    torch.manual_seed(seed)
    m = len(prompt_ids)
    blocks = -(-(m + gen_length) // block)
    total = blocks * block
    allowed = torch.tril(torch.ones(blocks, blocks)).repeat_interleave(block, 0).repeat_interleave(block, 1)[None]
    x = torch.full((1, total), mask_id, dtype=torch.long)
    x[0, :m] = torch.tensor(prompt_ids)
    past = DynamicCache()
    whole = (m // block) * block
    if whole:
        model(x[:, :whole], attention_mask=allowed[:, :whole, :whole], position_ids=torch.arange(whole)[None],
              past_key_values=past, use_cache=True, store_kv=True)
    shares = transfer_schedule(block, steps)
    passes = []
    for b in range(m // block, blocks):
        lo, hi = b * block, (b + 1) * block
        cur = x[:, lo:hi].clone()
        att, pos = allowed[:, lo:hi, :hi], torch.arange(lo, hi)[None]
        for step in range(steps + 1):
            masked = cur == mask_id
            if not masked.any():
                model(cur, attention_mask=att, position_ids=pos, past_key_values=past, use_cache=True, store_kv=True)
                break
            logits = model(cur, attention_mask=att, position_ids=pos, past_key_values=past, use_cache=True,
                           store_kv=False).logits
            probs = F.softmax(logits.reshape(-1, logits.shape[-1]), dim=-1)
            token = torch.multinomial(probs, num_samples=1)
            chance = torch.gather(probs, -1, token).view(1, -1)
            token = token.view(1, -1)
            share = shares[step]
            conf = torch.where(masked, chance, -torch.inf)
            pick = torch.zeros_like(masked)
            if remasking == "sequential":
                first = int(masked[0].nonzero()[0])
                pick[0, first:first + share] = True
            else:
                high = conf[0] > threshold
                if remasking == "low_confidence_dynamic" and int(high.sum()) >= share:
                    pick[0] = high
                else:
                    pick[0, torch.topk(conf[0], share).indices] = True
            assert not (pick & ~masked).any() and not (token[pick] == mask_id).any(), "a corner case of SDAR's code"
            cur[pick] = token[pick]
            where = torch.nonzero(pick[0]).flatten()
            passes.append(((lo + where).tolist(), token[0, where].tolist()))
        x[:, lo:hi] = cur
    return x[0].tolist(), passes


CASES = [(UNALIGNED, 4, how) for how in ("low_confidence_dynamic", "low_confidence_static", "sequential")] + \
        [(ALIGNED, 2, how) for how in ("low_confidence_dynamic", "low_confidence_static", "sequential")]


@pytest.mark.parametrize("cache", ["prefix", "none"])
@pytest.mark.parametrize("prompt, steps, remasking", CASES)
def test_a_seeded_sdar_decode_is_sdars_generate_pass_for_pass(sdar, prompt, steps, remasking, cache):
    """Threshold 0.1, so that the dynamic strategy commits more than its share in some passes (random weights draw
    tokens of probability 0.05 to 0.6)."""
    settings = dict(remasking=remasking, steps=steps, threshold=0.1, random_seed=7)
    trace = dico.generate(sdar, prompt, "sdar", mode="semi-ar", gen_length=16, block_length=BLOCK, cache=cache,
                          **settings)
    m = trace.prompt_length
    with torch.random.fork_rng():
        ids, passes = sdar_reference(sdar.model, sdar.encode_prompt(prompt), sdar.mask_id, 16, BLOCK, steps,
                                     remasking, 0.1, seed=7)
    ours = [([m + p for p in s.committed], s.tokens) for s in trace.steps]
    assert ours == passes
    assert ids[m:] == trace.response
    if remasking == "low_confidence_dynamic" and steps == BLOCK:
        assert any(len(p) > 1 for p, _ in passes)            # the threshold's branch was taken (the share is 1)


def test_the_schedule_splits_a_block_as_sdar_does():
    assert transfer_schedule(4, 4) == [1, 1, 1, 1]
    assert transfer_schedule(8, 3) == [3, 3, 2]
    assert transfer_schedule(4, 8) == [1, 1, 1, 1, 0, 0, 0, 0]


def test_a_drawn_mask_token_leaves_its_position_masked():
    """SDAR writes a drawn mask token back, so its position stays masked; here the pass commits the rest (none at
    all when every chosen draw was the mask) and the decode goes on."""
    from dico.rules import Scores
    rule = dico.methods.make_rule("sdar", "semi-ar", {"remasking": "low_confidence_static", "steps": 2})
    rule.plan(4, 4)
    rule.mask_id = 4
    rule.start((0, 4))
    masked = torch.ones(4, dtype=torch.bool)
    scores = Scores(conf=torch.tensor([0.9, 0.8, 0.1, 0.1]), pred=torch.tensor([4, 12, 13, 14]),
                    margin=torch.zeros(4), masked=masked, window=(0, 4))
    assert rule.choose(scores).commit == [1]
    scores.pred = torch.tensor([4, 4, 13, 14])
    assert rule.choose(scores).commit == []


def test_sdar_runs_on_a_bidirectional_model_too():
    """On any other model the block is the window (semi-AR) or the whole response (non-AR)."""
    trace = dico.generate(scripted(lambda step, r: [0.5] * r.numel(), 8), "w20 w21", "sdar", mode="semi-ar",
                          gen_length=8, block_length=4, steps=4)
    assert trace.nfe == 8 and all(len(s.committed) <= 1 for s in trace.steps)
