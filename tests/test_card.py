"""The model card's measures score what they say: an oracle gets everything, a model that ignores the prompt gets
little."""
import re

import pytest
import torch
from torch import nn

import dico
from dico.embedded import card, tasks


class Oracle(nn.Module):
    """Predicts every position's true token: the masked ones are read from the sequence it was built for."""

    def __init__(self, truth: list[int], vocab: int):
        super().__init__()
        self.truth, self.vocab = torch.tensor(truth), vocab

    def forward(self, input_ids, **_):
        logits = torch.full((*input_ids.shape, self.vocab), -20.0)
        logits.scatter_(-1, self.truth[: input_ids.shape[1]].expand_as(input_ids)[..., None], 20.0)
        return type("Out", (), {"logits": logits})


@pytest.fixture(scope="module")
def tokenizer():
    from dico.embedded.tokenizer import build_tokenizer
    return build_tokenizer()


def predictor_for(model, tokenizer):
    return dico.from_module(model, tokenizer, kind="masked-lm", mask_id=tokenizer.mask_token_id,
                                   max_length=384)


def test_masked_alone_accuracy_is_one_for_an_oracle_and_low_for_a_constant_guess(tokenizer):
    item = next(i for i in tasks.make_split("word") if i.answer.split()[0] in tasks.NAMES)
    probe = predictor_for(nn.Identity(), tokenizer)
    prompt, _, response = card._layout(probe, item, card.GEN_LENGTH)
    vocab = len(tokenizer)
    oracle = predictor_for(Oracle(prompt + response, vocab), tokenizer)
    assert card.masked_alone_accuracy(oracle, [item]) == 1.0
    assert card.masked_alone_accuracy(oracle, [item], "entities") == 1.0
    assert card.teacher_forced(oracle, [item]) == 1.0

    the = tokenizer.convert_tokens_to_ids("Ġthe")                        # always guesses one word
    constant = predictor_for(Oracle([the] * len(prompt + response), vocab), tokenizer)
    assert card.masked_alone_accuracy(constant, [item], "entities") == 0.0
    assert card.masked_alone_accuracy(constant, [item]) == 0.0


def test_a_name_counts_only_when_every_piece_is_right(tokenizer):
    item = next(i for i in tasks.make_split("word") if i.held_out)
    probe = predictor_for(nn.Identity(), tokenizer)
    prompt, answer, response = card._layout(probe, item, card.GEN_LENGTH)
    mentions = card._mentions(probe, item)
    assert all(mentions) and max(len(m) for ms in mentions for m in ms) >= 2   # some name or object is in pieces
    truth = prompt + response
    spoiled = list(truth)
    for ms in mentions:
        for m in ms:
            spoiled[len(prompt) + m[-1]] = tokenizer.convert_tokens_to_ids("Ġthe")   # last piece wrong
    assert card.masked_alone_accuracy(predictor_for(Oracle(spoiled, len(tokenizer)), tokenizer), [item],
                                      "entities") == 0.0


class ReadsLaterMentions(nn.Module):
    """Fills a masked position with whatever stands at the next mention of its true token: copying, not computing."""

    def __init__(self, truth: list[int], start: int, vocab: int):
        super().__init__()
        self.truth, self.start, self.vocab = truth, start, vocab

    def forward(self, input_ids, **_):
        n, length = input_ids.shape
        logits = torch.zeros(n, length, self.vocab)
        for i in range(self.start, length):
            later = [j for j in range(i + 1, length) if self.truth[j] == self.truth[i]]
            logits[:, i, :] = -20.0
            if later:
                logits[torch.arange(n), i, input_ids[:, later[0]]] = 20.0
        return type("Out", (), {"logits": logits})


def test_computed_results_and_first_mentions_cannot_be_read_back_from_later_in_the_answer(tokenizer):
    item = next(i for i in tasks.make_split("word") if i.answer.count(" = ") >= 2)
    prompt, answer, response = card._layout(predictor_for(nn.Identity(), tokenizer), item, card.GEN_LENGTH)
    truth = prompt + answer + [tokenizer.eos_token_id] * (len(response) - len(answer))
    vocab = len(tokenizer)
    copier = predictor_for(ReadsLaterMentions(truth, len(prompt), vocab), tokenizer)
    # every result is re-mentioned later (next step, answer line), so masking it alone lets the copier score
    assert card.masked_alone_accuracy(copier, [item], after="=") == 1.0
    assert card.masked_alone_accuracy(copier, [item], after="=", with_later=True) == 0.0
    assert card.masked_alone_accuracy(copier, [item], "entities", with_later=True) == 0.0
    oracle = predictor_for(Oracle(truth, vocab), tokenizer)
    assert card.masked_alone_accuracy(oracle, [item], after="=", with_later=True) == 1.0
    assert card.masked_alone_accuracy(oracle, [item], "entities", with_later=True) == 1.0
    by_op = card.computed_by_operation(copier, [item])
    equations = re.findall(r"(\d+) ([-+*]) \d+ = (\d+)", item.answer)
    assert by_op["all"] == {"n": len(equations), "accuracy": 0.0}
    assert sum(v["n"] for k, v in by_op.items() if k.startswith("op ")) == len(equations)
    assert {k[3:] for k in by_op if k.startswith("op ")} == {op for _, op, _ in equations}
    assert card.computed_by_operation(oracle, [item])["all"]["accuracy"] == 1.0


