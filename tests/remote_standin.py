"""Model code shipped inside a stand-in model folder, loaded with ``trust_remote_code=True`` as LLaDA's and
Dream's own code is. Written for these tests (not their code) after the published ``modeling_llada.py`` and
``modeling_dream.py``: the same module tree, attribute names and arithmetic at tiny sizes, so whatever drives
their modules (the recomputing attention hooks, ``dico.remote_cache``'s cached forward) meets what it would meet
on the released models.

- ``LladaStandin`` (``model_type`` "llada", as ``LLaDAModelLM``): ``model.transformer.{wte, blocks, ln_f, ff_out}``;
  each block as ``LLaDALlamaBlock``: ``attn_norm``, ``q_proj``/``k_proj``/``v_proj`` (biased with
  ``include_qkv_bias``), optional ``q_norm``/``k_norm`` (``attention_layer_norm``) before the heads are split,
  ``rotary_emb`` (a sin/cos table by position, float32 with ``rope_full_precision``), bidirectional SDPA with the
  key/value heads repeated, ``attn_out``, ``ff_norm``, ``act(ff_proj) * up_proj`` into ``ff_out``; RMS norms in
  float32; ``input_emb_norm``, ``weight_tying``, ``scale_logits``; a padding mask becomes an additive bias;
  ``output_attentions`` is refused.
- ``DreamStandin`` (``model_type`` "Dream", as ``DreamModel``, Qwen2 style): ``model.{embed_tokens, layers, norm,
  rotary_emb}`` and ``lm_head``; each layer: ``input_layernorm``, ``self_attn`` (biased q/k/v, unbiased ``o_proj``,
  grouped key/value heads, a per-layer ``rotary_emb`` it does not use, as Dream's), ``post_attention_layernorm``,
  ``mlp`` (gate/up/down, SiLU); a 4-D boolean attention mask; raw ``logits[i]`` predict position i + 1.
- For the tests only: the mask id in the config; ``end_token_id`` pushed at the last ``end_positions`` positions
  by the wrapper's forward (after the head: a cached forward does not see it, so cache tests build without it), so
  a decode ends there; ``keep_probs`` keeps each layer's eager attention for the hooks' test.
"""
import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizer
from transformers.modeling_outputs import MaskedLMOutput


class LladaStandinConfig(PretrainedConfig):
    model_type = "llada"

    def __init__(self, vocab_size=64, embedding_size=None, d_model=32, n_heads=4, n_kv_heads=None, n_layers=2,
                 mlp_hidden_size=48, max_sequence_length=96, rope_theta=500000.0, rms_norm_eps=1e-5, rope=True,
                 alibi=False, block_type="llama", include_qkv_bias=False, attention_layer_norm=False,
                 weight_tying=False, input_emb_norm=False, scale_logits=False, rope_full_precision=True,
                 mask_token_id=None, end_token_id=None, end_positions=3, keep_probs=False, **kwargs):
        self.vocab_size, self.embedding_size, self.d_model = vocab_size, embedding_size, d_model
        self.n_heads, self.n_kv_heads, self.n_layers = n_heads, n_kv_heads, n_layers
        self.mlp_hidden_size, self.max_sequence_length = mlp_hidden_size, max_sequence_length
        self.rope_theta, self.rms_norm_eps, self.rope, self.alibi = rope_theta, rms_norm_eps, rope, alibi
        self.block_type, self.include_qkv_bias = block_type, include_qkv_bias
        self.attention_layer_norm = attention_layer_norm
        self.weight_tying, self.input_emb_norm, self.scale_logits = weight_tying, input_emb_norm, scale_logits
        self.rope_full_precision, self.mask_token_id = rope_full_precision, mask_token_id
        self.end_token_id, self.end_positions, self.keep_probs = end_token_id, end_positions, keep_probs
        kwargs["tie_word_embeddings"] = False         # LLaDA ties by its own weight_tying
        super().__init__(**kwargs)

    @property
    def effective_n_kv_heads(self):
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads


