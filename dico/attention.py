"""Attention maps of models whose code does not return them (LLaDA's and Dream's run SDPA and ignore
``output_attentions``): forward hooks on the query and key projections of the chosen layers recompute
the eager formula softmax(RoPE(q) RoPE(k)^T / sqrt(d)), bidirectional as these models attend, and
keep only the mean over those layers and all heads, on the model's device.

Memory (on top of the model's own forward pass), per batch row, for a sequence of l positions, h heads
of size d: the float32 copies of one layer's rotated queries and keys, about 4 * h * l * d * 4 bytes at the
peak; the scores of ``HEAD_CHUNK`` heads at a time and their softmax, 2 * HEAD_CHUNK * l^2 * 4 bytes; and the
running (l, l) float32 mean. Nothing is kept per layer, so the number of hooked layers does not matter, unless a
measurement asks for each layer's map (``capture(per_layer=True)``, ``dico.observe.layer_locality``): then one
(l, l) float32 map a hooked layer (32 MB for LLaDA-8B's 32 layers at l = 512).
For an 8B model (LLaDA-8B: 32 heads of 128) with a 256-token prompt and gen 256 (l = 512): 34 MB + 17 MB
+ 1 MB, about 52 MB (twice that with classifier-free guidance), against 16 GB of bf16 weights. The loop's
stage maps add 3 * n * (n + 1) float64 on the device (1.6 MB at n = 256).
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import torch
from torch import nn

HEAD_CHUNK = 8          # heads scored at once; bounds the transient memory above


def response_rows(attention: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """The response queries' rows of an (l, l) attention map as a trace keeps them (``AttentionStages.matrix``):
    (n, n + 1), the prompt's keys summed in column 0, then the n response keys."""
    rows = attention[m:m + n]                                                                # n, l
    return torch.cat([rows[:, :m].sum(dim=1, keepdim=True), rows[:, m:m + n]], dim=1)


def stage_index(masked: torch.Tensor, stages: int) -> int:
    """Which of ``stages`` equal shares of progress a state of the response's (n,) mask falls in, by its unmasked
    fraction in float32 (the last share takes a finished response)."""
    unmasked = 1.0 - masked.float().mean().item() if masked.numel() else 0.0
    return min(int(unmasked * stages), stages - 1)


