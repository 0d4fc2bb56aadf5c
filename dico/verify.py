"""WINO's verification view: one forward pass over the sequence and a mirrored copy of a block
in which every copy is blind to the token it mirrors.

    out = verify_forward(predictor, ids, (s, e))           # ids (b, l) on the CPU; the block in sequence offsets
    out.logits           # (b, l, v): an ordinary forward's logits (to float tolerance), aligned as forward's
    out.mirror_logits    # (b, e - s, v): [j] predicts position s + j from everything but that position's token
    out.token_forwards   # per row: its length + (e - s), the positions this pass computed

The sequence (length l) gains B = e - s extra slots, each holding the mask token, at the position ids of the
block (Feng-Hong/WINO-DLLM ``LLaDA/decoding.py``, ``decoding_wino``). A real query sees every real key and no
extra one, so the real positions' logits are those of an ordinary forward. Extra query j sees every real key but
its mirror s + j, and every extra key (itself included): at the block's positions it sees masks beside the real
tokens, and at s + j the mask only.

The pass runs the model's own modules through the forwards the KV caches use (``dico.cache._bert``: BERT,
relative-key distances or absolute embeddings from position ids; ``dico.remote_cache``: LLaDA and Dream, rotary
angles of position ids), handed a ``View`` in place of a cache's ``Exchange``: every slot is a query and a key,
with explicit position ids and an explicit (w, w) boolean mask.

Dream's shift: its raw logits at position i predict position i + 1 (``MaskPredictor.forward`` aligns them, position
0 keeping its own). The real logits are aligned in the same way. The extra slot that verifies position s + j
therefore sits at position id s + j - 1 (0 for position 0), the place whose raw logits predict s + j, and is blind
to the real key s + j, the token it verifies. At s + j, as in LLaDA, its raw logits would predict s + j + 1, a
position it sees.
"""
from __future__ import annotations

import operator
from typing import NamedTuple

import torch

from dico.cache import cache_shift, forward_for


class VerifyPass(NamedTuple):
    """What one verification pass gives, on the model's device (``token_forwards`` is a list of ints)."""
    logits: torch.Tensor          # b, l, v: aligned to positions, as MaskPredictor.forward
    mirror_logits: torch.Tensor   # b, B, v: [:, j] predicts position s + j, blind to its token
    token_forwards: list          # per row: the row's length + B


