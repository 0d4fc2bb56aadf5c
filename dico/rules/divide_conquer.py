"""DiCo, the rule that divides a window into clusters and decodes them in parallel: Divide picks seeds and grows
clusters, Conquer decodes the clusters in parallel, Finalize commits by logit margin (docs/decoding.md §6). Its state
(phase, clusters, step counters) lives between the steps of one window; ``start`` begins a new window.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from dico.rules.core import Choice, Rule, Scores, factor_set, top1
from dico.settings import DiCoSettings

# Divide ends when this many steps in a row (after its first) change no cluster (docs/decoding.md §6.3, item 6).
QUIET_STEPS_TO_END_DIVIDE = 2
# ... where a cluster counts as grown when its length rose by at least this share (integer arithmetic below).
GROWTH_TENTHS = 11


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


class DiCo(Rule):
    """Divide, Conquer, Finalize over each window. State lives between steps of a window."""

    def __init__(self, settings: DiCoSettings | None = None, mode: str = "non-ar"):
        self.settings = settings or DiCoSettings()
        self.n_seeds = self.settings.seeds_for(mode)
        self.start(None)

    def start(self, window) -> None:
        """A new window starts a new round of Divide."""
        self.phase = "divide"
        self.clusters: list[list[int]] = []
        self._enter_divide()

    def _enter_divide(self) -> None:
        self.phase = "divide"
        self.divide_steps = 0
        self.quiet_steps = 0

    def choose(self, s: Scores) -> Choice:
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
        weights = (guidance_weights(s.conf.numel(), s.window, s.masked, cfg.alpha, cfg.beta, cfg.guidance_origin)
                   if cfg.guidance else None)
        cw = s.conf * weights if weights is not None else s.conf
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

        # beyond the paper: commit what is already sure beside the seeds (the shortcut Conquer and Finalize use)
        shortcut = (torch.nonzero(cand & (s.conf > cfg.shortcut)).flatten().tolist()
                    if cfg.divide_shortcut else [])
        shortcut = [p for p in shortcut if p not in seeds]
        after = masked.copy()
        after[seeds + shortcut] = False
        inside = cluster_mask(self.clusters, masked.size) & after
        density = float(cw[torch.from_numpy(inside)].mean()) if inside.any() else 0.0
        self.divide_steps += 1
        if self.divide_steps > 1:
            new_seed_outside = any(not any(c[0] <= sd <= c[1] for c in before) for sd in seeds)
            # grown by 10% or more; integer arithmetic, as 1.1 * 50 > 55 in floating point
            grew = any(10 * (e - b + 1) >= GROWTH_TENTHS * _widest_within(before, b, e)
                       for b, e in self.clusters)
            changed = new_seed_outside or len(self.clusters) != len(before) or grew
            self.quiet_steps = 0 if changed else self.quiet_steps + 1
        if density >= cfg.tau2 or self.quiet_steps >= QUIET_STEPS_TO_END_DIVIDE or self.divide_steps >= cfg.t_max:
            self._end_divide(after)
        return Choice(sorted(seeds + shortcut), "divide", seeds=list(seeds), clusters=[c[:] for c in self.clusters],
                      guided=cw, guidance=weights, seed_threshold=cfg.tau1, shortcut=shortcut)

    def _end_divide(self, masked: np.ndarray) -> None:
        self.clusters = trim(self.clusters, masked)
        self.phase = "conquer" if self.clusters else "finalize"

    # --------------------------------------------------------------- Conquer
    def _conquer(self, s: Scores) -> Choice | None:
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
        commit = torch.nonzero(picked).flatten().tolist() or self._fallback(s, cand, in_clusters)
        window_start, window_end = s.window
        if not commit:          # the authors' fallback found nothing: Conquer ends, the next phase takes these scores
            self._end_conquer(s.masked.numpy()[window_start:window_end])
            self.clusters = []
            return None

        masked = s.masked.numpy().copy()
        masked[commit] = False
        # the authors' code walls growth only where confidence was <= tau2 before the commit
        passing = (s.masked.numpy() if cfg.grow_through_commits else masked) & (s.conf > cfg.tau2).numpy()
        updated: list[list[int]] = []
        for i, span in enumerate(self.clusters):
            # the code bounds by the previous cluster as it was; ours as it has grown this step
            lo = window_start if i == 0 else \
                (self.clusters[i - 1] if cfg.merge_after_conquer else updated[-1])[1] + 1
            hi = self.clusters[i + 1][0] if i + 1 < len(self.clusters) else window_end
            if cfg.short_right_growth:      # the code's off-by-one: one short of the next cluster and the window end
                hi -= 1
            updated.append(grow(span, passing, cfg.gap, lo, hi))
        self.clusters = trim(merge(updated) if cfg.merge_after_conquer else updated, masked)
        inside = torch.from_numpy(cluster_mask(self.clusters, n) & masked)
        if not self.clusters or float(s.conf[inside].mean()) < cfg.tau2:
            self._end_conquer(masked[window_start:window_end])
            clusters_out, self.clusters = [c[:] for c in self.clusters], []
            return Choice(commit, "conquer", clusters=clusters_out)
        return Choice(commit, "conquer", clusters=[c[:] for c in self.clusters])

    def _fallback(self, s: Scores, cand: torch.Tensor, in_clusters: torch.Tensor) -> list[int]:
        """Nothing qualified: the top-1 inside the clusters, or (the authors' code) the window's top-1 if its
        confidence reaches tau2, else nothing."""
        if self.settings.conquer_fallback == "clusters":
            return top1(s.conf, in_clusters)
        best = top1(s.conf, cand)
        return best if float(s.conf[best[0]]) >= self.settings.tau2 else []

    def _end_conquer(self, window_masked: np.ndarray) -> None:
        """Finalize once R_gate of the window is decoded, else Divide again."""
        if 1.0 - window_masked.mean() >= self.settings.r_gate:
            self.phase = "finalize"
        else:
            self._enter_divide()

    # --------------------------------------------------------------- Finalize
    def _finalize(self, s: Scores) -> Choice:
        cfg = self.settings
        cand = s.candidates()
        sure = s.conf > cfg.shortcut
        if cfg.logit_margin:
            sure = sure | (s.margin > cfg.tau3)
        picked = torch.nonzero(cand & sure).flatten().tolist()
        return Choice(picked or top1(s.conf, cand), "finalize")


def _widest_within(spans, start: int, end: int) -> int:
    """The widest of ``spans`` (inclusive [b, e]) lying inside [start, end]; 0 if none."""
    return max([e - b + 1 for b, e in spans if start <= b and e <= end] or [0])
