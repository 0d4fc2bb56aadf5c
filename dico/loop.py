"""The one denoising loop: forward, score, let the rule choose, commit, record.

    trace = generate(predictor, "Tom has 5 apples...", method="dico", gen_length=96)

Every method runs through ``generate``; rules only choose positions (``dico.rules``). The loop owns
the window (whole response in non-AR mode, blocks of ``block_length`` in semi-AR mode), timing,
the optional attention capture, and the trace.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from dico.models import MaskPredictor
from dico.rules import METHODS, Scores, make_rule, rule_settings
from dico.trace import AttentionStages, Step, Trace, STAGES

MAX_PROMPT_CHARS = 4000


class Cancelled(Exception):
    """Raised inside ``generate`` when ``should_stop`` says so; the partial trace is on ``.trace``."""

    def __init__(self, trace: Trace):
        super().__init__("decoding was stopped")
        self.trace = trace


def check_inputs(prompt: str, method: str, mode: str, gen_length: int, block_length: int | None) -> None:
    """The checks of ``check_request`` that need no model (the command line runs them before loading one)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt: is empty; type a question for the model")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"prompt: is {len(prompt)} characters, over the {MAX_PROMPT_CHARS}-character limit")
    if method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; choose from {', '.join(METHODS)}")
    if mode not in ("non-ar", "semi-ar"):
        raise ValueError(f"mode: must be 'non-ar' or 'semi-ar', got {mode!r}")
    if not isinstance(gen_length, int) or isinstance(gen_length, bool) or gen_length < 1:
        raise ValueError(f"gen_length: must be a whole number >= 1, got {gen_length!r}")
    if mode == "semi-ar":
        if not isinstance(block_length, int) or isinstance(block_length, bool) or not 1 <= block_length <= gen_length:
            raise ValueError(f"block_length: must be a whole number in 1..gen_length ({gen_length}), got {block_length!r}")
        if gen_length % block_length:
            raise ValueError(f"block_length: gen_length {gen_length} is not a multiple of block_length {block_length}")


def check_request(predictor: MaskPredictor, prompt: str, method: str, mode: str, gen_length: int,
                  block_length: int | None) -> list[int]:
    """Validate a request before any forward pass; return the prompt ids. Errors name the field."""
    check_inputs(prompt, method, mode, gen_length, block_length)
    prompt_ids = predictor.encode_prompt(prompt)
    if len(prompt_ids) >= predictor.max_length:       # no room for even one answer token: the prompt is at fault
        raise ValueError(f"prompt: is {len(prompt_ids)} tokens; the model's {predictor.max_length} positions must "
                         "hold the prompt and the answer; shorten the prompt")
    if len(prompt_ids) + gen_length > predictor.max_length:
        raise ValueError(f"gen_length: prompt ({len(prompt_ids)} tokens) + gen_length ({gen_length}) exceeds the "
                         f"model's {predictor.max_length} positions; shorten the prompt or lower gen_length "
                         f"to at most {max(predictor.max_length - len(prompt_ids), 0)}")
    return prompt_ids


