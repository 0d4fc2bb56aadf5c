"""WINO's verification view (``dico.verify``): the sequence and a mirrored block in one pass.

The rule, from Feng-Hong/WINO-DLLM ``decoding_wino``: B = e - s extra slots, each the mask token, at the block's
position ids; a real query sees every real key and no extra one; extra query j sees every real key except its
mirror s + j, and every extra key. Dream's raw logits at i predict i + 1, so its extra slot j sits at s + j - 1
(the place that predicts s + j), still blind to s + j.

The references here are independent of ``dico.verify`` and of the forwards it drives: the mask is written pair by
pair from the rule (``spec_view``) and the models' own code runs over the l + B tokens with it: transformers'
``BertForMaskedLM`` (a 3-D attention mask; absolute position ids as it takes them, relative distances by wrapping
its distance table, since ``modeling_bert`` measures them between slots), the stand-ins' LLaDA blocks (an additive
bias; their rotary table read at the position ids) and Dream layers (a 4-D boolean mask and position ids, as
Dream's code takes them). Tolerances are float32's, and stated where used.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import dico
from accelerator import DEVICE, OnAccelerator, accelerator
from dico.verify import verify_forward
from standins import remote_model_folder
from tolerances import assert_reordered_close

torch.set_num_threads(1)

BERTS = ["embedded", "absolute", "relative_key_query"]
REMOTES = {"llada": ("llada", {}),
           "llada-options": ("llada", dict(n_kv_heads=2, attention_layer_norm=True, include_qkv_bias=True,
                                            weight_tying=True, input_emb_norm=True, scale_logits=True)),
           "dream": ("dream", {}),
           "llada-1": ("llada", dict(n_layers=1)), "dream-1": ("dream", dict(num_hidden_layers=1))}
MODELS = BERTS + ["llada", "llada-options", "dream"]


def bert_folder(path, position: str, layers: int = 2):
    """A tiny BertForMaskedLM with the embedded model's tokenizer, saved like a hub model."""
    from dico.embedded.tokenizer import build_tokenizer
    from dico.embedded.train import build_model

    torch.manual_seed(1)
    tokenizer = build_tokenizer(vocab_size=300, max_number=20)
    model = build_model(len(tokenizer), hidden=32, layers=layers, heads=2, max_positions=64, position=position)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Every model on the CPU in float32, where the references run (not conftest's shared ``predictor``, which is
    the app's: on a GPU machine it loads there in bfloat16)."""
    root = tmp_path_factory.mktemp("verify")
    cpu = dict(device="cpu", dtype="float32")
    made = {"embedded": dico.load_model(**cpu)}
    for position in ("absolute", "relative_key_query"):
        made[position] = dico.load_model(bert_folder(root / position, position), **cpu)
    made["bert-1"] = dico.load_model(bert_folder(root / "bert-1", "relative_key", layers=1), **cpu)
    for name, (kind, extra) in REMOTES.items():
        folder = remote_model_folder(root / name, kind, end_token_id=None, **extra)    # no end push after the head
        made[name] = dico.load_model(folder, trust_remote_code=True, **cpu)
    return made


def sequence(predictor, length: int, seed: int, masked=()) -> torch.Tensor:
    """Token ids (length,): random words, the mask at ``masked``."""
    vocab = predictor.model.get_output_embeddings().weight.shape[0]
    ids = torch.randint(6, vocab, (length,), generator=torch.Generator().manual_seed(seed))
    ids[ids == predictor.mask_id] = 6
    ids[list(masked)] = predictor.mask_id
    return ids


def shift_of(predictor) -> int:
    return 1 if predictor.kind == "dream" else 0


# ---------------------------------------------------------------------------- the references

def spec_view(l: int, s: int, e: int, shift: int = 0):
    """Position ids (l + B,) and attention mask (l + B, l + B) of the view, one pair at a time from the rule."""
    width = e - s
    positions = list(range(l)) + [max(s + j - shift, 0) for j in range(width)]
    allowed = torch.zeros(l + width, l + width, dtype=torch.bool)
    for q in range(l + width):
        for k in range(l + width):
            if q < l:
                allowed[q, k] = k < l                                   # real: real keys only
            else:
                allowed[q, k] = k >= l or k != s + (q - l)              # extra: all but its mirror
    return torch.tensor(positions), allowed


class AtPositions(nn.Module):
    """BERT's relative-distance table read at the distances between position ids (``modeling_bert`` asks for the
    distances between slots, arange minus arange)."""

    def __init__(self, table: nn.Embedding, positions: torch.Tensor, top: int):
        super().__init__()
        self.table, self.positions, self.top = table, positions, top

    def forward(self, index):
        assert tuple(index.shape) == (self.positions.numel(),) * 2
        return self.table(self.positions[:, None] - self.positions[None, :] + self.top)


def bert_reference(model, full, positions, allowed):
    kwargs = dict(attention_mask=allowed[None].long(), token_type_ids=torch.zeros_like(full)[None])
    layers = [layer.attention.self for layer in model.bert.encoder.layer]
    tables = [att.distance_embedding for att in layers] if model.config.position_embedding_type != "absolute" else []
    if not tables:
        kwargs["position_ids"] = positions[None]
    try:
        for att, table in zip(layers, tables):
            att.distance_embedding = AtPositions(table, positions, model.config.max_position_embeddings - 1)
        return model(input_ids=full[None], **kwargs).logits[0]
    finally:
        for att, table in zip(layers, tables):
            att.distance_embedding = table


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_at(rotary, positions, full_precision: bool):
    """A forward for the stand-in's LLaDA rotary (q, k -> rotated q, k) that turns every slot by its position id,
    read from the model's own sin/cos table (its own forward turns slot i by position i)."""
    sin, cos = (table[0, 0, positions] for table in rotary.get_rotary_embedding(int(positions.max()) + 1, "cpu"))

    def turn(x):
        y = x.float() if full_precision else x
        return (y * cos.type_as(y) + rotate_half(y) * sin.type_as(y)).type_as(x)
    return lambda q, k: (turn(q), turn(k))


def llada_reference(model, full, positions, allowed):
    parts, cfg = model.model.transformer, model.config
    bias = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float).min)[None, None]
    x = parts.wte(full[None])
    if cfg.input_emb_norm:
        x = x * cfg.d_model ** 0.5
    for block in parts.blocks:
        block.rotary_emb.forward = rotary_at(block.rotary_emb, positions, cfg.rope_full_precision)
        try:
            x = block(x, bias)
        finally:
            del block.rotary_emb.forward
    x = parts.ln_f(x)
    logits = nn.functional.linear(x, parts.wte.weight) if cfg.weight_tying else parts.ff_out(x)
    return (logits / cfg.d_model ** 0.5 if cfg.scale_logits else logits)[0]


