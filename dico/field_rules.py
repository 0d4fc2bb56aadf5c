"""The decoders the field races next, as rules over the one loop: EB-Sampler and KLASS wait (for a bounded joint
entropy, for stable distributions); WINO and Saber revise (a step may take committed tokens back).

Each is the published algorithm's choice of commits (and re-masks) from one step's scores, written from its
description (docs/decoding.md §7): what the published code does and where the project differs are recorded there
and in ``dico.settings``. A rule asks the sampler for the signals it needs (``signals``: entropy, KL from the previous
pass, the mirrored block's verification); they come back as (n,) CPU vectors in ``Scores.signals``. Ties go to the
lower position, as everywhere in the project (the published code's ``topk``/``sort`` leave them to torch), except in
Saber: among exactly equal values it commits and takes back what its published code's ``torch.topk`` does
(``_saber_topk``: the same call on the vector its code lays out).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from dico.rules import Choice, Rule, Schedule, Scores, top1, top_ranked
from dico.settings import EBSettings, KLASSSettings, SaberSettings, WINOSettings


def _ranked(values: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The allowed positions, highest value first; ties to the lower position."""
    positions = torch.nonzero(allowed).flatten()
    order = values[positions].sort(descending=True, stable=True).indices
    return positions[order]


def _lowest(values: torch.Tensor, allowed: torch.Tensor, k: int) -> list[int]:
    """The k allowed positions with the lowest values (ties to the lower position), in position order."""
    return top_ranked(-values, allowed, k) if k > 0 and bool(allowed.any()) else []


# ------------------------------------------------------------------------------------------------ EB-Sampler

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


# ------------------------------------------------------------------------------------------------------ KLASS

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


# ------------------------------------------------------------------------------------------------------- WINO

WINO_FIRST_ACCEPT = 30          # the authors' code: last_accept starts at 30 in every block


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
            return _lowest(verify, earlier, self.last_accept - 1)
        return torch.nonzero(doubted).flatten().tolist()


# ------------------------------------------------------------------------------------------------------ Saber

def _saber_topk(values: torch.Tensor, allowed: torch.Tensor, k: int, largest: bool, prompt_length: int) -> list[int]:
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
class Saber(Rule):
    """Saber (docs/decoding.md §7.4). Commit the undecoded positions up to the window's end whose confidence is above
    the mean confidence the committed tokens had when committed (1 before any), at least the top ``n``. Then, unless
    that finished everything up to the window's end, take back max(n // 2, ceil(fix / 8)) (at most fix - 1, where fix
    = max(n, commits)) decoded positions up to the window's end whose confidence fell most since the previous pass
    (positions committed in this very pass included, and in semi-AR earlier blocks' too). "Confidence" is the
    probability of the current argmax at every position, decoded or not. Among exactly equal values both choices
    are its published code's ``torch.topk`` (``_saber_topk``), over the prompt too (``Scores.prompt_length``)."""
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
        return Choice(commit, "fast", remask=_saber_topk(fell, decoded, count, False, s.prompt_length))

    def _commits(self, conf: torch.Tensor, reach: torch.Tensor, end: int, prompt_length: int) -> list[int]:
        known = self.committed_conf[:end]
        known = known[torch.isfinite(known)]
        threshold = float(known.mean()) if known.numel() else 1.0
        picked = reach & (conf > threshold)
        if int(picked.sum()) >= self.settings.n:
            return torch.nonzero(picked).flatten().tolist()
        return _saber_topk(conf, reach, self.settings.n, True, prompt_length)     # fewer: the top n
