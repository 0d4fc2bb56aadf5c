"""The official samplers' options (docs/decoding.md §2.3, §4; ``dico.sampling``, Vanilla's ``steps``, ``remasking``).

Vanilla with LLaDA's defaults commits what LLaDA's ``generate.py`` commits: ``llada_reference`` below is that
rule written from its published description (per block, an even share of the block's masks per step; the
predicted token is the argmax, its confidence the softmax probability over every token including the mask;
the top share by confidence inside the block is committed; classifier-free guidance mixes a pass with the
prompt masked). Sampling with a temperature is reproducible for a seed.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import dico
from standins import EOS_ID, MASK_ID, VOCAB, FakeTokenizer, RandomLM, Row, profile, scripted, settle, zipf_frequency

torch.set_num_threads(1)

PROMPT = "w20 w21 w22"


class MaskInSoftmaxLM(RandomLM):
    """Random logits whose mask token logit sits at each row's mean: never the argmax, but in the softmax."""

    def forward(self, input_ids, **kwargs):
        logits = super().forward(input_ids).logits
        logits[..., self.mask_id] = logits.mean(dim=-1)
        return SimpleNamespace(logits=logits)


def predictor(seed: int = 0):
    return dico.from_module(MaskInSoftmaxLM(seed, scale=1.5), FakeTokenizer(), kind="masked-lm", mask_id=MASK_ID,
                            max_length=128, name="llada-like", token_frequency=zipf_frequency(VOCAB))