def dream_reference(model, full, positions, allowed):
    base = model.model
    x = base.embed_tokens(full[None])
    rope = base.rotary_emb(x, positions[None])
    for layer in base.layers:
        x = layer(x, allowed[None, None], rope)
    return model.lm_head(base.norm(x))[0]


@torch.no_grad()
def reference(predictor, ids, s: int, e: int):
    """(real logits (l, v) aligned as MaskPredictor.forward, mirror logits (B, v)) from the models' own code."""
    l, shift = ids.numel(), shift_of(predictor)
    positions, allowed = spec_view(l, s, e, shift)
    full = torch.cat([ids, torch.full((e - s,), predictor.mask_id)])
    run = {"masked-lm": bert_reference, "llada": llada_reference, "dream": dream_reference}[predictor.kind]
    raw = run(predictor.model, full, positions, allowed)
    real = raw[:l] if not shift else torch.cat([raw[:1], raw[:l - 1]])
    return real, raw[l:]


# ---------------------------------------------------------------------------- the view

@pytest.mark.parametrize("name", MODELS)
def test_the_real_positions_get_an_ordinary_forwards_logits(models, name):
    predictor = models[name]
    ids = sequence(predictor, 30, seed=1, masked=range(14, 30))
    for block in ((14, 22), (22, 30), (0, 30)):
        out = verify_forward(predictor, ids[None], block)
        expected, _ = predictor.forward(ids[None])
        assert out.logits.shape == expected.shape and out.logits.dtype == expected.dtype == torch.float32
        assert_reordered_close(out.logits, expected)
        assert out.token_forwards == [30 + block[1] - block[0]]


