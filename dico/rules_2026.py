"""Decoders the field moved to after the paper, as rules over the one loop (docs/decoding.md §7.8-7.12): dInfer's
hierarchical decoder (one token from each sure run of masks) and its credit decoder (a steady prediction earns a
logit bonus), PC-Sampler (confidence calibrated by how common a token is), Prophet's early commit (everything at
once when the answer's logit gap is wide) and ReMDM as Saber's repository runs it (take the least likely tokens back
and decode them again). LLaDA 2.1's editing rules are in ``dico.editing``.

Each is written from its published code's behaviour (read, not copied; the sources are named in docs/decoding.md);
ties go to the lower position as everywhere, but ReMDM, which takes among exactly equal values what its code's
``torch.topk`` takes, as Saber does (``_saber_topk``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from dico.field_rules import _saber_topk
from dico.rules import Choice, Rule, Schedule, Scores, top1, top_ranked
from dico.settings import CreditSettings, HierarchySettings, PCSamplerSettings, ProphetSettings, ReMDMSettings


def mask_runs(allowed: torch.Tensor) -> list[tuple[int, int]]:
    """[start, end) of every maximal run of adjacent True positions."""
    edges = torch.diff(allowed.int(), prepend=allowed.new_zeros(1).int(), append=allowed.new_zeros(1).int())
    starts, ends = torch.nonzero(edges == 1).flatten(), torch.nonzero(edges == -1).flatten()
    return list(zip(starts.tolist(), ends.tolist()))


@dataclass
class Hierarchy(Rule):
    """dInfer's hierarchical decoder (§7.8): the most confident position of every run of adjacent masked positions
    of the window whose best confidence is above ``low_threshold`` (every position sharing that best value), every
    masked position above ``threshold``, and always the window's most confident one. Tokens committed together
    then lie in different runs, with written tokens between them. No state across steps."""
    settings: HierarchySettings = field(default_factory=HierarchySettings)

    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        conf = torch.where(cand, s.conf, torch.full_like(s.conf, -math.inf))
        picked = cand & (conf > self.settings.threshold)
        for start, end in mask_runs(cand):
            best = conf[start:end].max()
            if best > self.settings.low_threshold:
                picked[start:end] |= conf[start:end] == best
        picked[top1(s.conf, cand)] = True
        return Choice(torch.nonzero(picked).flatten().tolist(), "fast")


@dataclass
class Credit(Rule):
    """dInfer's credit threshold decoder (§7.11). Each window keeps a credit for every (position, token): at every
    pass, after the window's first, all credit decays by ``decay_beta``; each masked position's most likely token
    gains its probability to the power ``boost_gamma``; the pass is then scored from the logits plus
    ``credit_alpha`` x log(1 + credit). Commit every masked position of the window whose confidence is at least
    ``threshold``, or, none being, the most confident one and any within 1e-5 of it (its code's float32 rule)."""
    settings: CreditSettings = field(default_factory=CreditSettings)
    fuses = True

    def start(self, window) -> None:
        self.window, self.credit = window, None

    def fuse(self, logits: torch.Tensor, probs: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        cfg, (start, end) = self.settings, self.window
        if self.credit is None:                              # (w, v) on the model's device, as its code keeps it
            self.credit = torch.zeros(end - start, logits.shape[1], dtype=torch.float32, device=logits.device)
        else:
            self.credit.mul_(cfg.decay_beta)
        top = probs[start:end].float().max(dim=-1)
        gain = top.values.pow(cfg.boost_gamma) * masked[start:end].to(logits.device, torch.float32)
        self.credit.scatter_add_(1, top.indices[:, None], gain[:, None])
        logits[start:end] += cfg.credit_alpha * torch.log(self.credit + 1)
        return logits

    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        conf = torch.where(cand, s.conf.float(), torch.full_like(s.conf, -math.inf, dtype=torch.float32))
        bar = (conf.max() - 1e-5).clamp(-1000, self.settings.threshold)
        return Choice(torch.nonzero(cand & (conf >= bar)).flatten().tolist(), "fast")


@dataclass
class PCSampler(Rule):
    """PC-Sampler as d2Cache runs it (§7.12): each masked position's score is -conf x log(f + 1e-10), f the
    predicted token's share of the model's training text (``MaskPredictor.token_frequency``), capped at
    ``clip_alpha`` (and with ``lambd``, PC-Sampler's own position weight exp(-lambd x offset in the window));
    the window's ``num_transfer_tokens`` highest scores are committed a pass."""
    settings: PCSamplerSettings = field(default_factory=PCSamplerSettings)

    def bind(self, predictor) -> None:
        if predictor.token_frequency is None:
            raise ValueError(f"method: PC-Sampler needs the token frequencies of {predictor.name!r}'s training text, "
                             "a token_frequency.json beside its weights (docs/decoding.md §7.12)")
        self.frequency = predictor.token_frequency

    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        rarity = -torch.log(self.frequency[s.pred].to(s.conf.dtype) + 1e-10)
        score = torch.clamp_max(s.conf * rarity, self.settings.clip_alpha)
        if self.settings.lambd:
            offset = torch.arange(len(score), dtype=score.dtype) - s.window[0]
            score = torch.exp(-self.settings.lambd * offset) * score
        k = min(self.settings.num_transfer_tokens, int(cand.sum()))
        return Choice(top_ranked(score, cand, k), "vanilla")


@dataclass
class Prophet(Rule):
    """Prophet (§7.9): LLaDA's low-confidence sampler (``steps`` over the blocks, one token a step by default), and
    before each step's commits the mean top-2 logit gap over the answer's first ``answer_length`` positions from
    ``answer_start``; once it reaches the gap for the progress made (step / steps, this step counted: ``early``
    before a third, ``mid`` before two thirds, ``late`` after), every mask of the response takes this pass's
    prediction and the run ends."""
    settings: ProphetSettings = field(default_factory=ProphetSettings)
    cannot = {"cache": "its early exit commits every mask of the response, and a cached pass leaves the positions "
                       "it does not compute with stale logits"}

    def __post_init__(self):
        self.schedule = Schedule(self.settings.steps)
        self.total, self.step = 0, 0

    def plan(self, gen_length: int, width: int) -> None:
        self.schedule.plan(gen_length, width)
        self.total = self.settings.steps or gen_length

    def start(self, window) -> None:
        self.schedule.start()

    def choose(self, s: Scores) -> Choice:
        self.step += 1
        if self._exits(s.margin):
            return Choice(torch.nonzero(s.masked).flatten().tolist(), "fast")
        cand = s.candidates()
        i, steps = self.schedule.tick(s.window)
        return Choice(top_ranked(s.conf, cand, self.schedule.even(i, steps, int(cand.sum()))), "vanilla")

    def _exits(self, margin: torch.Tensor) -> bool:
        start = self.settings.answer_start
        watched = margin[start:start + self.settings.answer_length]
        if not watched.numel():
            return False
        progress = self.step / (self.total or 1)
        gap = self.settings.early if progress < 0.33 else self.settings.mid if progress < 0.67 else self.settings.late
        return float(watched.double().mean()) >= gap


@dataclass
class ReMDM(Rule):
    """ReMDM as Saber's repository runs it (§7.10), non-AR: ``unmask_k`` commits a pass (the most confident masks)
    until ``init_unmask_ratio`` of the response is written; then ``loop_steps`` loops of two passes, the first
    taking back the ``unmask_k`` written tokens the model now gives the lowest probability, the second committing
    the ``unmask_k`` most confident masks; then ``unmask_k`` a pass to the end. Among exactly equal values it takes
    what its code's ``torch.topk`` takes over the whole sequence (``_saber_topk``)."""
    settings: ReMDMSettings = field(default_factory=ReMDMSettings)
    signals = ("token_prob",)
    leans = {"commit": {"conf": 1}, "remask": {"token_prob": -1}}

    def __post_init__(self):
        self.initial, self.loops, self.take_back, self.remasked = 0, self.settings.loop_steps, True, 0

    def lingers(self) -> bool:
        return self.initial == 0 and self.loops > 0      # its loops run even on a response with no mask left

    def lingering(self) -> int:
        return 2 * self.settings.loop_steps

    def plan(self, gen_length: int, width: int) -> None:
        cfg = self.settings                                  # non-AR only: ``admit`` refuses semi-AR
        initial = gen_length * cfg.init_unmask_ratio
        if abs(initial - round(initial)) > 1e-9 or round(initial) % cfg.unmask_k or gen_length % cfg.unmask_k:
            raise ValueError(f"init_unmask_ratio: gen_length {gen_length} x {cfg.init_unmask_ratio} must be a whole "
                             f"number of tokens, and it and gen_length multiples of unmask_k ({cfg.unmask_k}), as "
                             "its code asserts")
        self.initial = round(initial) // cfg.unmask_k

    def choose(self, s: Scores) -> Choice:
        k, cand = self.settings.unmask_k, s.candidates()
        if self.initial > 0:
            self.initial -= 1
            return Choice(self._top(s, cand, k), "vanilla")
        written = s.written()                                # the window is the whole response (non-AR)
        while self.loops > 0 and self.take_back and not bool(written.any()):
            self.loops -= 1                                  # its code skips a loop with nothing written
        if self.loops > 0 and self.take_back:
            self.take_back, count = False, min(k, int(written.sum()))
            self.remasked = count
            return Choice([], "vanilla", remask=_saber_topk(s.signals["token_prob"], written, count, False,
                                                            s.prompt_length))
        if self.loops > 0:
            self.loops, self.take_back = self.loops - 1, True
            return Choice(self._top(s, cand, self.remasked), "vanilla")
        return Choice(self._top(s, cand, k), "vanilla")

    @staticmethod
    def _top(s: Scores, cand: torch.Tensor, k: int) -> list[int]:
        return _saber_topk(s.conf, cand, min(k, int(cand.sum())), True, s.prompt_length)
