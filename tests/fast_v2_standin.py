"""Model code shipped inside a Fast-dLLM v2 stand-in's folder, loaded with ``trust_remote_code=True`` as the release's
own ``modeling.py`` is. Written for these tests (not the release's code) after the published ``modeling.py`` of
Fast-dLLM v2 (NVlabs/Fast-dLLM ``v2/``, the model card Efficient-Large-Model/Fast_dLLM_v2_7B; Apache-2.0; a Qwen2.5
decoder): the same module tree, attribute names, call signature and inference arithmetic at tiny sizes, so that
``dico.block`` and ``dico.fast_dllm_v2`` meet what they would meet on the released model. Its training path (the
doubled sequence under a flex-attention mask, the complementary masks) is left out: nothing here trains.

- ``FastV2StandinConfig`` (``model_type`` "Fast_dLLM_Qwen", ``bd_size``), ``FastV2StandinForCausalLM``:
  ``model.{embed_tokens, layers, norm, rotary_emb}`` and ``lm_head``; each layer: ``input_layernorm``, ``self_attn``
  (q/k/v projections with biases, o without, grouped key/value heads, rotary positions), ``post_attention_layernorm``,
  ``mlp`` (gate/up/down, SiLU).
- Its forward as the release's at inference: the attention mask given is ignored and rebuilt from ``block_size``
  (a call's own argument, 32 unless given, not the config's ``bd_size``) and the stored length: query i (counted after
  the stored positions) sees key j when j // block_size <= i // block_size. Positions start at the stored length
  (plus ``replace_position`` in a sub-block call). ``past_key_values`` (a ``DynamicCache``): with
  ``update_past_key_values`` a call appends its keys and values, without it it reads the stored ones before its own.
  ``use_block_cache``: with no ``block_past_key_values`` (or an empty one) the call's keys and values fill a new one
  (returned as ``block_past_key_values``); with a filled one they overwrite it in place from ``replace_position`` on,
  the call attends to the whole of it (stale entries too) after the stored keys, and no mask is applied at all.
- Logits are those of the AR model it was made from: ``logits[i]`` predicts position i + 1.
- As the release's file, it imports ``einops`` (unused at inference) and flex attention unconditionally, and wraps a
  training helper in ``torch.compile`` when it is imported: loading it on a CPU without einops needs the fallback of
  ``dico.block.release_imports``.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange, repeat  # noqa: F401  (imported by the release's file, unused at inference)
from torch import nn
from torch.nn.attention.flex_attention import flex_attention
from transformers import PretrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


@torch.compile(fullgraph=True)
def compiled_flex_attention(q, k, v, mask=None):      # the release's training path: never called here
    return flex_attention(q, k, v, block_mask=mask, enable_gqa=True)


@dataclass
class FastV2Output(CausalLMOutputWithPast):
    block_past_key_values: Cache | None = None


class FastV2StandinConfig(PretrainedConfig):
    model_type = "Fast_dLLM_Qwen"

    def __init__(self, vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0,
                 rms_norm_eps=1e-6, bd_size=8, attention_dropout=0.0, pad_token_id=None, **kwargs):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.max_position_embeddings, self.rope_theta, self.rms_norm_eps = max_position_embeddings, rope_theta, \
            rms_norm_eps
        self.bd_size, self.attention_dropout = bd_size, attention_dropout
        self.sliding_window = None
        kwargs["tie_word_embeddings"] = False
        super().__init__(pad_token_id=pad_token_id, **kwargs)


def block_visible(length: int, block: int, stored: int) -> torch.Tensor:
    """(length, stored + length) bool: the release's inference mask, queries counted after the stored positions."""
    query = (torch.arange(length) + stored) // block
    key = torch.arange(stored + length) // block
    return query[:, None] >= key[None, :]


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        dtype = x.dtype
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * y.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """cos and sin (b, l, d) at ``position_ids``, computed in float32, cast to the hidden states' dtype."""

    def __init__(self, config):
        super().__init__()
        dim = config.hidden_size // config.num_attention_heads
        inv = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.is_causal = True
        width = config.hidden_size
        self.q_proj = nn.Linear(width, config.num_attention_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(width, config.num_key_value_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(width, config.num_key_value_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, width, bias=False)

    def forward(self, x, position_embeddings, attention_mask, past_key_value=None, update_past_key_values=False,
                block_past_key_values=None, replace_position=None):
        b, l, _ = x.shape
        shape = (b, l, -1, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        cos, sin = position_embeddings
        cos, sin = cos[:, None], sin[:, None]
        q, k = (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)
        if block_past_key_values is not None:
            if len(block_past_key_values) <= self.layer_idx:         # a full block: kept whole
                k, v = block_past_key_values.update(k, v, self.layer_idx)
            else:                                                   # a sub-block: written over its place
                kept_k, kept_v = block_past_key_values[self.layer_idx]
                kept_k[:, :, replace_position:replace_position + l] = k
                kept_v[:, :, replace_position:replace_position + l] = v
                k, v = kept_k, kept_v
        if past_key_value is not None:
            if update_past_key_values:
                k, v = past_key_value.update(k, v, self.layer_idx)
            elif len(past_key_value) > self.layer_idx:
                past_k, past_v = past_key_value[self.layer_idx]
                k, v = torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)
        out, _ = ALL_ATTENTION_FUNCTIONS["sdpa"](self, q, k, v, attention_mask, is_causal=False, dropout=0.0,
                                                 scaling=self.scaling, sliding_window=None)
        return self.o_proj(out.reshape(b, l, -1).contiguous())


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.self_attn, self.mlp = Attention(config, layer_idx), MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, attention_mask, position_embeddings, **caches):
        x = x + self.self_attn(self.input_layernorm(x), position_embeddings, attention_mask, **caches)
        return x + self.mlp(self.post_attention_layernorm(x))


class Core(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = Rotary(config)

    def forward(self, input_ids, position_ids=None, past_key_values=None, use_cache=False,
                update_past_key_values=False, block_size=32, use_block_cache=False, block_past_key_values=None,
                replace_position=None):
        x = self.embed_tokens(input_ids)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        if use_block_cache and block_past_key_values is None:
            block_past_key_values = DynamicCache()
        stored = past_key_values.get_seq_length() if past_key_values is not None else 0
        first = stored + (replace_position or 0) if use_block_cache else stored
        if position_ids is None:
            position_ids = torch.arange(first, first + x.shape[1], device=x.device)[None]
        if use_block_cache and block_past_key_values.get_seq_length() != 0:
            mask = None                                      # a sub-block call sees everything kept
        else:
            mask = block_visible(x.shape[1], block_size, stored).to(x.device)
        rope = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, mask, rope, past_key_value=past_key_values, update_past_key_values=update_past_key_values,
                      block_past_key_values=block_past_key_values, replace_position=replace_position)
        return self.norm(x), past_key_values, block_past_key_values


class FastV2StandinForCausalLM(PreTrainedModel):
    config_class = FastV2StandinConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.model = Core(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.3)
            if getattr(module, "bias", None) is not None:
                nn.init.normal_(module.bias, std=0.1)
        elif isinstance(module, RMSNorm):
            nn.init.normal_(module.weight, mean=1.0, std=0.1)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                update_past_key_values=False, block_size=32, use_block_cache=False, block_past_key_values=None,
                replace_position=None, **kwargs):
        hidden, past, block_past = self.model(input_ids, position_ids, past_key_values, bool(use_cache),
                                              update_past_key_values, block_size, use_block_cache,
                                              block_past_key_values, replace_position)
        return FastV2Output(logits=self.lm_head(hidden), past_key_values=past if use_cache else None,
                            block_past_key_values=block_past if use_block_cache else None)
