"""Rules that commit a count of tokens a pass set in advance (LLaDA's and Dream's schedules, k a pass), ranked by a
score: Vanilla and the official samplers, Top-k, PC-Sampler (confidence calibrated by how common a token is) and
Prophet (LLaDA's schedule until the answer's logit gap allows committing everything at once). docs/decoding.md §4,
§7.9, §7.12.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dico.rules.core import Choice, Rule, Schedule, Scores, top1, top_ranked
from dico.sampling import DREAM_RANKS
from dico.settings import PCSamplerSettings, ProphetSettings, TopKSettings, VanillaSettings

DREAM_EPS = 1e-3        # Dream's timesteps run from 1 down to this


@dataclass
class Vanilla(Rule):
    """LLaDA's low-confidence remasking with one token a step: commit the most confident masked position.

    With ``steps``, the official samplers: LLaDA's ``generate.py`` commits an even share of each block per step
    (low_confidence, random); Dream's algorithms commit a share on its timesteps 1 -> eps, ranked by their own
    confidence (maskgit_plus, topk_margin, entropy) or, for origin, each masked position with probability
    1 - s/t. Every step commits at least one token (the progress invariant; the official code may commit none).
    """
    settings: VanillaSettings = field(default_factory=VanillaSettings)

    def __post_init__(self):
        self.rank = self.settings.remasking if self.settings.remasking in DREAM_RANKS else None
        self._random = torch.Generator().manual_seed(self.settings.random_seed)     # rules see CPU tensors only
        self.schedule = Schedule(self.settings.steps)

    def plan(self, gen_length: int, width: int) -> None:
        self.schedule.plan(gen_length, width)

    def start(self, window) -> None:
        self.schedule.start()

    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        remasking, masked = self.settings.remasking, int(cand.sum())
        i, steps = self.schedule.tick(s.window)
        if remasking == "origin":
            return Choice(self._origin(cand, self._dream_share(i, steps)), "vanilla")
        if remasking in ("low_confidence", "random"):                          # LLaDA: the block's masks, evenly
            count = self.schedule.even(i, steps, masked)
        else:
            count = max(1, min(int(masked * self._dream_share(i, steps)), masked))
        values = {"low_confidence": s.conf, "random": torch.rand(s.conf.shape, generator=self._random)}.get(
            remasking, s.rank)
        return Choice(top_ranked(values, cand, count), "vanilla")

    @staticmethod
    def _dream_share(i: int, steps: int) -> float:
        """1 - s/t on Dream's timesteps linspace(1, eps, steps + 1); 1 at the last step."""
        if i >= steps - 1:
            return 1.0
        t, s = 1 - i * (1 - DREAM_EPS) / steps, 1 - (i + 1) * (1 - DREAM_EPS) / steps
        return 1 - s / t

    def _origin(self, cand: torch.Tensor, p: float) -> list[int]:
        draw = torch.rand(cand.shape, generator=self._random)
        picked = torch.nonzero(cand & (draw < p)).flatten().tolist()
        return picked or top1(-draw, cand)


@dataclass
class TopK(Rule):
    """Naive parallel decoding (the paper's Observation I): the k most confident masked positions of the window,
    each from its own marginal, whatever they depend on. The same commits as LLaDA's low-confidence sampler with
    steps = gen_length / k (k dividing the window); the last step of a window commits what is left."""
    settings: TopKSettings = field(default_factory=TopKSettings)
    def choose(self, s: Scores) -> Choice:
        cand = s.candidates()
        return Choice(top_ranked(s.conf, cand, min(self.settings.k, int(cand.sum()))), "vanilla")


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
