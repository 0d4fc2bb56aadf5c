"""Rules that replace written tokens with others where the model now predicts another one confidently (a step's
``edited``): LLaDA 2.1's joint threshold (SGLang's ``JointThreshold``, Apache-2.0), which fills the window's masks
above ``threshold`` and, in the same pass, replaces every written, unfixed position of the window whose prediction
differs from its token with a probability above ``edit_threshold`` (docs/decoding.md §7.6). Its signal, acted on by
taking the token back instead, is token-to-mask's (``dico.rules.takeback``). Earlier windows, the prompt,
constraints and a fork's forced tokens are never touched.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dico.rules.core import Choice, Rule, Scores, top1
from dico.settings import LLaDA21Settings


def doubted(s: Scores, edit_threshold: float) -> torch.Tensor:
    """Written, unfixed positions of the window whose prediction is another token, above ``edit_threshold``."""
    return s.written() & (s.conf > edit_threshold) & (s.pred != s.tokens)


def filled(s: Scores, threshold: float) -> list[int]:
    """Mask-to-token: the window's masked positions above ``threshold``, or the most confident one."""
    cand = s.candidates()
    if not bool(cand.any()):
        return []
    return torch.nonzero(cand & (s.conf > threshold)).flatten().tolist() or top1(s.conf, cand)


@dataclass
class JointThreshold(Rule):
    """LLaDA 2.1 (``llada21``): mask-to-token and token-to-token in one pass. Once the window has no mask, up to
    ``max_post_edit_steps`` more passes may still edit it; the pass after them, or a pass that would write nothing,
    ends the window without a write (SGLang spends that pass too, so it is a step of the trace). With ``model_card``
    the window ends with its last post-edit pass, as LLaDA 2.1's own generate checks its count before a pass
    (docs/decoding.md §11.6)."""
    settings: LLaDA21Settings = field(default_factory=LLaDA21Settings)
    leans = {"commit": {"conf": 1}, "edit": {"conf": 1}}

    def start(self, window) -> None:
        self.post_edit, self.finished = 0, False

    def lingers(self) -> bool:
        return not self.finished

    def lingering(self) -> int:
        return self.settings.max_post_edit_steps + 1

    def choose(self, s: Scores) -> Choice:
        commit = filled(s, self.settings.threshold)
        if not commit:
            self.post_edit += 1
            if self.post_edit > self.settings.max_post_edit_steps:
                self.finished = True
                return Choice([], "edit")
        edit = torch.nonzero(doubted(s, self.settings.edit_threshold)).flatten().tolist()
        if not commit and not edit:
            self.finished = True
        full = int(s.candidates().sum()) == len(commit)                  # no mask left after this pass
        if self.settings.model_card and full and self.post_edit >= self.settings.max_post_edit_steps:
            self.finished = True
        return Choice(commit, "fast" if commit else "edit", edit=edit)