def llada_reference(model, prompt: list[int], steps: int, gen_length: int, block_length: int, cfg_scale: float = 0.0):
    """The positions (response offsets) LLaDA's generate.py transfers at each step, temperature 0."""
    m = len(prompt)
    x = torch.tensor([prompt + [MASK_ID] * gen_length])
    per_block = steps // (gen_length // block_length)
    transfers = []
    for block in range(gen_length // block_length):
        end = m + (block + 1) * block_length
        left = int((x[0, end - block_length:end] == MASK_ID).sum())
        shares = [left // per_block + (1 if i < left % per_block else 0) for i in range(per_block)]
        for share in shares:
            if cfg_scale > 0:                   # one call on [x, x with the prompt masked], as LLaDA makes it
                unprompted = x.clone()
                unprompted[0, :m] = MASK_ID
                cond, uncond = model(input_ids=torch.cat([x, unprompted])).logits.double()
                logits = uncond + (cfg_scale + 1) * (cond - uncond)
            else:
                logits = model(input_ids=x).logits[0].double()
            token = logits.argmax(-1)
            conf = torch.softmax(logits, -1).gather(1, token[:, None])[:, 0]
            conf[end:] = -torch.inf
            conf[x[0] != MASK_ID] = -torch.inf
            chosen = conf.topk(share).indices
            x[0, chosen] = token[chosen]
            transfers.append(sorted(int(i) - m for i in chosen))
    return transfers, x[0, m:].tolist()


@pytest.mark.parametrize("steps, gen_length, block_length, cfg_scale", [
    (16, 16, 16, 0.0),        # LLaDA's defaults: steps = gen_length = block_length
    (8, 16, 16, 0.0),         # two tokens a step
    (10, 16, 16, 0.0),        # uneven shares: 2 2 2 2 2 2 1 1 1 1
    (8, 16, 4, 0.0),          # semi-AR blocks
    (16, 16, 8, 1.5),         # classifier-free guidance
])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vanilla_commits_what_lladas_generate_commits(steps, gen_length, block_length, cfg_scale, seed):
    p = predictor(seed)
    mode = "semi-ar" if block_length < gen_length else "non-ar"
    trace = dico.generate(p, PROMPT, "vanilla", mode=mode, gen_length=gen_length, block_length=block_length,
                          steps=steps, cfg_scale=cfg_scale, mask_in_softmax=True)
    transfers, response = llada_reference(p.model, p.encode_prompt(PROMPT), steps, gen_length, block_length,
                                          cfg_scale)
    assert [s.committed for s in trace.steps] == transfers
    assert trace.response == response and trace.nfe == steps


def test_steps_must_split_evenly_over_the_blocks():
    with pytest.raises(ValueError, match=r"^steps: 6 is not a multiple of the number of blocks \(4\)"):
        dico.generate(predictor(), PROMPT, "vanilla", mode="semi-ar", gen_length=16, block_length=4, steps=6)


def test_more_steps_than_masks_still_commit_a_token_each_step():
    # LLaDA's shares would be 1 1 ... 1 0 0 ...: a pass that commits nothing is not made (progress invariant)
    trace = dico.generate(predictor(), PROMPT, "vanilla", gen_length=8, steps=12)
    assert trace.nfe == 8 and all(len(s.committed) == 1 for s in trace.steps)


# ============================================================================ sampling

@pytest.mark.parametrize("method", [m for m in dico.METHODS if m != "wino"])     # WINO: a stand-in has no mirror
def test_sampling_is_reproducible_for_a_seed_and_differs_between_seeds(method):
    def response(seed):
        return dico.generate(predictor(3), PROMPT, method, gen_length=16, temperature=1.0, random_seed=seed).response
    assert response(7) == response(7)
    assert response(7) != response(8)


def test_top_k_1_samples_the_argmax_at_any_temperature():
    greedy = dico.generate(predictor(4), PROMPT, "fast", gen_length=16)
    sampled = dico.generate(predictor(4), PROMPT, "fast", gen_length=16, temperature=2.0, top_k=1, random_seed=5)
    assert sampled.response == greedy.response



def test_greedy_takes_the_first_of_equal_logits_as_torch_argmax_does():
    """In bfloat16 two tokens' logits are often exactly equal; the published greedy codes (torch.argmax, max) take
    the first, and topk's order among equals is unspecified."""
    from dico.sampling import Sampler
    from dico.settings import SamplingSettings
    logits = torch.full((2, 64), -1.0, dtype=torch.bfloat16)
    logits[0, [13, 35]] = 6.09375
    logits[1, [2, 40, 50]] = 3.0
    conf, pred, margin = Sampler(SamplingSettings()).score(logits)[:3]
    assert pred.tolist() == [13, 2] and margin.tolist() == [0.0, 0.0]

def test_a_small_top_p_keeps_only_the_most_likely_token():
    greedy = dico.generate(predictor(5), PROMPT, "vanilla", gen_length=12)
    sampled = dico.generate(predictor(5), PROMPT, "vanilla", gen_length=12, temperature=1.0, top_p=1e-6)
    assert sampled.response == greedy.response


def test_top_p_then_top_k_limit_the_tokens_a_temperature_samples():
    from dico.sampling import Sampler
    from dico.settings import SamplingSettings

    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log().repeat(2000, 1)         # 2000 draws from one distribution

    def support(**options):
        return set(Sampler(SamplingSettings(temperature=1.0, **options)).score(logits)[1].tolist())
    assert support() == {0, 1, 2, 3}
    assert support(top_p=0.5) == {0, 1}                 # 0.4 < 0.5: the token that crosses top_p stays
    assert support(top_p=0.8) == {0, 1, 2}
    assert support(top_p=0.8, top_k=2) == {0, 1}


def test_confidence_stays_the_models_probability_of_the_sampled_token():
    trace = dico.generate(predictor(6), PROMPT, "vanilla", gen_length=8, temperature=1.0, random_seed=1)
    first = trace.steps[0]
    logits = predictor(6).model(input_ids=torch.tensor([predictor().encode_prompt(PROMPT) + [MASK_ID] * 8])).logits
    logits = logits[0, 3:].clone()
    logits[:, MASK_ID] = -torch.inf
    probs = torch.softmax(logits, -1)
    want = [float(probs[i, t]) for i, t in enumerate(first.prediction)]
    assert first.confidence == pytest.approx(want, abs=1e-5)


# ============================================================================ end-of-text options

def eos_script(step, response):
    """Position 0 predicts the end-of-text token with confidence 0.9; every other position 0.5 on its own token."""
    masked = (response == MASK_ID).tolist()
    return Row(conf=[0.9 if i == 0 else 0.5 + 0.01 * i for i in range(len(masked))],
               pred=[EOS_ID if i == 0 else 10 + i for i in range(len(masked))])


def test_eos_last_commits_end_of_text_predictions_last():
    plain = dico.generate(scripted(eos_script, 4), PROMPT, "vanilla", gen_length=4)
    last = dico.generate(scripted(eos_script, 4), PROMPT, "vanilla", gen_length=4, eos_last=True)
    assert plain.steps[0].committed == [0] and last.steps[-1].committed == [0]
    assert last.steps[0].confidence[0] == 0.0


def test_ban_eos_never_predicts_an_end_of_text_token():
    trace = dico.generate(scripted(eos_script, 4), PROMPT, "vanilla", gen_length=4, ban_eos=True)
    assert EOS_ID not in trace.response
    assert all(EOS_ID not in [t for t in s.prediction if t is not None] for s in trace.steps)


# ============================================================================ Dream's algorithms

# Position 0: p1 0.45, p2 0.41 (logit margin 0.1); position 1: p1 0.40, p2 0.03 (logit margin 2.5).
DREAM_ROW = Row(conf=[0.45, 0.4], pred=[11, 12], margin=[0.1, 2.5])


@pytest.mark.parametrize("remasking, first", [("low_confidence", 0), ("maskgit_plus", 0), ("topk_margin", 1),
                                              ("entropy", 0)])
def test_dreams_algorithms_rank_by_their_own_confidence(remasking, first):
    # entropy: position 0 keeps 86% of its mass on two tokens, position 1 spreads 60% over the vocabulary
    trace = dico.generate(scripted([DREAM_ROW], 2, then=settle()), PROMPT, "vanilla", gen_length=2,
                          remasking=remasking)
    assert trace.steps[0].committed == [first]


def test_dream_steps_commit_its_share_of_the_masks_on_its_timesteps():
    trace = dico.generate(scripted(lambda step, ids: profile(20, 0.5), 20), PROMPT, "vanilla", gen_length=20,
                          steps=4, remasking="maskgit_plus")
    counts = [len(s.committed) for s in trace.steps]
    # 1 - s/t on linspace(1, 1e-3, 5): 0.2498, 0.333, 0.4996, then all: int(20 * .2498) = 4, int(16 * .333) = 5, ...
    assert counts == [4, 5, 5, 6] and trace.nfe == 4


def test_origin_decodes_random_positions_reproducibly_and_finishes_within_its_steps():
    def run(seed):
        return dico.generate(predictor(2), PROMPT, "vanilla", gen_length=16, steps=4, remasking="origin",
                             random_seed=seed)
    first, again, other = run(3), run(3), run(4)
    assert [s.committed for s in first.steps] == [s.committed for s in again.steps]
    assert [s.committed for s in first.steps] != [s.committed for s in other.steps]
    assert first.nfe <= 4 and all(s.committed for s in first.steps)


def test_random_remasking_is_seeded():
    def run(seed):
        return [s.committed for s in dico.generate(predictor(2), PROMPT, "vanilla", gen_length=12, steps=6,
                                                   remasking="random", random_seed=seed).steps]
    assert run(1) == run(1) != run(2)
