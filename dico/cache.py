"""KV caches: which positions a forward pass computes, and the keys and values it reuses for the rest.

    cache = Cache("dual", refresh=0, prompt_length=m, gen_length=n)      # one decode's cache (settings.cache)
    cache.plan(masked, window)                # this pass's positions (all of them when it refreshes)
    logits, _ = predictor.forward(ids, caches=[cache])                   # cached pass: (b, l, v) as ever

A diffusion LM attends both ways, so above the first layer every position's keys and values change
whenever another position changes: a cache reuses slightly stale ones and bounds the error by full
refreshes (the first layer's keys and values of an unchanged token depend on it and its position
only, so they stay exact). The kinds differ only in the positions a pass computes between refreshes:

- ``prefix`` (Fast-dLLM): the current block and everything after it; the prefix is reused.
- ``dual`` (Fast-dLLM): the current block only; prefix and masked suffix are reused.
  In non-AR mode the block is the whole response, so both cache the prompt.
- ``delayed`` (dKV-Cache): every masked position, plus every position decoded since it was last
  computed, so a decoded token's keys and values are cached from the pass after its commit.

A pass refreshes (computes every position) when it is the first, when a block starts, and every
``refresh`` passes (0: never otherwise; 1: every pass, exactly as no cache). With ``keep_prompt`` off every pass
computes the prompt too: in a full pass the prompt's states read the answer written so far, and a model that
finds which choices are taken through them (the embedded model's pick and team answers) loses answers to a
prompt kept from the pass when the answer was all masks. The cache is a property
of the forward pass only: the decoding rules see logits for every position as before, those not
computed this pass being the ones last computed (positions outside the window, which no rule commits).

The forward itself (``cached_forward``) runs the model's own modules for the computed positions only,
each layer writing their fresh keys and values into the store and attending over all of it at real
positions: the embedded BERT model (``_bert``, relative-key distances from real positions) here, and
LLaDA and Dream (``dico.remote_cache``: rotary positions, grouped key/value heads; attached to the model at
load as ``dico_cached_forward`` when its modules are the published ones, else the cache is refused).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from dico.settings import CACHE_KINDS


@dataclass
class KVStore:
    """One sequence's keys and values per layer ((h, l, d) each) and the raw logits last computed at every position
    ((l, v)), on the model's device. Empty until the first (refreshing) pass fills it."""
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    logits: torch.Tensor | None = None