class DreamStandinConfig(PretrainedConfig):
    model_type = "Dream"

    def __init__(self, vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96, rope_theta=1000000.0,
                 rms_norm_eps=1e-6, mask_token_id=None, pad_token_id=None, end_token_id=None, end_positions=3,
                 keep_probs=False, **kwargs):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads, self.max_position_embeddings = num_key_value_heads, max_position_embeddings
        self.rope_theta, self.rms_norm_eps, self.mask_token_id = rope_theta, rms_norm_eps, mask_token_id
        self.end_token_id, self.end_positions, self.keep_probs = end_token_id, end_positions, keep_probs
        kwargs["tie_word_embeddings"] = False
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class RMSNorm(nn.Module):
    """Both models' RMS norm: normalised in float32, cast back, then scaled."""

    def __init__(self, size, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(size)), eps

    def forward(self, x):
        dtype = x.dtype
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def eager_probs(q, k, mask):
    """Softmax(q k^T / sqrt(d)) in float32 (mask: additive or boolean), kept for the hooks' test."""
    scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf) if mask.dtype == torch.bool else scores + mask.float()
    return scores.softmax(-1).detach()


def end_push(logits, config, shift):
    """The tests' end of text: the end token favoured at the last positions (raw logits shifted for Dream)."""
    if config.end_token_id is not None:
        l, k = logits.shape[1], config.end_positions
        logits[:, l - k - shift:l - shift, config.end_token_id] += 30.0
    return logits


def init_standin(module, std=0.15):
    """Random weights that make every part matter: biases and norm weights too."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=std)
        if getattr(module, "bias", None) is not None:
            nn.init.normal_(module.bias, std=std)
    elif isinstance(module, RMSNorm):
        nn.init.normal_(module.weight, mean=1.0, std=0.1)


# ---------------------------------------------------------------------------- LLaDA

class LladaRotary(nn.Module):
    """A sin/cos table by position (rotate-half pairing), grown on demand and moved to the queries' device."""

    def __init__(self, config, table: dict | None = None):
        super().__init__()
        self.config, self.table = config, ({} if table is None else table)     # LLaDA: one table for every block
        self.get_rotary_embedding(config.max_sequence_length, torch.device("cpu"))

    def get_rotary_embedding(self, seq_len, device):
        sin, cos = self.table.get("sin"), self.table.get("cos")
        if sin is not None and sin.shape[-2] >= seq_len:
            if sin.device != device:
                sin, cos = sin.to(device), cos.to(device)
                self.table.update(sin=sin, cos=cos)
            return sin[:, :, :seq_len], cos[:, :, :seq_len]
        dim = self.config.d_model // self.config.n_heads
        inv = 1.0 / (self.config.rope_theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float) / dim))
        freqs = torch.einsum("i,j->ij", torch.arange(seq_len, device=device, dtype=torch.float), inv)
        angles = torch.cat((freqs, freqs), dim=-1)
        sin, cos = angles.sin()[None, None], angles.cos()[None, None]
        self.table.update(sin=sin, cos=cos)
        return sin, cos

    def forward(self, q, k):
        q_, k_ = (q.float(), k.float()) if self.config.rope_full_precision else (q, k)
        nq, nk = q_.shape[-2], k_.shape[-2]
        sin, cos = self.get_rotary_embedding(nk, q_.device)
        sin, cos = sin.type_as(q_), cos.type_as(q_)
        q_ = ((q_ * cos[:, :, nk - nq:nk]) + (rotate_half(q_) * sin[:, :, nk - nq:nk])).to(q_.dtype)
        k_ = ((k_ * cos) + (rotate_half(k_) * sin)).to(k_.dtype)
        return q_.type_as(q), k_.type_as(k)


