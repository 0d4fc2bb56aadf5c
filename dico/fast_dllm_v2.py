"""Fast-dLLM v2's own decoding (``fast-v2``): its ``generate`` as one window's rule and its two caches, pass for pass
(docs/decoding.md §11.5).

Read from the published code (the model card Efficient-Large-Model/Fast_dLLM_v2_7B ``modeling.py`` and NVlabs/Fast-dLLM
``v2/``, Apache-2.0; written here in the project's own words). With batch 1, greedy (its ``temperature`` 0) and
``use_block_cache``, its generate decodes a model block like this:

- the block's first position, when it is a response position, is decoded by the pass that stores the block before
  it (or by the prefill pass over the prompt's whole blocks): the argmax of that pass's last logits, an AR step;
- then the block a sub-block (``small_block_size`` positions, counted from the block's start) at a time, left to
  right; each pass scores the sub-block (softmax over every token, the mask's included; the argmax) and commits its
  masked positions whose probability is above ``threshold`` and, in any case, the most probable one;
- a pass over the whole block (keys and values of the finished blocks read from its ``past_key_values``) keeps the
  block's own keys and values in a block cache (``block_past_key_values``). While the current sub-block's first
  position is still masked, or no block cache was made for this block yet, each pass is such a whole-block pass. Once
  it is written, each pass computes the sub-block only: its keys and values overwrite their places in the block cache
  and it attends, with no mask, to the finished blocks and to the whole block cache, whose other entries are those of
  the last whole-block pass. Its logits are then approximate, and the rule here sees exactly those logits. The block
  cache is made anew at each block (``block_past_key_values = None``), in its ``generate`` and its batch decoding
  alike (a copy of the model card's file edited by a third party keeps it across blocks; not followed).
- once the block has no mask left, a pass stores it (``update_past_key_values``) and decodes the next block's first
  token.

``FastV2Cache`` plans those passes for the loop and ``FastV2Store`` makes them through the release's own forward;
``FastV2Rule`` commits as the generate does. Its logits are AR-shifted inside a call (position j reads the call's
logits at j - 1, its first position its own), as the generate shifts them.

Where this differs from the published code, on purpose:
- a prompt of exactly one block: the generate neither prefills it nor decodes an AR token (it decodes the next block
  without seeing the prompt); here the prompt is stored and the first token decoded from it, as for longer prompts;
- the decode runs to the end of the response: the generate stops at its stop token once nothing before it is
  masked, and at the end stores the last block, decoding one token more; neither pass is made here;
- a predicted mask token: the generate writes it back (the position stays masked); here the mask token is never a
  prediction (``dico.sampling``).
Its denoising calls pass no ``block_size``, so the release's forward masks them with its default 32: all visible
for a block dividing 32, which the released models' 32 does; the calls here are the same.

On another model (no release code, no model blocks), ``fast-v2`` is the sub-block threshold rule alone: sub-blocks
from the window's start, no AR step, and the cache the settings ask for explicitly (the published_code preset's
prefix is a block model's: left out here).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from dico.block import BLOCK_KIND, OWN_CACHES, BlockCache, BlockStore
from dico.rules import Choice, Rule, Scores
from dico.settings import FastV2Settings

AR, WHOLE, SUB = "ar", "block", "sub"


def sub_block_span(masked: torch.Tensor, window: tuple[int, int], m: int, block: int | None,
                   sub: int) -> tuple[str, int, int, int]:
    """This pass on a window with masks, in absolute positions: (``AR`` or ``SUB``, where the block starts, where
    the current sub-block starts and ends). ``AR``: the block's first position, a masked response position, is the one
    to decode. ``block`` None (a model without blocks): the window is the block and nothing is AR."""
    start = m + window[0]
    origin = start if block is None else start - start % block
    if block is not None and origin >= m and bool(masked[origin - m]):
        return AR, origin, origin, origin + 1
    first = start + int(torch.nonzero(masked[window[0]:window[1]])[0])
    lo = origin + (first - origin) // sub * sub
    return SUB, origin, lo, min(lo + sub, m + window[1])


@dataclass
class FastV2Rule(Rule):
    """``fast-v2``: the sub-block threshold of Fast-dLLM v2's generate (module docstring)."""
    settings: FastV2Settings = field(default_factory=FastV2Settings)
    leans = {"commit": {"conf": 1}}
    cannot = {"cfg_scale": "Fast-dLLM v2's generate has no guidance"}
    block: int | None = None

    def bind(self, predictor) -> None:
        if predictor.kind != BLOCK_KIND:
            self.block = None
            if "cache" not in self.settings.given() and self.settings.cache != "none":
                self.settings = replace(self.settings, cache="none")    # its kept blocks are a block model's
            return
        block, sub = predictor.block, self.settings.sub_block
        if block % sub:
            raise ValueError(f"sub_block: {predictor.name!r} decodes blocks of {block}, which sub-blocks of {sub} do "
                             f"not divide (its generate would never finish the last one); choose a divisor of {block}")
        if self.settings.block_cache and self.settings.cache != "prefix":
            raise ValueError("block_cache: Fast-dLLM v2's sub-block cache sits beside the kept finished blocks; set "
                             "cache to prefix, or block_cache off")
        self.block = block

    def choose(self, s: Scores) -> Choice:
        m = s.prompt_length
        kind, _, lo, hi = sub_block_span(s.masked, s.window, m, self.block, self.settings.sub_block)
        if kind == AR:
            return Choice([lo - m], "vanilla")
        inside = torch.zeros_like(s.masked)
        inside[max(lo - m, 0):hi - m] = True
        cand = s.masked & inside
        conf = torch.where(cand, s.conf, torch.full_like(s.conf, -torch.inf))
        chosen = cand & (conf > self.settings.threshold)
        chosen[int(conf.argmax())] = True
        commit = torch.nonzero(chosen).flatten().tolist()
        return Choice(commit, "fast" if len(commit) > 1 else "vanilla")


