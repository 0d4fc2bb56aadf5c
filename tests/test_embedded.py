"""The shipped model: loads offline like a hub model and solves a held-out word problem."""

import pytest

import dico
from dico import tasks
from dico.models import EMBEDDED


@pytest.fixture(scope="module")
def predictor():
    return dico.load_model()


def test_shipped_files_are_complete_and_small():
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"):
        assert (EMBEDDED / name).exists(), name
    assert (EMBEDDED / "model.safetensors").stat().st_size <= 25 * 2**20


def test_loads_through_the_hub_path_offline_with_eager_attention(predictor):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    assert predictor.name == dico.EMBEDDED_NAME and predictor.kind == "masked-lm"
    assert predictor.supports_attention and predictor.model.config._attn_implementation == "eager"
    assert predictor.mask_id == AutoTokenizer.from_pretrained(EMBEDDED).mask_token_id
    assert AutoModelForMaskedLM.from_pretrained(EMBEDDED).config.model_type == "bert"


def test_answers_a_fixed_held_out_word_problem_with_vanilla(predictor):
    item = next(i for i in tasks.make_split("word") if i.prompt.count(".") <= 2)
    trace = dico.generate(predictor, item.prompt, "vanilla", mode="semi-ar", gen_length=96, block_length=32)
    assert trace.nfe == 96
    assert tasks.check(item, trace.text), (item, trace.text)


def test_unknown_words_are_flagged_not_fatal(predictor):
    prompt = "Tom has 5 zebras. He finds a quasar. How many apples does Tom have now?"
    assert predictor.unknown_words(prompt) == ["zebras", "quasar"]
    trace = dico.generate(predictor, prompt, "dico", gen_length=32)
    assert trace.nfe >= 1 and "[MASK]" not in trace.text


def test_attention_capture_on_the_embedded_model(predictor):
    item = tasks.make_split("list")[0]
    trace = dico.generate(predictor, item.prompt, "dico", gen_length=48, capture_attention=True)
    att = trace.attention
    assert att.stages == ["early", "middle", "late"]
    assert sorted(s for steps in att.steps for s in steps) == list(range(trace.nfe))
    for rows in att.matrix:
        assert len(rows) == 48
        for row in rows:
            assert row is None or (len(row) == 49 and min(row) >= 0 and abs(sum(row) - 1) < 2e-3)  # rows are distributions


def test_decoding_a_tokenized_text_gives_it_back(predictor):
    """The checker reads decoded text, so decode must not respace "answer: 8" into "answer : 8". (Texts with words
    outside a word-level model's vocabulary cannot come back, whatever the spacing: they are left out.)"""
    checked = 0
    for item in (item for family in tasks.FAMILIES for item in tasks.make_split(family)[:200]):
        for text in (item.prompt, item.answer):
            if predictor.unknown_words(text):
                continue
            ids = predictor.tokenizer(text, add_special_tokens=False)["input_ids"]
            assert predictor.decode(ids + [predictor.tokenizer.eos_token_id]) == text
            checked += 1
    assert checked >= 100
