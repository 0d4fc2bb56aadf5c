"""SDAR's own decoding (``sdar``): its ``block_diffusion_generate`` (JetAstra/SDAR ``generate.py``, MIT) as one
window's rule, step for step (docs/decoding.md §11.4).

Each pass, SDAR draws a token at every position of the block from the model's distribution (softmax of the raw
logits at temperature 1, the mask token included) with ``torch.multinomial`` and the global generator its caller
seeded, and takes that token's probability as its confidence. A pass then commits a share of the block:
``get_num_transfer_tokens(block_length, steps)`` splits the block's positions evenly over ``steps`` passes (the first
``block_length % steps`` passes one more), and the remasking strategy picks which masked positions:

- ``low_confidence_dynamic``: every masked position whose drawn token's probability is above ``threshold`` (strictly)
  when they are at least the pass's share; otherwise the share with the highest probabilities (``torch.topk``);
- ``low_confidence_static``: the share with the highest probabilities;
- ``sequential``: the share from the first masked position on, left to right.

``BlockDraw`` draws exactly as SDAR does: one ``torch.multinomial`` over the rows of the whole model block (those of
the prompt's tail too, in the block the prompt ends in) with a ``torch.Generator`` seeded with ``random_seed``, the
state ``torch.manual_seed(seed)`` gives the global one, so a seeded decode draws SDAR's tokens. The draw of a row
fills the whole vocabulary with noise whatever the row's probabilities (PyTorch draws one sample by the exponential
race), so the prompt's rows, whose draws SDAR never keeps, take uniform rows here and the stream stays aligned.

Where SDAR's code does something a step of this project cannot, the rule keeps SDAR's tokens and positions and
records the difference:
- a drawn mask token is written back as a mask by SDAR (the position stays masked); the rule leaves that position
  out of its commits, and a pass whose every chosen draw was the mask commits nothing (``may_idle``);
- when the pass's share is larger than the masks left, SDAR's ``torch.topk`` also picks written positions (and prompt
  positions) and overwrites them with fresh draws; the rule commits the masked ones only;
- a pass whose share is 0 (more ``steps`` than the block has positions, reached after passes that wrote nothing)
  commits nothing, as SDAR's; after ``steps`` passes SDAR's schedule has no entry (its code would fail); the rule
  commits one a pass.

``llada20``: LLaDA 2.0's own generate (its model card's ``modeling_llada2_moe.py``, Apache-2.0; docs/decoding.md
§11.6) is this procedure with greedy tokens at its default temperature 0: the shared scores (the argmax and its
probability) stand in for the draw, and ``low_confidence_dynamic`` picks from them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from dico import sampling
from dico.rules import Choice, Rule, Scores
from dico.sampling import Sampler
from dico.settings import SDARSettings


def transfer_schedule(block: int, steps: int) -> list[int]:
    """Positions committed at each pass of a block: SDAR's ``get_num_transfer_tokens(block_length, steps)``."""
    base, extra = divmod(block, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


@dataclass
class SDARRule(Rule):
    """``sdar``: SDAR's remasking strategies over the tokens ``BlockDraw`` drew this pass."""
    settings: SDARSettings = field(default_factory=SDARSettings)
    may_idle = True                     # a pass may commit nothing: every chosen draw was the mask token
    leans = {"commit": {"conf": 1}}

    def plan(self, gen_length: int, width: int) -> None:
        cfg = self.settings
        if cfg.llada20 and (cfg.temperature or cfg.remasking != "low_confidence_dynamic"):
            raise ValueError("llada20: LLaDA 2.0's generate takes greedy tokens and commits as low_confidence_dynamic "
                             "does; set temperature 0 and remasking low_confidence_dynamic, or llada20 off to draw")
        self.width = width
        self.schedule = transfer_schedule(width, self.settings.steps)

    def bind(self, predictor) -> None:
        self.mask_id = predictor.mask_id

    def start(self, window) -> None:
        self.window, self.passes = tuple(window), 0

    def sampler(self) -> Sampler:
        return BlockDraw(self.settings, rule=self)

    def choose(self, s: Scores) -> Choice:
        share = self.schedule[self.passes] if self.passes < len(self.schedule) else 1
        self.passes += 1
        cand = s.candidates()
        count = int(cand.sum())
        if count == 0:
            return Choice([], "vanilla")
        how = self.settings.remasking
        if how == "sequential":
            first = int(torch.nonzero(cand)[0])
            chosen = torch.zeros_like(cand)
            chosen[first:first + share] = True
            chosen &= cand
        else:
            high = cand & (s.conf > self.settings.threshold)
            if how == "low_confidence_dynamic" and int(high.sum()) >= share:
                chosen = high
            else:
                conf = torch.where(cand, s.conf, torch.full_like(s.conf, -torch.inf))
                chosen = torch.zeros_like(cand)
                chosen[conf.topk(min(share, count)).indices] = True
        phase = "fast" if how == "low_confidence_dynamic" and int(high.sum()) >= share else "vanilla"
        commit = torch.nonzero(chosen & (s.pred != self.mask_id)).flatten().tolist()
        return Choice(commit, phase)


@dataclass
class BlockDraw(Sampler):
    """The sampler of ``sdar``: the shared scores everywhere, then, in the window, SDAR's draw (tokens and their
    probabilities) over the rows of the window's model block."""
    rule: SDARRule | None = None
    _draws: torch.Generator | None = field(default=None, repr=False)

    def score(self, logits: torch.Tensor, mask_id: int | None = None, stop_ids=(), signals=(), tokens=None,
              mirror=None, fuse=None):
        conf, pred, margin, rank, extra = super().score(logits, mask_id, stop_ids, signals, tokens, mirror, fuse)
        if self.settings.llada20:                  # LLaDA 2.0's generate: the greedy scores, nothing drawn
            return conf, pred, margin, rank, extra
        start, end = self.rule.window
        rows = logits[start:end]                                                    # w, v (model dtype)
        probs = F.softmax(rows, dim=-1)
        ghost = self.rule.width - (end - start) if start == 0 else 0     # the prompt's rows of the first block
        if ghost:
            probs = torch.cat([probs.new_full((ghost, probs.shape[-1]), 1.0 / probs.shape[-1]), probs])
        if self._draws is None:
            self._draws = sampling.generator_for(logits.device).manual_seed(self.settings.random_seed)
        drawn = torch.multinomial(probs, num_samples=1, generator=self._draws)           # ghost + w, 1
        chance = probs.gather(-1, drawn)[ghost:, 0]
        both = torch.stack([drawn[ghost:, 0].double(), chance.double()]).cpu()
        pred, conf = pred.clone(), conf.clone()
        pred[start:end] = both[0].long()
        conf[start:end] = both[1].to(conf.dtype)
        return conf, pred, margin, rank, extra