class View:
    """One full pass for the forwards of ``dico.cache`` / ``dico.remote_cache`` (the interface of ``Exchange``):
    every slot is computed and is a key, at ``positions`` (b, w), attending where ``allowed`` (b, w, w) holds."""

    def __init__(self, positions: torch.Tensor, allowed: torch.Tensor):
        self.qpos = self.kpos = positions
        self.allowed = allowed
        self.width = positions.shape[1]

    def kv(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Every key and value is this pass's own: nothing is stored."""
        return k, v

    def additive_mask(self, dtype) -> torch.Tensor:
        """(b, 1, w, w): 0 where a query attends, the dtype's minimum elsewhere (as BERT's extended mask)."""
        return ((~self.allowed).to(dtype) * torch.finfo(dtype).min)[:, None]

    def boolean_mask(self) -> torch.Tensor:
        """(b, 1, w, w) for ``scaled_dot_product_attention``."""
        return self.allowed[:, None]


def layout(lengths: list[int], l: int, blocks: list[tuple[int, int]], shift: int = 0):
    """Position ids (b, l + B) and attention mask (b, l + B, l + B) of rows of ``lengths`` padded to ``l``, each
    followed by the extra slots of its block (all blocks B wide). ``shift``: how far a raw logit sits before the
    position it predicts (Dream: 1), so the extra slot verifying position p sits at p - shift (at least 0)."""
    b, width = len(lengths), blocks[0][1] - blocks[0][0]
    j = torch.arange(width)
    mirrors = torch.tensor([s for s, _ in blocks])[:, None] + j[None, :]                  # b, B
    positions = torch.cat([torch.arange(l).expand(b, l), (mirrors - shift).clamp(min=0)], dim=1)
    real = torch.arange(l)[None, :] < torch.tensor(lengths)[:, None]                      # b, l: a row's real keys
    allowed = torch.zeros(b, l + width, l + width, dtype=torch.bool)
    allowed[:, :, :l] = real[:, None, :]                       # every query sees the real keys
    allowed[:, l:, l:] = True                                  # the extra queries see every extra key
    allowed[torch.arange(b)[:, None], l + j[None, :], mirrors] = False          # but never their own mirror
    return positions, allowed


@torch.no_grad()
def verify_forward(predictor, ids: torch.Tensor, block, attention_mask: torch.Tensor | None = None) -> VerifyPass:
    """One forward of ``ids`` (b, l; on the CPU, rows right-padded as ``attention_mask`` (b, l; 1 = real) says)
    with WINO's mirrored block appended. ``block``: (s, e) in sequence offsets for every row, or one (s, e) per
    row, all e - s wide. Each row's result is that of its own single-row call (to float tolerance)."""
    b, l = _check_ids(ids)
    lengths = _lengths(attention_mask, b, l)
    blocks = _blocks(block, lengths)
    runner = _runner(predictor)
    shift = cache_shift(predictor)
    positions, allowed = layout(lengths, l, blocks, shift)
    width = blocks[0][1] - blocks[0][0]
    extra = torch.full((b, width), predictor.mask_id, dtype=torch.long)
    qids = predictor.to_model(torch.cat([ids.long(), extra], dim=1))                       # b, l + B
    raw, _ = runner(predictor.model, qids, View(predictor.to_model(positions), predictor.to_model(allowed)))
    logits = raw[:, :l]
    if shift:                           # position i is predicted at raw[i - 1]; position 0 keeps its own
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    return VerifyPass(logits, raw[:, l:], [n + width for n in lengths])


def _check_ids(ids) -> tuple[int, int]:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[1] == 0 or ids.is_floating_point():
        raise ValueError(f"ids: must be a (rows, length) tensor of token ids, got {_shape(ids)}")
    return ids.shape[0], ids.shape[1]


def _lengths(attention_mask, b: int, l: int) -> list[int]:
    """Each row's real length; the mask must be ones then zeros (rows padded on the right)."""
    if attention_mask is None:
        return [l] * b
    if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != (b, l):
        raise ValueError(f"attention_mask: must be ({b}, {l}) like ids, got {_shape(attention_mask)}")
    mask = attention_mask.cpu().bool()
    lengths = mask.sum(dim=1)
    if not torch.equal(mask, torch.arange(l)[None, :] < lengths[:, None]) or not bool((lengths > 0).all()):
        raise ValueError("attention_mask: every row must be real tokens padded on the right (ones, then zeros)")
    return lengths.tolist()


def _blocks(block, lengths: list[int]) -> list[tuple[int, int]]:
    """One (s, e) per row, inside the row, all equally wide."""
    many = isinstance(block, (list, tuple)) and len(block) > 0 and all(isinstance(x, (list, tuple)) for x in block)
    blocks = [_pair(x) for x in block] if many else [_pair(block)] * len(lengths)
    if len(blocks) != len(lengths):
        raise ValueError(f"block: one (start, end) per row is needed: {len(lengths)} rows, {len(blocks)} blocks")
    for row, (pair, length) in enumerate(zip(blocks, lengths)):
        if pair is None or not 0 <= pair[0] < pair[1] <= length:
            raise ValueError(f"block: must be (start, end) with 0 <= start < end <= the row's length ({length}), "
                             f"got {pair!r} for row {row}")
    if len({e - s for s, e in blocks}) > 1:
        raise ValueError(f"block: every row's block must be equally wide, got {blocks}")
    return blocks


def _pair(x) -> tuple[int, int] | None:
    """(s, e) as two ints (Python, NumPy or 0-d tensor ones), or None when it is not such a pair."""
    try:
        s, e = x
        return operator.index(s), operator.index(e)
    except (TypeError, ValueError):
        return None


def _runner(predictor):
    """The model's forward over explicit positions and masks (the one its KV cache uses)."""
    try:
        return forward_for(predictor)
    except ValueError:
        raise ValueError(f"method: WINO's verification pass needs a forward over explicit positions and an explicit "
                         f"attention mask, which model {predictor.name!r} lacks (the embedded BERT model has one, "
                         "and LLaDA and Dream whose modules are the published ones)") from None


def _shape(x) -> str:
    return f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
