"""Rules that commit every masked position of the window whose score clears a bar, and at least the most confident:
Fast-dLLM's threshold and factor rules, EB-Sampler (an entropy budget), KLASS (stable and confident), dInfer's
hierarchy (one sure token a run of masks) and credit (a steady prediction earns a logit bonus). docs/decoding.md §5,
§7.1-7.2, §7.8, §7.11; ties go to the lower position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from dico.rules.core import Choice, Rule, Schedule, Scores, factor_set, top1, top_ranked
from dico.settings import CreditSettings, EBSettings, FastFactorSettings, FastSettings, HierarchySettings, KLASSSettings


def _ranked(values: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The allowed positions, highest value first; ties to the lower position."""
    positions = torch.nonzero(allowed).flatten()
    order = values[positions].sort(descending=True, stable=True).indices
    return positions[order]


@dataclass
class FastThreshold(Rule):
    """Fast-dLLM, threshold rule: every masked position with conf > threshold, else the top-1."""
    settings: FastSettings = field(default_factory=FastSettings)
    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        picked = torch.nonzero(cand & (s.conf > self.settings.threshold)).flatten().tolist()
        return Choice(picked or top1(s.conf, cand), "fast")


@dataclass
class FastFactor(Rule):
    """Fast-dLLM, factor rule (f = 1 by default): always at least one token."""
    settings: FastFactorSettings = field(default_factory=FastFactorSettings)
    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        picked = factor_set(s.conf, torch.nonzero(cand).flatten(), self.settings.factor).tolist()
        return Choice(picked or top1(s.conf, cand), "fast")


@dataclass
class EntropyBounded(Rule):
    """EB-Sampler (docs/decoding.md §7.1): take the window's masked positions by confidence, highest first, and commit
    the longest prefix whose entropies summed, less the largest of them, stay within gamma. The first position always
    fits (its sum less its max is 0), so every step commits at least one. No state across steps."""
    settings: EBSettings = field(default_factory=EBSettings)
    leans = {"commit": {"conf": 1, "entropy": -1}}
    signals = ("entropy",)

    def choose(self, s: Scores) -> Choice:
        cand = s.candidates() & (s.conf > 0)
        if not bool(cand.any()):                                   # every confidence zeroed (eos_last): the top-1
            return Choice(top1(s.conf, s.candidates()), "vanilla")
        order = _ranked(s.conf, cand)
        entropy = s.signals["entropy"][order].double()
        spent = entropy.cumsum(0) - entropy.cummax(0).values
        k = int((spent <= self.settings.gamma).sum())
        return Choice(sorted(order[:max(k, 1)].tolist()), "vanilla")


@dataclass
class KLAdaptive(Rule):
    """KLASS (docs/decoding.md §7.2): a masked window position is ready when its confidence is above ``confidence``
    and its KL divergence from the previous pass stayed below ``kl`` for the last ``history`` passes (from the
    window's pass ``history - 1`` on); commit every ready position, or, when none is, LLaDA's schedule (an even
    share of the window's masks a pass, the most confident first). The KL history runs across windows, as the
    authors' code keeps it (``reset_each_block``: the DiCo release's port)."""
    settings: KLASSSettings = field(default_factory=KLASSSettings)
    leans = {"commit": {"conf": 1, "kl": -1}}
    signals = ("kl",)
    precision = torch.float64           # its code scores in float64 (docs/decoding.md §7.2)

    def __post_init__(self):
        if self.settings.reset_each_block:              # the DiCo release's port scores in float32
            self.precision = torch.float32
        self.history: torch.Tensor | None = None        # (n, history) float64: the last KL values of every position
        self.schedule = Schedule(self.settings.steps)
        self.start(None)

    def plan(self, gen_length: int, width: int) -> None:
        self.schedule.plan(gen_length, width)

    def start(self, window) -> None:
        self.schedule.start()
        self.forget = window is not None and self.settings.reset_each_block and self.history is not None

    def choose(self, s: Scores) -> Choice:
        self._remember(s.signals["kl"].double())
        cand = s.candidates()
        i, steps = self.schedule.tick(s.window)
        stable = (self.history < self.settings.kl).all(dim=1) if i >= self.settings.history - 1 else \
            torch.zeros_like(cand)
        ready = cand & stable & (s.conf > self.settings.confidence)
        if bool(ready.any()):
            return Choice(torch.nonzero(ready).flatten().tolist(), "fast")
        count = self.schedule.even(i, steps, int(cand.sum()))   # none ready: LLaDA's schedule of the window's masks
        return Choice(top_ranked(s.conf, cand, count), "vanilla")

    def _remember(self, kl: torch.Tensor) -> None:
        """Push this pass's KL into every position's history (a forgotten history reads as unstable)."""
        if self.history is None or self.forget:
            self.history = torch.full((kl.numel(), self.settings.history), math.inf, dtype=torch.float64)
            if self.forget:                                    # the port's first KL of a window is against zeros
                kl = torch.full_like(kl, math.inf)
            self.forget = False
        self.history = torch.cat([self.history[:, 1:], kl[:, None]], dim=1)


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
