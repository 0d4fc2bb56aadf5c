"""Model code shipped inside a stand-in model folder, loaded with ``trust_remote_code=True`` as LLaDA's and
Dream's own code is. Written for these tests (not their code), with the same interface:

- ``LladaStandin``: ``model_type`` "llada", the query/key projections in the block (as LLaDA's blocks hold them);
- ``DreamStandin``: ``model_type`` "Dream", projections under ``self_attn`` (Qwen2 style), logits shifted by
  one (raw ``logits[i]`` predicts position i + 1) and a 4-D boolean attention mask;
- both bidirectional with rotary positions, ignoring ``output_attentions`` (SDPA-only code), with the mask
  id in the config, optional query/key layer norms (``qk_norm``), and pushing the end-of-text token ``end_token_id`` at the last ``end_positions``
  positions, so a decode ends there. ``keep_probs`` keeps each layer's attention for the hooks' test.
"""
import json
import os

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizer
from transformers.modeling_outputs import MaskedLMOutput


class StandinConfig(PretrainedConfig):
    def __init__(self, vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                 num_hidden_layers=2, rope_theta=10000.0, max_position_embeddings=96, mask_token_id=None,
                 end_token_id=None, end_positions=3, keep_probs=False, qk_norm=False, **kwargs):
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        self.num_attention_heads, self.num_key_value_heads = num_attention_heads, num_key_value_heads
        self.rope_theta, self.max_position_embeddings = rope_theta, max_position_embeddings
        self.mask_token_id, self.end_token_id, self.end_positions = mask_token_id, end_token_id, end_positions
        self.keep_probs, self.qk_norm = keep_probs, qk_norm
        super().__init__(**kwargs)


class LladaStandinConfig(StandinConfig):
    model_type = "llada"


class DreamStandinConfig(StandinConfig):
    model_type = "Dream"


def rotary(x, theta):
    d, l = x.shape[-1], x.shape[-2]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = torch.arange(l, device=x.device, dtype=torch.float32)[:, None] * inv
    ang = torch.cat([ang, ang], dim=-1)
    half = d // 2
    return x * ang.cos() + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * ang.sin()


def add_projections(module, config):
    """Query, key, value and output projections on ``module`` (LLaDA's block holds them; Dream's self_attn)."""
    h, kv, width = config.num_attention_heads, config.num_key_value_heads, config.hidden_size
    module.h, module.kv, module.d, module.theta = h, kv, width // h, config.rope_theta
    module.q_proj = nn.Linear(width, h * module.d, bias=False)
    module.k_proj = nn.Linear(width, kv * module.d, bias=False)
    module.v_proj = nn.Linear(width, kv * module.d, bias=False)
    module.o_proj = nn.Linear(h * module.d, width, bias=False)
    module.keep, module.probs = config.keep_probs, None
    if config.qk_norm:            # LLaDA's attention_layer_norm: queries and keys normalised before RoPE
        module.q_norm, module.k_norm = nn.LayerNorm(h * module.d), nn.LayerNorm(kv * module.d)


def attend(module, x, key_mask):
    b, l, _ = x.shape
    q, k = module.q_proj(x), module.k_proj(x)
    if hasattr(module, "q_norm"):
        q, k = module.q_norm(q), module.k_norm(k)
    q = rotary(q.view(b, l, module.h, module.d).transpose(1, 2), module.theta)
    k = rotary(k.view(b, l, module.kv, module.d).transpose(1, 2), module.theta)
    v = module.v_proj(x).view(b, l, module.kv, module.d).transpose(1, 2)
    k, v = k.repeat_interleave(module.h // module.kv, 1), v.repeat_interleave(module.h // module.kv, 1)
    scores = q @ k.transpose(-1, -2) / module.d ** 0.5
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], -torch.inf)
    probs = scores.softmax(-1)
    if module.keep:
        module.probs = probs.detach()
    return module.o_proj((probs @ v).transpose(1, 2).reshape(b, l, -1))


class SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        add_projections(self, config)

    def forward(self, x, key_mask):
        return attend(self, x, key_mask)


class Block(nn.Module):
    def __init__(self, config, llada_layout):
        super().__init__()
        self.norm = nn.LayerNorm(config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 2 * config.hidden_size), nn.GELU(),
                                 nn.Linear(2 * config.hidden_size, config.hidden_size))
        if llada_layout:
            add_projections(self, config)
        else:
            self.self_attn = SelfAttention(config)

    def attention_site(self):
        return getattr(self, "self_attn", self)

    def forward(self, x, key_mask):
        x = x + attend(self.attention_site(), self.norm(x), key_mask)
        return x + self.mlp(x)


class StandinModel(PreTrainedModel):
    llada_layout = True

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList(Block(config, self.llada_layout) for _ in range(config.num_hidden_layers))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.15)

    def forward(self, input_ids, attention_mask=None, output_attentions=None, **kwargs):
        key_mask = None
        if attention_mask is not None:       # 2-D (b, l) or Dream's 4-D boolean (b, 1, l, l)
            key_mask = attention_mask.bool() if attention_mask.dim() == 2 else attention_mask[:, 0, 0].bool()
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, key_mask)
        logits = self.lm_head(x)
        if self.config.end_token_id is not None:
            l, k = logits.shape[1], self.config.end_positions
            start = l - k - (0 if self.llada_layout else 1)          # Dream: raw logits[i] predict position i + 1
            logits[:, start:start + k, self.config.end_token_id] += 30.0
        return MaskedLMOutput(logits=logits)


class LladaStandin(StandinModel):
    config_class = LladaStandinConfig
    llada_layout = True


class DreamStandin(StandinModel):
    config_class = DreamStandinConfig
    llada_layout = False


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
