"""The one denoising loop: forward, score on the model's device, let the rule choose, commit, record.

    for trace, step in decode(predictor, "Tom has 5 apples...", "dico"):   # one step as it is decided
        print(step.index, step.phase, step.committed)
    trace = generate(predictor, "Tom has 5 apples...", "dico")             # the same, drained

``Decoding`` is one prompt's state (ids, masks, window, rule, trace); it advances by one step given
that step's logits. ``decode`` drives it with one forward pass per step and yields every step;
closing the generator early (Stop) leaves a partial trace marked ``stopped``. Streaming, progress,
stopping and racing several methods are the caller's business: nothing here knows about threads.

Devices: logits stay where the model put them; the sampler (``dico.sampling``) reduces them there to
a few vectors of the response length and brings those back to the CPU in one transfer. Rules, masks,
ids and the trace only ever see CPU tensors; ``MaskPredictor.to_model`` is the one way a CPU tensor
reaches the model's device, and attention maps are summed there until the run ends.
"""
from __future__ import annotations

import copy
import time
from collections.abc import Generator
from functools import partial

import torch

from dico.attention import response_rows, stage_index
from dico.block import BLOCK_KIND, block_cache_for, check_block_request, response_length
from dico.cache import Cache, cache_shift, forward_for, uncached_token_forwards
from dico.constraints import encode_fixed
from dico.lanes import default_label
from dico.length import AUTO, auto_length
from dico.methods import admit
from dico.models import MaskPredictor
from dico.rules import Choice, Scores
from dico.settings import (
    DEFAULT_BLOCK_LENGTH,
    DEFAULT_GEN_LENGTH,
    MAX_PROMPT_CHARS,
    METHODS,
    MODES,
    NON_AR,
    PASS_LIMIT,
    SEMI_AR,
    Settings,
    method_id,
)
from dico.trace import NEAR_TIE, STAGES, AttentionStages, Step, Trace

CONFIDENCE_DIGITS = 5       # the trace rounds confidences to this many digits (its JSON stays small)


def check_inputs(prompt: str, method: str, mode: str, gen_length: int, block_length: int | None) -> None:
    """The checks of a request that need no model (the CLI runs them before loading one)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt: is empty; type a question for the model")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"prompt: is {len(prompt)} characters, over the {MAX_PROMPT_CHARS}-character limit")
    if method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; choose from {', '.join(METHODS)}")
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
    if gen_length == AUTO:                                  # the model chooses it (dico.length); blocks round it up
        if mode == SEMI_AR and (not isinstance(block_length, int) or isinstance(block_length, bool)
                                or block_length < 1):
            raise ValueError(f"block_length: must be a whole number >= 1, got {block_length!r}")
        return
    if not isinstance(gen_length, int) or isinstance(gen_length, bool) or gen_length < 1:
        raise ValueError(f"gen_length: must be a whole number >= 1 or 'auto', got {gen_length!r}")
    if mode == SEMI_AR:
        if not isinstance(block_length, int) or isinstance(block_length, bool) or not 1 <= block_length <= gen_length:
            raise ValueError(f"block_length: must be a whole number in 1..gen_length ({gen_length}), "
                             f"got {block_length!r}")
        if gen_length % block_length:
            raise ValueError(f"block_length: gen_length {gen_length} is not a multiple of block_length {block_length}")


def check_request(predictor: MaskPredictor, prompt: str, method: str, mode: str, gen_length: int,
                  block_length: int | None) -> list[int]:
    """Validate a request before any forward pass; return the prompt ids. Errors name the field."""
    if predictor.kind == BLOCK_KIND:         # block diffusion: semi-AR, one model block a window (dico.block)
        check_block_request(predictor, mode, block_length, gen_length)
    check_inputs(prompt, method, mode, gen_length, block_length)
    prompt_ids = predictor.encode_prompt(prompt)
    if len(prompt_ids) >= predictor.max_length:       # no room for even one answer token: the prompt is at fault
        raise ValueError(f"prompt: is {len(prompt_ids)} tokens; the model's {predictor.max_length} positions must "
                         "hold the prompt and the answer; shorten the prompt")
    if gen_length == AUTO:
        return prompt_ids
    if len(prompt_ids) + gen_length > predictor.max_length:
        raise ValueError(f"gen_length: prompt ({len(prompt_ids)} tokens) + gen_length ({gen_length}) exceeds the "
                         f"model's {predictor.max_length} positions; shorten the prompt or lower gen_length "
                         f"to at most {max(predictor.max_length - len(prompt_ids), 0)}")
    return prompt_ids


class AttentionAccumulator:
    """Per-stage running means of masked rows of the layer- and head-averaged attention map, kept on the
    model's device until the end of the run. Stages split the run by unmasked fraction (``STAGES``)."""

    def __init__(self, predictor: MaskPredictor, prompt_length: int, n: int):
        self.predictor, self.m, self.n = predictor, prompt_length, n
        self.sums = predictor.to_model(torch.zeros(len(STAGES), n, n + 1, dtype=torch.float64))
        self.counts = torch.zeros(len(STAGES), n, dtype=torch.float64)
        self.steps: list[list[int]] = [[] for _ in STAGES]

    def add(self, step: int, attentions, masked: torch.Tensor) -> None:
        stage = stage_index(masked, len(STAGES))
        mean = torch.stack([a[0].float().mean(dim=0) for a in attentions]).mean(dim=0)         # l, l (device)
        keyed = response_rows(mean, self.m, self.n)                                             # n, n + 1
        weight = masked.double()
        self.sums[stage] += keyed.double() * self.predictor.to_model(weight)[:, None]
        self.counts[stage] += weight
        self.steps[stage].append(step)

    def result(self) -> AttentionStages:
        sums = self.sums.cpu()
        matrix = []
        for stage in range(len(STAGES)):
            mean = (sums[stage] / self.counts[stage].clamp(min=1)[:, None]).float()
            matrix.append([[round(float(v), CONFIDENCE_DIGITS) for v in row] if self.counts[stage, q] > 0 else None
                           for q, row in enumerate(mean.tolist())])
        return AttentionStages(stages=list(STAGES), steps=self.steps, matrix=matrix)


