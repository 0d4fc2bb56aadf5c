"""From one step's logits to the few vectors a rule needs, computed where the model runs.

    sampler = Sampler(settings)                       # any method's settings (they all carry the sampling options)
    logits, maps = sampler.logits(predictor, ids, prompt_length)        # one pass, two with classifier-free guidance
    conf, pred, margin, rank = sampler.score(logits[m:m + n], mask_id, stop_ids)   # four (n,) CPU vectors

``score`` works on the model's device and brings its vectors to the CPU in one transfer: a vocabulary-wide
tensor never leaves the device. Greedy by default (docs/decoding.md §2.1): ``pred`` is the argmax with the mask
token removed (the first of equal logits, as ``torch.argmax``), ``conf`` its softmax probability, ``margin`` the
top1 - top2 raw logit, all in float32.
With a temperature, ``pred`` is drawn by Gumbel noise as LLaDA's ``generate.py`` draws it (float64), after
Dream's top-p / top-k filters; ``conf`` stays LLaDA's: the model's untempered probability of that token.
``rank`` is Dream's ranking for its algorithms (maskgit_plus, topk_margin, entropy) when a rule asks for it.
A rule whose published code scores in float64 (KLASS, WINO: ``Rule.precision``) gets its confidences and signals in
float64 (docs/decoding.md §7): in float32 near-certain positions tie at 1.0 where that code tells them apart.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dico.settings import SamplingSettings

DREAM_RANKS = ("maskgit_plus", "topk_margin", "entropy")
_ENTROPY_EPS = 1e-10        # Dream's: log(p + eps) keeps tokens of probability 0 finite
_KL_EPS = 1e-12             # KLASS's: log(p + eps) on both sides of its KL
SIGNALS = ("entropy", "kl", "token_prob", "verify")     # what a rule may ask the sampler for (``Rule.signals``)


def generator_for(device: torch.device) -> torch.Generator:
    """A random generator on ``device`` (tests of an emulated accelerator give the CPU's)."""
    return torch.Generator(device=device)


@dataclass
class Sampler:
    """One decode's sampling: its settings, the ranking a rule asked for, and its seeded generator."""
    settings: SamplingSettings = field(default_factory=SamplingSettings)
    rank: str | None = None
    _generator: torch.Generator | None = field(default=None, repr=False)
    precision: torch.dtype = torch.float32      # of the confidences: float64 for the rules whose code scores so
    _previous: torch.Tensor | None = field(default=None, repr=False)     # KLASS: the previous pass's distribution

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

    def score(self, logits: torch.Tensor, mask_id: int | None = None, stop_ids=(), signals=(),
              tokens: torch.Tensor | None = None, mirror: torch.Tensor | None = None, fuse=None):
        """conf, pred, margin and rank (None unless asked for) per position of ``logits`` (n, v), on the CPU, and
        the ``signals`` a rule asked for (``SIGNALS``) as a dict of (n,) CPU vectors (empty when none). ``fuse``:
        a rule's ``fuse(logits, probs)`` (``Rule.fuse``), whose logits everything is then read from."""
        cfg = self.settings
        x, stops = self._prepared(logits, mask_id, stop_ids)                   # n, v
        if fuse is not None:
            x = fuse(x, self._probs(x.to(self.precision), logits, mask_id))
        top = x.topk(2, dim=-1)                                                # n, 2
        margin = top.values[:, 0] - top.values[:, 1]
        # argmax, not topk's first index: among equal logits (frequent in bfloat16) the published codes'
        # torch.argmax / max take the first, where topk's order among equals is unspecified
        pred = x.argmax(dim=-1) if cfg.temperature == 0 else self._sample(x)
        probs = self._probs(x.to(self.precision), logits, mask_id)
        conf = probs.gather(1, pred[:, None])[:, 0]
        if cfg.eos_last and stops:
            conf = torch.where(torch.isin(pred, pred.new_tensor(stops)), torch.zeros_like(conf), conf)
        rows = [conf.double(), pred.double(), margin.double()]                # token ids are exact in float64
        if self.rank is not None:
            rows.append(self._rank(x, pred).double())
        extra = self._signals(signals, x, logits, probs, mask_id, stop_ids, tokens, mirror)
        packed = torch.stack(rows + [v.double() for v in extra.values()]).cpu()   # the step's one transfer
        rank = packed[3].float() if self.rank is not None else None
        values = packed[len(rows):]
        return (packed[0].to(self.precision), packed[1].long(), packed[2].float(), rank,
                {name: values[i].to(self.precision) for i, name in enumerate(extra)})

    def _prepared(self, logits: torch.Tensor, mask_id: int | None, stop_ids) -> tuple[torch.Tensor, list[int]]:
        """float32 logits with the mask token (and, with ``ban_eos``, end-of-text) removed; a copy, never the model's
        output itself."""
        x = logits.float()
        if x is logits:
            x = x.clone()
        if mask_id is not None:
            x[:, mask_id] = -torch.inf                                         # the mask token is never a prediction
        stops = sorted(int(i) for i in stop_ids if i is not None and i != mask_id and 0 <= int(i) < x.shape[1])
        if self.settings.ban_eos and stops:
            x[:, stops] = -torch.inf
        return x, stops

    def _probs(self, x: torch.Tensor, logits: torch.Tensor, mask_id: int | None) -> torch.Tensor:
        """The distribution confidences are read from: softmax of ``x``, or with ``mask_in_softmax`` LLaDA's softmax
        over every token (the mask token's own logit kept in the normaliser)."""
        if mask_id is None or not self.settings.mask_in_softmax:
            return torch.softmax(x, dim=-1)
        kept = logits[:, mask_id].to(x.dtype)
        return torch.softmax(x.index_copy(1, x.new_tensor([mask_id], dtype=torch.long), kept[:, None]), dim=-1)

    def _signals(self, wanted, x, logits, probs, mask_id, stop_ids, tokens, mirror) -> dict:
        """The per-position signals of the revising and stability rules (docs/decoding.md §7), on the device."""
        out = {}
        for name in wanted:
            if name == "entropy":                         # nats, of the distribution confidences come from
                out[name] = torch.special.entr(probs).sum(dim=-1)
            elif name == "kl":                            # KL(p_now || p_previous pass), float64 as KLASS computes it
                now = probs if probs.dtype == torch.float64 else self._probs(x.double(), logits.double(), mask_id)
                out[name] = self._kl(now)
            elif name == "token_prob":                    # the probability this pass gives each position's token
                out[name] = probs.gather(1, self._on(tokens, probs)[:, None])[:, 0]
            elif name == "verify":                        # the mirrored block's probability of the token it mirrors
                out[name] = self._verified(mirror, mask_id, stop_ids, tokens)
            else:
                raise ValueError(f"signal: unknown signal {name!r}; known: {', '.join(SIGNALS)}")
        return out

    def _kl(self, now: torch.Tensor) -> torch.Tensor:
        """KL of each position's distribution from the previous pass's (zeros before the first pass, so the first KL
        is large), as KLASS keeps it; the previous distribution stays on the device with this sampler."""
        previous = self._previous if self._previous is not None else torch.zeros_like(now)
        self._previous = now
        return (now * (torch.log(now + _KL_EPS) - torch.log(previous + _KL_EPS))).sum(dim=-1)

    def _verified(self, mirror: torch.Tensor, mask_id, stop_ids, tokens: torch.Tensor) -> torch.Tensor:
        """(n,) with, at the window's positions (the mirror's rows, ``mirror`` = (start, logits (w, v))), the
        probability the mirrored position gives the token at its mirror; 0 elsewhere."""
        start, rows = mirror
        x, _ = self._prepared(rows, mask_id, stop_ids)
        probs = self._probs(x.to(self.precision), rows, mask_id)
        own = self._on(tokens, probs)[start:start + rows.shape[0]]
        out = probs.new_zeros(tokens.shape[0])
        out[start:start + rows.shape[0]] = probs.gather(1, own[:, None])[:, 0]
        return out

    @staticmethod
    def _on(tokens: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return tokens.to(like.device)

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
    conf, pred, margin, _, _ = Sampler().score(logits, mask_id)
    return conf, pred, margin