def score(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """conf = max softmax (float32), pred = argmax, margin = top1 - top2 raw logit, per position."""
    top = logits.topk(2, dim=-1)                                             # n, 2
    conf = torch.softmax(logits, dim=-1).max(dim=-1).values                  # n
    return conf, top.indices[:, 0], top.values[:, 0] - top.values[:, 1]


class _AttentionAccumulator:
    """Per-stage running means of masked rows of the layer- and head-averaged attention map."""

    def __init__(self, prompt_length: int, n: int):
        self.m, self.n = prompt_length, n
        self.sums = torch.zeros(3, n, n + 1, dtype=torch.float64)
        self.counts = torch.zeros(3, n, dtype=torch.float64)
        self.steps: list[list[int]] = [[], [], []]

    def add(self, step: int, attentions, masked: torch.Tensor, unmasked_fraction: float) -> None:
        stage = min(int(unmasked_fraction * 3), 2)
        mean = torch.stack([a[0].float().mean(dim=0) for a in attentions]).mean(dim=0).cpu()   # l, l
        rows = mean[self.m:self.m + self.n]                                                     # n, l
        keyed = torch.cat([rows[:, :self.m].sum(dim=1, keepdim=True), rows[:, self.m:self.m + self.n]], dim=1)
        weight = masked.double()
        self.sums[stage] += keyed.double() * weight[:, None]
        self.counts[stage] += weight
        self.steps[stage].append(step)

    def result(self) -> AttentionStages:
        matrix = []
        for stage in range(3):
            mean = (self.sums[stage] / self.counts[stage].clamp(min=1)[:, None]).float()
            matrix.append([[round(float(v), 5) for v in row] if self.counts[stage, q] > 0 else None
                           for q, row in enumerate(mean.tolist())])
        return AttentionStages(stages=list(STAGES), steps=self.steps, matrix=matrix)


def generate(predictor: MaskPredictor, prompt: str, method: str = "dico", *, mode: str = "non-ar",
             gen_length: int = 96, block_length: int | None = None, capture_attention: bool = False,
             on_step: Callable[[Trace, Step], None] | None = None, should_stop: Callable[[], bool] | None = None,
             **settings) -> Trace:
    """Decode ``prompt`` with ``method`` and return the full step trace.

    ``settings`` go to the rule (e.g. ``threshold=0.9`` for fast, ``tau1=0.3, seeds=8`` for dico).
    ``on_step(trace, step)`` is called after every step (streaming); ``should_stop()`` is polled
    before every forward pass and raises ``Cancelled`` carrying the partial trace.
    """
    prompt_ids = check_request(predictor, prompt, method, mode, gen_length, block_length)
    rule = make_rule(method, mode, **settings)
    if mode == "non-ar":
        block_length = None
    if capture_attention and not predictor.supports_attention:
        raise ValueError(f"capture_attention: model {predictor.name!r} does not return attention maps")
    n, m = gen_length, len(prompt_ids)
    ids = torch.tensor([prompt_ids + [predictor.mask_id] * n], dtype=torch.long)   # 1, m + n
    masked = torch.ones(n, dtype=torch.bool)
    trace = Trace(model=predictor.name, method=method, mode=mode, settings=rule_settings(rule), prompt=prompt,
                  prompt_length=m, gen_length=n, block_length=block_length)
    vocab: dict[int, str] = {}
    attention = _AttentionAccumulator(m, n) if capture_attention else None
    width = block_length or n
    start_time = time.perf_counter()
    for start in range(0, n, width):
        window = (start, min(start + width, n))
        rule.reset()
        while masked[window[0]:window[1]].any():
            if should_stop is not None and should_stop():
                trace.stopped = True
                _finish(trace, predictor, ids[0, m:], vocab, start_time, attention)
                raise Cancelled(trace)
            t0 = time.perf_counter()
            logits, attn = predictor.forward(ids, attentions=capture_attention)
            t1 = time.perf_counter()
            response_logits = logits[0, m:]
            response_logits[:, predictor.mask_id] = -torch.inf     # never "predict" a mask
            conf, pred, margin = score(response_logits)
            choice = rule.select(Scores(conf, pred, margin, masked, window))
            commit = torch.tensor(sorted(set(choice.commit)), dtype=torch.long)
            if commit.numel() == 0 or not masked[commit].all():
                raise RuntimeError(f"rule {method} chose no or already decoded positions: {choice.commit}")
            t2 = time.perf_counter()
            if attention is not None:
                attention.add(len(trace.steps), attn, masked, 1.0 - masked.float().mean().item())
            tokens = pred[commit]
            conf_list = [round(c, 5) if keep else None for c, keep in zip(conf.tolist(), masked.tolist())]
            pred_list = [p if keep else None for p, keep in zip(pred.tolist(), masked.tolist())]
            ids[0, m + commit] = tokens
            masked[commit] = False
            step = Step(index=len(trace.steps), phase=choice.phase, window=list(window), committed=commit.tolist(),
                        tokens=tokens.tolist(), confidence=conf_list, prediction=pred_list, seeds=choice.seeds,
                        clusters=choice.clusters, unmasked_fraction=round(1.0 - masked.float().mean().item(), 5),
                        forward_s=round(t1 - t0, 6), select_s=round(t2 - t1, 6))
            for token in set(pred_list) - {None} - vocab.keys():
                vocab[token] = predictor.token_text(token)
            trace.steps.append(step)
            trace.nfe = len(trace.steps)
            if on_step is not None:
                on_step(trace, step)
    _finish(trace, predictor, ids[0, m:], vocab, start_time, attention)
    return trace


def _finish(trace: Trace, predictor: MaskPredictor, response: torch.Tensor, vocab: dict, start_time: float,
            attention: _AttentionAccumulator | None) -> None:
    trace.response = response.tolist()
    for token in set(trace.response) - vocab.keys():
        vocab[token] = predictor.token_text(token)
    trace.vocab = {str(k): v for k, v in sorted(vocab.items())}
    trace.text = predictor.decode(trace.response)
    trace.nfe = len(trace.steps)
    trace.wall_s = round(time.perf_counter() - start_time, 6)
    decoded = sum(len(s.committed) for s in trace.steps)
    trace.tokens_per_s = round(decoded / trace.wall_s, 3) if trace.wall_s > 0 else 0.0
    trace.attention = attention.result() if attention is not None else None