class Decoding:
    """One prompt being decoded: its ids, masks, window, rule state and trace, advanced one step at a time.

    ``decode`` drives one Decoding with a forward pass per step; a batch driver can drive many with one
    pass for all of them, handing each its own rows of the logits.
    """

    def __init__(self, predictor: MaskPredictor, prompt: str, method: str = "dico", *, mode: str = NON_AR,
                 gen_length: int = DEFAULT_GEN_LENGTH, block_length: int | None = DEFAULT_BLOCK_LENGTH,
                 settings: Settings | dict | None = None, capture_attention: bool = False, label: str | None = None,
                 constraints: dict | None = None):
        method, block_length = method_id(method), block_length if mode == SEMI_AR else None
        prompt_ids = check_request(predictor, prompt, method, mode, gen_length, block_length)
        self.rule = admit(method, mode, settings, capture_attention=capture_attention)
        self.align = 0                          # response offset of the first window's end, counted in windows
        if predictor.kind == BLOCK_KIND:        # windows are the model's blocks from position 0 (dico.block)
            gen_length = response_length(len(prompt_ids), gen_length, predictor.block)
            self.align = len(prompt_ids) % predictor.block
            if self.rule.verifies:
                raise ValueError(f"method: {method} scores a mirrored copy of the window that sees the blocks after "
                                 f"it; {predictor.name!r} is a block diffusion model; choose another method")
            if len(prompt_ids) + gen_length > predictor.max_length:
                raise ValueError(f"gen_length: the prompt and the response to the end of its last block "
                                 f"({len(prompt_ids)} + {gen_length}) exceed the model's {predictor.max_length} "
                                 "positions; lower gen_length")
        length_search = None
        if gen_length == AUTO:                                  # settings checked first: a bad one runs nothing
            gen_length, length_search = auto_length(predictor, prompt_ids, block_length)
        self.rule.plan(gen_length, block_length or gen_length)
        self.rule.bind(predictor)
        self.sampler = self.rule.sampler()
        self.cache = _cache_for(predictor, self.rule.settings, len(prompt_ids), gen_length)
        self.stops = predictor.stop_ids()
        if capture_attention and not predictor.supports_attention:
            raise ValueError(f"capture_attention: model {predictor.name!r} does not return attention maps")
        self.predictor = predictor
        self.m, self.n = len(prompt_ids), gen_length
        self.ids = torch.tensor([prompt_ids + [predictor.mask_id] * gen_length], dtype=torch.long)   # 1, m + n (CPU)
        self.masked = torch.ones(gen_length, dtype=torch.bool)                                        # n
        self.fixed = torch.zeros(gen_length, dtype=torch.bool)      # n: fixed by hand, never taken back
        fixed = encode_fixed(predictor, constraints or {}, gen_length)       # words before decoding (dico.constraints)
        self.max_passes = pass_limit(self.rule, gen_length, block_length)      # a rule that would loop ends here
        self.out_of_passes = False                                   # ended at the pass limit (edits cut short too)
        settings_record = self.rule.settings.to_dict()
        if method == "dico":
            settings_record["seeds"] = self.rule.n_seeds      # the N in effect for this mode
        self.trace = Trace(model=predictor.name, method=method, mode=mode, settings=settings_record, prompt=prompt,
                           prompt_length=self.m, gen_length=gen_length, block_length=block_length,
                           model_block=predictor.block if predictor.kind == BLOCK_KIND else None,
                           device=str(predictor.device), label=label or default_label(method, self.rule.settings),
                           length_search=length_search,
                           constraints={str(p): t for p, t in fixed.items()} or None)
        self.attention = AttentionAccumulator(predictor, self.m, gen_length) if capture_attention else None
        self.width = block_length or gen_length
        self.window: tuple[int, int] | None = None
        self.vocab: dict[int, str] = {}
        self.started = time.perf_counter()
        self.finished = False
        self._fix(fixed)
        self._open_window()

    @property
    def done(self) -> bool:
        """No pass left: the pass limit, or no mask left and a rule that does not linger (docs/decoding.md §3.2)."""
        return self.out_of_passes or (not bool(self.masked.any()) and not self.rule.lingers())

    def _fix(self, tokens: dict[int, int]) -> None:
        """Write tokens at response positions and fix them: decoded from now on, never taken back."""
        if tokens:
            where = torch.tensor(list(tokens), dtype=torch.long)
            self.ids[0, self.m + where] = torch.tensor(list(tokens.values()), dtype=torch.long)
            self.masked[where] = False
            self.fixed[where] = True
            self.vocab.update((t, self.predictor.token_text(t)) for t in tokens.values())

    def edit(self, forced: dict[int, int], taken: list[int]) -> None:
        """Between two steps (a fork, ``dico.forking``): force tokens (fixed from now on) and take decoded ones back.
        The window reopens at the first block with masks, so a take-back in an earlier block is decoded again."""
        self.finished = False           # a decode closed at its last step is open again (a fork at its end)
        self._fix(forced)
        if taken:
            where = torch.tensor(taken, dtype=torch.long)
            self.ids[0, self.m + where] = self.predictor.mask_id
            self.masked[where] = True
            if self.cache is not None:
                self.cache.taken_back(where)
        if forced and self.cache is not None:
            self.cache.taken_back(torch.tensor(list(forced), dtype=torch.long))   # stale: recompute them
        if self.done or self.window is None:
            return
        if taken and min(taken) < self.window[0]:                   # reopen the earlier block (left to right)
            self.window = None
            self._open_window()
        elif not self.masked[:self.window[1]].any():                # the edit finished the window
            self._open_window()

    def switch_rule(self, method: str, settings=None) -> None:
        """Continue this decode with another method's rule (a fork racing another lane's): a fresh rule, sampler and
        cache (its first pass refreshes), started on the current window."""
        old, method = self.trace.method, method_id(method)
        self.rule = admit(method, self.trace.mode, settings, self.n, self.width, self.attention is not None)
        self.rule.bind(self.predictor)
        self.sampler = self.rule.sampler()
        self.cache = _cache_for(self.predictor, self.rule.settings, self.m, self.n)
        self.trace.method, self.trace.settings = method, self.rule.settings.to_dict()
        self.trace.label = default_label(method, self.rule.settings)
        if self.window is not None:
            self.rule.start(self.window)
        self.max_passes = pass_limit(self.rule, self.n, self.width)
        self.switched_from = old

    def _open_window(self) -> None:
        """Move to the first window that still has masks (semi-AR blocks left to right) and restart the rule."""
        start = 0 if self.window is None else self.window[1]
        while start < self.n and not self.masked[start:self._window_end(start)].any():
            start = self._window_end(start)
        if start < self.n:
            self.window = (start, self._window_end(start))
            self.rule.start(self.window)

    def _window_end(self, start: int) -> int:
        """End of the window starting at ``start``: a width on (a block-causal model's first block may be cut short by
        the prompt that fills its beginning, ``align``)."""
        return min(start + self.width - (start + self.align) % self.width, self.n)

    def plan_pass(self) -> Cache | None:
        """Before a forward pass: the cache, told which positions this pass computes (None without a cache)."""
        if self.cache is not None:
            self.cache.plan(self.masked, self.window)
        return self.cache

    def forward(self):
        """This step's forward pass (two with classifier-free guidance): logits (l, v) on the model's device and
        the attention maps when captured. A batch driver makes its own pass and hands each row to ``step``.
        A verifying rule's pass (WINO) appends the mirrored window: its logits are (l + w, v)."""
        if self.rule.verifies:
            return self._verifying_forward(), None
        cache = self.plan_pass()
        logits, attentions = self.sampler.logits(self.predictor, self.ids, self.m,
                                                 attentions=self.attention is not None,
                                                 caches=None if cache is None else [cache])
        return logits[0], attentions

    def _verifying_forward(self) -> torch.Tensor:
        """WINO's pass: the sequence and, after it, a mirrored copy of the window (``dico.verify``): (l + w, v)."""
        from dico.verify import verify_forward  # only the verifying rules need it
        start, end = self.window
        logits, mirror, _ = verify_forward(self.predictor, self.ids, (self.m + start, self.m + end))
        return torch.cat([logits[0], mirror[0]])

    def step(self, logits: torch.Tensor, attentions=None, forward_s: float = 0.0, recorded: Step | None = None) -> Step:
        """Advance by one step given this pass's logits over the whole sequence (l, v), on the model's device
        (a verifying rule's: (l + w, v), the mirrored window after the sequence). ``recorded``: the step a replay
        expects (``dico.forking``); near-ties fall its way (``_choose``)."""
        t1 = time.perf_counter()
        length, mirror = self.m + self.n, None
        if self.rule.verifies:
            mirror = (self.window[0], logits[length:])
        conf, pred, margin, rank, signals = self.sampler.score(
            logits[self.m:length], self.predictor.mask_id, self.stops, signals=self.rule.signals,
            tokens=self.ids[0, self.m:], mirror=mirror,
            fuse=partial(self.rule.fuse, masked=self.masked) if self.rule.fuses else None)
        choice = self._choose(Scores(conf, pred, margin, self.masked, self.window, rank, signals, self.fixed, self.m,
                                     self.ids[0, self.m:].clone()), recorded)
        commit, remask, edit = self._checked(choice, pred)
        t2 = time.perf_counter()
        if self.attention is not None and attentions is not None and (self.cache is None or self.cache.refreshed):
            self.attention.add(len(self.trace.steps), attentions, self.masked)
        step = self._record(choice, commit, remask, edit, conf, pred, forward_s, t2 - t1)
        if not self.masked[:self.window[1]].any() and not self.rule.lingers():   # a revising rule may have reopened
            self._open_window()                                                   # an earlier block
        if len(self.trace.steps) >= self.max_passes and not self.done:
            self.out_of_passes = True
        if self.done:
            self.close()
        return step

    def _choose(self, scores: Scores, recorded: Step | None) -> Choice:
        """The rule's choice. Replaying a recorded step whose positions this machine would choose otherwise, the
        rule chooses again from scores leaning the recorded way (``Scores.leaning``: values within ``NEAR_TIE`` of
        each other, every score the rule decides by, ``Rule.leans``): another CPU's last bits may order near-tied
        positions otherwise (docs/decoding.md §2.2), and a trace decoded there still forks here. Only then: a replay
        on the machine that decoded the trace gives its rule exactly the scores it had."""
        if recorded is None:
            return self.rule.choose(scores)
        trial = copy.deepcopy(self.rule, {id(self.predictor): self.predictor}).choose(scores.copy())
        if _positions(trial) == (recorded.committed, recorded.remasked, [p for p, _, _ in recorded.edited]):
            return self.rule.choose(scores)
        chosen = {"commit": recorded.committed, "remask": recorded.remasked,
                  "edit": [p for p, _, _ in recorded.edited]}
        return self.rule.choose(scores.leaning(chosen, self.rule.leans, NEAR_TIE))

    def _checked(self, choice: Choice, pred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rule's commits (masked positions), re-masks (decoded after the commits, none fixed) and edits (decoded
        before the step, none fixed, each to another token). A step commits at least one position unless its window
        had no mask left or it takes tokens back (the progress invariant, docs/decoding.md §3.2)."""
        commit, remask, edit = (torch.tensor(p, dtype=torch.long) for p in _positions(choice))
        may_rest = not self.masked[self.window[0]:self.window[1]].any() or remask.numel() > 0 or \
            self.rule.may_idle                              # SDAR: every chosen draw was the mask token (dico.sdar)
        if (commit.numel() == 0 and not may_rest) or not self.masked[commit].all():
            raise RuntimeError(f"rule {self.trace.method} chose no or already decoded positions: {choice.commit}")
        if remask.numel():
            decoded = ~self.masked & ~self.fixed
            decoded[commit] = True
            if not decoded[remask].all():
                raise RuntimeError(f"rule {self.trace.method} took back positions that are masked or fixed: "
                                   f"{choice.remask}")
        if edit.numel():
            editable = ~self.masked & ~self.fixed
            editable[remask] = False
            if not editable[edit].all() or bool((pred[edit] == self.ids[0, self.m + edit]).any()):
                raise RuntimeError(f"rule {self.trace.method} edited positions that are masked, fixed, taken back or "
                                   f"already hold the predicted token: {choice.edit}")
        return commit, remask, edit

    def _record(self, choice: Choice, commit: torch.Tensor, remask: torch.Tensor, edit: torch.Tensor, conf, pred,
                forward_s: float, select_s: float) -> Step:
        masked = self.masked.tolist()
        tokens = pred[commit]
        self.ids[0, self.m + commit] = tokens
        self.masked[commit] = False
        edited = [[p, old, new] for p, old, new in zip(edit.tolist(), self.ids[0, self.m + edit].tolist(),
                                                        pred[edit].tolist())]
        if edit.numel():
            self.ids[0, self.m + edit] = pred[edit]
        if remask.numel():
            self.ids[0, self.m + remask] = self.predictor.mask_id
            self.masked[remask] = True
        if self.cache is not None and (remask.numel() or edit.numel()):
            self.cache.taken_back(torch.cat([remask, edit]))          # stale keys and values: recompute them
        step = Step(index=len(self.trace.steps), phase=choice.phase, window=list(self.window),
                    committed=commit.tolist(), tokens=tokens.tolist(),
                    confidence=_masked_list(conf, masked), prediction=[p if keep else None
                                                                       for p, keep in zip(pred.tolist(), masked)],
                    seeds=choice.seeds, clusters=choice.clusters,
                    unmasked_fraction=round(1.0 - self.masked.float().mean().item(), CONFIDENCE_DIGITS),
                    guided_confidence=None if choice.guided is None else _masked_list(choice.guided, masked),
                    guidance=None if choice.guidance is None else
                    [round(w, CONFIDENCE_DIGITS) for w in choice.guidance.tolist()],
                    seed_threshold=choice.seed_threshold, shortcut=sorted(choice.shortcut),
                    forward_s=round(forward_s, 6), select_s=round(select_s, 6),
                    refresh=self.cache is not None and self.cache.refreshed, remasked=remask.tolist(),
                    edited=edited, token_forwards=self._token_forwards())
        for token in (set(step.prediction) | {new for _, _, new in edited}) - {None} - self.vocab.keys():
            self.vocab[token] = self.predictor.token_text(token)
        self.trace.steps.append(step)
        self.trace.nfe = len(self.trace.steps)
        self.trace.token_forwards += step.token_forwards
        return step

    def _token_forwards(self) -> int:
        """Positions this pass put through the model: the cache's plan, or every position (and a verifying rule's
        mirrored window), twice with classifier-free guidance."""
        if self.cache is not None:
            return self.cache.token_forwards
        extra = self.window[1] - self.window[0] if self.rule.verifies else 0
        return uncached_token_forwards(self.m + self.n + extra, self.rule.settings.cfg_scale)

    def close(self) -> Trace:
        """Finish the trace (final text, answer length, timing); a run closed before the end is ``stopped`` (one
        that reached the pass limit is not: ``limit_reached``)."""
        if self.finished:
            return self.trace
        self.finished = True
        self.trace.limit_reached = self.out_of_passes and bool(self.masked.any())     # with masks left
        finish(self.trace, self.predictor, self.ids[0, self.m:].tolist(), self.vocab, stopped=not self.done,
               wall_s=time.perf_counter() - self.started)
        self.trace.attention = self.attention.result() if self.attention is not None else None
        return self.trace


def finish(trace: Trace, predictor: MaskPredictor, response: list[int], vocab: dict[int, str], stopped: bool,
           wall_s: float) -> Trace:
    """Close ``trace`` on its final response ids: text, vocabulary, answer length and timing."""
    trace.stopped = stopped
    trace.response = response
    for token in set(response) - vocab.keys():
        vocab[token] = predictor.token_text(token)
    trace.vocab = {str(k): v for k, v in sorted(vocab.items())}
    trace.text = predictor.decode(response)
    trace.nfe = len(trace.steps)
    trace.set_time(wall_s)
    trace.set_answer(predictor.answer_length(response))
    return trace


def close_snapshot(predictor: MaskPredictor, trace: Trace) -> Trace:
    """Finish, as stopped, a copy of a running trace from its record alone: the copy a worker process sent back
    before its run was closed there (ZeroGPU). Its response is the trace's own replay of its steps and edits by hand
    (``Trace.tokens_before``); its attention maps stayed with the run."""
    response = [predictor.mask_id if t is None else t for t in trace.tokens_before(len(trace.steps))]
    vocab: dict[int, str] = {}
    for step in trace.steps:
        vocab.update((t, predictor.token_text(t)) for t in set(step.prediction) - {None} - vocab.keys())
    return finish(trace, predictor, response, vocab, stopped=True,
                  wall_s=sum(s.forward_s + s.select_s for s in trace.steps))


def _positions(choice: Choice) -> tuple[list[int], list[int], list[int]]:
    """A choice's commits, take-backs and edits as a step records them (sorted, once each)."""
    return sorted(set(choice.commit)), sorted(set(choice.remask)), sorted(set(choice.edit))


