"""Model code shipped inside a LLaDA 2.x stand-in's folder, loaded with ``trust_remote_code=True`` as LLaDA 2.x's own
code is. Written for these tests (not LLaDA 2.x's code) after the published ``modeling_llada2_moe.py`` of inclusionAI's
LLaDA2.0 / LLaDA2.1 model cards, read as ZHZisZZ/dllm carries them (``dllm/pipelines/llada2*/models/``, Apache-2.0
licence): the same module tree, attribute names, call signature and arithmetic at tiny sizes, so that ``dico.block``
meets what it would meet on the released models.

- ``LLaDA2MoeConfig`` (``model_type`` "llada2_moe", no block size: the generate's ``block_length`` default is 32) and
  ``LLaDA2MoeModelLM``: ``model.{word_embeddings, layers, norm, rotary_emb}`` and ``lm_head``; each layer:
  ``input_layernorm``, ``attention`` (one fused ``query_key_value`` projection, ``query_layernorm`` / ``key_layernorm``
  on each head, grouped key/value heads, rotary positions on the first half of each head from ``position_ids``,
  ``dense`` out), ``post_attention_layernorm`` and ``mlp``: a plain gated MLP in the first ``first_k_dense_replace``
  layers, then a mixture of experts (``gate`` with sigmoid scores, an ``expert_bias`` for routing, group-limited top-k
  and ``routed_scaling_factor``; ``experts``; ``shared_experts``).
- Its forward as LLaDA 2.x's: a 4-D ``attention_mask`` is used as given by the SDPA path (transformers'
  ``_prepare_4d_causal_attention_mask_for_sdpa`` passes it through; its generate hands an additive float mask), the
  eager path inverts a 0/1 mask (``_prepare_4d_causal_attention_mask``); the attention runs through transformers'
  ``ALL_ATTENTION_FUNCTIONS``; with ``past_key_values`` every call appends its keys and values (no switch); logits in
  float32 at every position, aligned (``logits[i]`` predicts position i).
- Its imports as the published file's (``is_torch_fx_available``, ``is_torch_greater_or_equal_than_1_13``,
  ``TransformersKwargs``, all present in transformers 4.57); it imports neither ``flash_attn`` nor ``LossKwargs``.
"""
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig
from transformers.activations import ACT2FN
from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerationMixin
from transformers.modeling_attn_mask_utils import (
    _prepare_4d_causal_attention_mask,
    _prepare_4d_causal_attention_mask_for_sdpa,
)
from transformers.modeling_outputs import MoeCausalLMOutputWithPast, MoeModelOutputWithPast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.pytorch_utils import ALL_LAYERNORM_LAYERS, is_torch_greater_or_equal_than_1_13  # noqa: F401
from transformers.utils import TransformersKwargs  # noqa: F401
from transformers.utils.import_utils import is_torch_fx_available  # noqa: F401


class LLaDA2MoeConfig(PretrainedConfig):
    model_type = "llada2_moe"

    def __init__(self, vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, hidden_act="silu", use_qkv_bias=False,
                 use_qk_norm=True, use_bias=False, rms_norm_eps=1e-6, initializer_range=0.5,
                 max_position_embeddings=256, rope_theta=600000.0, rope_scaling=None, pad_token_id=None,
                 num_experts=4, num_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
                 routed_scaling_factor=2.5, moe_intermediate_size=16, first_k_dense_replace=1,
                 partial_rotary_factor=0.5, attention_dropout=0.0, output_router_logits=False, use_cache=True,
                 **kwargs):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads, self.head_dim, self.hidden_act = num_key_value_heads, head_dim, hidden_act
        self.use_qkv_bias, self.use_qk_norm, self.use_bias = use_qkv_bias, use_qk_norm, use_bias
        self.rms_norm_eps, self.initializer_range = rms_norm_eps, initializer_range
        self.max_position_embeddings, self.rope_theta, self.rope_scaling = max_position_embeddings, rope_theta, \
            rope_scaling
        self.num_experts, self.num_shared_experts, self.num_experts_per_tok = num_experts, num_shared_experts, \
            num_experts_per_tok
        self.n_group, self.topk_group, self.routed_scaling_factor = n_group, topk_group, routed_scaling_factor
        self.moe_intermediate_size, self.first_k_dense_replace = moe_intermediate_size, first_k_dense_replace
        self.partial_rotary_factor, self.attention_dropout = partial_rotary_factor, attention_dropout
        self.output_router_logits, self.use_cache = output_router_logits, use_cache
        kwargs["tie_word_embeddings"] = False
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class LLaDA2MoeRMSNorm(nn.Module):
    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(dtype)


