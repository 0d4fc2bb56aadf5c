"""The embedded dLLM's training objective (LLaDA / MDLM): what one batch holds and masks, and the loss.

Objective (LLaDA eq. 3): draw t ~ U(eps, 1) per example, mask every response token (answer and its
end-of-text padding) with probability t, never the prompt; cross-entropy on the masked tokens
weighted 1/t, normalised by the response length. Half the examples (``--occurrence-share``) also mask
one number or prompt word of the answer with all its later occurrences, so that results are computed
and names copied from the prompt rather than read back from a later mention (see ``occurrence_mask``).

Layout of a sequence (training and decoding alike): ``[CLS] prompt [SEP] response <|eot|>...``,
the response region padded with end-of-text to a length drawn per batch, so that any
gen_length the user picks is in distribution.
"""
from __future__ import annotations

import random

from dico.embedded.tokenizer import entity_spans

MAX_PROMPT_TOKENS = 128


def make_batch(items, tokenizer, rng: random.Random, max_gen: int, long_share: float = 0.15,
               occurrence_share: float = 0.0, number=None, tail_share: float = 0.0, prefix_share: float = 0.0):
    """Token ids, attention mask, response mask and the extra (occurrence or tail) mask of one batch.

    The response is padded with <|eot|>: most batches only a little past the longest answer (the end-of-text tail
    is easy to learn and costs compute); a ``long_share`` of batches pads far, so every position up to ``max_gen``
    is trained and any gen_length a user picks is in distribution. ``tail_share`` of the rows mask the whole answer
    and the first few end-of-text tokens after it (see ``tail_length``); ``prefix_share`` mask everything after a
    random point of the response, the state semi-AR decoding reaches (a written prefix, the rest masked to the end,
    end-of-text included); of the others, ``occurrence_share``
    also mask one number or one name/object mention with all its later mentions (see ``occurrence_positions``),
    or, in a pick or team answer, one chosen item whole (see ``chosen_items``).
    """
    import torch

    prompts = [tokenizer(item.prompt)["input_ids"][:MAX_PROMPT_TOKENS] for item in items]
    answers = [tokenizer(item.answer, add_special_tokens=False)["input_ids"] for item in items]
    longest = max(len(a) for a in answers) + 1
    gen = longest + rng.randint(0, 16) if rng.random() >= long_share else rng.randint(longest, max(longest, max_gen))
    width = max(len(p) for p in prompts) + gen
    ids = torch.full((len(items), width), tokenizer.pad_token_id, dtype=torch.long)
    response = torch.zeros_like(ids, dtype=torch.bool)
    extra = torch.zeros_like(ids, dtype=torch.bool)
    for row, (item, p, a) in enumerate(zip(items, prompts, answers)):
        seq = p + a + [tokenizer.eos_token_id] * (gen - len(a))
        ids[row, :len(seq)] = torch.tensor(seq)
        response[row, len(p):len(seq)] = True
        if tail_share > 0 and rng.random() < tail_share:
            extra[row, len(p):len(p) + tail_length(len(a), gen, rng)] = True
        elif prefix_share > 0 and rng.random() < prefix_share:
            extra[row, len(p) + rng.randint(0, len(a)):len(seq)] = True
        elif occurrence_share > 0 and rng.random() < occurrence_share:
            names = item.entities or chosen_items(item)
            spans = entity_spans(tokenizer, item.answer, names) if names else []
            for i in occurrence_positions(a, spans, number, rng):
                extra[row, len(p) + i] = True
    return ids, (ids != tokenizer.pad_token_id).long(), response, extra


def chosen_items(item) -> tuple:
    """The items a pick or team answer names, as mentions ``occurrence_positions`` may mask one of.

    Masking one chosen item whole while the others stay visible trains what committing one slot at a time needs:
    the masked slot is any offered item *not yet named*. Random masking rarely shows that state sharply, and
    predicting every offered item costs only log(n / (n - 1)) a piece more than excluding the named ones: the
    step-57,113 model, trained without this, repeated items with Vanilla ("I pick drums and drums.", 8 of 20
    picks right)."""
    from dico.embedded.picks import chosen

    return tuple(chosen(item.family, item.answer) or ()) if item.family in ("pick", "team") else ()


def tail_length(answer_length: int, gen: int, rng: random.Random, reach: int = 12) -> int:
    """How many response positions a tail row masks: the whole answer and 0 to ``reach`` end-of-text tokens after it.

    Vanilla non-AR commits end-of-text from the far right inward before any word of the answer, and stops where
    the model first doubts that a position is end-of-text: that decides how long the answer may be. Random
    masking almost never shows an end-of-text tail with the whole answer hidden, so the model had not learned
    where an answer of this prompt must end (measured on the step-15,946 model: 33% of word problems right non-AR,
    most of the misses one or two steps short). A tail row is that state: the model must tell from the prompt
    alone where the answer ends, and fill an answer of that length."""
    return answer_length + rng.randint(0, min(reach, gen - answer_length))