@pytest.mark.parametrize("name", MODELS)
def test_each_mirror_is_the_models_own_forward_with_the_views_mask(models, name):
    """Decoded and masked tokens in the block, a block in the middle, at the end, and the whole sequence."""
    predictor = models[name]
    ids = sequence(predictor, 30, seed=2, masked=[15, 17, 18, 21, 24, 25, 26, 27, 28, 29])
    for s, e in ((14, 22), (22, 30), (0, 30)):
        real, mirror = reference(predictor, ids, s, e)
        out = verify_forward(predictor, ids[None], (s, e))
        assert out.mirror_logits.shape == (1, e - s, real.shape[-1])
        assert_reordered_close(out.mirror_logits[0], mirror)
        assert_reordered_close(out.logits[0], real)


def test_the_reference_mask_is_not_an_ordinary_one(models):
    """The references can fail: the mirror differs from the same slot seeing its own mirror key."""
    predictor = models["embedded"]
    ids = sequence(predictor, 24, seed=3, masked=range(16, 24))
    positions, allowed = spec_view(24, 8, 16)
    allowed[24:, :24] = True                                        # mirrors allowed to see their own tokens
    full = torch.cat([ids, torch.full((8,), predictor.mask_id)])
    with torch.no_grad():
        seeing = bert_reference(predictor.model, full, positions, allowed)[24:]
    out = verify_forward(predictor, ids[None], (8, 16))
    assert (out.mirror_logits[0] - seeing).abs().max() > 1e-2


@pytest.mark.parametrize("name", ["bert-1", "llada-1", "dream-1"])
def test_with_one_layer_a_mirror_never_reads_its_own_token(models, name):
    """One layer's keys depend on their own token and position only, so the mirror of s + j is the same whatever
    token stands at s + j; and (BERT, LLaDA) a block of one is an ordinary forward with that token masked."""
    predictor = models[name]
    ids = sequence(predictor, 20, seed=4, masked=range(14, 20))
    base = verify_forward(predictor, ids[None], (6, 14)).mirror_logits[0]
    for j in range(8):
        changed = ids.clone()
        changed[6 + j] = predictor.mask_id if ids[6 + j] != predictor.mask_id else 7
        other = verify_forward(predictor, changed[None], (6, 14)).mirror_logits[0]
        assert_reordered_close(other[j], base[j])
        assert (other[(j + 1) % 8] - base[(j + 1) % 8]).abs().max() > 1e-4       # the others do read it
    if predictor.kind != "dream":
        for p in (6, 10, 13):
            masked = ids.clone()
            masked[p] = predictor.mask_id
            alone = verify_forward(predictor, ids[None], (p, p + 1)).mirror_logits[0, 0]
            assert_reordered_close(alone, predictor.forward(masked[None])[0][0, p])


def test_dreams_mirror_sits_where_its_position_is_predicted(models):
    """Dream: the slot verifying s + j has position id s + j - 1 (raw logits there predict s + j); placed at
    s + j (LLaDA's layout) it would predict s + j + 1. The two layouts give different logits."""
    predictor = models["dream"]
    ids = sequence(predictor, 24, seed=5, masked=range(12, 24))
    out = verify_forward(predictor, ids[None], (8, 16))
    _, unshifted = reference(predictor, ids, 8, 16)
    assert_reordered_close(out.mirror_logits[0], unshifted)
    positions, allowed = spec_view(24, 8, 16, shift=0)
    full = torch.cat([ids, torch.full((8,), predictor.mask_id)])
    with torch.no_grad():
        at_mirror = dream_reference(predictor.model, full, positions, allowed)[24:]
    assert (out.mirror_logits[0] - at_mirror).abs().max() > 1e-3
    first = verify_forward(predictor, ids[None], (0, 4)).mirror_logits[0, 0]            # position 0 predicts itself
    assert_reordered_close(first, reference(predictor, ids, 0, 4)[1][0])