ALL_LAYERNORM_LAYERS.append(LLaDA2MoeRMSNorm)


class LLaDA2MoeRotaryEmbedding(nn.Module):
    """cos and sin (b, l, rotary dim) at ``position_ids``: transformers' default rope, which reads the config's
    ``partial_rotary_factor`` (half of each head rotates)."""

    def __init__(self, config, device=None):
        super().__init__()
        inv_freq, self.attention_scaling = ROPE_INIT_FUNCTIONS["default"](config, device)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        angles = torch.cat((freqs, freqs), dim=-1)
        return (angles.cos() * self.attention_scaling).to(x.dtype), (angles.sin() * self.attention_scaling).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """The rotation on the first ``cos.shape[-1]`` dimensions of each head; the rest pass unrotated."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rot = cos.shape[-1]
    q_rot, q_pass = q[..., :rot], q[..., rot:]
    k_rot, k_pass = k[..., :rot], k[..., rot:]
    q_rot = q_rot * cos + rotate_half(q_rot) * sin
    k_rot = k_rot * cos + rotate_half(k_rot) * sin
    return torch.cat([q_rot, q_pass], dim=-1), torch.cat([k_rot, k_pass], dim=-1)


class LLaDA2MoeMLP(nn.Module):
    def __init__(self, config, intermediate_size):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LLaDA2MoeGate(nn.Module):
    """Sigmoid scores in float32; routing on scores + ``expert_bias`` within the ``topk_group`` best groups (a group's
    worth: its two best scores); the chosen experts weighed by their plain scores, normalised, times
    ``routed_scaling_factor``."""

    def __init__(self, config):
        super().__init__()
        self.top_k, self.num_experts = config.num_experts_per_tok, config.num_experts
        self.n_group, self.topk_group = config.n_group, config.topk_group
        self.routed_scaling_factor = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(self.num_experts, config.hidden_size))
        self.register_buffer("expert_bias", torch.zeros(self.num_experts))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def group_limited_topk(self, scores):
        n = scores.shape[0]
        groups = scores.view(n, self.n_group, -1).topk(2, dim=-1)[0].sum(dim=-1)                   # n, groups
        chosen = torch.topk(groups, k=self.topk_group, dim=-1, sorted=False)[1]
        keep = torch.zeros_like(groups).scatter_(1, chosen, 1)
        keep = keep.unsqueeze(-1).expand(n, self.n_group, self.num_experts // self.n_group).reshape(n, -1)
        return torch.topk(scores.masked_fill(~keep.bool(), float("-inf")), k=self.top_k, dim=-1)

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, hidden_states.shape[-1])
        logits = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
        scores = torch.sigmoid(logits.float()).type_as(logits)
        _, topk_idx = self.group_limited_topk(scores + self.expert_bias)
        scores = torch.gather(scores, dim=1, index=topk_idx).type_as(logits)
        weight = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20) if self.top_k > 1 else scores
        return topk_idx, weight * self.routed_scaling_factor, logits


class LLaDA2MoeSparseMoeBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.experts = nn.ModuleList(LLaDA2MoeMLP(config, config.moe_intermediate_size)
                                     for _ in range(config.num_experts))
        self.gate = LLaDA2MoeGate(config)
        if config.num_shared_experts is not None:
            self.shared_experts = LLaDA2MoeMLP(config, config.moe_intermediate_size * config.num_shared_experts)

    def forward(self, hidden_states):
        identity = hidden_states
        b, l, h = hidden_states.shape
        topk_idx, topk_weight, router_logits = self.gate(hidden_states)
        y = self.moe_infer(hidden_states.view(-1, h), topk_idx, topk_weight).view(b, l, h)
        if self.config.num_shared_experts is not None:
            y = y + self.shared_experts(identity)
        return y, (router_logits.view(b, l, -1), topk_idx.view(b, l, -1))

    @torch.no_grad()
    def moe_infer(self, x, topk_ids, topk_weight):
        """Tokens sorted by expert, each expert run once on its tokens (counts read on the host, as the published
        code does), the outputs put back and summed with the routing weights."""
        counts = topk_ids.new_zeros((topk_ids.shape[0], len(self.experts))).scatter_(1, topk_ids, 1).sum(dim=0)
        order = topk_ids.view(-1).argsort()
        tokens = x[order // topk_ids.shape[1]]
        outputs, start = [], 0
        for i, count in enumerate(counts.cpu().numpy()):
            if count == 0:
                continue
            outputs.append(self.experts[i](tokens[start:start + int(count)]))
            start += int(count)
        out = torch.cat(outputs, dim=0) if outputs else tokens.new_empty(0)
        placed = torch.empty_like(out)
        placed[order] = out
        return (placed.view(*topk_ids.shape, -1).type(topk_weight.dtype).mul_(topk_weight.unsqueeze(-1)).sum(dim=1)
                .type(placed.dtype))


def repeat_kv(x, n_rep):
    b, kv, l, d = x.shape
    return x if n_rep == 1 else x[:, :, None].expand(b, kv, n_rep, l, d).reshape(b, kv * n_rep, l, d)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    key, value = repeat_kv(key, module.num_key_value_groups), repeat_kv(value, module.num_key_value_groups)
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask[:, :, :, :key.shape[-2]]
    weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


class LLaDA2MoeAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = False
        self.query_key_value = nn.Linear(config.hidden_size,
                                         (self.num_heads + 2 * self.num_key_value_heads) * self.head_dim,
                                         bias=config.use_qkv_bias)
        if config.use_qk_norm:
            self.query_layernorm = LLaDA2MoeRMSNorm(self.head_dim, eps=config.rms_norm_eps)
            self.key_layernorm = LLaDA2MoeRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.dense = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=config.use_bias)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None,
                position_embeddings=None, **kwargs):
        b, l, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states).view(b, l, self.num_heads + 2 * self.num_key_value_heads,
                                                       self.head_dim)
        q, k, v = qkv.split([self.num_heads, self.num_key_value_heads, self.num_key_value_heads], dim=-2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.config.use_qk_norm:
            q, k = self.query_layernorm(q), self.key_layernorm(k)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if past_key_value is not None:                     # every call appends: the published code has no switch
            k, v = past_key_value.update(k, v, self.layer_idx, {"sin": sin, "cos": cos})
        attention: Callable = eager_attention_forward
        if self.config._attn_implementation != "eager":
            attention = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
        out, weights = attention(self, q, k, v, attention_mask,
                                 dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling)
        return self.dense(out.reshape(b, l, -1).contiguous()), weights, past_key_value


class LLaDA2MoeDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.attention = LLaDA2MoeAttention(config, layer_idx)
        moe = config.num_experts is not None and layer_idx >= config.first_k_dense_replace
        self.mlp = LLaDA2MoeSparseMoeBlock(config) if moe else LLaDA2MoeMLP(config, config.intermediate_size)
        self.input_layernorm = LLaDA2MoeRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LLaDA2MoeRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None,
                position_embeddings=None, **kwargs):
        residual = hidden_states
        hidden_states, _, _ = self.attention(self.input_layernorm(hidden_states), attention_mask, position_ids,
                                             past_key_value, position_embeddings)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.mlp(self.post_attention_layernorm(hidden_states))
        if isinstance(hidden_states, tuple):
            hidden_states = hidden_states[0]
        return residual + hidden_states.to(residual.device)


class LLaDA2MoePreTrainedModel(PreTrainedModel):
    config_class = LLaDA2MoeConfig
    base_model_prefix = "model"
    _no_split_modules = ["LLaDA2MoeDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values"]
    _supports_sdpa = True
    _supports_cache_class = True

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=std)


class LLaDA2MoeModel(LLaDA2MoePreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(LLaDA2MoeDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self._use_sdpa = config._attn_implementation == "sdpa"
        self.norm = LLaDA2MoeRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LLaDA2MoeRotaryEmbedding(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.word_embeddings

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, **kwargs):
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        b, l = inputs_embeds.shape[:2]
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        seen = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None:
            position_ids = torch.arange(seen, seen + l, device=inputs_embeds.device)[None]
        if self._use_sdpa:               # a 4-D mask goes through unchanged (the generate's additive block mask)
            attention_mask = _prepare_4d_causal_attention_mask_for_sdpa(attention_mask, (b, l), inputs_embeds, seen)
        else:                            # a 4-D 0/1 mask is inverted to an additive one
            attention_mask = _prepare_4d_causal_attention_mask(attention_mask, (b, l), inputs_embeds, seen)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                  past_key_value=past_key_values, position_embeddings=position_embeddings)
        return MoeModelOutputWithPast(last_hidden_state=self.norm(hidden_states),
                                      past_key_values=past_key_values if use_cache else None)


class LLaDA2MoeModelLM(LLaDA2MoePreTrainedModel, GenerationMixin):
    def __init__(self, config):
        super().__init__(config)
        self.model = LLaDA2MoeModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.word_embeddings

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, **kwargs):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache)
        logits = self.lm_head(out.last_hidden_state).float()
        return MoeCausalLMOutputWithPast(logits=logits, past_key_values=out.past_key_values)