@dataclass
class FastV2Store(BlockStore):
    """One sequence's caches on a Fast-dLLM v2 model: the finished blocks (``past``, exact, as ``BlockStore``) and the
    current block's block cache (``kept``, made for the block starting at ``kept_for``). ``forward`` makes the pass
    ``FastV2Cache.plan`` chose (``plan``: kind, block start, first and end position computed)."""
    kept: object = None
    kept_for: int = -1
    plan: tuple | None = None

    def forward(self, predictor, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        kind, origin, lo, hi = self.plan
        model, ids = predictor.model, predictor.to_model(ids)
        self.computed = 0 if kind == AR else hi - lo
        if kind == AR and self.past is not None and getattr(self.past, "next_at", -1) != origin:
            self.drop_from(origin - predictor.block)       # its storing pass's last logits are needed: store it again
        self.store_before(predictor, ids, origin)
        if self.logits is None or self.logits.shape[0] != ids.shape[1]:
            self.logits = torch.zeros(ids.shape[1], model.config.vocab_size, dtype=model.dtype, device=ids.device)
        if kind == AR:
            self.logits[origin] = self.past.next_logits[0, 0]
            return self.logits[None]
        if kind == WHOLE:
            out = model(input_ids=ids[:, lo:hi], past_key_values=self.past, use_cache=True,
                        update_past_key_values=False, use_block_cache=True)
            self.kept, self.kept_for = out.block_past_key_values, origin
        else:
            out = model(input_ids=ids[:, lo:hi], past_key_values=self.past, use_cache=True,
                        update_past_key_values=False, use_block_cache=True, block_past_key_values=self.kept,
                        replace_position=lo - origin)
        raw = out.logits[0]                                                                         # w, v
        self.logits[lo:hi] = torch.cat([raw[:1], raw[:-1]])
        return self.logits[None]


@dataclass
class FastV2Cache(BlockCache):
    """``fast-v2``'s caches for the loop (``BlockCache``'s interface): each pass is an AR step, a whole-block pass
    or a sub-block pass, as Fast-dLLM v2's generate chooses (module docstring)."""
    sub: int = 8
    use_block_cache: bool = True
    stores: list = field(default_factory=lambda: [FastV2Store()])

    def plan(self, masked: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
        store = self.stores[0]
        kind, origin, lo, hi = sub_block_span(masked, window, self.m, self.block, self.sub)
        if kind == SUB:
            written = lo < self.m or not bool(masked[lo - self.m])
            if not (self.use_block_cache and store.kept_for == origin and written):
                kind, lo, hi = WHOLE, origin, self.m + window[1]
        store.plan = (kind, origin, lo, hi)
        self.refreshed = self.window != tuple(window)
        self.window = tuple(window)
        self.positions = torch.arange(lo, lo if kind == AR else hi)
        return self.positions

    def taken_back(self, positions: torch.Tensor) -> None:
        super().taken_back(positions)
        if positions.numel():
            self.stores[0].kept, self.stores[0].kept_for = None, -1    # the block cache is made anew


def fast_v2_cache(predictor, settings, prompt_length: int, gen_length: int) -> FastV2Cache:
    """The caches ``fast-v2`` keeps on a Fast-dLLM v2 model (``dico.block.OWN_CACHES``): cache prefix, one sequence."""
    if settings.cache != "prefix":
        raise ValueError(f"cache: {predictor.name!r} is a block diffusion model: fast-v2 keeps its finished blocks "
                         f"(prefix) or none; {settings.cache} has nothing to add")
    return FastV2Cache(predictor.block, prompt_length, gen_length, sub=settings.sub_block,
                       use_block_cache=settings.block_cache)


OWN_CACHES[FastV2Settings.method] = fast_v2_cache
