"""Rules that may take committed tokens back to the mask (a step's ``remasked``), so a later pass decodes them again:
WINO (what its mirrored window does not confirm), Saber (what fell most since the last pass), ReMDM (the least likely,
in loops) and token-to-mask (where the model now confidently predicts another token). docs/decoding.md §7.3-7.4,
§7.7, §7.10. Among exactly equal values Saber and ReMDM take what their published code's ``torch.topk`` takes
(``saber_topk``); the others break ties to the lower position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from dico.rules.core import Choice, Rule, Scores, top1, top_ranked
from dico.rules.editing import doubted, filled
from dico.settings import ReMDMSettings, SaberSettings, T2MSettings, WINOSettings

WINO_FIRST_ACCEPT = 30          # the authors' code: last_accept starts at 30 in every block


def lowest(values: torch.Tensor, allowed: torch.Tensor, k: int) -> list[int]:
    """The k allowed positions with the lowest values (ties to the lower position), in position order."""
    return top_ranked(-values, allowed, k) if k > 0 and bool(allowed.any()) else []


def saber_topk(values: torch.Tensor, allowed: torch.Tensor, k: int, largest: bool, prompt_length: int) -> list[int]:
    """The allowed positions among the k highest (``largest``) or lowest ``values`` as Saber's published code picks
    them, in position order: ``torch.topk`` on the CPU over the whole sequence in float32, the ``prompt_length``
    prompt positions first, every position outside ``allowed`` at -inf (+inf for the lowest). Which of exactly equal
    values it takes depends on that layout (its length and where the infinities lie), so the layout is the published
    one. Where k runs past the allowed positions its code takes some of the infinities too; those are left out."""
    if k <= 0 or not bool(allowed.any()):
        return []
    fill = -math.inf if largest else math.inf
    row = torch.full((prompt_length + len(values),), fill, dtype=torch.float32)
    row[prompt_length:] = torch.where(allowed, values.float(), torch.full_like(values, fill, dtype=torch.float32))
    picked = torch.topk(row, k=min(k, len(row)), largest=largest).indices - prompt_length
    return sorted(p for p in picked.tolist() if p >= 0 and bool(allowed[p]))


@dataclass
class WideInNarrowOut(Rule):
    """WINO (docs/decoding.md §7.3). Wide in: commit the window's masked positions above ``threshold`` (at most
    min(max(int(0.7 x masked), 5), 20), the most confident; none: the top-1). Narrow out, only when this pass
    committed more than one: take back every token committed in an earlier pass whose mirrored position (which
    cannot see it; ``signals["verify"]``) gives it a probability below ``keep``; when that is at least as many as the
    previous pass committed, only that many less one, the least confirmed."""
    settings: WINOSettings = field(default_factory=WINOSettings)
    leans = {"commit": {"conf": 1}, "remask": {"verify": -1}}
    signals = ("verify",)
    precision = torch.float64           # its code scores in float64 (docs/decoding.md §7.3)
    # its pass appends a mirrored copy of the window to the sequence (``dico.verify``)
    cannot = {"cache": "the KV caches do not compute the mirrored copy of the window its pass appends",
              "cfg_scale": "its verifying pass has no classifier-free guidance",
              "capture_attention": "its verifying pass returns no attention maps"}

    def start(self, window) -> None:
        self.last_accept = WINO_FIRST_ACCEPT

    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        most = min(max(int(int(cand.sum()) * 0.7), 5), 20)
        above = cand & (s.conf > self.settings.threshold)
        if int(above.sum()) > most:
            commit = top_ranked(s.conf, cand, most)
        elif bool(above.any()):
            commit = torch.nonzero(above).flatten().tolist()
        else:
            commit = top1(s.conf, cand)
        remask = self._narrow_out(s) if len(commit) > 1 else []
        self.last_accept = len(commit)
        return Choice(commit, "fast", remask=remask)

    def _narrow_out(self, s: Scores) -> list[int]:
        earlier = s.written()                                   # decoded before this pass (and not fixed by hand)
        verify = s.signals["verify"]
        doubted = earlier & (verify < self.settings.keep)
        if int(doubted.sum()) >= self.last_accept:
            return lowest(verify, earlier, self.last_accept - 1)
        return torch.nonzero(doubted).flatten().tolist()


@dataclass
class Saber(Rule):
    """Saber (docs/decoding.md §7.4). Commit the undecoded positions up to the window's end whose confidence is above
    the mean confidence the committed tokens had when committed (1 before any), at least the top ``n``. Then, unless
    that finished everything up to the window's end, take back max(n // 2, ceil(fix / 8)) (at most fix - 1, where fix
    = max(n, commits)) decoded positions up to the window's end whose confidence fell most since the previous pass
    (positions committed in this very pass included, and in semi-AR earlier blocks' too). "Confidence" is the
    probability of the current argmax at every position, decoded or not. Among exactly equal values both choices
    are its published code's ``torch.topk`` (``saber_topk``), over the prompt too (``Scores.prompt_length``)."""
    settings: SaberSettings = field(default_factory=SaberSettings)
    leans = {"commit": {"conf": 1}, "remask": {"conf": -1}}   # takes back where confidence fell most
    def __post_init__(self):
        self.committed_conf: torch.Tensor | None = None   # (n,) confidence at each position's last commit; -inf: never
        self.previous: torch.Tensor | None = None         # (n,) last pass's confidence (-inf past its window's end)

    def start(self, window) -> None:
        pass

    def choose(self, s: Scores) -> Choice:
        n, end = self.settings.n, s.window[1]
        if self.committed_conf is None:
            self.committed_conf = torch.full_like(s.conf, -math.inf)
            self.previous = torch.zeros_like(s.conf)
        conf = s.conf.clone()
        conf[end:] = -math.inf
        fell = conf - self.previous
        fell = torch.where(torch.isfinite(fell), fell, torch.full_like(fell, math.inf))
        self.previous = conf
        reach = s.masked.clone()
        reach[end:] = False                                    # undecoded positions up to the window's end
        commit = self._commits(conf, reach, end, s.prompt_length)
        self.committed_conf[commit] = conf[commit]
        after = s.masked.clone()
        after[commit] = False
        if not bool(after[:end].any()):                        # done up to the window's end: nothing taken back
            return Choice(commit, "fast")
        fix = max(n, len(commit))
        count = min(max(n // 2, math.ceil(fix / 8)), fix - 1)
        decoded = ~after & ~s.fixed
        decoded[end:] = False
        return Choice(commit, "fast", remask=saber_topk(fell, decoded, count, False, s.prompt_length))

    def _commits(self, conf: torch.Tensor, reach: torch.Tensor, end: int, prompt_length: int) -> list[int]:
        known = self.committed_conf[:end]
        known = known[torch.isfinite(known)]
        threshold = float(known.mean()) if known.numel() else 1.0
        picked = reach & (conf > threshold)
        if int(picked.sum()) >= self.settings.n:
            return torch.nonzero(picked).flatten().tolist()
        return saber_topk(conf, reach, self.settings.n, True, prompt_length)     # fewer: the top n


@dataclass
class ReMDM(Rule):
    """ReMDM as Saber's repository runs it (§7.10), non-AR: ``unmask_k`` commits a pass (the most confident masks)
    until ``init_unmask_ratio`` of the response is written; then ``loop_steps`` loops of two passes, the first
    taking back the ``unmask_k`` written tokens the model now gives the lowest probability, the second committing
    the ``unmask_k`` most confident masks; then ``unmask_k`` a pass to the end. Among exactly equal values it takes
    what its code's ``torch.topk`` takes over the whole sequence (``saber_topk``)."""
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
            return Choice([], "vanilla", remask=saber_topk(s.signals["token_prob"], written, count, False,
                                                            s.prompt_length))
        if self.loops > 0:
            self.loops, self.take_back = self.loops - 1, True
            return Choice(self._top(s, cand, self.remasked), "vanilla")
        return Choice(self._top(s, cand, k), "vanilla")

    @staticmethod
    def _top(s: Scores, cand: torch.Tensor, k: int) -> list[int]:
        return saber_topk(s.conf, cand, min(k, int(cand.sum())), True, s.prompt_length)


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
        commit = filled(s, self.settings.threshold)
        remask = []
        if self.budget > 0:
            remask = torch.nonzero(doubted(s, self.settings.edit_threshold)).flatten().tolist()
            self.budget -= bool(remask)
        if not commit and not remask:
            self.finished = True
        return Choice(commit, "fast" if commit else "edit", remask=remask)