# ---------------------------------------------------------------------------- batches and devices

@pytest.mark.parametrize("name", ["embedded", "relative_key_query", "llada-options", "dream"])
def test_a_batch_of_rows_gives_each_rows_own_call(models, name):
    predictor = models[name]
    short = sequence(predictor, 18, seed=6, masked=range(10, 18))
    long = sequence(predictor, 27, seed=7, masked=range(15, 27))
    ids = torch.zeros(2, 27, dtype=torch.long)
    ids[0, :18], ids[1] = short, long
    mask = (torch.arange(27)[None, :] < torch.tensor([[18], [27]])).long()
    for blocks in ([(10, 14), (19, 23)], (10, 14)):
        out = verify_forward(predictor, ids, blocks, attention_mask=mask)
        assert out.logits.shape[:2] == (2, 27) and out.mirror_logits.shape[:2] == (2, 4)
        assert out.token_forwards == [18 + 4, 27 + 4]
        rows = blocks if isinstance(blocks, list) else [blocks] * 2
        for row, (alone_ids, block) in enumerate(zip((short, long), rows)):
            alone = verify_forward(predictor, alone_ids[None], block)
            n = alone_ids.numel()
            assert_reordered_close(out.logits[row, :n], alone.logits[0])
            assert_reordered_close(out.mirror_logits[row], alone.mirror_logits[0])


@pytest.mark.parametrize("name", ["embedded", "dream"])
def test_on_the_accelerator_the_pass_stays_there_and_computes_what_the_cpu_does(models, tmp_path, name):
    cpu = models[name]
    with accelerator():
        if name == "embedded":
            gpu = dico.load_model(device="cuda", dtype="float32")
        else:
            folder = remote_model_folder(tmp_path / name, "dream", end_token_id=None)
            gpu = dico.load_model(folder, trust_remote_code=True, device="cuda", dtype="float32")
    ids = sequence(cpu, 26, seed=8, masked=range(14, 26))[None]
    want = verify_forward(cpu, ids, (14, 22))
    with accelerator():
        got = verify_forward(gpu, ids, (14, 22), attention_mask=torch.ones(1, 26, dtype=torch.long))
        assert all(isinstance(t, OnAccelerator) and t.device == DEVICE for t in got[:2])
        logits, mirror = got.logits.cpu(), got.mirror_logits.cpu()
    assert torch.equal(logits, want.logits) and torch.equal(mirror, want.mirror_logits)


def test_bad_input_is_named(models):
    predictor = models["embedded"]
    ids = sequence(predictor, 12, seed=9)[None]
    cases = [((ids, (4, 4)), "block"), ((ids, (4, 13)), "block"), ((ids, (-1, 3)), "block"),
             ((ids, "4:8"), "block"), ((ids.float(), (4, 8)), "ids"),
             ((torch.cat([ids, ids]), [(0, 4), (4, 10)], torch.ones(2, 12)), "block"),
             ((torch.cat([ids, ids]), [(0, 4)], torch.ones(2, 12)), "block"),
             ((ids, (4, 8), torch.tensor([[1] * 6 + [0, 1] + [0] * 4])), "attention_mask"),
             ((ids, (4, 8), torch.ones(1, 11)), "attention_mask")]
    for args, field in cases:
        with pytest.raises(ValueError, match=f"^{field}: "):
            verify_forward(predictor, *args)
    out = verify_forward(predictor, ids, (torch.tensor(4), 8))          # a tensor's int is an int
    assert out.mirror_logits.shape[1] == 4