class LladaBlock(nn.Module):
    def __init__(self, config, table: dict | None = None):
        super().__init__()
        d, heads, kv = config.d_model, config.n_heads, config.effective_n_kv_heads
        self.config, self.head_dim, self.probs = config, d // heads, None
        self.attn_norm, self.ff_norm = RMSNorm(d, config.rms_norm_eps), RMSNorm(d, config.rms_norm_eps)
        bias = config.include_qkv_bias
        self.q_proj = nn.Linear(d, d, bias=bias)
        self.k_proj = nn.Linear(d, kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d, kv * self.head_dim, bias=bias)
        self.q_norm = RMSNorm(d, config.rms_norm_eps) if config.attention_layer_norm else None
        self.k_norm = RMSNorm(kv * self.head_dim, config.rms_norm_eps) if config.attention_layer_norm else None
        self.attn_out = nn.Linear(d, d, bias=False)
        self.ff_proj = nn.Linear(d, config.mlp_hidden_size, bias=False)
        self.up_proj = nn.Linear(d, config.mlp_hidden_size, bias=False)
        self.ff_out = nn.Linear(config.mlp_hidden_size, d, bias=False)
        self.act = nn.SiLU()
        self.rotary_emb = LladaRotary(config, table)

    def attention(self, q, k, v, bias):
        b, t, c = q.shape
        dtype = k.dtype
        if self.q_norm is not None:
            q, k = self.q_norm(q).to(dtype=dtype), self.k_norm(k).to(dtype=dtype)
        q = q.view(b, t, -1, self.head_dim).transpose(1, 2)
        k = k.view(b, t, -1, self.head_dim).transpose(1, 2)
        v = v.view(b, t, -1, self.head_dim).transpose(1, 2)
        q, k = self.rotary_emb(q, k)
        if bias is not None:
            bias = bias.to(dtype)
        if q.shape[1] != k.shape[1]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1, output_size=q.shape[1])
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1, output_size=q.shape[1])
        if self.config.keep_probs:
            self.probs = eager_probs(q, k, bias)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=0.0, is_causal=False)
        return self.attn_out(att.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x, attention_bias=None):
        h = self.attn_norm(x)
        x = x + self.attention(self.q_proj(h), self.k_proj(h), self.v_proj(h), attention_bias)
        h = self.ff_norm(x)
        h, up = self.ff_proj(h), self.up_proj(h)
        return x + self.ff_out(self.act(h) * up)