def test_decoded_counts_right_answers_and_stutters(tokenizer):
    item = tasks.make_split("word")[0]
    probe = predictor_for(nn.Identity(), tokenizer)
    prompt, answer, response = card._layout(probe, item, card.GEN_LENGTH)
    oracle = predictor_for(Oracle(prompt + response, len(tokenizer)), tokenizer)
    assert card.decoded(oracle, [item]) | {"nfe": 0} == {"accuracy": 1.0, "stutter_rate": 0.0, "nfe": 0, "items": 1,
                                                         "method": "dico"}
    first = answer.index(next(t for t in answer if card._texts(probe, [t])[0].isdigit()))
    stutter = answer[:first + 1] + answer[first:]                          # "We start from 5 5 apples."
    stutter = (stutter + [tokenizer.eos_token_id] * card.GEN_LENGTH)[:card.GEN_LENGTH]
    stutterer = predictor_for(Oracle(prompt + stutter, len(tokenizer)), tokenizer)
    assert card.decoded(stutterer, [item])["stutter_rate"] == 1.0
    assert card._stutters("Adding 3 3 gives") and card._stutters("from 18 18.")
    assert not card._stutters("3 + 3 = 6.") and not card._stutters("It is 4, 4, 5.")


NUMBER_MEASURES = ("teacher_forced_", "number_accuracy_", "computed_result_accuracy_", "name_object_", "stutter_rate_")


@pytest.mark.parametrize("family", tasks.FAMILIES)
def test_number_measures_are_the_number_families_and_accuracy_every_familys(tokenizer, family):
    item = tasks.make_split(family)[0]
    prompt, _, response = card._layout(predictor_for(nn.Identity(), tokenizer), item, card.gen_for(family))
    oracle = predictor_for(Oracle(prompt + response, len(tokenizer)), tokenizer)
    report = card.family_measures(oracle, family, [item], profile_items=1, decode_items=1)
    numbers = [key for key in report if key.startswith(NUMBER_MEASURES)]
    assert bool(numbers) == (family in tasks.NUMBER_FAMILIES), numbers
    assert all(key.endswith(family) for key in numbers)
    assert report[f"decoded_{family}"]["accuracy"] == 1.0 and report[f"profile_{family}"]
    assert ("stutter_rate" in report[f"decoded_{family}"]) == (family in tasks.NUMBER_FAMILIES)
    assert f"decoded_{family}_dico" in card.DECODED_KEYS              # the training curve follows every family


def test_the_card_reads_worked_answers_in_the_wording_the_model_was_trained_in(tmp_path):
    import json

    (tmp_path / "train_log.json").write_text(json.dumps({"step": 5, "args": {"wording": "shifted"}}))
    assert card.trained_wording(str(tmp_path)) == "shifted"
    (tmp_path / "train_log.json").write_text(json.dumps({"step": 5, "args": {}}))     # a log from before the choice
    assert card.trained_wording(str(tmp_path)) == "free"
    assert card.trained_wording("GSAI-ML/LLaDA-8B-Instruct") == "free"
    shifted, free = (tasks.make_split("word", size=40, wording=w) for w in ("shifted", "free"))
    assert [i.prompt for i in shifted] == [i.prompt for i in free] and [i.answer for i in shifted] != [
        i.answer for i in free]


def test_the_editing_probe_finds_an_oracle_repairing_every_replaced_token_and_keeping_the_rest(tokenizer):
    """The editing probe: a model that predicts every position's true token repairs each replaced token and
    keeps each untouched one; one that copies its input keeps everything and repairs nothing."""
    item = tasks.make_split("chain")[0]
    gen = card.gen_for("chain")
    prompt, answer, response = card._layout(predictor_for(nn.Identity(), tokenizer), item, gen)
    oracle = predictor_for(Oracle(prompt + response, len(tokenizer)), tokenizer)
    report = card.editing(oracle, [item], gen_length=gen)
    assert report["replaced"] == round(card.EDIT_SHARE * len(answer)) and report["untouched"] == len(answer) - report[
        "replaced"]
    assert (report["repaired"], report["kept"], report["confident_wrong"]) == (1.0, 1.0, 0.0)

    class Copier(nn.Module):
        def forward(self, input_ids, **_):
            return type("Out", (), {"logits": nn.functional.one_hot(input_ids, len(tokenizer)).float() * 20})

    copier = card.editing(predictor_for(Copier(), tokenizer), [item], gen_length=gen)
    assert (copier["repaired"], copier["kept"]) == (0.0, 1.0)


def test_every_decode_the_card_plans_is_one_its_method_runs(predictor):
    """``python -m dico.embedded.card`` decodes the issue prompts with every method in every mode it decodes in:
    each planned run starts (settings, lengths, mode and model checked, its first window open) without a refusal, and
    only a method that decodes in one mode (ReMDM: non-AR) misses the other."""
    from dico.loop import Decoding
    from dico.settings import METHODS, MODES, decodes_in

    runs = card.issue_runs()
    assert {(mode, method) for _, mode, method in runs} == {
        (mode, method) for mode in MODES for method in METHODS if decodes_in(method, mode)}
    assert ("semi-ar", "remdm") not in {(mode, method) for _, mode, method in runs}
    for item, mode, method in runs:
        run = Decoding(predictor, item.prompt, method, mode=mode, gen_length=card.GEN_LENGTH, block_length=32)
        assert run.window is not None and not run.done
