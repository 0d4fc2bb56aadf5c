"""The model card's measures score what they say: an oracle gets everything, a model that ignores the prompt gets little."""
import torch
from torch import nn

import dico
from dico import card, tasks
from dico.models import EMBEDDED


class Oracle(nn.Module):
    """Predicts every position's true token: the masked ones are read from the sequence it was built for."""

    def __init__(self, truth: list[int], vocab: int):
        super().__init__()
        self.truth, self.vocab = torch.tensor(truth), vocab

    def forward(self, input_ids, **_):
        logits = torch.full((*input_ids.shape, self.vocab), -20.0)
        logits.scatter_(-1, self.truth[: input_ids.shape[1]].expand_as(input_ids)[..., None], 20.0)
        return type("Out", (), {"logits": logits})


def predictor_for(model, tokenizer):
    return dico.models.from_module(model, tokenizer, kind="masked-lm", mask_id=tokenizer.mask_token_id,
                                   max_length=384)


def test_masked_alone_accuracy_is_one_for_an_oracle_and_low_for_a_constant_guess():
    item = next(i for i in tasks.make_split("word") if i.answer.split()[0] in tasks.NAMES)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED)
    probe = predictor_for(nn.Identity(), tokenizer)
    prompt, _, response = card._layout(probe, item, card.GEN_LENGTH)
    vocab = len(tokenizer)
    oracle = predictor_for(Oracle(prompt + response, vocab), tokenizer)
    assert card.masked_alone_accuracy(oracle, [item]) == 1.0
    assert card.masked_alone_accuracy(oracle, [item], card.ENTITY) == 1.0
    assert card.teacher_forced(oracle, [item]) == 1.0

    ivan = tokenizer.convert_tokens_to_ids("Ivan")                       # always guesses one name
    constant = predictor_for(Oracle([ivan] * len(prompt + response), vocab), tokenizer)
    assert card.masked_alone_accuracy(constant, [item], card.ENTITY) == 0.0
    assert card.masked_alone_accuracy(constant, [item]) == 0.0


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


def test_computed_results_and_first_mentions_cannot_be_read_back_from_later_in_the_answer():
    item = next(i for i in tasks.make_split("word") if i.answer.count(" = ") >= 2)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED)
    prompt, answer, response = card._layout(predictor_for(nn.Identity(), tokenizer), item, card.GEN_LENGTH)
    truth = prompt + answer + [tokenizer.eos_token_id] * (len(response) - len(answer))
    vocab = len(tokenizer)
    copier = predictor_for(ReadsLaterMentions(truth, len(prompt), vocab), tokenizer)
    # every result is re-mentioned later (next step, answer line), so masking it alone lets the copier score
    assert card.masked_alone_accuracy(copier, [item], after="=") == 1.0
    assert card.masked_alone_accuracy(copier, [item], after="=", with_later=True) == 0.0
    assert card.masked_alone_accuracy(copier, [item], card.ENTITY, with_later=True) == 0.0
    oracle = predictor_for(Oracle(truth, vocab), tokenizer)
    assert card.masked_alone_accuracy(oracle, [item], after="=", with_later=True) == 1.0
    assert card.masked_alone_accuracy(oracle, [item], card.ENTITY, with_later=True) == 1.0
