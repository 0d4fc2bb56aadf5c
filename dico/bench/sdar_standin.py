"""An SDAR-shaped stand-in's model code: shipped inside the tests' stand-in folders (``tests/standins.py``), loaded
with ``trust_remote_code=True`` as SDAR's own code is, and built at any size, up to SDAR-4B's, by the blocks bench
(``dico.bench.blocks``; it lives in the package for that bench, which must not read tests/). Written for this project
(not SDAR's code) after the published ``modeling_sdar.py`` of JetAstra/SDAR (MIT licence; a Qwen3 decoder): the same
module tree, attribute names, call signature and arithmetic, so that ``dico.block`` meets what it would meet on the
released models. Nothing imports it as a plain module: it is read inside ``dico.block.release_imports``.

- ``SDARStandinConfig`` (``model_type`` "sdar", ``block_size``), ``SDARStandinForCausalLM``: ``model.{embed_tokens,
  layers, norm, rotary_emb}`` and ``lm_head``; each layer: ``input_layernorm``, ``self_attn`` (q/k/v/o projections,
  ``q_norm`` / ``k_norm`` on each head, grouped key/value heads, rotary positions from ``position_ids``),
  ``post_attention_layernorm``, ``mlp`` (gate/up/down, SiLU); RMS norms through flash-attn's ``rms_norm_fn``.
- Its forward as SDAR's: ``attention_mask`` is turned to bool; when it is all true the attention runs through
  ``flash_attn_func`` (non-causal), else through SDPA with the mask; ``past_key_values`` (a ``DynamicCache``) with
  ``store_kv=True`` appends this call's keys and values, with ``store_kv=False`` reads the stored ones before its own
  and keeps nothing. Logits at every position, aligned (``logits[i]`` predicts position i).
- As SDAR's file, it imports ``flash_attn`` and ``transformers.utils.LossKwargs`` unconditionally: loading it on a CPU
  with transformers 4.56+ needs the fallbacks of ``dico.block.release_imports``.
"""
import torch
import torch.nn.functional as F
from flash_attn import flash_attn_func
from flash_attn.ops.triton.layer_norm import rms_norm_fn
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.utils import LossKwargs


class SDARStandinConfig(PretrainedConfig):
    model_type = "sdar"

    def __init__(self, vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                 rope_theta=10000.0, rms_norm_eps=1e-6, block_size=4, pad_token_id=None, **kwargs):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads, self.head_dim = num_key_value_heads, head_dim
        self.max_position_embeddings, self.rope_theta, self.rms_norm_eps = max_position_embeddings, rope_theta, \
            rms_norm_eps
        self.block_size = block_size
        kwargs["tie_word_embeddings"] = False
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class StandinKwargs(LossKwargs):                 # as SDAR's KwargsForCausalLM: the import must resolve
    ...


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        return rms_norm_fn(x, weight=self.weight, bias=None, eps=self.variance_epsilon)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary(nn.Module):
    """cos and sin (b, l, d) at ``position_ids``, computed in float32, cast to the hidden states' dtype."""

    def __init__(self, config):
        super().__init__()
        dim = config.head_dim
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
        self.layer_idx, self.head_dim = layer_idx, config.head_dim
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        width = config.hidden_size
        self.q_proj = nn.Linear(width, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, width, bias=False)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)          # on each head, before the rotation
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, x, position_embeddings, attention_mask, past_key_value=None, store_kv=False):
        b, l, _ = x.shape
        shape = (b, l, -1, self.head_dim)
        q = self.q_norm(self.q_proj(x).view(shape)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(shape)).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        cos, sin = position_embeddings
        cos, sin = cos[:, None], sin[:, None]
        q, k = (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)
        if past_key_value is not None and store_kv:
            k, v = past_key_value.update(k, v, self.layer_idx)
        elif past_key_value is not None and len(past_key_value) > self.layer_idx:
            past_k, past_v = past_key_value[self.layer_idx]
            k, v = torch.cat([past_k, k], dim=-2), torch.cat([past_v, v], dim=-2)
        mask = attention_mask.bool() if attention_mask is not None else None
        if mask is None or torch.all(mask):         # SDAR's decoding path: flash attention, not causal
            out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=False,
                                  softmax_scale=self.scaling)
            out = out.reshape(b, l, -1)
        else:                                       # its prefill path: SDPA under the block mask
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False, scale=self.scaling,
                                                 enable_gqa=True)
            out = out.transpose(1, 2).reshape(b, l, -1)
        return self.o_proj(out)


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

    def forward(self, x, attention_mask, position_embeddings, past_key_value, store_kv):
        x = x + self.self_attn(self.input_layernorm(x), position_embeddings, attention_mask, past_key_value, store_kv)
        return x + self.mlp(self.post_attention_layernorm(x))


class Core(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = Rotary(config)

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache, store_kv):
        x = self.embed_tokens(input_ids)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        if position_ids is None:
            seen = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = torch.arange(seen, seen + x.shape[1], device=x.device)[None]
        rope = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, attention_mask, rope, past_key_values, store_kv)
        return self.norm(x), past_key_values


class SDARStandinForCausalLM(PreTrainedModel):
    config_class = SDARStandinConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.model = Core(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.3)
        elif isinstance(module, RMSNorm):
            nn.init.normal_(module.weight, mean=1.0, std=0.1)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                store_kv=False, **kwargs):
        hidden, past = self.model(input_ids, attention_mask, position_ids, past_key_values, bool(use_cache),
                                  bool(store_kv))
        logits = self.lm_head(hidden)
        return CausalLMOutputWithPast(logits=logits, past_key_values=past if use_cache else None)
