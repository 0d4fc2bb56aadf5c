"""``gen_length="auto"``: the model chooses the response length before decoding, as DAEDAL's initial-length phase
does (docs/decoding.md §7.5).

Start from ``AUTO_START`` masks after the prompt; each check is one forward pass over prompt + masks, reading the
end-of-text confidence of the tail: the probability of end-of-text summed over up to ``AUTO_WINDOW`` right-most
response positions whose prediction is end-of-text (scanning from the end, skipping the others), divided by
``AUTO_WINDOW``. Below ``AUTO_THRESHOLD`` (the model still wants to write) and room left: add ``AUTO_STEP`` masks and
check again; otherwise stop and add ``AUTO_WINDOW // 2`` more, left masked to be decoded (as the DiCo release's port
does; DAEDAL's own code fills them with end-of-text). Nothing is committed during the checks; they are counted
apart from the decode's NFE (``Trace.length_search``). In semi-AR mode the length is rounded up to whole blocks.
"""
from __future__ import annotations

import torch

AUTO = "auto"
AUTO_START = 32          # the first length checked (one check window)
AUTO_STEP = 8            # DAEDAL's expansion factor
AUTO_WINDOW = 32         # DAEDAL's eos check tokens
AUTO_THRESHOLD = 0.5     # DAEDAL's eos confidence threshold


def end_confidence(probs_eos: torch.Tensor, predicts_eos: torch.Tensor) -> float:
    """DAEDAL's tail reading over one response: (n,) p(end-of-text) and (n,) whether end-of-text is the prediction."""
    picked = probs_eos.flip(0)[predicts_eos.flip(0)][:AUTO_WINDOW]
    return float(picked.sum()) / AUTO_WINDOW


def auto_length(predictor, prompt_ids: list[int], block_length: int | None = None) -> tuple[int, dict]:
    """The response length DAEDAL's initial phase chooses for ``prompt_ids``, and the search's record."""
    room = predictor.max_length - len(prompt_ids)
    least = max(block_length or 1, AUTO_WINDOW // 2 + 1)
    if room < least:
        raise ValueError(f"gen_length: auto needs at least {least} positions after the prompt, and the model's "
                         f"{predictor.max_length} positions leave {max(room, 0)}; shorten the prompt or give a length")
    eos = sorted(predictor.stop_ids())
    length, tried, confidences, work = min(AUTO_START, room), [], [], 0
    while True:
        ids = torch.tensor([prompt_ids + [predictor.mask_id] * length], dtype=torch.long)
        logits, _ = predictor.forward(ids)
        confidences.append(round(_tail(logits[0, len(prompt_ids):], eos, predictor.mask_id), 5))
        tried.append(length)
        work += ids.shape[1]
        if confidences[-1] >= AUTO_THRESHOLD or length >= room:
            break
        length = min(length + AUTO_STEP, room)
    chosen = min(length + AUTO_WINDOW // 2, room)
    if block_length:
        chosen = _whole_blocks(chosen, block_length, room)
    return chosen, {"tried": tried, "end_confidence": confidences, "passes": len(tried), "token_forwards": work,
                    "chosen": chosen}


def _tail(logits: torch.Tensor, eos: list[int], mask_id: int) -> float:
    """The tail's end-of-text confidence from one pass's response logits (n, v), computed on the model's device."""
    if not eos:
        return 0.0
    x = logits.float().clone()
    x[:, mask_id] = -torch.inf
    probs = torch.softmax(x, dim=-1)
    pred = x.argmax(dim=-1)
    stops = pred.new_tensor(eos)
    p_eos, is_eos = probs[:, stops].max(dim=-1).values, torch.isin(pred, stops)
    packed = torch.stack([p_eos.double(), is_eos.double()]).cpu()
    return end_confidence(packed[0], packed[1].bool())


def _whole_blocks(length: int, block: int, room: int) -> int:
    """``length`` rounded up to a multiple of ``block`` (down where the model has no room for that)."""
    up = -(-length // block) * block
    return up if up <= room else room // block * block
