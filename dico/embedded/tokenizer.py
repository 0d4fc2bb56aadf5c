"""The embedded model's tokenizer: byte-level BPE with no unknown token, learned from shipped text only."""
from __future__ import annotations

import json
import random
import re

from dico.embedded.tasks import MAX_NUMBER

# No unknown token: byte-level BPE encodes any text, so a name never seen in training is copied piece by
# piece.
SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "<|eot|>"]


def tokenizer_corpus(seed: int = 1, items: int = 3000):
    """Text the BPE merges are learned from, all of it shipped with the project (so every machine builds the same
    tokenizer): task wording with its names, objects and digits removed, plus every word of the word lists once
    (held-out ones included; ``words.txt`` is 8,000 English words from Debian's wamerican).

    Names and objects are left out of the task text on purpose: counted thousands of times they would become
    single tokens while held-out ones stay in pieces; counted once each, training and held-out words split
    alike, and the pieces of a held-out word are pieces the model trains on."""
    from dico.embedded import tasks

    rng = random.Random(seed)
    for _ in range(items):
        # Word problems and lists only: the shipped tokenizer was learned from them, and pick and team items list
        # their objects and names with nothing to strip (counted thousands of times they would become one token);
        # the chain family came later, in the same words, and is tokenized by this tokenizer as it is.
        for family in ("word", "list"):
            item = tasks.make_item(family, rng)
            text = item.prompt + " " + item.answer
            for entity in item.entities:
                text = text.replace(entity, "")
            yield "".join(c for c in text if not c.isdigit())
    for name in ("names_male.txt", "names_female.txt", "objects.txt", "places.txt", "words.txt"):
        words = tasks._load(name)
        for i in range(0, len(words), 1000):
            yield " ".join(words[i:i + 1000])


def build_tokenizer(vocab_size: int = 1400, max_number: int = MAX_NUMBER):
    """Byte-level BPE (Hugging Face format, no unknown token) with every number 0..max_number one token.

    Numbers: the BPE never sees a digit while learning merges; then merges " 1"+"7" -> " 17", " 17"+"3" -> " 173"
    are put first, so " 0" .. " 200" are single tokens (sums are one fact each, as in the word-level model) and a
    bigger number falls back to pieces (" 25" "0" for 250)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(tokenizer_corpus(), trainer)
    spec = json.loads(core.to_str())
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    as_pair = (lambda a, b: [a, b]) if merges and isinstance(merges[0], list) else (lambda a, b: f"{a} {b}")
    number_merges = []
    for n in range(max_number + 1):
        text = "Ġ" + str(n)
        for cut in range(2, len(text) + 1):
            piece = text[:cut]
            if piece not in vocab:
                vocab[piece] = len(vocab)
                number_merges.append(as_pair(text[:cut - 1], text[cut - 1]))
    spec["model"]["merges"] = number_merges + merges
    core = Tokenizer.from_str(json.dumps(spec))
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
        eos_token="<|eot|>", clean_up_tokenization_spaces=False, model_max_length=384, add_prefix_space=True)


def token_tables(tokenizer):
    """Per-vocabulary boolean tables: whole numbers (" 17") and alphabetic pieces (" Nor", "a")."""
    import torch

    texts = [tokenizer.convert_tokens_to_string([t]).strip() for t in tokenizer.convert_ids_to_tokens(
        list(range(len(tokenizer))))]
    return torch.tensor([t.isdigit() for t in texts]), torch.tensor([t.isalpha() for t in texts])


def entity_spans(tokenizer, text: str, entities) -> list[list[list[int]]]:
    """For each entity, the token index lists of its mentions in ``text`` (tokenised without special tokens)."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    spans = []
    for entity in entities:
        mentions = []
        for m in re.finditer(r"(?<![A-Za-z])" + re.escape(entity) + r"(?![A-Za-z])", text):
            toks = [i for i, (a, b) in enumerate(offsets) if a < m.end() and b > m.start()]
            if toks:
                mentions.append(toks)
        spans.append(mentions)
    return spans