class Cache:
    """One decode's cache: the positions each pass computes and when it refreshes, and its stores (two with
    classifier-free guidance: the prompted and the unprompted sequence). ``shift`` is the model's logit shift (Dream:
    position i is predicted at position i - 1, which is then computed too)."""

    def __init__(self, kind: str, refresh: int, prompt_length: int, gen_length: int, *, rows: int = 1, shift: int = 0,
                 keep_prompt: bool = True):
        if kind not in CACHE_KINDS or kind == "none":
            raise ValueError(f"cache: must be one of {', '.join(CACHE_KINDS[1:])} for a cached decode, got {kind!r}")
        self.kind, self.every, self.m, self.n, self.shift = kind, refresh, prompt_length, gen_length, shift
        self.keep_prompt = keep_prompt
        self.stores = [KVStore() for _ in range(rows)]
        self.fresh = torch.zeros(prompt_length + gen_length, dtype=torch.bool)   # computed with its final token
        self.window: tuple[int, int] | None = None
        self.since = 0                      # passes since the last refresh
        self.positions = torch.arange(0)    # this pass's computed positions (sequence offsets, ascending)
        self.refreshed = False
        self.retaken = torch.zeros(prompt_length + gen_length, dtype=torch.bool)   # taken back, not computed since

    @property
    def length(self) -> int:
        return self.m + self.n

    def plan(self, masked: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
        """Decide this pass from the response's masks (n,) and the window; return the positions it computes."""
        full = torch.cat([torch.zeros(self.m, dtype=torch.bool), masked])                # l: still masked
        self.refreshed = self.window is None or tuple(window) != self.window or (0 < self.every <= self.since)
        self.window = tuple(window)
        if self.refreshed:
            need = torch.ones(self.length, dtype=torch.bool)
            self.since = 0
        else:
            need = torch.zeros(self.length, dtype=torch.bool)
            start, end = self.m + window[0], self.m + window[1]
            if self.kind == "prefix":
                need[start:] = True
            elif self.kind == "dual":
                need[start:end] = True
            else:                                                                          # delayed
                need = full | ~self.fresh
            if not self.keep_prompt:
                need[:self.m] = True
            if self.shift:                                  # the logits of position i come from position i - shift
                need[:-self.shift] |= need[self.shift:].clone()
            if bool((self.retaken & ~need).any()):          # a token taken back where this pass would not look:
                self.refreshed, self.since = True, 0        # its cached keys and values are stale, refresh them all
                need = torch.ones(self.length, dtype=torch.bool)
        self.retaken[need] = False
        self.since += 1
        self.positions = torch.nonzero(need).flatten()
        self.fresh[self.positions] = ~full[self.positions]
        return self.positions

    def taken_back(self, positions: torch.Tensor) -> None:
        """A rule took these response positions back to the mask or wrote another token there (an edit, a fork): their
        cached keys and values still hold the tokens they had, so a pass that would not compute them refreshes
        instead (``plan``)."""
        self.retaken[self.m + positions] = True
        self.fresh[self.m + positions] = False

    @property
    def token_forwards(self) -> int:
        """Positions this pass put through the model (every row: two with classifier-free guidance)."""
        return int(self.positions.numel()) * len(self.stores)


def uncached_token_forwards(length: int, cfg_scale: float) -> int:
    """Positions an uncached pass puts through the model (the second, unprompted pass of guidance counts too)."""
    return length * (2 if cfg_scale else 1)


# ------------------------------------------------------------------------------------------- the cached forward

class Exchange:
    """A batch of rows' cached pass: where the queried positions sit, and the per-layer swap of their fresh keys and
    values into the stores. Rows queried at fewer positions than the widest are padded with slots past their end
    (masked as keys, never stored), so every row's real keys keep their places."""

    def __init__(self, stores: list[KVStore], positions: list[torch.Tensor], lengths: list[int], device):
        self.stores, self.lengths = stores, lengths
        counts = [int(p.numel()) for p in positions]
        q = max(counts)
        self.width = max(max(lengths), max(l + q - c for l, c in zip(lengths, counts)))
        qpos = torch.empty(len(stores), q, dtype=torch.long)
        for row, (p, l, c) in enumerate(zip(positions, lengths, counts)):
            qpos[row, :c] = p
            qpos[row, c:] = torch.arange(l, l + q - c)                 # padding slots past the row's end
        self.counts = counts
        self.qpos = qpos.to(device)                                                      # b, q
        keys = torch.arange(self.width)[None, :] < torch.tensor(lengths)[:, None]        # b, w
        self.key_mask = keys.to(device)
        self.kpos = torch.arange(self.width, device=device)[None, :]     # 1, w: every key sits at its position

    def boolean_mask(self) -> torch.Tensor | None:
        """SDPA's boolean mask (b, 1, 1, w) when some row has padding slots, else None (as the models pass none)."""
        if all(length == self.width for length in self.lengths):
            return None
        return self.key_mask[:, None, None, :]

    def additive_mask(self, dtype) -> torch.Tensor:
        """(b, 1, 1, w): 0 for a row's real keys, the dtype's minimum elsewhere (as BERT's extended mask)."""
        return ((~self.key_mask).to(dtype) * torch.finfo(dtype).min)[:, None, None, :]

    def kv(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write this pass's keys and values (b, h, q, d) at their positions; return every position's (b, h, w, d).

        The stores' rows are views of the batch tensor the last pass built; when this pass has the same rows at the
        same width (always, one sequence at a time), the fresh ones are written into it in place: a pass then
        moves only what it computed, not the whole store (on a GPU the copies cost more than a small pass)."""
        b, h, q, d = k.shape
        out = []
        index = self.qpos[:, None, :, None].expand(b, h, q, d)
        for new, bank in ((k, "keys"), (v, "values")):
            full = self._batch_of(layer, bank, (b, h, self.width, d))
            if full is not None:
                out.append(full.scatter_(2, index, new))
                continue
            full = new.new_zeros(b, h, self.width, d)
            for row, store in enumerate(self.stores):
                kept = getattr(store, bank)
                if len(kept) > layer:
                    full[row, :, :self.lengths[row]] = kept[layer]
            full.scatter_(2, index, new)
            for row, store in enumerate(self.stores):
                kept, view = getattr(store, bank), full[row, :, :self.lengths[row]]
                if len(kept) > layer:
                    kept[layer] = view
                else:
                    kept.append(view)
            out.append(full)
        return out[0], out[1]

    def _batch_of(self, layer: int, bank: str, shape) -> torch.Tensor | None:
        """The tensor of ``shape`` whose row ``r`` every store ``r``'s kept keys (or values) of ``layer`` view, at
        the row's length; None when the rows were kept apart (another batch, a row finished, another width)."""
        kept = [getattr(store, bank) for store in self.stores]
        if any(len(k) <= layer for k in kept):
            return None
        full = kept[0][layer]._base
        if full is None or tuple(full.shape) != tuple(shape):
            return None
        for row, (k, length) in enumerate(zip(kept, self.lengths)):
            view = k[layer]
            if (view._base is not full or view.shape[1] != length or view.storage_offset() != full[row].storage_offset()
                    or view.stride() != full[row].stride()):
                return None
        return full


def cached_forward(predictor, ids: torch.Tensor, stores: list[KVStore], positions: list[torch.Tensor],
                   lengths: list[int] | None = None, attentions: bool = False):
    """Logits (b, l, v) of a cached pass: ``positions[row]`` of each row computed against its store, the other
    positions' logits as last computed. ``ids`` (b, l) are right-padded rows of ``lengths``. The logits are aligned
    (position i at [i]) as ``MaskPredictor.forward`` gives them; attention maps (b, h, q, w) only on request."""
    b, l = ids.shape
    lengths = lengths or [l] * b
    ex = Exchange(stores, positions, lengths, predictor.device)
    padded = torch.cat([ids, torch.full((b, ex.width - l), predictor.mask_id, dtype=ids.dtype)], dim=1) \
        if ex.width > l else ids
    qids = predictor.to_model(padded).gather(1, ex.qpos)                                           # b, q
    wanted = attentions and (True if predictor.hooks is None else predictor.hooks.sites)  # LLaDA/Dream: the hooked
    raw, maps = forward_for(predictor)(predictor.model, qids, ex, wanted)                # layers; b, q, v
    shift = cache_shift(predictor)
    out = []
    for row, store in enumerate(stores):
        if store.logits is None:
            store.logits = raw.new_zeros(lengths[row], raw.shape[-1])
        store.logits[ex.qpos[row, :ex.counts[row]]] = raw[row, :ex.counts[row]]
        aligned = store.logits if not shift else torch.cat([store.logits[:1], store.logits[:-1]])
        out.append(torch.nn.functional.pad(aligned, (0, 0, 0, l - lengths[row])))
    return torch.stack(out), maps


def cache_shift(predictor) -> int:
    """How far the model's raw logits sit before the position they predict (Dream: one)."""
    return 1 if predictor.kind == "dream" else 0


def forward_for(predictor):
    """The cached forward of a predictor's model, or ValueError naming the setting when it has none."""
    model = predictor.model
    if hasattr(model, "bert") and hasattr(model, "cls"):
        return _bert
    runner = getattr(model, "dico_cached_forward", None)         # LLaDA / Dream, attached at load (dico.remote_cache)
    if runner is not None:
        return runner
    raise ValueError(f"cache: model {predictor.name!r} has no cached forward (the embedded BERT model has one, and "
                     "LLaDA and Dream whose modules are the published ones); set cache to none")


# ------------------------------------------------------------------------------------------- BERT

RELATIVE = ("relative_key", "relative_key_query")


def _bert(model, qids: torch.Tensor, ex: Exchange, attentions: bool = False):
    """BertForMaskedLM over the queried positions only, the same arithmetic as transformers 4.57's eager
    ``modeling_bert`` (dropout off): its own cache cannot serve here, as its relative-key attention assumes one new
    query at the last position."""
    bert, cfg = model.bert, model.config
    kind = getattr(cfg, "position_embedding_type", "absolute")
    if kind not in ("absolute",) + RELATIVE:
        raise ValueError(f"cache: position_embedding_type {kind!r} of this BERT model is not supported; set cache "
                         "to none")
    b, q = qids.shape
    top = cfg.max_position_embeddings - 1
    emb = bert.embeddings
    x = emb.word_embeddings(qids) + emb.token_type_embeddings(torch.zeros_like(qids))
    if kind == "absolute":
        x = x + emb.position_embeddings(ex.qpos.clamp(max=top))
    x = emb.LayerNorm(x)
    mask = ex.additive_mask(x.dtype)
    distance = (ex.qpos[:, :, None] - ex.kpos[:, None, :]).clamp(-top, top)                 # b, q, w
    maps = []
    for i, layer in enumerate(bert.encoder.layer):
        att = layer.attention.self
        h, d = att.num_attention_heads, att.attention_head_size

        def heads(t, h=h, d=d):
            return t.view(b, q, h, d).transpose(1, 2)                                   # b, h, q, d

        query = heads(att.query(x))
        keys, values = ex.kv(i, heads(att.key(x)), heads(att.value(x)))                # b, h, w, d
        scores = torch.matmul(query, keys.transpose(-1, -2))                            # b, h, q, w
        if kind in RELATIVE:
            pos = att.distance_embedding(distance + top).to(dtype=query.dtype)         # b, q, w, d
            if b == 1:                                   # the very einsum of modeling_bert (one row)
                scores = scores + torch.einsum("bhld,lrd->bhlr", query, pos[0])
                if kind == "relative_key_query":
                    scores = scores + torch.einsum("bhrd,lrd->bhlr", keys, pos[0])
            else:
                scores = scores + torch.einsum("bhld,blrd->bhlr", query, pos)
                if kind == "relative_key_query":
                    scores = scores + torch.einsum("bhrd,blrd->bhlr", keys, pos)
        scores = scores / math.sqrt(d) + mask
        probs = torch.nn.functional.softmax(scores, dim=-1)
        if attentions:
            maps.append(probs)
        context = torch.matmul(probs, values).permute(0, 2, 1, 3).contiguous().view(b, q, h * d)
        attended = layer.attention.output(context, x)
        x = layer.output(layer.intermediate(attended), attended)
    return model.cls(x), (tuple(maps) if attentions else None)