class LladaCore(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config, table = config, {}            # the rotary table every block shares, as LLaDA's BufferCache
        parts = dict(wte=nn.Embedding(config.embedding_size or config.vocab_size, config.d_model),
                     ln_f=RMSNorm(config.d_model, config.rms_norm_eps),
                     blocks=nn.ModuleList(LladaBlock(config, table) for _ in range(config.n_layers)))
        if not config.weight_tying:
            parts["ff_out"] = nn.Linear(config.d_model, config.embedding_size or config.vocab_size, bias=False)
        self.transformer = nn.ModuleDict(parts)

    def forward(self, input_ids, attention_mask=None):
        cfg = self.config
        x = self.transformer.wte(input_ids)
        if cfg.input_emb_norm:
            x = x * (cfg.d_model ** 0.5)
        bias = None
        if attention_mask is not None and 0.0 in attention_mask:       # padded keys: an additive bias, bidirectional
            b, l = input_ids.shape
            pad = (1.0 - attention_mask.to(torch.float).view(b, -1)[:, None, None, :]) * torch.finfo(torch.float).min
            bias = torch.zeros(1, 1, l, l, device=x.device) + pad
        for block in self.transformer.blocks:
            x = block(x, bias)
        x = self.transformer.ln_f(x)
        logits = F.linear(x, self.transformer.wte.weight) if cfg.weight_tying else self.transformer.ff_out(x)
        if cfg.scale_logits:
            logits.mul_(1 / math.sqrt(cfg.d_model))
        return logits


class LladaStandin(PreTrainedModel):
    config_class = LladaStandinConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.model = LladaCore(config)
        self.post_init()

    def _init_weights(self, module):
        init_standin(module)

    def get_input_embeddings(self):
        return self.model.transformer.wte

    def get_output_embeddings(self):
        return self.model.transformer.wte if self.config.weight_tying else self.model.transformer.ff_out

    def forward(self, input_ids, attention_mask=None, output_attentions=None, **kwargs):
        if output_attentions:
            raise ValueError("output_attentions is not yet supported in LLaDA")          # as LLaDA's own code
        return MaskedLMOutput(logits=end_push(self.model(input_ids, attention_mask), self.config, 0))


# ---------------------------------------------------------------------------- Dream

class DreamRotary(nn.Module):
    """cos and sin (b, l, d) at the given positions, computed in float32 and cast to the hidden states' dtype."""

    def __init__(self, config):
        super().__init__()
        dim = config.hidden_size // config.num_attention_heads
        inv = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos() * self.attention_scaling, angles.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


class DreamAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config, self.probs = config, None
        self.num_heads, self.num_key_value_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.hidden_size // self.num_heads
        width = config.hidden_size
        self.q_proj = nn.Linear(width, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(width, self.num_key_value_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(width, self.num_key_value_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, width, bias=False)
        self.rotary_emb = DreamRotary(config)

    def forward(self, x, attention_mask, position_embeddings):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        cos, sin = cos[:, None], sin[:, None]
        q, k = (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)
        groups = self.num_heads // self.num_key_value_heads                   # Qwen2's repeat_kv: expand, reshape
        k = k[:, :, None].expand(b, self.num_key_value_heads, groups, t, self.head_dim).reshape(b, -1, t, self.head_dim)
        v = v[:, :, None].expand(b, self.num_key_value_heads, groups, t, self.head_dim).reshape(b, -1, t, self.head_dim)
        if self.config.keep_probs:
            self.probs = eager_probs(q, k, attention_mask)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=0.0, is_causal=False)
        return self.o_proj(out.transpose(1, 2).contiguous().view(b, t, -1))


class DreamMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DreamLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn, self.mlp = DreamAttention(config), DreamMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, attention_mask, position_embeddings):
        x = x + self.self_attn(self.input_layernorm(x), attention_mask, position_embeddings)
        return x + self.mlp(self.post_attention_layernorm(x))


class DreamCore(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(DreamLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = DreamRotary(config)

    def forward(self, input_ids, attention_mask=None):
        x = self.embed_tokens(input_ids)
        positions = torch.arange(x.shape[1], device=x.device)[None]
        rope = self.rotary_emb(x, positions)
        for layer in self.layers:
            x = layer(x, attention_mask, rope)
        return self.norm(x)


class DreamStandin(PreTrainedModel):
    config_class = DreamStandinConfig
    base_model_prefix = "model"

    def __init__(self, config):
        super().__init__(config)
        self.model = DreamCore(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        init_standin(module)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, output_attentions=None, **kwargs):
        logits = self.lm_head(self.model(input_ids, attention_mask))      # Dream: raw logits[i] predict i + 1
        return MaskedLMOutput(logits=end_push(logits, self.config, 1))


class StandinTokenizer(PreTrainedTokenizer):
    """A slow word-level tokenizer with ``get_vocab()`` and no ``.vocab`` (as Dream's)."""
    vocab_files_names = {"vocab_file": "vocab.json"}

    def __init__(self, vocab_file, **kwargs):
        with open(vocab_file) as f:
            self._ids = json.load(f)
        self._words = {i: w for w, i in self._ids.items()}
        super().__init__(**kwargs)

    @property
    def vocab_size(self):
        return len(self._ids)

    def get_vocab(self):
        return dict(self._ids, **self.added_tokens_encoder)

    def _tokenize(self, text, **kwargs):
        return text.split()

    def _convert_token_to_id(self, token):
        return self._ids.get(token, self._ids["<unk>"])

    def _convert_id_to_token(self, index):
        return self._words.get(index, "<unk>")

    def convert_tokens_to_string(self, tokens):
        return " ".join(tokens)

    def save_vocabulary(self, save_directory, filename_prefix=None):
        path = os.path.join(save_directory, (filename_prefix or "") + "vocab.json")
        with open(path, "w") as f:
            json.dump(self._ids, f)
        return (path,)