def _config_value(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def _source(site: nn.Module, which: str) -> nn.Module:
    """Where a site's queries (keys) are final before RoPE: its ``q_norm`` (``k_norm``) when it has one (LLaDA's
    ``attention_layer_norm``), else its projection."""
    norm = getattr(site, f"{which}_norm", None)
    return norm if isinstance(norm, nn.Module) else getattr(site, f"{which}_proj")


class AttentionHooks:
    """Recomputes attention in every module that owns a ``q_proj`` and a ``k_proj`` (LLaDA's blocks,
    Dream's / Qwen2's attention), or in the chosen ``layers`` of them (indices in model order)."""

    def __init__(self, sites: list[nn.Module], heads: int, kv_heads: int, head_dim: int, theta: float):
        self.sites, self.heads, self.kv_heads, self.head_dim, self.theta = sites, heads, kv_heads, head_dim, theta
        self._pending: dict[int, dict[str, torch.Tensor]] = {}
        self._key_mask: torch.Tensor | None = None
        self.total: torch.Tensor | None = None
        self.layers_seen = 0
        self.per_layer: list[torch.Tensor] | None = None

    @classmethod
    def find(cls, model: nn.Module, layers=None) -> AttentionHooks | None:
        """Hooks for ``model``, or None when it has no query/key projections or its config lacks the head count."""
        sites, seen = [], set()
        for _, module in model.named_modules():
            q, k = getattr(module, "q_proj", None), getattr(module, "k_proj", None)
            if isinstance(q, nn.Module) and isinstance(k, nn.Module) and id(q) not in seen:
                seen.add(id(q))         # a module that only refers to another's projections is the same site
                sites.append(module)
        config = getattr(model, "config", None)
        heads = _config_value(config, "n_heads", "num_attention_heads")
        hidden = _config_value(config, "d_model", "hidden_size")
        if not sites or not heads or not hidden:
            return None
        if layers is not None:
            sites = [sites[i] for i in layers]
        kv_heads = _config_value(config, "n_kv_heads", "num_key_value_heads", default=heads)
        head_dim = _config_value(config, "head_dim", default=hidden // heads)
        theta = float(_config_value(config, "rope_theta", default=10000.0))
        return cls(sites, int(heads), int(kv_heads), int(head_dim), theta)

    @contextmanager
    def capture(self, key_mask: torch.Tensor | None = None, per_layer: bool = False):
        """Hooks in place for one forward pass; ``maps()`` then holds the mean map (``per_layer``: each hooked
        layer's). ``key_mask`` (b, l; bool, on the model's device) hides padded keys, as the model's own attention
        mask does."""
        self.total, self.layers_seen, self._pending, self._key_mask = None, 0, {}, key_mask
        self.per_layer = [] if per_layer else None
        handles = []
        for site in self.sites:
            handles.append(_source(site, "q").register_forward_hook(self._hook(site, "q")))
            handles.append(_source(site, "k").register_forward_hook(self._hook(site, "k")))
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()
            self._pending, self._key_mask = {}, None

    def maps(self) -> tuple[torch.Tensor, ...] | None:
        """The mean over the hooked layers and heads as one (b, 1, l, l) map, like a one-layer, one-head
        ``output_attentions`` (captured ``per_layer``: one such map a hooked layer); None if no hooked layer ran."""
        if self.total is None:
            return None
        if self.per_layer is not None:
            return tuple(layer[:, None] for layer in self.per_layer)
        return ((self.total / self.layers_seen)[:, None],)

    def _hook(self, site: nn.Module, which: str):
        def keep(module, inputs, output):
            pending = self._pending.setdefault(id(site), {})
            pending[which] = output
            if len(pending) == 2:
                del self._pending[id(site)]
                self._add(pending["q"], pending["k"])
        return keep

    def _add(self, q: torch.Tensor, k: torch.Tensor) -> None:
        b, l = q.shape[:2]                  # (b, l, h * d) from a projection, or (b, l, h, d) from a per-head norm
        d = self.head_dim
        q = self._rope(q.reshape(b, l, self.heads, d).transpose(1, 2).float())             # b, h, l, d
        k = self._rope(k.reshape(b, l, self.kv_heads, d).transpose(1, 2).float())          # b, kv, l, d
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)                        # b, h, l, d
        mean = None
        for h in range(0, self.heads, HEAD_CHUNK):
            scores = q[:, h:h + HEAD_CHUNK] @ k[:, h:h + HEAD_CHUNK].transpose(-1, -2) / math.sqrt(d)
            if self._key_mask is not None:
                scores = scores.masked_fill(~self._key_mask[:, None, None, :], -torch.inf)
            part = scores.softmax(dim=-1).sum(dim=1)                                       # b, l, l
            mean = part if mean is None else mean + part
        mean = mean / self.heads
        if self.per_layer is not None:
            self.per_layer.append(mean)
        self.total = mean if self.total is None else self.total + mean
        self.layers_seen += 1

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        """Rotary position embedding with rotate-half pairing, positions 0..l-1 (LLaDA's and Dream's form)."""
        l, d = x.shape[-2], x.shape[-1]
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
        freqs = torch.arange(l, device=x.device, dtype=torch.float32)[:, None] * inv_freq[None, :]   # l, d/2
        angles = torch.cat([freqs, freqs], dim=-1)                                                   # l, d
        first, second = x[..., : d // 2], x[..., d // 2:]
        return x * angles.cos() + torch.cat([-second, first], dim=-1) * angles.sin()
