"""Test references for EB-Sampler, KLASS, WINO and Saber: each sampler as one plain loop, written from the published
algorithm's description (docs/decoding.md §7; /work/shared/notes/decoders.md), independent of ``dico``'s loop and rules.

    steps, response = wino(forward, prompt_ids, mask_id, gen_length=96, block_length=32)
    steps[k] == {"committed": [...], "tokens": [...], "remasked": [...]}      # response offsets, as a trace's steps

Every function drives a model through ``forward(ids) -> logits (l, v)`` (WINO: ``forward(ids, allowed, positions)``,
``bert_forward`` below for the embedded model), greedy, one forward pass per step, and returns what each pass
committed and took back. ``published`` picks whose conventions score the logits:

- ``published=True``: the published code's own, so that the reference commits what that code commits on the same
  logits (tests/fidelity_run.py checks it against the code itself): the argmax and the softmax run over every token,
  the mask token included; each sampler's own precision (KLASS and WINO float64, EB and Saber float32); ties and
  top-k exactly as its ``torch.topk`` / ``argsort`` calls break them, a top-k that asks for more positions than are
  left taking some outside the candidates, as the code's does.
- ``published=False``: the project's (docs/decoding.md §2.1, §7): the mask token is never predicted and leaves the
  softmax; confidences and entropies in float32, KL in float64; ties to the lower position; a step commits only
  masked positions of its window and takes back only decoded ones. ``tests/test_fidelity.py`` holds ``dico``'s
  methods to these, step for step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# ------------------------------------------------------------------------------------------------ scoring

@dataclass(frozen=True)
class Conventions:
    """Where the published code and the project score differently, one switch each (True: the published code's)."""
    mask_token: bool = False        # the mask token may be the argmax and stays in the softmax
    precision: bool = False         # the sampler's own precision (KLASS, WINO: float64); else float32, KL in float64
    torch_order: bool = False       # torch's top-k / argsort tie order, a top-k may run past the candidates


PUBLISHED, PROJECT = Conventions(True, True, True), Conventions(False, False, False)


def conventions(published) -> Conventions:
    """``published`` as a ``Conventions`` (True: every published convention; False: every project one)."""
    if isinstance(published, Conventions):
        return published
    return PUBLISHED if published else PROJECT


def scored(logits: torch.Tensor, mask_id: int, conv: Conventions, dtype: torch.dtype, argmax_of_probs: bool = False):
    """(probs, pred, conf) of ``logits`` (l, v): the distribution, its argmax and the argmax's probability. The argmax
    is taken over the logits (KLASS's code takes it over its float64 probabilities: ``argmax_of_probs``)."""
    x = logits.to(dtype if conv.precision else torch.float32).clone()
    if not conv.mask_token:
        x[:, mask_id] = -torch.inf                  # the project never predicts the mask token
    probs = torch.softmax(x, dim=-1)
    pred = (probs if argmax_of_probs and conv.precision else x).argmax(dim=-1)
    return probs, pred, probs.gather(1, pred[:, None])[:, 0]


def highest(values: torch.Tensor, allowed: torch.Tensor, k: int, torch_order: bool) -> torch.Tensor:
    """Indices of the k highest ``values`` among ``allowed``. Published: ``torch.topk`` over the whole vector with -inf
    outside ``allowed`` (torch's tie order; past the allowed ones it picks -inf entries). Else: only allowed
    positions, at most all of them, ties to the lower position."""
    if torch_order:
        return torch.topk(torch.where(allowed, values, torch.full_like(values, -torch.inf)), k=k).indices
    positions = torch.nonzero(allowed).flatten()
    order = values[positions].sort(descending=True, stable=True).indices
    return positions[order[:k]]


def lowest(values: torch.Tensor, allowed: torch.Tensor, k: int, torch_order: bool) -> torch.Tensor:
    """Indices of the k lowest ``values`` among ``allowed`` (+inf outside them in torch's order)."""
    if torch_order:
        return torch.topk(torch.where(allowed, values, torch.full_like(values, torch.inf)), k=k, largest=False).indices
    return highest(-values, allowed, k, torch_order=False)


def record(steps: list, m: int, n: int, x: torch.Tensor, mask_id: int, commit: torch.Tensor, tokens: torch.Tensor,
           remask: torch.Tensor | None = None) -> None:
    """Write a pass's commits, then its re-masks, into ``x`` (l,) and note what changed, in response offsets:
    ``committed``/``tokens`` (mask -> token), ``remasked`` (token -> mask). Only the published code's top-k past the
    candidates writes elsewhere: ``overwritten`` ([offset, old, new]: a decoded token replaced), ``rewritten`` (a
    write that changed nothing) and ``outside`` ([sequence offset, old, new]: a change outside the response)."""
    step = {"committed": [], "tokens": [], "remasked": [], "overwritten": [], "rewritten": [], "outside": []}
    writes = [(commit, tokens)] + ([(remask, torch.full_like(x, mask_id))] if remask is not None else [])
    for where, values in writes:
        for pos in sorted(where.tolist()):
            old, new = int(x[pos]), int(values[pos])
            x[pos] = new
            r = pos - m
            if not 0 <= r < n:
                if old != new:
                    step["outside"].append([pos, old, new])
            elif old == new:
                step["rewritten"].append(r)
            elif old == mask_id:
                step["committed"].append(r)
                step["tokens"].append(new)
            elif new == mask_id:
                step["remasked"].append(r)
            else:
                step["overwritten"].append([r, old, new])
    steps.append(step)


def blocks(m: int, gen_length: int, block_length: int):
    """The semi-AR blocks (sequence offsets); one block of the whole response in non-AR mode."""
    return [(m + s, m + s + block_length) for s in range(0, gen_length, block_length)]


def even_shares(masks: int, steps: int) -> list[int]:
    """LLaDA's schedule: ``masks`` split over ``steps`` as evenly as possible, the larger shares first."""
    base, extra = divmod(masks, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


# ------------------------------------------------------------------------------------------------ EB-Sampler

@torch.no_grad()
def eb_sampler(forward, prompt: list[int], mask_id: int, gen_length: int, block_length: int, gamma: float = 0.1,
               published: bool | Conventions = False):
    """EB-Sampler as the DiCo release runs it (``entropy_bound``): in the current block, order the masked positions of
    positive confidence by confidence, highest first, and commit the longest prefix whose entropies summed, less the
    largest of them, stay <= gamma; the entropy is of each position's full distribution, in nats. The prefix always
    holds the first position. No memory from pass to pass, nothing taken back."""
    conv, m = conventions(published), len(prompt)
    x = torch.tensor(prompt + [mask_id] * gen_length)
    steps = []
    for start, end in blocks(m, gen_length, block_length):
        while bool((x[start:end] == mask_id).any()):
            logits = forward(x[None])
            probs, pred, conf = scored(logits, mask_id, conv, torch.float32)
            open_ = torch.zeros_like(x, dtype=torch.bool)
            open_[start:end] = x[start:end] == mask_id
            cand = torch.nonzero(open_ & (conf > 0)).flatten()
            if conv.torch_order:            # argsort, as the code calls it
                order = cand[torch.argsort(conf[cand], descending=True)]
            else:
                order = highest(conf, open_ & (conf > 0), len(cand), torch_order=False)
            if conv.precision:              # the code's: torch.distributions' entropy of the logits
                kept = logits[order].clone()
                if not conv.mask_token:
                    kept[:, mask_id] = -torch.inf
                entropy = torch.distributions.Categorical(logits=kept).entropy()
            else:
                entropy = torch.special.entr(probs[order]).sum(dim=-1)
            spent = entropy.cumsum(0) - entropy.cummax(0).values
            k = int((spent <= gamma).sum())
            commit = order[:k] if k > 0 else highest(conf, open_, 1, conv.torch_order)  # the release's top-1 fallback
            record(steps, m, gen_length, x, mask_id, commit, pred)
    return steps, x[m:].tolist()


# ------------------------------------------------------------------------------------------------------ KLASS

@torch.no_grad()
def klass(forward, prompt: list[int], mask_id: int, gen_length: int, block_length: int, confidence: float = 0.9,
          kl: float = 0.01, history: int = 2, steps: int = 0,
          published: bool | Conventions = False, port: bool = False):
    """KLASS as its authors' ``stable_confident_decode`` (alg="klass"). Each pass computes, at every position, the KL
    divergence of its distribution from the previous pass's (zeros before the first pass, log(p + 1e-12) on both
    sides) and keeps the last ``history`` of them; none of this is reset when a block starts. A masked position of
    the block is ready when its confidence is above ``confidence`` and all its kept KL values are below ``kl``,
    tested only from the block's pass ``history - 1`` on (the pass count restarts in each block). Commit every
    ready position; when none is ready, LLaDA's schedule: ``steps`` (0: gen_length) split evenly over the blocks,
    the block's masks split evenly over its passes, the most confident share committed. A block gets at most its
    share of passes (with steps = gen_length every pass commits at least one, so it always finishes).

    ``port``: the DiCo release's port (``dllm/KLASS.py``, its run script's ``fixed`` 0.9) instead: the KL history
    forgotten when a block starts (the first KL of a block is against zeros again), the published confidence in
    float32 from the logits' argmax, one token a pass when none is ready, and no cap on a block's passes."""
    conv, m = conventions(published), len(prompt)
    x = torch.tensor(prompt + [mask_id] * gen_length)
    per_block = (steps or gen_length) // (gen_length // block_length)
    kept = torch.zeros(len(x), history, dtype=torch.float64)
    previous = None
    out = []
    for start, end in blocks(m, gen_length, block_length):
        shares = even_shares(int((x[start:end] == mask_id).sum()), per_block)
        if port:
            kept, previous = torch.zeros(len(x), history, dtype=torch.float64), None
            shares = [1] * (end - start)
        for i in range(len(shares)):
            open_ = torch.zeros_like(x, dtype=torch.bool)
            open_[start:end] = x[start:end] == mask_id
            if not bool(open_.any()):
                break
            logits = forward(x[None])
            probs, pred, conf = scored(logits, mask_id, conv, torch.float32 if port else torch.float64,
                                       argmax_of_probs=not port)
            p = _float64_probs(logits, mask_id, conv)       # the project: confidence in float32, the KL in float64
            before = torch.zeros_like(p) if previous is None else previous
            divergence = (p * (torch.log(p + 1e-12) - torch.log(before + 1e-12))).sum(dim=-1)
            kept = torch.cat([kept[:, 1:], divergence[:, None]], dim=1)
            previous = p
            stable = (kept < kl).all(dim=1) if i >= history - 1 else torch.zeros_like(open_)
            ready = open_ & stable & (conf > confidence)
            if bool(ready.any()):
                commit = torch.nonzero(ready).flatten()
            else:
                commit = highest(conf, open_, shares[i], conv.torch_order)
            record(out, m, gen_length, x, mask_id, commit, pred)
    return out, x[m:].tolist()


def _float64_probs(logits: torch.Tensor, mask_id: int, conv: Conventions) -> torch.Tensor:
    """KLASS's distribution for its KL, in float64 (the project's without the mask token)."""
    x = logits.double().clone()
    if not conv.mask_token:
        x[:, mask_id] = -torch.inf
    return torch.softmax(x, dim=-1)


# ------------------------------------------------------------------------------------------------------- WINO

def mirrored_layout(length: int, start: int, end: int):
    """WINO's pass over ``length`` real positions and a mirror of the block [start, end): position ids and who may
    attend to whom. Real queries see the real keys only; mirror query j sees every real key but its own mirror
    (start + j) and every mirror key; mirror j sits at the position id start + j."""
    w = end - start
    positions = torch.cat([torch.arange(length), torch.arange(start, end)])
    allowed = torch.ones(length + w, length + w, dtype=torch.bool)
    allowed[:, length:] = False
    allowed[length:, length:] = True
    allowed[length + torch.arange(w), start + torch.arange(w)] = False
    return positions, allowed


@torch.no_grad()
def wino(forward, prompt: list[int], mask_id: int, gen_length: int, block_length: int, threshold: float = 0.6,
         keep: float = 0.9, published: bool | Conventions = False):
    """WINO as its authors' ``decoding_wino``. Each pass runs the sequence and a mirrored copy of the current block
    (all masks, ``mirrored_layout``); a mirror slot whose position is decoded scores that position's token, blind to
    it. Wide in: commit the block's masked positions with confidence above ``threshold``, at most
    min(max(int(0.7 x masked), 5), 20) (the most confident), or the single most confident when none is. Narrow
    out, only when this pass committed more than one: take back every position decoded in an earlier pass of this
    block whose mirror gives its token less than ``keep``; when those are at least as many as the previous pass
    committed (30 before a block's first pass), only that many less one, the least confirmed."""
    conv, m, n, w = conventions(published), len(prompt), gen_length, block_length
    length = m + n
    x = torch.tensor(prompt + [mask_id] * (n + w))              # the last w slots: the mirror, always masks
    out = []
    for start, end in blocks(m, gen_length, block_length):
        positions, allowed = mirrored_layout(length, start, end)
        masked = torch.zeros(length + w, dtype=torch.bool)
        masked[start:end] = x[start:end] == mask_id
        decoded = torch.zeros(length + w, dtype=torch.bool)      # mirror slots whose position this block decoded
        decoded[length:] = ~masked[start:end]
        last_accept = 30
        while bool(masked.any()):
            most = min(max(int(int(masked.sum()) * 0.7), 5), 20)
            logits = forward(x[None], allowed, positions)                      # l + w, v
            probs, pred, _ = scored(logits, mask_id, conv, torch.float64)
            token = pred.clone()
            token[length:][decoded[length:]] = x[start:end][decoded[length:]]  # the mirror scores the decoded token
            conf = probs.gather(1, token[:, None])[:, 0]
            above = masked & (conf > threshold)
            if int(above.sum()) > most:
                commit = highest(conf, masked, most, conv.torch_order)
            elif bool(above.any()):
                commit = torch.nonzero(above).flatten()
            elif conv.torch_order:                                             # the code's argmax
                commit = torch.where(masked, conf, torch.full_like(conf, -torch.inf)).argmax()[None]
            else:
                commit = highest(conf, masked, 1, torch_order=False)
            remask = torch.zeros(0, dtype=torch.long)
            if commit.numel() > 1:
                doubted = decoded & (conf < keep)
                if int(doubted.sum()) >= last_accept:
                    doubted_slots = lowest(conf, decoded, last_accept - 1, conv.torch_order)
                else:
                    doubted_slots = torch.nonzero(doubted).flatten()
                remask = doubted_slots - length + start                        # mirror slot -> its position
            record(out, m, gen_length, x, mask_id, commit, token, remask)
            masked[commit] = False
            masked[remask] = True
            decoded[commit - start + length] = True
            decoded[remask - start + length] = False
            last_accept = commit.numel()
    return out, x[m:length].tolist()


# ------------------------------------------------------------------------------------------------------ Saber

@torch.no_grad()
def saber(forward, prompt: list[int], mask_id: int, gen_length: int, block_length: int, n: int = 2,
          published: bool | Conventions = False, max_passes: int = 1024):
    """Saber as its authors' ``generate_with_saber``. "Confidence" is the probability of the current argmax at every
    response position (decoded or not), -inf past the block's end. Commit the undecoded positions whose confidence is
    above the mean of the confidences the committed tokens had when committed, over the positions before the
    block's end (1 before any commit; a re-masked position keeps its record), at least the top ``n``. Finished when
    every response position is decoded. Else, unless nothing is masked before the block's end, take back
    max(n // 2, ceil(fix / 8)) (at most fix - 1; fix = max(n, commits)) decoded positions before the block's end
    whose confidence fell most since the previous pass (the previous confidence starts at 0; a change from or to
    -inf counts as +inf): positions committed in this very pass and earlier blocks' positions included."""
    conv, m = conventions(published), len(prompt)
    x = torch.tensor(prompt + [mask_id] * gen_length)
    response = torch.zeros_like(x, dtype=torch.bool)
    response[m:] = True
    decoded = torch.zeros_like(response)
    at_commit = torch.full((len(x),), -torch.inf)
    previous = torch.zeros(len(x))
    out = []
    for _, end in blocks(m, gen_length, block_length):
        for _ in range(max_passes):
            _, pred, argmax_conf = scored(forward(x[None]), mask_id, conv, torch.float32)
            argmax_conf = argmax_conf.float()
            argmax_conf[end:] = -torch.inf
            conf = torch.where(response, argmax_conf, torch.full_like(argmax_conf, -torch.inf))
            fell = conf - previous
            fell = torch.where(torch.isfinite(fell), fell, torch.full_like(fell, torch.inf))
            previous = conf
            token = torch.where(response, pred, x)
            open_ = ~decoded & torch.isfinite(conf)             # undecoded response positions before the block's end
            known = at_commit[:end][torch.isfinite(at_commit[:end])]
            threshold = known.mean() if known.numel() else 1.0
            commit = torch.nonzero(open_ & (conf > threshold)).flatten()
            if commit.numel() < n:
                commit = highest(conf, open_, n, conv.torch_order)
            fix = max(n, commit.numel())
            decoded[commit] = True
            at_commit[commit] = argmax_conf[commit]
            after = x.clone()
            after[commit] = token[commit]
            if bool(decoded[response].all()) or not bool((after[:end] == mask_id).any()):
                record(out, m, gen_length, x, mask_id, commit, token)      # finished, or the block is: no take-back
                if bool(decoded[response].all()):
                    return out, x[m:].tolist()
                break
            count = min(max(n // 2, math.ceil(fix / 8)), fix - 1)
            candidates = response & (after != mask_id)
            candidates[end:] = False
            remask = lowest(fell, candidates, count, conv.torch_order)
            record(out, m, gen_length, x, mask_id, commit, token, remask)
            decoded[remask] = False
    return out, x[m:].tolist()


# ------------------------------------------------------------------------------------------------ the embedded model

def bert_forward(model, ids: torch.Tensor, allowed: torch.Tensor | None = None,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
    """Logits (l, v) of a BertForMaskedLM (the embedded model: eager attention, relative-key or absolute positions)
    for one sequence ``ids`` (1, l), with an optional (l, l) boolean attention mask and position ids (relative
    distances are position id differences). Without them it is the model's own forward."""
    if allowed is None and positions is None:
        return model(input_ids=ids).logits[0]
    bert, cfg = model.bert, model.config
    kind = cfg.position_embedding_type
    if kind not in ("relative_key", "absolute"):
        raise ValueError(f"position_embedding_type {kind!r} is not covered by this reference")
    top = cfg.max_position_embeddings - 1
    emb = bert.embeddings
    h = emb.word_embeddings(ids) + emb.token_type_embeddings(torch.zeros_like(ids))
    if kind == "absolute":
        h = h + emb.position_embeddings(positions[None])
    h = emb.LayerNorm(h)
    q = ids.shape[1]
    additive = ((~allowed).to(h.dtype) * torch.finfo(h.dtype).min)[None, None]
    distance = (positions[:, None] - positions[None, :]).clamp(-top, top) + top
    for layer in bert.encoder.layer:
        att = layer.attention.self
        heads, d = att.num_attention_heads, att.attention_head_size
        query, key, value = (t.view(1, q, heads, d).transpose(1, 2) for t in (att.query(h), att.key(h), att.value(h)))
        scores = query @ key.transpose(-1, -2)
        if kind == "relative_key":
            scores = scores + torch.einsum("bhld,lrd->bhlr", query, att.distance_embedding(distance).to(query.dtype))
        weights = torch.softmax(scores / math.sqrt(d) + additive, dim=-1)
        context = (weights @ value).permute(0, 2, 1, 3).reshape(1, q, heads * d)
        attended = layer.attention.output(context, h)
        h = layer.output(layer.intermediate(attended), attended)
    return model.cls(h)[0]
