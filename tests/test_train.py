"""Training smoke test: a few steps of the real command on a tiny config, loaded back like a hub model."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tokenizer():
    from dico.embedded.tokenizer import build_tokenizer
    return build_tokenizer()


def _train(out, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "dico.embedded.train", "--out", str(out), "--batch-size", "4",
                           "--hidden", "32", "--layers", "1", "--heads", "2", "--max-gen", "64", "--threads", "1",
                           "--log-every", "1",
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.train
def test_training_command_writes_a_model_that_loads_back_and_resumes_where_it_stopped(tmp_path):
    out = tmp_path / "tiny"
    result = _train(out, "--max-steps", "3")
    assert result.returncode == 0, result.stderr[-2000:]
    for name in ("config.json", "model.safetensors", "tokenizer.json", "train_log.json", "trainer_state.pt"):
        assert (out / name).exists(), name
    log = json.loads((out / "train_log.json").read_text())
    assert log["step"] == 3 and log["command"].startswith("python -m dico.embedded.train")

    import dico
    predictor = dico.load_model(out)
    assert predictor.kind == "masked-lm" and predictor.mask_id == predictor.tokenizer.mask_token_id
    assert predictor.unknown_words("Nora finds 5 shells at the beach, señor 😀") == []
    trace = dico.generate(predictor, "Tom has 5 apples. How many apples does Tom have now?", "dico", gen_length=16)
    assert trace.nfe >= 1 and all(s.committed != [] for s in trace.steps)

    before = torch.load(out / "trainer_state.pt", weights_only=False)
    result = _train(out, "--resume", "--max-steps", "5")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "starting at step 3" in result.stdout and "step 4 " in result.stdout and "step 1 " not in result.stdout
    log = json.loads((out / "train_log.json").read_text())
    assert log["step"] == 5 and [c["from_step"] for c in log["commands"]] == [0, 3]
    after = torch.load(out / "trainer_state.pt", weights_only=False)
    assert after["elapsed_s"] > before["elapsed_s"] and after["optimizer"]["state"]      # optimizer state carried

    shipped = tmp_path / "shipped"
    result = _train(shipped, "--export-from", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((shipped / "config.json").read_text())["dtype"] == "float16"
    assert json.loads((shipped / "train_log.json").read_text())["step"] == 5
    assert (shipped / "model.safetensors").stat().st_size < 0.6 * (out / "model.safetensors").stat().st_size
    ids = dico.load_model(out).tokenizer("Tom has 5 apples.", return_tensors="pt")["input_ids"]
    full, half = (dico.load_model(folder).model(input_ids=ids).logits for folder in (out, shipped))
    assert half.dtype == torch.float32 and torch.allclose(full, half, atol=0.05)     # upcast on load; fp16 rounding

    # The shipped copy has no optimizer state: continuing it carries its count and commands on, and warms up again.
    further = tmp_path / "further"
    result = _train(further, "--continue-from", str(shipped), "--max-steps", "7", "--warmup", "4")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "starting at step 5" in result.stdout
    assert re.search(r"^step 6 .* lr 2\.50e-04 ", result.stdout, re.M)        # first step of 4 at lr 1e-3: 1/4
    log = json.loads((further / "train_log.json").read_text())
    assert log["step"] == 7 and [c["from_step"] for c in log["commands"]] == [0, 3, 5]
    state = torch.load(further / "trainer_state.pt", weights_only=False)
    shipped_s = 60 * json.loads((shipped / "train_log.json").read_text())["minutes"]
    assert state["warm_from"] == 5 and state["elapsed_s"] > shipped_s                 # the minutes carry on too


def test_tokenizer_has_no_unknown_token_and_round_trips_any_text(tokenizer):
    assert tokenizer.unk_token_id is None and tokenizer.mask_token == "[MASK]" and tokenizer.eos_token == "<|eot|>"
    texts = ["Nora has 14 shells. She finds 5 more shells at the beach.", "Zoë naïve café, 日本語, emoji 😀!",
             "Xylophonist Quetzalcoatl's \t tabs\nnewlines", "12, 5, 8, 1 and 250 or 1234567."]
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids).strip() == text
        assert max(ids) < len(tokenizer)


def test_numbers_up_to_200_are_one_token_each_and_bigger_ones_still_encode(tokenizer):
    for n in range(201):
        assert len(tokenizer(f"{n}", add_special_tokens=False)["input_ids"]) == 1, n
        assert len(tokenizer(f"has {n} apples", add_special_tokens=False)["input_ids"][1:-2]) == 1, n
    assert len(tokenizer("250", add_special_tokens=False)["input_ids"]) == 2


def test_every_machine_builds_the_shipped_tokenizer(tokenizer):
    """A new task family must not change the tokenizer the shipped model was trained with (it is learned from the
    number families' text only)."""
    shipped = json.loads((ROOT / "assets" / "dico-tiny" / "tokenizer.json").read_text())["model"]
    built = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    assert (built["vocab"], built["merges"]) == (shipped["vocab"], shipped["merges"])


def test_tokenizer_saves_and_loads_offline_like_a_hub_tokenizer(tokenizer, tmp_path):
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "Tom has 5 apples. He buys 3 more."
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded(text)["input_ids"][0] == loaded.cls_token_id and loaded(text)["input_ids"][-1] == loaded.sep_token_id


def test_held_out_names_split_into_pieces_that_training_words_use_too(tokenizer):
    from dico.embedded import tasks

    def pieces(words):
        return {t for w in words for t in tokenizer(w, add_special_tokens=False)["input_ids"]}

    def mean_length(words):
        return sum(len(tokenizer(w, add_special_tokens=False)["input_ids"]) for w in words) / len(words)

    seen = pieces(tasks.NAMES + tasks.OBJECTS)
    held = pieces(tasks.HELD_OUT_NAMES + tasks.HELD_OUT_OBJECTS)
    trained = seen | pieces(tasks.WORDS)                    # the invented names and objects of training
    assert len(held - trained) / len(held) < 0.02           # almost every piece of an unseen word is trained
    assert abs(mean_length(tasks.HELD_OUT_NAMES) - mean_length(tasks.NAMES)) < 0.5


def test_diffusion_loss_is_zero_where_nothing_is_masked_and_weights_by_one_over_t():
    from dico.embedded.objective import diffusion_loss

    class Perfect(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            logits = torch.full((*input_ids.shape, 10), -30.0)
            logits.scatter_(-1, torch.tensor([[3, 4, 5, 6]]).expand_as(input_ids)[..., None], 30.0)
            return type("Out", (), {"logits": logits})

    ids = torch.tensor([[3, 4, 5, 6]])
    response = torch.tensor([[False, False, True, True]])
    loss = diffusion_loss(Perfect(), ids, torch.ones_like(ids), response, mask_id=9)
    assert loss.item() < 1e-6     # a model that always knows the answer has no loss, whatever is masked


def test_occurrence_positions_hide_one_number_or_mention_and_all_its_later_mentions():
    import random

    from dico.embedded.objective import occurrence_positions

    # answer: 7 3 7 8 7 ; numbers are 7 and 3 (id 8 is a word); one entity with mentions at [1, 2] and [4]
    answer = [7, 3, 7, 8, 7]
    number = torch.zeros(10, dtype=torch.bool)
    number[[3, 7]] = True
    rng = random.Random(0)
    got = {tuple(occurrence_positions(answer, [], number, rng)) for _ in range(200)}
    assert got == {(0, 2, 4), (2, 4), (4,), (1,)}                  # each number start, with its later mentions
    spans = [[[1, 2], [4]]]
    got = {tuple(occurrence_positions(answer, spans, number, rng)) for _ in range(400)}
    assert {(1, 2, 4), (4,)} <= got                                # a mention with every later mention
    assert occurrence_positions([8, 8], [], number, rng) == []


def test_make_batch_masks_extra_positions_only_inside_the_answer(tokenizer):
    import random

    from dico.embedded import tasks
    from dico.embedded.objective import make_batch
    from dico.embedded.tokenizer import token_tables

    items = tasks.make_split("word", size=8)
    number, _ = token_tables(tokenizer)
    ids, attention, response, extra = make_batch(items, tokenizer, random.Random(0), 128, 0.0, 1.0, number)
    assert extra.any(dim=1).all()
    assert not (extra & ~response).any() and not (extra & (ids == tokenizer.eos_token_id)).any()


def test_tail_rows_hide_the_whole_answer_and_a_few_end_of_text_tokens_the_rest_of_the_tail_shown(tokenizer):
    """The state Vanilla non-AR decodes from: only the end-of-text tail past some point is known."""
    import random

    from dico.embedded import tasks
    from dico.embedded.objective import make_batch
    from dico.embedded.tokenizer import token_tables

    items = tasks.make_split("word", size=16)
    number, _ = token_tables(tokenizer)
    ids, attention, response, extra = make_batch(items, tokenizer, random.Random(0), 128, 1.0, 0.0, number,
                                                 tail_share=1.0)
    eos = ids == tokenizer.eos_token_id
    reach = []
    for row in range(len(items)):
        answer = response[row] & ~eos[row]
        assert (extra[row] >= answer).all() and not (extra[row] & ~response[row]).any()
        hidden = extra[row].nonzero().flatten()
        assert hidden.tolist() == list(range(hidden[0].item(), hidden[-1].item() + 1))     # one span from the start
        reach.append(int((extra[row] & eos[row]).sum()))
        assert (response[row] & ~extra[row]).any()                                       # some tail stays shown
    assert min(reach) >= 0 and max(reach) <= 12 and len(set(reach)) > 3


@pytest.mark.parametrize("wording", ["free", "equal", "shifted", "usual", "plain"])
def test_only_the_free_wording_lets_an_answer_be_longer_than_its_prompt_says(tokenizer, wording):
    """Equal, shifted, usual and plain wordings: same name, object and number of steps, same length in tokens
    (Vanilla non-AR can tell where the answer ends); the free wording (the held-out split's) varies it."""
    from collections import defaultdict

    from dico.embedded import tasks

    stream = tasks.train_stream(seed=3, wording=wording)
    lengths, wordings = defaultdict(set), defaultdict(set)
    for item in (next(stream) for _ in range(2000)):
        if item.family in ("word", "list"):
            steps = item.answer.count(" = ") if item.family == "word" else item.target.count(",") + 1
            shape = (item.family, item.entities, steps)
            lengths[shape].add(len(tokenizer(item.answer, add_special_tokens=False)["input_ids"]))
            wordings[item.family].add(re.sub(r"\d+", "N", item.answer.split(".")[-2 if item.family == "word" else 0]))
    assert all(len(found) == 1 for found in lengths.values()) == (wording != "free")
    assert len(wordings["word"]) >= 3                                # free words in every wording


def test_the_shifted_wording_moves_the_equations_inside_an_answer_of_fixed_length(tokenizer):
    """Where an answer ends follows from the prompt, where its first equation sits does not (0 to 5 tokens of
    opening, 1 to 3 of lead): a model trained on it stays unsure of positions, not of the length."""
    from collections import defaultdict

    from dico.embedded import tasks

    equals = tokenizer.convert_tokens_to_ids("\u0120=")
    stream = tasks.train_stream(seed=5, wording="shifted")
    lengths, offsets = defaultdict(set), defaultdict(set)
    for item in (next(stream) for _ in range(3000)):
        if item.family == "word":
            ids = tokenizer(item.answer, add_special_tokens=False)["input_ids"]
            name, obj = (len(tokenizer(" " + word, add_special_tokens=False)["input_ids"]) for word in item.entities)
            shape = (name, obj, item.answer.count(" = "))       # what the length may follow from
            lengths[shape].add(len(ids))
            offsets[shape].add(ids.index(equals))
    assert all(len(found) == 1 for found in lengths.values())
    assert max(len(found) for found in offsets.values()) >= 6


def test_the_usual_wording_moves_a_step_less_often_than_the_shifted_one():
    """Same steps as "shifted", but the first lead of each ("Now she has", "This gives") seven times in ten and
    each other one rarely: one likely place per token of a step, and the others still seen."""
    from collections import Counter

    from dico.embedded import tasks, wordings

    def leads(wording):
        stream, found = tasks.train_stream(seed=5, wording=wording), Counter()
        for item in (next(stream) for _ in range(3000)):
            if item.family == "word":
                equations = (sentence.split(" = ")[0] for sentence in item.answer.split(". ")[1:] if " = " in sentence)
                found.update(re.sub(r"\d+", "N", left.rsplit(" ", 3)[0]) for left in equations)   # drop "a + b"
        return found

    usual, shifted = leads("usual"), leads("shifted")
    for first in ("Now he has", "Now she has"):
        assert usual[first] > 2 * shifted[first]
    share = sum(usual[lead] for lead in ("Now he has", "Now she has", "This gives")) / sum(usual.values())
    assert abs(share - wordings.USUAL_SHARE) < 0.05
    assert set(usual) == set(shifted)


def test_the_plain_wording_is_the_usual_one_with_lists_that_mostly_say_equals():
    """A list step reads "=" nine times in ten ("usual": two in three, else "is" or "gives"): a token about 0.9
    sure, which DiCo's factor rule commits several of at once and Fast-dLLM's 0.95 threshold does not."""
    from collections import Counter
    from itertools import islice

    from dico.embedded import tasks

    def links(items):
        return Counter(re.search(r"\d+ [-+*] \d+ (=|is|gives) \d+", step).group(1) for item in items
                       if item.family == "list" for step in item.answer.split(". ") if re.search(r"[-+*] \d+ ", step))

    usual, plain = (list(islice(tasks.train_stream(seed=5, wording=w), 3000)) for w in ("usual", "plain"))
    assert [(a.prompt, a.target) for a in usual] == [(b.prompt, b.target) for b in plain]
    assert [a.answer for a in usual if a.family != "list"] == [b.answer for b in plain if b.family != "list"]
    for found, share in ((links(usual), 2 / 3), (links(plain), 0.9)):
        assert abs(found["="] / sum(found.values()) - share) < 0.03 and found["is"] and found["gives"]


def test_extra_masked_positions_count_once_not_one_over_t():
    from dico.embedded.objective import diffusion_loss

    class Uniform(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return type("Out", (), {"logits": torch.zeros(*input_ids.shape, 10)})

    ids = torch.tensor([[3, 4, 5, 6]] * 64)
    response = torch.tensor([[False, False, True, True]] * 64)
    extra = torch.tensor([[False, False, True, True]] * 64)      # everything masked by the extra rule
    loss = diffusion_loss(Uniform(), ids, torch.ones_like(ids), response, 9, torch.Generator().manual_seed(0),
                          extra=extra)
    per_token = torch.log(torch.tensor(10.0))                     # cross-entropy of a uniform guess over 10
    # a token masked at random (prob t) weighs 1/t, else 1 as an extra: expected weight E[2 - t] = 1.5;
    # weighing the extras 1/t too would give E[1/t] = ln(1000) = 6.9
    assert per_token <= loss <= 3 * per_token


def test_editing_rows_replace_only_written_response_tokens_and_score_every_written_position_of_those_rows():
    """LLaDA 2.1's token-to-token objective: masks, the prompt and rows not drawn stay as they are."""
    import torch

    from dico.embedded.objective import Editing

    noisy = torch.tensor([[1, 2, 3, 9, 9, 5, 6, 7]] * 64)
    written = torch.tensor([[False, False, False, False, False, True, True, True]] * 64)    # 9 = mask, 1-3 prompt
    edited, scored = Editing(0.5, 1.0, [100, 101]).corrupt(noisy, written, torch.Generator().manual_seed(0))
    changed = edited != noisy
    assert not (changed & ~written).any()
    assert (scored == written & scored.any(1, keepdim=True)).all()      # a drawn row scores all its written places
    assert 10 < int(scored.any(1).sum()) < 54 and changed.any()
    assert not (changed & ~scored).any() and set(edited[changed].tolist()) <= {100, 101}


def test_prefix_rows_mask_everything_after_a_point_of_the_response_and_leave_the_rest_of_the_data_as_it_was():
    """The state semi-AR decoding reaches (a written prefix, the rest masked to the end); without --prefix-share
    a batch is drawn exactly as before (no extra draws)."""
    import random

    from dico.embedded import tasks
    from dico.embedded.objective import make_batch
    from dico.embedded.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    items = tasks.make_split("chain", size=8)
    plain = make_batch(items, tokenizer, random.Random(1), 256)
    same = make_batch(items, tokenizer, random.Random(1), 256, prefix_share=0.0)
    assert all((a == b).all() for a, b in zip(plain, same))
    ids, _, response, extra = make_batch(items, tokenizer, random.Random(1), 256, prefix_share=1.0)
    for row in range(len(items)):
        masked = extra[row].nonzero().flatten().tolist()
        assert masked and masked == list(range(masked[0], int(response[row].nonzero().max()) + 1))
