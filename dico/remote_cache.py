"""Cached forwards of LLaDA and Dream over their own modules, attached at load (``attach``).

Their own code cannot serve a diffusion cache: LLaDA's model refuses ``past_key_values`` (an assertion) and
both place the queries at the last positions of the keys. As ``dico.cache._bert`` does for the embedded model,
these run the model's own submodules (norms, projections, rotary tables, MLP, head) for the queried positions
only, rotate queries and keys at their real positions, write the fresh keys and values into the store
(``Exchange.kv``: per layer, the key/value heads only, so grouped-query models keep the smaller store) and attend
over all of it with ``scaled_dot_product_attention``, bidirectional, as the models do. What they take from each
model, from its published ``modeling_llada.py`` / ``modeling_dream.py``:

- LLaDA (``LLaDAModelLM``): ``model.transformer`` holds ``wte``, ``blocks`` (``LLaDALlamaBlock``: ``attn_norm``,
  ``q_proj``/``k_proj``/``v_proj``, optional ``q_norm``/``k_norm`` on the projections before the heads are split,
  ``rotary_emb`` whose sin/cos table is indexed by position, ``attn_out``, ``ff_norm``, ``act(ff_proj) * up_proj``
  into ``ff_out``), ``ln_f`` and ``ff_out`` (or the embedding with ``weight_tying``); ``input_emb_norm`` scales the
  embeddings by sqrt(d_model), ``scale_logits`` the logits by its inverse; RoPE in float32 with
  ``rope_full_precision``. Other block types (fused ``att_proj``, block groups) keep no cached forward.
- Dream (``DreamModel``, Qwen2-like): ``model`` holds ``embed_tokens``, ``layers`` (``input_layernorm``,
  ``self_attn`` with biased ``q_proj``/``k_proj``/``v_proj`` and ``o_proj``, ``post_attention_layernorm``,
  ``mlp``), ``norm`` and the shared ``rotary_emb(x, position_ids)``; ``lm_head`` outside. Its raw logits at i
  predict position i + 1: ``dico.cache`` computes position i - 1 with i and aligns them (``cache_shift``).

Attention maps, on request, are the eager softmax in float32 of the layers asked for ((b, h, q, w) each), as the
recomputing hooks (``dico.attention``) give them for an uncached pass.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

LLADA_BLOCK = ("attn_norm", "q_proj", "k_proj", "v_proj", "attn_out", "ff_norm", "ff_proj", "up_proj", "ff_out",
               "act", "rotary_emb")
DREAM_LAYER = ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")
DREAM_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def attach(model, kind: str) -> bool:
    """Give a loaded LLaDA or Dream model its cached forward (``model.dico_cached_forward``, read by
    ``dico.cache.forward_for``) when its modules are the ones this forward knows; False (and nothing attached)
    otherwise, so the cache setting is refused with a clear message rather than run on a guess."""
    runner = {"llada": (_llada_known, _llada), "dream": (_dream_known, _dream)}.get(kind)
    if runner is None or not runner[0](model):
        return False
    model.dico_cached_forward = runner[1]
    return True


def _has(module, names) -> bool:
    return all(getattr(module, name, None) is not None for name in names)


def _llada_known(model) -> bool:
    cfg = getattr(model, "config", None)
    transformer = getattr(getattr(model, "model", None), "transformer", None)
    if cfg is None or transformer is None or not hasattr(transformer, "keys"):
        return False
    parts = set(transformer.keys())
    if not {"wte", "ln_f", "blocks"} <= parts or ("ff_out" not in parts and not getattr(cfg, "weight_tying", False)):
        return False
    if getattr(cfg, "alibi", False) or not getattr(cfg, "rope", True) or not getattr(cfg, "n_heads", None):
        return False
    return all(_has(block, LLADA_BLOCK) and hasattr(block.rotary_emb, "get_rotary_embedding")
               and (getattr(block, "q_norm", None) is None) == (getattr(block, "k_norm", None) is None)
               for block in transformer.blocks)


def _dream_known(model) -> bool:
    base = getattr(model, "model", None)
    if base is None or getattr(model, "lm_head", None) is None:
        return False
    if not _has(base, ("embed_tokens", "layers", "norm", "rotary_emb")):
        return False
    return all(_has(layer, DREAM_LAYER) and _has(layer.self_attn, DREAM_ATTENTION + ("head_dim", "num_heads"))
               for layer in base.layers)


# ------------------------------------------------------------------------------------------- shared arithmetic

def _heads(t: torch.Tensor, size: int) -> torch.Tensor:
    b, q, _ = t.shape
    return t.view(b, q, -1, size).transpose(1, 2)                                         # b, h, q, d


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _attend(q, keys, values, mask):
    """Bidirectional attention of the queries (b, h, q, d) over every position's keys and values (b, kv, w, d),
    key/value heads repeated for grouped queries; (b, q, h * d)."""
    groups = q.shape[1] // keys.shape[1]
    if groups > 1:
        keys = keys.repeat_interleave(groups, dim=1, output_size=q.shape[1])
        values = values.repeat_interleave(groups, dim=1, output_size=q.shape[1])
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, dropout_p=0.0, is_causal=False)
    b, h, n, d = out.shape
    return out.transpose(1, 2).contiguous().view(b, n, h * d), keys


def _probs(q, keys, mask) -> torch.Tensor:
    """The eager attention map in float32 (b, h, q, w), for the attention figures."""
    scores = q.float() @ keys.float().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf)
    return scores.softmax(dim=-1)


def _wanted(attentions, site) -> bool:
    """``attentions``: False, True (every layer) or the attention sites asked for (the hooks' chosen layers)."""
    if attentions is True:
        return True
    return bool(attentions) and any(site is s for s in attentions)


# ------------------------------------------------------------------------------------------- LLaDA

def _llada(model, qids: torch.Tensor, ex, attentions=False):
    cfg, parts = model.config, model.model.transformer
    size = cfg.d_model // cfg.n_heads
    x = parts.wte(qids)                                                                     # b, q, d_model
    if getattr(cfg, "input_emb_norm", False):
        x = x * (cfg.d_model ** 0.5)
    full_precision = getattr(cfg, "rope_full_precision", True)
    mask, maps, tables = ex.boolean_mask(), [], {}
    for i, block in enumerate(parts.blocks):
        h = block.attn_norm(x)
        q, k, v = block.q_proj(h), block.k_proj(h), block.v_proj(h)
        if getattr(block, "q_norm", None) is not None:          # attention_layer_norm, before the heads are split
            q, k = block.q_norm(q).to(dtype=k.dtype), block.k_norm(k).to(dtype=k.dtype)
        q, k, v = _heads(q, size), _heads(k, size), _heads(v, size)
        sin, cos = _llada_angles(block, ex, tables, q.dtype if not full_precision else torch.float32)
        q, k = (_llada_rope(t, sin, cos, full_precision) for t in (q, k))
        keys, values = ex.kv(i, k, v)                                                       # b, kv, w, d
        att, keys = _attend(q, keys, values, mask)
        if _wanted(attentions, block):
            maps.append(_probs(q, keys, mask))
        x = x + block.attn_out(att)
        h = block.ff_norm(x)
        x = x + block.ff_out(block.act(block.ff_proj(h)) * block.up_proj(h))
    x = parts.ln_f(x)
    logits = F.linear(x, parts.wte.weight) if getattr(cfg, "weight_tying", False) else parts.ff_out(x)
    if getattr(cfg, "scale_logits", False):
        logits = logits * (1 / math.sqrt(cfg.d_model))
    return logits, (tuple(maps) if attentions else None)


def _llada_angles(block, ex, tables: dict, dtype):
    """The block's sin and cos at the queried positions (b, 1, q, d) in ``dtype``, gathered once per pass for each
    table: LLaDA's blocks share one (its ``BufferCache``), so a pass gathers it once, not twice a layer."""
    sin, cos = block.rotary_emb.get_rotary_embedding(ex.width, ex.qpos.device)            # 1, 1, >= w, d
    key = (sin.data_ptr(), cos.data_ptr(), tuple(sin.shape), dtype)
    if key not in tables:
        tables[key] = tuple(t[0, 0][ex.qpos][:, None].to(dtype) for t in (sin, cos))
    return tables[key]


def _llada_rope(t, sin, cos, full_precision: bool):
    """LLaDA's rotation of queries or keys (b, h, q, d) by the angles of their positions, in float32 with
    rope_full_precision."""
    x = t.float() if full_precision else t
    return ((x * cos) + (_rotate_half(x) * sin)).to(x.dtype).type_as(t)


# ------------------------------------------------------------------------------------------- Dream

def _dream(model, qids: torch.Tensor, ex, attentions=False):
    base = model.model
    x = base.embed_tokens(qids)                                                             # b, q, hidden
    cos, sin = base.rotary_emb(x, ex.qpos)                                                  # b, q, d (x's dtype)
    cos, sin = cos[:, None], sin[:, None]
    mask, maps = ex.boolean_mask(), []
    for i, layer in enumerate(base.layers):
        att = layer.self_attn
        h = layer.input_layernorm(x)
        q, k, v = (_heads(proj(h), att.head_dim) for proj in (att.q_proj, att.k_proj, att.v_proj))
        q = (q * cos) + (_rotate_half(q) * sin)
        k = (k * cos) + (_rotate_half(k) * sin)
        keys, values = ex.kv(i, k, v)                                                       # b, kv, w, d
        out, keys = _attend(q, keys, values, mask)
        if _wanted(attentions, att):
            maps.append(_probs(q, keys, mask))
        x = x + att.o_proj(out)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.lm_head(base.norm(x)), (tuple(maps) if attentions else None)
