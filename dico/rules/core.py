"""The contract every decoding rule keeps with the loop (``Scores`` in, ``Choice`` out, ``Rule``), and the rankings
and schedule several rules share.

Every rule follows one small protocol (``Rule``): ``start(window)`` when a window opens, and ``choose(scores)`` once
per forward pass. A rule sees only CPU vectors of one step (confidence, prediction, logit margin, which positions are
masked, the window, the signals it asked for) and returns a ``Choice``: the positions to commit, take back or edit,
and its phase. The loop in ``dico.loop`` drives every rule the same way and records the trace; each rule's settings
are a dataclass of ``dico.settings``, checked when built; ``dico.methods.make_rule`` builds a method's rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from dico.sampling import Sampler
from dico.settings import Settings


@dataclass
class Scores:
    """One step's view of the response, on the CPU (the loop brings these few vectors back from the model)."""
    conf: torch.Tensor      # (n,) float32, max softmax prob; meaningless where not masked
    pred: torch.Tensor      # (n,) long, argmax token
    margin: torch.Tensor    # (n,) float32, top1 - top2 raw logit
    masked: torch.Tensor    # (n,) bool, still masked before this step
    window: tuple[int, int]  # [start, end) response offsets the rule may commit
    rank: torch.Tensor | None = None   # (n,) float32, Dream's ranking when the rule asked for one (``Rule.rank``)
    signals: dict = field(default_factory=dict)   # name -> (n,) float32, the signals asked for (``Rule.signals``)
    fixed: torch.Tensor | None = None  # (n,) bool, fixed by hand (constraints, forced tokens): never taken back
    prompt_length: int = 0             # positions before the response (Saber's published top-k runs over them too)
    tokens: torch.Tensor | None = None  # (n,) long, the response's ids before this step (the mask id where masked)

    def __post_init__(self):
        if self.fixed is None:
            self.fixed = torch.zeros_like(self.masked)

    def candidates(self) -> torch.Tensor:
        """Masked positions inside the window."""
        return self.masked & self._inside()

    def written(self) -> torch.Tensor:
        """Positions inside the window decoded before this step and not fixed by hand: what a revising or editing
        rule may act on there."""
        return ~self.masked & ~self.fixed & self._inside()

    def _inside(self) -> torch.Tensor:
        inside = torch.zeros_like(self.masked)
        inside[self.window[0]:self.window[1]] = True
        return inside

    def copy(self) -> Scores:
        """These scores with tensors of their own (a trial ``choose`` may change them in place)."""
        return replace(self, conf=self.conf.clone(), margin=self.margin.clone(), masked=self.masked.clone(),
                       rank=None if self.rank is None else self.rank.clone(), fixed=self.fixed.clone(),
                       signals={k: v.clone() for k, v in self.signals.items()},
                       tokens=None if self.tokens is None else self.tokens.clone())

    def leaning(self, chosen: dict[str, list[int]], leans: dict[str, dict[str, int]], tol: float) -> Scores:
        """These scores leaning the way a recorded step chose (a fork replaying a trace decoded on another machine,
        docs/decoding.md §8). For each kind of choice (``commit``, ``remask``, ``edit``) and each score that decides
        it (``Rule.leans``: +1 where a higher value chooses a position, -1 a lower), the value moves by ``tol / 2``
        toward choosing the positions ``chosen`` recorded and away from choosing the kind's other candidates (masked
        positions for a commit; decoded ones, and this step's commits, for a take-back; decoded ones for an edit). So
        values less than ``tol`` apart fall as recorded, a value within ``tol / 2`` of a rule's threshold falls on the
        recorded side, and nothing further apart changes its order. A position two kinds pull both ways (a commit
        taken back in the same step) does not move."""
        pull: dict[str, torch.Tensor] = {}
        for kind, decides in leans.items():
            toward = torch.zeros(self.masked.shape, dtype=torch.float64)
            domain = self.masked.clone() if kind == "commit" else ~self.masked
            if kind == "remask":
                domain[list(chosen.get("commit", []))] = True
            toward[domain] = -1.0
            toward[list(chosen.get(kind, []))] = 1.0
            for name, sign in decides.items():
                pull[name] = pull.get(name, 0) + sign * toward
        leaned = self.copy()
        for name, way in pull.items():
            values = getattr(leaned, name) if name in LEANABLE else leaned.signals.get(name)
            if values is None:
                continue
            values = values + (tol / 2) * way.sign().to(values.dtype)
            if name == "conf":
                values = values.clamp(0.0, 1.0)
            if name in LEANABLE:
                setattr(leaned, name, values)
            else:
                leaned.signals[name] = values
        return leaned


LEANABLE = ("conf", "margin", "rank")      # the scores a lean may move besides the signals (``Scores.leaning``)


@dataclass
class Choice:
    commit: list[int]
    phase: str
    seeds: list[int] = field(default_factory=list)
    clusters: list[list[int]] = field(default_factory=list)
    guided: torch.Tensor | None = None       # DiCo Divide: the guided confidence seeds were ranked by
    guidance: torch.Tensor | None = None     # and the guidance weights behind it
    seed_threshold: float | None = None       # the guided confidence a seed needed
    shortcut: list[int] = field(default_factory=list)   # DiCo Divide: commits above the shortcut, beside the seeds
    remask: list[int] = field(default_factory=list)     # revising rules: decoded positions taken back to the mask,
                                                        # after this step's commits (docs/decoding.md §7)
    edit: list[int] = field(default_factory=list)       # editing rules: decoded positions whose token this pass's
                                                        # prediction replaces (docs/decoding.md §3.2)


