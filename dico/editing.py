"""Decoders that read the model's prediction at written positions (docs/decoding.md §7.6-7.7): LLaDA 2.1's joint
threshold replaces a written token where the model now predicts another one confidently (token-to-token); the
token-to-mask rival takes it back to the mask instead, so the next pass predicts it with the position masked.

Both are SGLang's ``JointThreshold`` (Apache-2.0, the algorithm that serves LLaDA 2.1) as one window's rule: fill
the window's masks above ``threshold`` (none above it: the most confident one), and in the same pass act on every
written, unfixed position of the window whose prediction differs from its token with a probability above
``edit_threshold``. Earlier windows, the prompt, constraints and a fork's forced tokens are never touched.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dico.rules import Choice, Rule, Scores, top1
from dico.settings import LLaDA21Settings, T2MSettings


def _doubted(s: Scores, edit_threshold: float) -> torch.Tensor:
    """Written, unfixed positions of the window whose prediction is another token, above ``edit_threshold``."""
    return s.written() & (s.conf > edit_threshold) & (s.pred != s.tokens)


def _filled(s: Scores, threshold: float) -> list[int]:
    """Mask-to-token: the window's masked positions above ``threshold``, or the most confident one."""
    cand = s.candidates()
    if not bool(cand.any()):
        return []
    return torch.nonzero(cand & (s.conf > threshold)).flatten().tolist() or top1(s.conf, cand)


@dataclass
class JointThreshold(Rule):
    """LLaDA 2.1 (``llada21``): mask-to-token and token-to-token in one pass. Once the window has no mask, up to
    ``max_post_edit_steps`` more passes may still edit it; the pass after them, or a pass that would write nothing,
    ends the window without a write (SGLang spends that pass too, so it is a step of the trace)."""
    settings: LLaDA21Settings = field(default_factory=LLaDA21Settings)
    leans = {"commit": {"conf": 1}, "edit": {"conf": 1}}

    def start(self, window) -> None:
        self.post_edit, self.finished = 0, False

    def lingers(self) -> bool:
        return not self.finished

    def lingering(self) -> int:
        return self.settings.max_post_edit_steps + 1

    def choose(self, s: Scores) -> Choice:
        commit = _filled(s, self.settings.threshold)
        if not commit:
            self.post_edit += 1
            if self.post_edit > self.settings.max_post_edit_steps:
                self.finished = True
                return Choice([], "edit")
        edit = torch.nonzero(_doubted(s, self.settings.edit_threshold)).flatten().tolist()
        if not commit and not edit:
            self.finished = True
        return Choice(commit, "fast" if commit else "edit", edit=edit)


@dataclass
class TokenToMask(Rule):
    """Token-to-mask (``t2m``): LLaDA 2.1's signal, acted on by taking the doubted token back to the mask (after the
    pass's commits) instead of replacing it. Each window may take tokens back in at most ``max_post_edit_steps``
    passes (LLaDA 2.1's post-edit budget, here spent wherever it edits), so a window always ends; a full window gets
    one more pass only while that budget lasts, and a pass that finds nothing to take back there ends it."""
    settings: T2MSettings = field(default_factory=T2MSettings)
    leans = {"commit": {"conf": 1}, "remask": {"conf": 1}}   # takes back a confident disagreement

    def start(self, window) -> None:
        self.budget, self.finished = self.settings.max_post_edit_steps, False

    def lingers(self) -> bool:
        return not self.finished and self.budget > 0

    def lingering(self) -> int:
        return 2 * self.settings.max_post_edit_steps        # a pass taking tokens back, a pass refilling them

    def choose(self, s: Scores) -> Choice:
        commit = _filled(s, self.settings.threshold)
        remask = []
        if self.budget > 0:
            remask = torch.nonzero(_doubted(s, self.settings.edit_threshold)).flatten().tolist()
            self.budget -= bool(remask)
        if not commit and not remask:
            self.finished = True
        return Choice(commit, "fast" if commit else "edit", remask=remask)
