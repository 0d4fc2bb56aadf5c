"""Mask predictors (docs/decoding.md §2.5): loading, refusing what cannot or should not be loaded, and the
alignment of logits to positions (LLaDA in place, Dream shifted by one, a plain masked LM in place).

Everything here runs offline: a tiny BertForMaskedLM saved to a temporary folder stands in for a hub model,
LLaDA- and Dream-sized stand-ins (tests/standins.py) for the remote-code models.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import dico  # noqa: E402
from dico.models import ModelError, default_device_dtype, from_module, load_model  # noqa: E402
from standins import (  # noqa: E402
    DREAM_MASK_ID,
    DREAM_VOCAB,
    LLADA_MASK_ID,
    LLADA_VOCAB,
    FakeTokenizer,
    MarkerLM,
    Row,
    dream_standin,
    llada_standin,
    scripted,
    tiny_model_folder,
)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_model_folder(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def predictor(tiny):
    return load_model(tiny)


# ============================================================================ what load_model refuses

def test_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(ModelError, match=r"^model: .*missing.* is neither an embedded model \(dico-tiny, "
                                         r"dico-tiny-long\), an existing folder nor a hub id"):
        load_model(tmp_path / "missing")
    with pytest.raises(ModelError, match="^model:"):
        load_model("no-such-model")


def test_a_hub_model_that_cannot_be_fetched_is_a_model_error():
    with pytest.raises(ModelError, match=r"^model: cannot load 'nobody/no-such-model' .*network access"):
        load_model("nobody/no-such-model")                   # offline here: the config cannot be fetched


def test_a_folder_without_config_json_is_refused(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelError, match=r"^model: .* has no config\.json"):
        load_model(tmp_path)


def test_a_config_json_that_is_not_json_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match=r"^model: .*config\.json is not valid JSON"):
        load_model(tmp_path)


@pytest.mark.parametrize("model_type", ["llada", "bert"])
def test_a_model_with_its_own_code_outside_the_allow_list_is_refused_without_trust_remote_code(tmp_path, model_type):
    # the folder's code would leave a canary file if it ever ran
    canary = tmp_path / "ran.txt"
    (tmp_path / "modeling_custom.py").write_text(f"open({str(canary)!r}, 'w').write('ran')\n")
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": model_type, "architectures": ["CustomModel"],
        "auto_map": {"AutoConfig": "modeling_custom.CustomConfig", "AutoModel": "modeling_custom.CustomModel",
                     "AutoModelForMaskedLM": "modeling_custom.CustomModel"}}))
    with pytest.raises(ModelError, match=r"^model: .*ships its own code; pass trust_remote_code=True"):
        load_model(tmp_path)
    assert not canary.exists()


def test_an_unknown_dtype_is_refused(tiny):
    with pytest.raises(ModelError, match="^dtype: unknown dtype 'float8'"):
        load_model(tiny, dtype="float8")


def test_model_errors_are_value_errors_so_callers_report_them_as_bad_input():
    assert issubclass(ModelError, ValueError)


def test_from_module_refuses_an_unknown_kind():
    with pytest.raises(ModelError, match="^kind:"):
        from_module(MarkerLM(64, 4), FakeTokenizer(), kind="gpt", mask_id=4, max_length=16)


# ============================================================================ a plain masked LM

@pytest.mark.skipif(torch.cuda.is_available(), reason="the defaults differ on a GPU machine")
def test_defaults_are_cpu_and_float32_without_a_gpu(predictor):
    assert default_device_dtype() == (torch.device("cpu"), torch.float32)
    assert predictor.device.type == "cpu"
    assert next(predictor.model.parameters()).dtype == torch.float32


def test_a_tiny_bert_loads_offline_as_a_masked_lm(predictor, tiny):
    assert predictor.kind == "masked-lm" and predictor.name == str(tiny)
    assert predictor.mask_id == predictor.tokenizer.mask_token_id
    assert predictor.max_length == 64 and predictor.supports_attention


def test_forward_returns_float32_logits_per_position_and_attention_when_asked(predictor):
    ids = torch.tensor([predictor.encode_prompt("Tom has 5 apples") + [predictor.mask_id] * 4])   # 1, l
    vocab = len(predictor.tokenizer)
    logits, attn = predictor.forward(ids)
    assert logits.shape == (1, ids.shape[1], vocab) and logits.dtype == torch.float32 and attn is None
    logits2, attn = predictor.forward(ids, attentions=True)
    assert torch.allclose(logits, logits2, atol=1e-5)
    assert len(attn) == 2 and attn[0].shape == (1, 2, ids.shape[1], ids.shape[1])
    assert torch.allclose(attn[0].sum(-1), torch.ones(1, 2, ids.shape[1]), atol=1e-4)


def test_a_bfloat16_model_keeps_its_logits_in_bfloat16_and_decodes(tiny):
    p = load_model(tiny, dtype="bfloat16")             # no float32 copy of a vocabulary-wide tensor per pass
    assert next(p.model.parameters()).dtype == torch.bfloat16 == p.dtype
    logits, _ = p.forward(torch.tensor([p.encode_prompt("Tom has 5 apples")]))
    assert logits.dtype == torch.bfloat16
    assert dico.generate(p, "Tom has 5 apples", "fast", gen_length=4).nfe >= 1


def test_attention_false_loads_without_attention_maps(tiny):
    assert not load_model(tiny, attention=False).supports_attention


def test_prompts_are_encoded_with_the_tokenizers_special_tokens(predictor):
    tok = predictor.tokenizer
    ids = predictor.encode_prompt("Tom has 5 apples")
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok.decode(ids[1:-1]).strip() == "Tom has 5 apples"


def test_unknown_words_flags_words_outside_a_word_level_vocabulary(predictor):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    words = ["[UNK]", "[MASK]", "Tom", "has", "5", "apples", ".", "He", "buys", "3"]
    core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    word_level = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", mask_token="[MASK]")
    p = dico.from_module(predictor.model, word_level, kind="masked-lm", mask_id=1, max_length=64)
    assert p.unknown_words("Tom has 5 zebras . He buys 3 yaks") == ["zebras", "yaks"]
    assert p.unknown_words("Tom has 5 apples") == []
    assert predictor.unknown_words("Tom has 5 zebras") == []      # byte-level BPE: no word is unknown


def test_decode_stops_at_end_of_text_and_drops_special_tokens(predictor):
    tok = predictor.tokenizer
    words = tok("Tom has 5 apples", add_special_tokens=False)["input_ids"]
    cut = next(k for k in range(len(words) + 1) if tok.decode(words[:k]).strip() == "Tom has")
    assert predictor.decode(words[:cut] + [tok.eos_token_id] + words[cut:]) == "Tom has"
    assert predictor.decode([tok.cls_token_id] + words) == "Tom has 5 apples"


def test_generate_runs_on_the_tiny_model_and_captures_attention(predictor):
    trace = dico.generate(predictor, "Tom has 5 apples", "dico", gen_length=12, capture_attention=True)
    assert trace.nfe == len(trace.steps) and len(trace.response) == 12
    assert trace.attention is not None and trace.attention.stages == ["early", "middle", "late"]
    assert len(trace.attention.matrix) == 3 and sum(len(s) for s in trace.attention.steps) == trace.nfe
    assert dico.Trace.from_json(trace.to_json()) == trace


# ============================================================================ LLaDA and Dream alignment

def test_llada_logits_are_used_in_place():
    p = llada_standin()
    ids = torch.full((1, 10), 7)
    raw = p.model(input_ids=ids).logits
    aligned, _ = p.forward(ids)
    assert aligned.shape == (1, 10, LLADA_VOCAB) and aligned.dtype == torch.float32
    assert torch.equal(aligned, raw)
    assert aligned[0].argmax(-1).tolist() == [1000 + i for i in range(10)]
    assert p.mask_id == LLADA_MASK_ID == 126336


def test_dream_logits_are_shifted_so_position_i_reads_raw_logits_i_minus_1_and_position_0_its_own():
    p = dream_standin()
    ids = torch.full((1, 10), 7)
    raw = p.model(input_ids=ids).logits
    aligned, _ = p.forward(ids)
    assert aligned.shape == (1, 10, DREAM_VOCAB) and aligned.dtype == torch.float32
    assert torch.equal(aligned[:, 0], raw[:, 0]) and torch.equal(aligned[:, 1:], raw[:, :-1])
    assert aligned[0].argmax(-1).tolist() == [1000] + [1000 + i - 1 for i in range(1, 10)]
    assert p.mask_id == DREAM_MASK_ID == 151666


@pytest.mark.parametrize("make, shift", [(llada_standin, 0), (dream_standin, 1)])
def test_the_loop_decodes_with_aligned_logits(make, shift):
    p = make()
    trace = dico.generate(p, "w20 w21 w22", "vanilla", gen_length=5)       # prompt: 3 positions
    first = trace.steps[0]
    assert first.prediction == [1000 + 3 + j - shift for j in range(5)]
    assert trace.response == first.prediction
    assert p.model.calls == 5


@pytest.mark.parametrize("make", [llada_standin, dream_standin])
def test_the_mask_token_is_never_predicted_even_when_the_model_favours_it(make):
    p = make(mask_bias=True)
    trace = dico.generate(p, "w20 w21 w22", "fast", gen_length=4)
    assert p.mask_id not in trace.response
    assert all(p.mask_id not in [t for t in s.prediction if t is not None] for s in trace.steps)


# ============================================================================ the tests' own stand-ins

def test_the_scripted_predictor_gives_the_loop_exactly_the_scripted_conf_pred_and_margin():
    from dico.sampling import score

    nan = float("nan")
    row = Row(conf=[0.3, 0.7, 0.99, 0.5], pred=[11, 12, 13, 14], margin=[nan, 1.0, 5.0, 3.0])
    p = scripted([row, ([0.2, 0.4, 0.6, 0.8], [20, 21, 22, 23])], 4)
    ids = torch.tensor([p.encode_prompt("w20 w21") + [p.mask_id] * 4])
    for want_conf, want_pred, want_margin in (([0.3, 0.7, 0.99, 0.5], [11, 12, 13, 14], [1.0, 5.0, 3.0]),
                                              ([0.2, 0.4, 0.6, 0.8], [20, 21, 22, 23], None)):
        logits, _ = p.forward(ids)
        conf, pred, margin = score(logits[0, 2:])
        assert conf.tolist() == pytest.approx(want_conf, abs=1e-6) and pred.tolist() == want_pred
        if want_margin:
            assert margin[1:].tolist() == pytest.approx(want_margin, abs=1e-5)
    with pytest.raises(AssertionError, match="the script has 2 steps"):
        p.forward(ids)


# ============================================================================ models with their own code

@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """LLaDA- and Dream-shaped folders whose names say neither 'instruct' nor the model kind."""
    from standins import remote_model_folder
    root = tmp_path_factory.mktemp("remote")
    return {kind: remote_model_folder(root / f"model-{i}", kind) for i, kind in enumerate(("llada", "dream"))}


@pytest.mark.parametrize("kind", ["llada", "dream"])
def test_a_remote_code_model_is_read_from_its_config_and_tokenizer(remote, kind):
    from standins import END_TOKEN
    p = load_model(remote[kind], trust_remote_code=True)
    vocab = p.tokenizer.get_vocab()
    assert p.kind == kind and p.mask_id == len(vocab) - 1 == vocab["<|mask_of_config|>"]   # the config's id
    assert p.mask_id != p.tokenizer.mask_token_id                        # not the tokenizer's own mask token
    assert p.chat and p.encode_prompt("w1 w2")[:2] == [vocab["<|start|>"], vocab["user"]]
    assert vocab[END_TOKEN[kind]] in p.stop_ids()
    assert p.supports_attention and p.hooks is not None


def test_a_slow_tokenizer_without_vocab_still_gives_its_stop_tokens(remote):
    p = load_model(remote["dream"], trust_remote_code=True)
    assert not hasattr(p.tokenizer, "vocab") and p.tokenizer.get_vocab()["<|im_end|>"] in p.stop_ids()


@pytest.mark.parametrize("mode", ["non-ar", "semi-ar"])
@pytest.mark.parametrize("kind", ["llada", "dream"])
def test_remote_code_models_decode_with_every_method_stop_at_their_end_token_and_give_attention(remote, kind, mode):
    from standins import END_TOKEN
    p = load_model(remote[kind], trust_remote_code=True)
    end = p.tokenizer.get_vocab()[END_TOKEN[kind]]
    for method in dico.METHODS:
        if not dico.settings.decodes_in(method, mode):
            continue
        extra = {"init_unmask_ratio": 0.75} if method == "remdm" else {}   # 12 x 0.875 is not a whole token count
        trace = dico.generate(p, "w1 w2 w3", method, mode=mode, gen_length=12, block_length=6,
                              capture_attention=method != "wino", **extra)  # WINO's mirrored pass returns no maps
        # the model ends its last 3: the stand-ins' wrapper pushes the end token after the head, where WINO's
        # mirrored pass (as a cached pass) does not look, so for WINO the model decodes without that push
        assert method == "wino" or (trace.response[-3:] == [end] * 3 and trace.answer_length <= 9)
        assert END_TOKEN[kind] not in trace.text and p.mask_id not in trace.response
        assert method == "wino" or (trace.attention is not None and len(trace.attention.matrix) == 3)


@pytest.mark.parametrize("kind, qk_norm", [("llada", False), ("llada", True), ("dream", False)])
def test_the_hooks_recompute_the_attention_the_model_computed(tmp_path, kind, qk_norm):
    from standins import remote_model_folder
    extra = {"attention_layer_norm": qk_norm, "n_kv_heads": 2} if kind == "llada" else {}
    folder = remote_model_folder(tmp_path / "m", kind, keep_probs=True, **extra)
    p = load_model(folder, trust_remote_code=True)
    ids = torch.tensor([p.encode_prompt("w1 w2 w3") + [p.mask_id] * 5])
    _, maps = p.forward(ids, attentions=True)
    sites = list(p.model.model.transformer.blocks) if kind == "llada" else [l.self_attn for l in p.model.model.layers]
    truth = torch.stack([site.probs[0].mean(dim=0) for site in sites]).mean(dim=0)         # l, l
    assert maps[0].shape == (1, 1, ids.shape[1], ids.shape[1])
    assert torch.allclose(maps[0][0, 0], truth, atol=1e-5)


def test_chat_false_encodes_the_raw_prompt_and_chat_true_needs_a_template(remote, tiny):
    p = load_model(remote["llada"], trust_remote_code=True, chat=False)
    assert not p.chat and len(p.encode_prompt("w1 w2")) == 2
    with pytest.raises(ModelError, match="^chat: the tokenizer of .* has no chat template"):
        load_model(tiny, chat=True)


def test_the_generation_configs_eos_ids_end_a_response(tmp_path):
    from standins import remote_model_folder
    folder = remote_model_folder(tmp_path / "m", "llada")
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [20, 21]}))
    assert {20, 21} <= load_model(folder, trust_remote_code=True).stop_ids()


def test_a_model_without_a_mask_token_is_refused_naming_the_field(tmp_path):
    from standins import remote_model_folder
    folder = remote_model_folder(tmp_path / "m", "dream", mask_token_id=None)
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab["[NOT-A-MASK]"] = vocab.pop("[MASK]")                       # nothing in the vocabulary spells a mask
    (folder / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(ModelError, match=r"^model: .* names no mask token: .*add \"mask_token_id\""):
        load_model(folder, trust_remote_code=True)


def test_a_mask_id_outside_the_vocabulary_is_refused(tmp_path):
    from standins import remote_model_folder
    folder = remote_model_folder(tmp_path / "m", "llada", mask_token_id=156895)
    with pytest.raises(ModelError, match=r"^model: .* has mask_token_id 156895, outside its 64 output tokens"):
        load_model(folder, trust_remote_code=True)


def test_a_model_whose_weights_cannot_be_read_is_a_model_error(tmp_path):
    from standins import remote_model_folder
    folder = remote_model_folder(tmp_path / "m", "llada")
    (folder / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ModelError, match=r"^model: cannot load"):
        load_model(folder, trust_remote_code=True)
