"""The shipped model: loads offline like a hub model and solves a held-out word problem."""

import re

import pytest

import dico
from dico.embedded import tasks
from dico.embedded.card import ISSUE_PROMPTS, issue_runs
from dico.models import EMBEDDED


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


def test_answers_a_fixed_held_out_word_problem_with_vanilla(predictor, logit_noise):
    item = next(i for i in tasks.make_split("word") if i.prompt.count(".") <= 2)
    trace = dico.generate(predictor, item.prompt, "vanilla", mode="semi-ar", gen_length=96, block_length=32)
    assert trace.nfe == 96
    assert tasks.check(item, trace.text), (item, trace.text)


# Three prompts as a new user typed them, with every method in both modes: right answer, name and object copied (the
# shipped model's card: 30 of 30, its card.json's issue_prompts; checked below). A model that misses some lists them
# here as strict expected failures.
MISSES: set = set()


@pytest.mark.slow
@pytest.mark.parametrize("item", ISSUE_PROMPTS, ids=lambda item: item.prompt.split()[0])
@pytest.mark.parametrize("mode", ["non-ar", "semi-ar"])
@pytest.mark.parametrize("method", ("vanilla", "topk", "fast", "fast-factor", "dico"))   # the card's runs
def test_issue_16_prompts_decode_right_with_the_name_and_object_copied(predictor, item, mode, method, request):
    if (item.prompt.split()[0], mode, method) in MISSES:
        request.applymarker(pytest.mark.xfail(strict=True, reason="a new user's prompt the shipped model misses"))
    trace = dico.generate(predictor, item.prompt, method, mode=mode, gen_length=96,
                          block_length=32 if mode == "semi-ar" else None)
    assert tasks.check(item, trace.text) and all(e in trace.text for e in item.entities), trace.text



def test_the_cards_issue_16_count_is_every_prompt_method_and_mode():
    """The card quotes these prompts' runs from card.json; they are one per prompt, method and mode, as tested above."""
    import json
    runs = json.loads((EMBEDDED / "card.json").read_text())["issue_prompts"]
    methods = {r["method"] for r in runs["runs_detail"]}         # the methods there were when the card was measured
    assert methods <= set(dico.METHODS) and {"vanilla", "topk", "fast", "fast-factor", "dico"} <= methods
    planned = {(item.prompt[:30], mode, method) for item, mode, method in issue_runs(methods)}
    assert runs["runs"] == len(runs["runs_detail"]) == len(planned)
    assert {(r["prompt"], r["mode"], r["method"]) for r in runs["runs_detail"]} == planned
    assert runs["right"] == runs["copied"] == sum(r["right"] and r["copied"] for r in runs["runs_detail"])
    card = (EMBEDDED / "README.md").read_text()
    assert f"{len(methods)} methods" in card and f"**{runs['right']} of {runs['runs']} runs right**" in card


QUETZALINA = "Quetzalina has 5 zebras. She finds 3 more zebras. How many zebras does Quetzalina have now?"


def test_no_word_is_unknown_and_an_answer_with_a_name_never_seen_is_right(predictor):
    assert predictor.unknown_words(QUETZALINA) == []
    trace = dico.generate(predictor, QUETZALINA, "vanilla", gen_length=96)
    assert "zebras" in trace.text and tasks.extract_answer(trace.text) == "8", trace.text


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="a rare name of 7 BPE pieces is mangled in this prompt (step 51,075: cut to "
                                       "'Quetzal'; step 76,415: 'Quetzalinaetalzalina'); the card's 'Rare long names'")
def test_a_long_name_never_seen_is_copied_whole(predictor):
    text = dico.generate(predictor, QUETZALINA, "vanilla", gen_length=96).text
    assert re.search(r"\bQuetzalina\b", text), text


def test_attention_capture_on_the_embedded_model(predictor):
    item = tasks.make_split("list")[0]
    trace = dico.generate(predictor, item.prompt, "dico", gen_length=48, capture_attention=True)
    att = trace.attention
    assert att.stages == ["early", "middle", "late"]
    assert sorted(s for steps in att.steps for s in steps) == list(range(trace.nfe))
    for rows in att.matrix:
        assert len(rows) == 48
        for row in rows:        # rows are distributions
            assert row is None or (len(row) == 49 and min(row) >= 0 and abs(sum(row) - 1) < 2e-3)


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


# ---------------------------------------------------------------------------- the long-answer model beside it

def test_the_long_answer_model_loads_offline_by_name_and_the_default_stays_dico_tiny():
    from dico.models import EMBEDDED_MODELS, train_log

    folder = EMBEDDED_MODELS["dico-tiny-long"]
    for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md", "train_log.json",
                 "token_frequency.json"):
        assert (folder / name).exists(), name
    assert (folder / "model.safetensors").stat().st_size <= 25 * 2**20
    long = dico.load_model("dico-tiny-long", attention=False)
    assert long.name == "dico-tiny-long" and long.kind == "masked-lm" and long.token_frequency is not None
    assert train_log("dico-tiny-long")["step"] > train_log("dico-tiny")["step"]         # trained further
    assert dico.load_model(attention=False).name == dico.EMBEDDED_NAME == "dico-tiny"


def test_the_long_answer_model_writes_a_worked_chain_answer_that_fills_gen_256():
    """What it is for: a held-out chain problem answered right, every change worked out, at the paper's length."""
    long = dico.load_model("dico-tiny-long", attention=False)
    item = tasks.make_split("chain", "test", 1)[0]
    trace = dico.generate(long, item.prompt, "fast", gen_length=256)
    assert tasks.check(item, trace.text), trace.text
    assert trace.text.count("Step ") >= 4 and trace.answer_length > 96


def test_an_unknown_model_name_is_refused_naming_the_embedded_ones():
    with pytest.raises(dico.ModelError, match="dico-tiny, dico-tiny-long"):
        dico.load_model("dico-tiny-longer")


def test_the_long_models_card_cites_only_files_that_are_committed():
    from dico.models import EMBEDDED_MODELS

    root = EMBEDDED_MODELS["dico-tiny-long"].parent.parent
    card = (EMBEDDED_MODELS["dico-tiny-long"] / "README.md").read_text()
    cited = set(re.findall(r"`(assets/bench/[\w.-]+\.(?:json|md))`", card))
    assert cited and all((root / path).exists() for path in cited), cited
