"""Batched decoding: many prompts, one forward pass per step for all rows still decoding.

    traces = generate_batch(predictor, prompts, "dico", batch_size=8, mode="semi-ar")   # one trace per prompt

Each row is its own ``dico.loop.Decoding`` (rule state, window, stopping); the batch only shares the
model call. Rows are padded on the right with an attention mask, so every position keeps its id and
each row's logits are those of its sequence alone: a row's trace commits exactly what decoding its
prompt alone commits. A finished row leaves the batch and the next waiting prompt takes its place
(continuous batching), so the batch stays full until the prompts run out.

On a GPU this turns many small forward passes into one large one. On a CPU the model's matmuls are
already compute-bound at batch 1 for sequences of a hundred tokens or more, so the gain there is the
framework's per-call overhead only (``python -m dico.bench throughput`` measures it).
"""
from __future__ import annotations

import time
from collections.abc import Generator, Sequence

import torch

from dico.loop import Decoding, check_request, fold_settings
from dico.models import MaskPredictor
from dico.settings import DEFAULT_BLOCK_LENGTH, DEFAULT_GEN_LENGTH, NON_AR, SEMI_AR

DEFAULT_BATCH_SIZE = 8


def decode_batch(predictor: MaskPredictor, prompts: Sequence[str], method: str = "dico", *,
                 batch_size: int = DEFAULT_BATCH_SIZE, **options) -> Generator[tuple[int, object, object], None, list]:
    """Decode ``prompts`` together (shortest first), yielding ``(prompt index, trace, step)`` as each row's step
    is decided.

    ``options`` are ``generate``'s (mode, gen_length, block_length, settings, capture_attention, or a
    method setting as a keyword). Every prompt is checked before the first forward pass. The generator
    returns the traces in prompt order; closing it early closes the unfinished ones as ``stopped``.
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size: must be a whole number >= 1, got {batch_size!r}")
    options = fold_settings(options)
    mode, gen_length = options.get("mode", NON_AR), options.get("gen_length", DEFAULT_GEN_LENGTH)
    block_length = options.get("block_length", DEFAULT_BLOCK_LENGTH) if mode == SEMI_AR else None
    # every prompt checked before any row runs; rows of similar length decode together, so little is padding
    sizes = [len(check_request(predictor, prompt, method, mode, gen_length, block_length)) for prompt in prompts]
    pad_id = _pad_id(predictor)
    traces: list = [None] * len(prompts)
    waiting = iter(sorted(range(len(prompts)), key=sizes.__getitem__))
    active: list[tuple[int, Decoding]] = []
    try:
        while True:
            while len(active) < batch_size and (index := next(waiting, None)) is not None:
                run = Decoding(predictor, prompts[index], method, **options)
                traces[index] = run.trace
                active.append((index, run))
            if not active:
                break
            if active[0][1].rule.verifies:      # WINO: its verifying pass is one sequence at a time (same commits)
                for index, run in active:
                    t0 = time.perf_counter()
                    logits, attentions = run.forward()
                    yield index, run.trace, run.step(logits, attentions, time.perf_counter() - t0)
                active = [(index, run) for index, run in active if not run.done]
                continue
            lengths = [run.ids.shape[1] for _, run in active]
            ids = torch.full((len(active), max(lengths)), pad_id, dtype=torch.long)        # b, l
            for row, (_, run) in enumerate(active):
                ids[row, :lengths[row]] = run.ids[0]
            mask = (torch.arange(ids.shape[1]) < torch.tensor(lengths)[:, None]).long()    # b, l
            attend = any(run.attention is not None for _, run in active)
            t0 = time.perf_counter()
            logits, attentions = _forward(predictor, active, ids, mask, attend)
            forward_s = time.perf_counter() - t0
            for row, (index, run) in enumerate(active):
                own = None if attentions is None else tuple(a[row:row + 1, :, :lengths[row], :lengths[row]]
                                                            for a in attentions)
                yield index, run.trace, run.step(logits[row, :lengths[row]], own, forward_s)
            active = [(index, run) for index, run in active if not run.done]
    finally:
        for _, run in active:
            run.close()
    return traces


def generate_batch(predictor: MaskPredictor, prompts: Sequence[str], method: str = "dico", *,
                   batch_size: int = DEFAULT_BATCH_SIZE, **options) -> list:
    """Decode every prompt with ``method``, ``batch_size`` rows per forward pass; the traces in prompt order,
    each identical (commits, tokens, NFE, text) to ``dico.generate`` on that prompt alone."""
    return drain(decode_batch(predictor, prompts, method, batch_size=batch_size, **options))


def drain(runs: Generator, on_finish=None) -> list:
    """Run a ``decode_batch`` generator to its end and return its traces; ``on_finish()`` is called as each row
    completes (a progress bar's tick)."""
    while True:
        try:
            _, trace, _ = next(runs)
        except StopIteration as end:
            return end.value
        if on_finish is not None and trace.response:        # closed by this step: its response is written
            on_finish()


def _forward(predictor: MaskPredictor, active, ids: torch.Tensor, mask: torch.Tensor, attend: bool):
    """One pass for the batch through the rows' shared sampler (their settings are the same), so classifier-free
    guidance masks each row's own prompt exactly as a single decode's pass does."""
    sampler = active[0][1].sampler
    caches = [run.plan_pass() for _, run in active]
    return sampler.logits(predictor, ids, [run.m for _, run in active], attentions=attend, attention_mask=mask,
                          caches=None if caches[0] is None else caches)


def _pad_id(predictor: MaskPredictor) -> int:
    """The tokenizer's pad token (any id would do: padded keys are masked and padded rows never read)."""
    pad = getattr(predictor.tokenizer, "pad_token_id", None)
    return int(pad) if pad is not None else int(predictor.mask_id)
