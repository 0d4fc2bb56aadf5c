"""From one step's logits to the few vectors a rule needs, computed where the model runs.

    sampler = Sampler(settings)                       # any method's settings (they all carry the sampling options)
    logits, maps = sampler.logits(predictor, ids, prompt_length)        # one pass, two with classifier-free guidance
    conf, pred, margin, rank = sampler.score(logits[m:m + n], mask_id, stop_ids)   # four (n,) CPU vectors

``score`` works on the model's device and brings its vectors to the CPU in one transfer: a vocabulary-wide
tensor never leaves the device. Greedy by default (docs/decoding.md §2.1): ``pred`` is the argmax with the mask
token removed, ``conf`` its softmax probability, ``margin`` the top1 - top2 raw logit, all in float32.
With a temperature, ``pred`` is drawn by Gumbel noise as LLaDA's ``generate.py`` draws it (float64), after
Dream's top-p / top-k filters; ``conf`` stays LLaDA's: the model's untempered probability of that token.
``rank`` is Dream's ranking for its algorithms (maskgit_plus, topk_margin, entropy) when a rule asks for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dico.settings import SamplingSettings

DREAM_RANKS = ("maskgit_plus", "topk_margin", "entropy")
_ENTROPY_EPS = 1e-10        # Dream's: log(p + eps) keeps tokens of probability 0 finite


def generator_for(device: torch.device) -> torch.Generator:
    """A random generator on ``device`` (tests of an emulated accelerator give the CPU's)."""
    return torch.Generator(device=device)


@dataclass
class Sampler:
    """One decode's sampling: its settings, the ranking a rule asked for, and its seeded generator."""
    settings: SamplingSettings = field(default_factory=SamplingSettings)
    rank: str | None = None
    _generator: torch.Generator | None = field(default=None, repr=False)

    def logits(self, predictor, ids: torch.Tensor, prompt_length, attentions: bool = False,
               attention_mask: torch.Tensor | None = None, caches: list | None = None):
        """This step's logits (b, l, v) on the model's device; with ``cfg_scale``, LLaDA's unsupervised
        classifier-free guidance: u + (s + 1)(c - u), u from the same ids with the prompt masked.
        ``prompt_length`` is one length or one per row (a batch); ``attention_mask`` is the model's (b, l);
        ``caches`` (one planned ``dico.cache.Cache`` per row) make it a cached pass."""
        scale = self.settings.cfg_scale
        rows = None if caches is None else [(c.stores[0], c.positions) for c in caches]
        if scale == 0:
            return predictor.forward(ids, attentions=attentions, attention_mask=attention_mask, cache_rows=rows)
        b = ids.shape[0]
        lengths = [prompt_length] * b if isinstance(prompt_length, int) else list(prompt_length)
        unprompted = ids.clone()
        for row, m in enumerate(lengths):
            unprompted[row, :m] = predictor.mask_id
        mask = None if attention_mask is None else torch.cat([attention_mask, attention_mask])
        if rows is not None:                                   # the unprompted sequence keeps its own store
            rows += [(c.stores[1], c.positions) for c in caches]
        both, maps = predictor.forward(torch.cat([ids, unprompted]), attentions=attentions, attention_mask=mask,
                                       cache_rows=rows)
        cond, uncond = both[:b].float(), both[b:].float()
        return uncond + (scale + 1) * (cond - uncond), (None if maps is None else tuple(a[:b] for a in maps))

    def score(self, logits: torch.Tensor, mask_id: int | None = None, stop_ids=()):
        """conf, pred, margin and rank (None unless asked for) per position of ``logits`` (n, v), on the CPU."""
        cfg = self.settings
        x = logits.float()                                                     # n, v
        if x is logits:
            x = x.clone()                                                      # never write into the model's output
        kept = x[:, mask_id].clone() if mask_id is not None and cfg.mask_in_softmax else None
        if mask_id is not None:
            x[:, mask_id] = -torch.inf                                         # the mask token is never a prediction
        stops = sorted(int(i) for i in stop_ids if i is not None and i != mask_id and 0 <= int(i) < x.shape[1])
        if cfg.ban_eos and stops:
            x[:, stops] = -torch.inf
        top = x.topk(2, dim=-1)                                                # n, 2
        margin = top.values[:, 0] - top.values[:, 1]
        pred = top.indices[:, 0] if cfg.temperature == 0 else self._sample(x)
        if kept is None:
            probs = torch.softmax(x, dim=-1)
        else:                                                                  # LLaDA's softmax over every token
            probs = torch.softmax(x.index_copy(1, pred.new_tensor([mask_id]), kept[:, None]), dim=-1)
        conf = probs.gather(1, pred[:, None])[:, 0]
        if cfg.eos_last and stops:
            conf = torch.where(torch.isin(pred, pred.new_tensor(stops)), torch.zeros_like(conf), conf)
        rows = [conf.double(), pred.double(), margin.double()]                # token ids are exact in float64
        if self.rank is not None:
            rows.append(self._rank(x, pred).double())
        packed = torch.stack(rows).cpu()                                       # the step's one transfer
        rank = packed[3].float() if self.rank is not None else None
        return packed[0].float(), packed[1].long(), packed[2].float(), rank

    # ------------------------------------------------------------------------------------------ sampling
    def _filtered(self, x: torch.Tensor) -> torch.Tensor:
        """Dream's filters on (tempered) logits, in its order: top-p (nucleus), then top-k; dropped tokens get -inf."""
        cfg = self.settings
        if cfg.top_p < 1:
            ordered, order = x.sort(dim=-1, descending=True)
            cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
            drop = cumulative > cfg.top_p
            drop[:, 1:] = drop[:, :-1].clone()                                 # keep the token that crosses top_p
            drop[:, 0] = False
            x = x.masked_fill(drop.scatter(1, order, drop), -torch.inf)
        if 0 < cfg.top_k < x.shape[1]:
            kth = x.topk(cfg.top_k, dim=-1).values[:, -1:]
            x = x.masked_fill(x < kth, -torch.inf)
        return x

    def _sample(self, x: torch.Tensor) -> torch.Tensor:
        """A token per row drawn from softmax(filtered(x / T)) by the Gumbel-max trick, in float64 (LLaDA)."""
        if self._generator is None:
            self._generator = generator_for(x.device)
            self._generator.manual_seed(self.settings.random_seed)
        tempered = self._filtered(x.double() / self.settings.temperature)
        noise = tempered.new_empty(tempered.shape).uniform_(generator=self._generator).clamp_(min=1e-300)
        return (tempered - torch.log(-torch.log(noise))).argmax(dim=-1)

    def _rank(self, x: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        """Dream's confidence of an algorithm, from the distribution its tokens are drawn from."""
        temperature = self.settings.temperature
        probs = torch.softmax(self._filtered(x / temperature if temperature > 0 else x), dim=-1)
        if self.rank == "maskgit_plus":
            return probs.gather(1, pred[:, None])[:, 0]
        if self.rank == "topk_margin":
            top = probs.topk(2, dim=-1).values
            return top[:, 0] - top[:, 1]
        return (probs * torch.log(probs + _ENTROPY_EPS)).sum(dim=-1)         # entropy: negative entropy


def score(logits: torch.Tensor, mask_id: int | None = None):
    """Greedy conf, pred and margin of ``logits`` (n, v) on the CPU (docs/decoding.md §2.1)."""
    conf, pred, margin, _ = Sampler().score(logits, mask_id)
    return conf, pred, margin