def occurrence_positions(answer: list[int], spans, number, rng: random.Random) -> list[int]:
    """One number or one name/object mention of ``answer``, with every later mention of it (answer indices).

    Random masking usually leaves some re-mention of a value visible ("13 - 9 = [M]. Taking away 1 leaves
    4 - 1 ..."), so a small model leans on reading it back rather than computing it, or on copying a name from
    the answer rather than the prompt (measured for the stage-4 model: every number right when its re-mentions
    showed, often wrong when they were masked too, which is the state confidence-ordered decoding reaches).
    Masking all later mentions leaves only the prompt and the earlier working to read from. Names and objects
    (``spans``: per entity, its mentions' token indices) are drawn half the time when the answer has any: copying
    them is what the earlier model failed at. Any mask pattern trains the same conditionals p(masked | visible);
    this gives more weight to the patterns decoding meets."""
    mentions = [(e, k) for e, ms in enumerate(spans) for k in range(len(ms))]
    numbers = [i for i, t in enumerate(answer) if number is not None and bool(number[t])]
    if mentions and (not numbers or rng.random() < 0.5):
        e, k = mentions[rng.randrange(len(mentions))]
        return [i for mention in spans[e][k:] for i in mention]
    if not numbers:
        return []
    start = numbers[rng.randrange(len(numbers))]
    return [i for i in range(start, len(answer)) if answer[i] == answer[start]]


def diffusion_loss(model, ids, attention, response, mask_id: int, generator=None, *, extra=None, edit=None):
    """LLaDA's masked-diffusion loss: mask with prob t ~ U(eps, 1), CE on masked tokens weighted 1/t.

    ``extra`` (b, l bool) adds positions to mask beyond the random ones (see occurrence_mask); those count with
    weight 1, not 1/t: a row drawn with t = 0.001 would otherwise weigh them a thousandfold (measured: that
    made the first version of this run worse at arithmetic, not better).

    ``edit`` (an ``Editing``) adds LLaDA 2.1's token-to-token objective (see ``corrupt``): in a share of the rows some
    written response tokens are replaced by other tokens, and the loss also covers every written response position
    of those rows, weight 1: predict the original where a token was replaced, keep it where it was not. Random
    draws come from ``generator`` on the CPU (the same run on any device draws the same masks).
    """
    import torch
    import torch.nn.functional as F

    b, device = ids.shape[0], ids.device
    t = (torch.rand(b, 1, generator=generator) * (1 - 1e-3) + 1e-3).to(device)                 # b, 1
    random_masked = (torch.rand(ids.shape, generator=generator).to(device) < t) & response   # b, l
    masked = random_masked | extra if extra is not None else random_masked
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    written = torch.zeros_like(masked)
    if edit is not None:
        noisy, written = edit.corrupt(noisy, response & ~masked, generator)
    logits = model(input_ids=noisy, attention_mask=attention).logits               # b, l, v
    scored = masked | written
    ce = F.cross_entropy(logits[scored].float(), ids[scored], reduction="none")
    weights = torch.where(random_masked, 1.0 / t, torch.ones_like(t))[scored]
    return (ce * weights).sum() / response.sum().clamp(min=1)


class Editing:
    """LLaDA 2.1's token-to-token corruption (its report's M2T + T2T training): in ``share`` of the rows, each written
    response token (answer or end-of-text, not masked) is replaced with probability r ~ U(0, ``rate``) per row by a
    token drawn uniformly from ``vocabulary`` (the ordinary tokens: no specials but end-of-text).

    Without it the model's prediction at a written position was never trained, and LLaDA 2.1's editing rule run on it
    flips tokens back and forth every pass; with it the model learns p(original | a possibly wrong token
    there) at every written position."""

    def __init__(self, share: float, rate: float, vocabulary):
        import torch

        self.share, self.rate = share, rate
        self.vocabulary = torch.as_tensor(vocabulary, dtype=torch.long)

    def corrupt(self, noisy, written, generator=None):
        """``noisy`` with some ``written`` positions replaced, and the mask of the rows' written positions to score
        (every written position of a corrupted row, replaced or kept)."""
        import torch

        b, device = noisy.shape[0], noisy.device
        rows = (torch.rand(b, 1, generator=generator) < self.share).to(device)
        r = (torch.rand(b, 1, generator=generator) * self.rate).to(device)
        replace = (torch.rand(noisy.shape, generator=generator).to(device) < r) & written & rows
        draws = torch.randint(len(self.vocabulary), noisy.shape, generator=generator)
        replacements = self.vocabulary[draws].to(device)
        return torch.where(replace, replacements, noisy), written & rows
