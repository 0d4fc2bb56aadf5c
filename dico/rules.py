"""Decoding rules: each chooses which masked positions to commit from one step's scores.

A rule sees a ``Scores`` (confidence, prediction and logit margin of every response position, which
positions are still masked, the current window) and returns a ``Choice`` (positions to commit, the
phase it was in, seeds and clusters). The denoising loop in ``dico.loop`` drives every rule the same
way. Section references are to ../shared/reference/DICO_SPEC.md.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch


@dataclass
class Scores:
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


def _top1(values: torch.Tensor, allowed: torch.Tensor) -> list[int]:
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
    name = "vanilla"

    def reset(self) -> None:
        pass

    def select(self, s: Scores) -> Choice:
        return Choice(_top1(s.conf, s.candidates()), "vanilla")


@dataclass
class FastThreshold:
    """Fast-dLLM, threshold rule: every masked position with conf > threshold, else the top-1."""
    threshold: float = 0.95
    name = "fast"

    def reset(self) -> None:
        pass

    def select(self, s: Scores) -> Choice:
        cand = s.candidates()
        picked = torch.nonzero(cand & (s.conf > self.threshold)).flatten().tolist()
        return Choice(picked or _top1(s.conf, cand), "fast")


@dataclass
class FastFactor:
    """Fast-dLLM, factor rule (f = 1 by default): always at least one token."""
    factor: float = 1.0
    name = "fast-factor"

    def reset(self) -> None:
        pass

    def select(self, s: Scores) -> Choice:
        cand = s.candidates()
        picked = factor_set(s.conf, torch.nonzero(cand).flatten(), self.factor).tolist()
        return Choice(picked or _top1(s.conf, cand), "fast")


# ------------------------------------------------------------------------- DiCo

@dataclass
class DiCoSettings:
    """Paper defaults (section 5.1); T_max, M and the 0.98 shortcut from the authors' code."""
    alpha: float = 0.5
    beta: float = 0.05
    tau1: float = 0.3
    tau2: float = 0.6
    tau3: float = 3.0
    r_gate: float = 0.8
    seeds: int | None = None         # N; None: 8 in non-AR, 4 in semi-AR
    t_max: int = 10
    gap: int = 2                     # M, gap tolerance when growing clusters
    shortcut: float = 0.98           # conf above which Conquer and Finalize commit at once
    guidance: bool = True            # trajectory guidance (TG)
    guidance_origin: str = "first-masked"   # or "window-start" (the paper's form)
    logit_margin: bool = True        # Finalize by margin > tau3 (else top-1 confidence only)
    conquer: str = "factor"          # or "threshold"
    conquer_threshold: float = 0.9   # used when conquer == "threshold"

    def validate(self) -> "DiCoSettings":
        for name in ("alpha", "beta", "tau1", "tau2", "r_gate", "shortcut", "conquer_threshold"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise ValueError(f"{name}: must be in (0, 1], got {value!r}")
        if not (isinstance(self.tau3, (int, float)) and self.tau3 > 0):
            raise ValueError(f"tau3: the logit-margin threshold must be > 0, got {self.tau3!r}")
        if self.seeds is not None and not (isinstance(self.seeds, int) and 1 <= self.seeds <= 64):
            raise ValueError(f"seeds: N must be an integer in 1..64, got {self.seeds!r}")
        if not (isinstance(self.t_max, int) and 1 <= self.t_max <= 100):
            raise ValueError(f"t_max: must be an integer in 1..100, got {self.t_max!r}")
        if not (isinstance(self.gap, int) and 0 <= self.gap <= 32):
            raise ValueError(f"gap: M must be an integer in 0..32, got {self.gap!r}")
        if self.guidance_origin not in ("first-masked", "window-start"):
            raise ValueError(f"guidance_origin: must be 'first-masked' or 'window-start', got {self.guidance_origin!r}")
        if self.conquer not in ("factor", "threshold"):
            raise ValueError(f"conquer: must be 'factor' or 'threshold', got {self.conquer!r}")
        return self


def guidance_weights(n: int, window: tuple[int, int], masked: torch.Tensor, alpha: float, beta: float,
                     origin: str = "first-masked") -> torch.Tensor:
    """Trajectory guidance w over response positions: 1 at the origin, decaying to w_min at the window end."""
    start, end = window
    unmasked = 1.0 - masked.float().mean().item()
    w_min = min(1.0, beta + alpha * unmasked)
    inside = masked[start:end].nonzero()
    first = start + int(inside[0]) if origin == "first-masked" and inside.numel() else start
    span = end - first
    k = torch.arange(n, dtype=torch.float32) - first
    exponent = k.clamp(min=0) / max(span - 1, 1)
    return torch.pow(torch.tensor(max(w_min, 1e-12)), exponent)


def soft_nms_seeds(cw: torch.Tensor, cand: torch.Tensor, n_seeds: int, tau1: float, width: int) -> list[int]:
    """Seeds spread apart by Soft-NMS: s *= D(i, j) = 1 - exp(-9 (i-j)^2 / W^2) after each accepted seed."""
    s = torch.where(cand, cw, torch.full_like(cw, -math.inf))
    pos = torch.arange(cw.numel(), dtype=torch.float32)
    seeds: list[int] = []
    for _ in range(n_seeds):
        i = int(s.argmax())
        if s[i] == -math.inf or cw[i] < tau1:
            break
        seeds.append(i)
        decay = 1 - torch.exp(-9 * (pos - i) ** 2 / width ** 2)
        s = torch.where(s == -math.inf, s, s * decay)
        s[i] = -math.inf
    return seeds


def _reach(passing: np.ndarray, gap: int) -> int:
    """How far a boundary moves along ``passing`` (walk order) when up to ``gap`` failures in a row are tolerated."""
    if passing.size == 0:
        return 0
    fail = (~passing).astype(np.int32)
    stop = passing.size
    if passing.size > gap:
        runs = np.convolve(fail, np.ones(gap + 1, dtype=np.int32), "valid")   # failures in each run of gap+1
        blocked = np.flatnonzero(runs == gap + 1)
        if blocked.size:
            stop = int(blocked[0])
    hits = np.flatnonzero(passing[:stop])
    return int(hits[-1]) + 1 if hits.size else 0


def grow(span: list[int], passing: np.ndarray, gap: int, lo: int, hi: int) -> list[int]:
    """Grow inclusive [start, end] left and right within [lo, hi) through positions that pass."""
    start, end = span
    right = _reach(passing[end + 1:hi], gap)
    left = _reach(passing[lo:start][::-1], gap)
    return [start - left, end + right]


def merge(clusters: list[list[int]]) -> list[list[int]]:
    """Merge clusters that overlap or touch; result sorted by start."""
    out: list[list[int]] = []
    for start, end in sorted(clusters):
        if out and start <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def trim(clusters: list[list[int]], masked: np.ndarray) -> list[list[int]]:
    """Shrink each cluster to its first and last still-masked position; drop clusters with none."""
    out = []
    for start, end in clusters:
        idx = np.flatnonzero(masked[start:end + 1])
        if idx.size:
            out.append([start + int(idx[0]), start + int(idx[-1])])
    return out


def cluster_mask(clusters: list[list[int]], n: int) -> np.ndarray:
    inside = np.zeros(n, dtype=bool)
    for start, end in clusters:
        inside[start:end + 1] = True
    return inside


@dataclass
class DiCo:
    """Divide, Conquer, Finalize over each window (spec, section DiCo). State lives between steps of a window."""
    settings: DiCoSettings = field(default_factory=DiCoSettings)
    semi_ar: bool = False
    name = "dico"

    def __post_init__(self):
        self.settings.validate()
        self.n_seeds = self.settings.seeds or (4 if self.semi_ar else 8)
        self.reset()

    def reset(self) -> None:
        """A new window starts a new round of Divide."""
        self.phase = "divide"
        self.clusters: list[list[int]] = []
        self._enter_divide()

    def _enter_divide(self) -> None:
        self.phase = "divide"
        self.divide_steps = 0
        self.quiet_steps = 0

    def select(self, s: Scores) -> Choice:
        # A phase that ends without committing hands the same scores to the next phase (progress invariant).
        while True:
            if self.phase == "divide":
                choice = self._divide(s)
            elif self.phase == "conquer":
                choice = self._conquer(s)
            else:
                choice = self._finalize(s)
            if choice is not None:
                return choice

    # --------------------------------------------------------------- Divide
    def _divide(self, s: Scores) -> Choice | None:
        cfg, (start, end) = self.settings, s.window
        cand = s.candidates()
        if cfg.guidance:
            cw = s.conf * guidance_weights(s.conf.numel(), s.window, s.masked, cfg.alpha, cfg.beta, cfg.guidance_origin)
        else:
            cw = s.conf
        seeds = soft_nms_seeds(cw, cand, self.n_seeds, cfg.tau1, end - start)
        if not seeds:
            self._end_divide(s.masked.numpy())
            return None
        masked = s.masked.numpy()
        passing = (cand & (cw >= cfg.tau1)).numpy()
        before = [c[:] for c in self.clusters]
        grown = []
        for seed in seeds:
            home = next((c for c in self.clusters if c[0] <= seed <= c[1]), None)
            grown.append(grow(home or [seed, seed], passing, cfg.gap, start, end))
        touched = {tuple(c) for c in self.clusters if any(c[0] <= sd <= c[1] for sd in seeds)}
        self.clusters = merge([c for c in self.clusters if tuple(c) not in touched] + grown)

        after = masked.copy()
        after[seeds] = False
        inside = cluster_mask(self.clusters, masked.size) & after
        density = float(cw[torch.from_numpy(inside)].mean()) if inside.any() else 0.0
        self.divide_steps += 1
        if self.divide_steps > 1:
            new_seed_outside = any(not any(c[0] <= sd <= c[1] for c in before) for sd in seeds)
            # grown by 10% or more; integer arithmetic, as 1.1 * 50 > 55 in floating point
            grew = any(10 * (e - b + 1) >= 11 * max([oe - ob + 1 for ob, oe in before if b <= ob and oe <= e] or [0])
                       for b, e in self.clusters)
            changed = new_seed_outside or len(self.clusters) != len(before) or grew
            self.quiet_steps = 0 if changed else self.quiet_steps + 1
        if density >= cfg.tau2 or self.quiet_steps >= 2 or self.divide_steps >= cfg.t_max:
            self._end_divide(after)
        return Choice(seeds, "divide", seeds=list(seeds), clusters=[c[:] for c in self.clusters])

    def _end_divide(self, masked: np.ndarray) -> None:
        self.clusters = trim(self.clusters, masked)
        self.phase = "conquer" if self.clusters else "finalize"

    # --------------------------------------------------------------- Conquer
    def _conquer(self, s: Scores) -> Choice:
        cfg = self.settings
        n = s.conf.numel()
        cand = s.candidates()
        in_clusters = torch.from_numpy(cluster_mask(self.clusters, n)) & cand
        picked = cand & (s.conf > cfg.shortcut)
        for start, end in self.clusters:
            positions = torch.nonzero(cand[start:end + 1]).flatten() + start
            if cfg.conquer == "factor":
                picked[factor_set(s.conf, positions)] = True
            else:
                picked[positions[s.conf[positions] > cfg.conquer_threshold]] = True
        commit = torch.nonzero(picked).flatten().tolist() or _top1(s.conf, in_clusters)

        masked = s.masked.numpy().copy()
        masked[commit] = False
        passing = masked & (s.conf > cfg.tau2).numpy()
        window_start, window_end = s.window
        updated: list[list[int]] = []
        for i, span in enumerate(self.clusters):
            lo = updated[-1][1] + 1 if updated else window_start
            hi = self.clusters[i + 1][0] if i + 1 < len(self.clusters) else window_end
            updated.append(grow(span, passing, cfg.gap, lo, hi))
        self.clusters = trim(updated, masked)
        inside = torch.from_numpy(cluster_mask(self.clusters, n) & masked)
        if not self.clusters or float(s.conf[inside].mean()) < cfg.tau2:
            window_masked = masked[window_start:window_end]
            if 1.0 - window_masked.mean() >= cfg.r_gate:
                self.phase = "finalize"
            else:
                self._enter_divide()
            clusters_out, self.clusters = [c[:] for c in self.clusters], []
            return Choice(commit, "conquer", clusters=clusters_out)
        return Choice(commit, "conquer", clusters=[c[:] for c in self.clusters])

    # --------------------------------------------------------------- Finalize
    def _finalize(self, s: Scores) -> Choice:
        cfg = self.settings
        cand = s.candidates()
        sure = s.conf > cfg.shortcut
        if cfg.logit_margin:
            sure = sure | (s.margin > cfg.tau3)
        picked = torch.nonzero(cand & sure).flatten().tolist()
        return Choice(picked or _top1(s.conf, cand), "finalize")


# ------------------------------------------------------------------------- construction

METHODS = ("vanilla", "fast", "fast-factor", "dico")


def make_rule(method: str, mode: str = "non-ar", **settings):
    """The rule for a method name with its settings; unknown names and values raise ValueError naming the field."""
    semi_ar = mode == "semi-ar"
    if method == "vanilla":
        _no_settings(method, settings)
        return Vanilla()
    if method == "fast":
        threshold = settings.pop("threshold", 0.95)
        _no_settings(method, settings)
        if not (isinstance(threshold, (int, float)) and 0 < threshold <= 1):
            raise ValueError(f"threshold: must be in (0, 1], got {threshold!r}")
        return FastThreshold(float(threshold))
    if method == "fast-factor":
        factor = settings.pop("factor", 1.0)
        _no_settings(method, settings)
        if not (isinstance(factor, (int, float)) and 0 < factor <= 10):
            raise ValueError(f"factor: must be in (0, 10], got {factor!r}")
        return FastFactor(float(factor))
    if method == "dico":
        known = set(DiCoSettings.__dataclass_fields__)
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ValueError(f"{unknown[0]}: not a DiCo setting; known: {', '.join(sorted(known))}")
        return DiCo(DiCoSettings(**settings), semi_ar=semi_ar)
    raise ValueError(f"method: unknown method {method!r}; choose from {', '.join(METHODS)}")


def _no_settings(method: str, settings: dict) -> None:
    if settings:
        raise ValueError(f"{next(iter(settings))}: not a setting of method {method!r}")


def rule_settings(rule) -> dict:
    """The settings a rule ran with, for the trace."""
    if isinstance(rule, DiCo):
        return {**asdict(rule.settings), "seeds": rule.n_seeds}
    return {k: v for k, v in vars(rule).items() if not k.startswith("_")}