class Rule:
    """The contract every rule keeps with the loop, written once: the loop calls ``plan`` before the first pass,
    ``start`` when a window opens and ``choose`` once a pass; what a rule asks of the sampler (``rank``,
    ``signals``, ``precision``) and what it cannot run with (``cannot``) are declared here, with defaults that
    a rule overrides where it differs."""
    settings: Settings
    rank: str | None = None         # a Dream ranking the sampler must compute for this rule (``dico.sampling``)
    signals: tuple[str, ...] = ()   # per-position signals the sampler must compute (``dico.sampling.SIGNALS``)
    precision: torch.dtype = torch.float32      # what its confidences and signals are scored in
    # What the rule cannot run with: {field: why}. ``dico.methods.admit`` refuses a run asking for one (a setting
    # not at its default, or an option of the run: ``capture_attention``) before anything runs.
    cannot: dict[str, str] = {}
    # What decides each kind of choice, for a replay leaning near-ties the recorded way (``Scores.leaning``): choice
    # kind -> {score: +1 where a higher value chooses a position, -1 a lower}. Most rules commit by confidence (Dream's
    # ranking where asked for; DiCo's Finalize and Prophet's exit by the logit margin).
    leans: dict[str, dict[str, int]] = {"commit": {"conf": 1, "margin": 1, "rank": 1}}

    @property
    def verifies(self) -> bool:
        """Its pass appends a mirrored copy of the window (WINO, ``dico.verify``)."""
        return "verify" in self.signals

    def plan(self, gen_length: int, width: int) -> None:
        """Check the settings against the run's lengths before any forward pass (ValueError names the field)."""

    def bind(self, predictor) -> None:
        """Take what the rule needs of the model before any forward pass (PC-Sampler: its token-frequency table);
        ValueError naming the field when the model lacks it."""

    def start(self, window: tuple[int, int] | None) -> None:
        """A new window opens (the whole response in non-AR mode, the next block in semi-AR mode)."""

    def choose(self, s: Scores) -> Choice:
        """The positions to commit at this step: at least one masked position of the window (a step of a window
        with no mask left, which only a lingering rule gets, may commit nothing)."""
        raise NotImplementedError

    fuses: bool = False             # it adds its own memory to the logits before they are scored (``fuse``)
    may_idle: bool = False          # a pass may commit nothing with masks left (SDAR: every chosen draw was the mask)

    def sampler(self) -> Sampler:
        """What scores this rule's passes: a ``Sampler`` of its settings, ranking and precision (a rule that draws
        its own tokens brings its own: ``dico.sdar``)."""
        return Sampler(self.settings, rank=self.rank, precision=self.precision)

    def fuse(self, logits: torch.Tensor, probs: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """The logits this pass is scored from, on the model's device, for a rule whose published code adds a memory of
        its own to the model's (dInfer's credit): ``logits`` (n, v) as the sampler prepared them (a copy), ``probs``
        their distribution, ``masked`` (n,) the CPU mask of the response before this step."""
        return logits

    def lingers(self) -> bool:
        """Whether the rule wants another pass over the current window although it has no mask left (LLaDA 2.1's
        post-edit passes). A lingering rule bounds those passes itself (docs/decoding.md §3.2)."""
        return False

    def lingering(self) -> int:
        """The most passes it lingers on one full window (the loop's pass limit grows by this a window)."""
        return 0


def steps_per_window(steps: int, gen_length: int, width: int) -> int:
    """LLaDA's schedule: ``steps`` passes split evenly over the blocks (0: one token a pass, returned as 0)."""
    blocks = gen_length // width
    if steps % blocks:
        raise ValueError(f"steps: {steps} is not a multiple of the number of blocks ({blocks}); "
                         "LLaDA splits the steps evenly over the blocks")
    return steps // blocks


def even_shares(masked: int, steps: int) -> list[int]:
    """LLaDA's schedule within a window: its ``masked`` positions split evenly over ``steps`` passes, the first
    passes taking one more where they do not divide."""
    base, extra = divmod(masked, steps)
    return [base + (1 if k < extra else 0) for k in range(steps)]


class Schedule:
    """LLaDA's schedule as a rule keeps it (Vanilla's official samplers, KLASS's fallback): ``steps`` passes for
    the whole answer split evenly over the blocks (0: one token a pass), and a window's masks split evenly over its
    passes, counted from the first pass that asks."""

    def __init__(self, steps: int):
        self.steps, self.per_window = steps, 0
        self.start()

    def plan(self, gen_length: int, width: int) -> None:
        self.per_window = steps_per_window(self.steps, gen_length, width)

    def start(self) -> None:
        self.step = 0
        self.shares: list[int] | None = None

    def tick(self, window: tuple[int, int]) -> tuple[int, int]:
        """This pass's index in the window and the window's passes."""
        i, self.step = self.step, self.step + 1
        return i, self.per_window or (window[1] - window[0])

    def even(self, i: int, steps: int, masked: int) -> int:
        """How many of ``masked`` positions pass ``i`` commits: its even share of the masks the window had when
        first asked; all that is left once the schedule has run out. At least one, at most ``masked``."""
        if self.shares is None:
            self.shares = even_shares(masked, steps)
        count = self.shares[i] if i < len(self.shares) else masked
        return max(1, min(count, masked))


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


def top_ranked(values: torch.Tensor, allowed: torch.Tensor, k: int) -> list[int]:
    """The k allowed positions with the highest values; ties go to the lower position."""
    if k == 1:
        return top1(values, allowed)
    ranked = torch.where(allowed, values, torch.full_like(values, -math.inf)).sort(descending=True, stable=True)
    return sorted(ranked.indices[:k].tolist())