def pass_limit(rule, gen_length: int, width: int | None) -> int:
    """The most passes a run may take: PASS_LIMIT x gen_length, and what an editing rule may linger on each full
    window (docs/decoding.md §3.2)."""
    return PASS_LIMIT * gen_length + -(-gen_length // (width or gen_length)) * rule.lingering()


def _cache_for(predictor: MaskPredictor, settings: Settings, prompt_length: int, gen_length: int) -> Cache | None:
    """The decode's KV cache as its settings ask (``dico.cache``); ValueError naming ``cache`` if the model has none."""
    if predictor.kind == BLOCK_KIND:         # its finished blocks, exact (dico.block)
        return block_cache_for(predictor, settings, prompt_length, gen_length)
    if settings.cache == "none":
        return None
    forward_for(predictor)
    return Cache(settings.cache, settings.cache_refresh, prompt_length, gen_length,
                 rows=2 if settings.cfg_scale else 1, shift=cache_shift(predictor), keep_prompt=settings.cache_prompt)


def _masked_list(values: torch.Tensor, masked: list[bool]) -> list[float | None]:
    return [round(v, CONFIDENCE_DIGITS) if keep else None for v, keep in zip(values.tolist(), masked)]


def decode(predictor: MaskPredictor, prompt: str, method: str = "dico", **options) -> Generator[tuple[Trace, Step],
                                                                                                 None, Trace]:
    """Decode ``prompt`` one step at a time, yielding ``(trace, step)`` as each step is decided.

    ``options`` are ``Decoding``'s (mode, gen_length (a number, or "auto": the model chooses it, ``dico.length``),
    block_length, settings, capture_attention, label, constraints ({response offset: word or token id}, fixed
    before decoding: ``dico.constraints``)) plus any setting of the method as a keyword (``name=value``). The generator
    returns the finished trace; closing it early finishes the partial trace with ``stopped=True`` (the caller still
    holds it).
    """
    return (yield from drive(Decoding(predictor, prompt, method, **fold_settings(options))))


def drive(run: Decoding) -> Generator[tuple[Trace, Step], None, Trace]:
    """One forward pass a step until ``run`` is done, yielding ``(trace, step)``; closed early, the trace is
    finished as ``stopped``. ``decode`` and ``dico.forking.decode_fork`` both drive their decode with it."""
    try:
        while not run.done:
            t0 = time.perf_counter()
            logits, attentions = run.forward()
            yield run.trace, run.step(logits, attentions, time.perf_counter() - t0)
    finally:
        run.close()
    return run.trace


def generate(predictor: MaskPredictor, prompt: str, method: str = "dico", **options) -> Trace:
    """Decode ``prompt`` with ``method`` and return the full step trace (``decode``, drained)."""
    steps = decode(predictor, prompt, method, **options)
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value


_OPTIONS = ("mode", "gen_length", "block_length", "settings", "capture_attention", "label", "constraints")


def fold_settings(options: dict) -> dict:
    """Keyword settings (``name=value``) folded into ``settings``, so both spellings reach the rule."""
    loose = {k: v for k, v in options.items() if k not in _OPTIONS}
    kept = {k: v for k, v in options.items() if k in _OPTIONS}
    if loose:
        base = kept.get("settings")
        base = base.to_dict() if isinstance(base, Settings) else dict(base or {})
        kept["settings"] = {**base, **loose}
    return kept
