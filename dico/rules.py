"""Decoding rules: each chooses which masked positions to commit from one step's scores.

Every rule follows one small protocol (``Rule``): ``start(window)`` when a window opens, and
``choose(scores) -> Choice`` once per forward pass. A rule sees only CPU vectors of one step
(confidence, prediction, logit margin, which positions are masked, the window) and returns the
positions to commit, its phase, and for DiCo its seeds and clusters. The denoising loop in
``dico.loop`` drives every rule the same way and records the trace. Each rule's settings are a
dataclass of ``dico.settings``, checked when built. Section references are to DICO_SPEC.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch

from dico.settings import (DiCoSettings, FastFactorSettings, FastSettings, NON_AR, Settings, VanillaSettings,
                           settings_for)


@dataclass
class Scores:
    """One step's view of the response, on the CPU (the loop brings these few vectors back from the model)."""
    conf: torch.Tensor      # (n,) float32, max softmax prob; meaningless where not masked
    pred: torch.Tensor      # (n,) long, argmax token
    margin: torch.Tensor    # (n,) float32, top1 - top2 raw logit
    masked: torch.Tensor    # (n,) bool, still masked before this step
    window: tuple[int, int]  # [start, end) response offsets the rule may commit

    def candidates(self) -> torch.Tensor:
        """Masked positions inside the window."""
        inside = torch.zeros_like(self.masked)
        inside[self.window[0]:self.window[1]] = True
        return self.masked & inside


@dataclass
class Choice:
    commit: list[int]
    phase: str
    seeds: list[int] = field(default_factory=list)
    clusters: list[list[int]] = field(default_factory=list)
    guided: torch.Tensor | None = None       # DiCo Divide: the guided confidence seeds were ranked by
    guidance: torch.Tensor | None = None     # and the guidance weights behind it


class Rule(Protocol):
    settings: Settings

    def start(self, window: tuple[int, int]) -> None:
        """A new window opens (the whole response in non-AR mode, the next block in semi-AR mode)."""

    def choose(self, s: Scores) -> Choice:
        """The positions to commit at this step: at least one masked position of the window."""


def top1(values: torch.Tensor, allowed: torch.Tensor) -> list[int]:
    """The allowed position with the highest value; ties go to the lower position."""
    return [int(torch.where(allowed, values, torch.full_like(values, -math.inf)).argmax())]


def factor_set(conf: torch.Tensor, positions: torch.Tensor, f: float = 1.0) -> torch.Tensor:
    """Fast-dLLM's factor rule over ``positions``: the top k for the largest k with (k+1)(1-c(k)) < f (may be empty)."""
    if positions.numel() == 0:
        return positions
    c, order = conf[positions].sort(descending=True)
    k = torch.arange(1, c.numel() + 1, device=c.device)
    ok = torch.nonzero((k + 1) * (1 - c) < f).flatten()
    return positions[order[: int(ok[-1]) + 1]] if ok.numel() else positions[:0]


# ------------------------------------------------------------------------- Vanilla and Fast-dLLM

@dataclass
class Vanilla:
    """LLaDA's low-confidence remasking with one token a step: commit the most confident masked position."""
    settings: VanillaSettings = field(default_factory=VanillaSettings)

    def start(self, window) -> None:
        pass

    def choose(self, s: Scores) -> Choice:
        return Choice(top1(s.conf, s.candidates()), "vanilla")


@dataclass
class FastThreshold:
    """Fast-dLLM, threshold rule: every masked position with conf > threshold, else the top-1."""
    settings: FastSettings = field(default_factory=FastSettings)

    def start(self, window) -> None:
        pass

    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        picked = torch.nonzero(cand & (s.conf > self.settings.threshold)).flatten().tolist()
        return Choice(picked or top1(s.conf, cand), "fast")


@dataclass
class FastFactor:
    """Fast-dLLM, factor rule (f = 1 by default): always at least one token."""
    settings: FastFactorSettings = field(default_factory=FastFactorSettings)

    def start(self, window) -> None:
        pass

    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        picked = factor_set(s.conf, torch.nonzero(cand).flatten(), self.settings.factor).tolist()
        return Choice(picked or top1(s.conf, cand), "fast")


# ------------------------------------------------------------------------- construction

def make_rule(method: str, mode: str = NON_AR, settings: Settings | dict | None = None) -> Rule:
    """The rule for a method with its settings (a settings object or a plain dict, checked here)."""
    if not isinstance(settings, Settings):
        settings = settings_for(method, settings)
    elif settings.method != method:
        raise ValueError(f"settings: {type(settings).__name__} are not the settings of method {method!r}")
    if method == "dico":
        from dico.divide_conquer import DiCo
        return DiCo(settings, mode)
    return {"vanilla": Vanilla, "fast": FastThreshold, "fast-factor": FastFactor}[method](settings)
