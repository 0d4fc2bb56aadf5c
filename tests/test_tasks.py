"""The task families: seeded, held out, and checked exactly."""
import random
import re

import pytest

from dico.embedded import scope, tasks, wordings
from dico.embedded.card import ISSUE_PROMPTS


@pytest.mark.parametrize("family", tasks.FAMILIES)
def test_held_out_split_is_fixed_distinct_and_large_enough(family):
    split = tasks.make_split(family)
    assert len(split) == tasks.TEST_SIZE >= 500
    assert len({item.prompt for item in split}) == len(split)
    assert [i.prompt for i in tasks.make_split(family, size=20)] == [i.prompt for i in split[:20]]


def test_training_stream_never_yields_a_held_out_prompt():
    held_out = {item.prompt for family in tasks.FAMILIES for item in tasks.make_split(family)}
    stream = tasks.train_stream(seed=3)
    assert not any(next(stream).prompt in held_out for _ in range(3000))


@pytest.mark.parametrize("family", tasks.FAMILIES)
def test_every_worked_answer_passes_its_own_checker(family):
    rng = random.Random(7)
    for _ in range(500):
        item = tasks.make_item(family, rng)
        assert tasks.check(item, item.answer), item


@pytest.mark.parametrize("wording", wordings.WORDINGS)
def test_every_wording_asks_the_same_prompts_and_passes_the_checker(wording):
    """The held-out split, the card and the lm-eval data do not depend on the wording a model was trained on."""
    for seed in range(200):
        for make in (tasks._word_item, tasks._list_item):
            item = make(random.Random(seed), wording=wording)
            assert item.prompt == make(random.Random(seed)).prompt
            assert tasks.check(item, item.answer), item


def test_an_unknown_wording_is_refused_not_read_as_free():
    with pytest.raises(ValueError, match="wording"):
        tasks.make_split("word", size=3, wording="shfited")


@pytest.mark.parametrize("family", ("word", "list"))
def test_wording_varies(family):
    rng = random.Random(11)
    openings = {tasks.make_item(family, rng).answer.split(" ")[0] for _ in range(300)}
    closings = {tasks.make_item(family, rng).answer.rsplit(" ", 3)[0][-12:] for _ in range(300)}
    assert len(openings) >= 4 and len(closings) >= 3


def test_word_problem_checker_rejects_near_misses():
    item = tasks.Item("word", "Tom has 5 apples. He buys 9 more. How many apples does Tom have now?",
                      "Tom starts with 5 apples. 5 + 9 = 14 apples. The answer is 14.", "14")
    assert tasks.check(item, "5 + 9 = 14. So the answer is 14.")
    assert tasks.check(item, "Final answer: 14.")
    assert tasks.check(item, "Final answer : 14.")                    # a tokenizer's spacing of ":"
    assert not tasks.check(item, "The answer is 140.")
    assert not tasks.check(item, "The answer is 4.")
    assert not tasks.check(item, "The answer is 13.")
    assert not tasks.check(item, "5 + 9 = 14.")                       # no answer line
    assert not tasks.check(item, "The answer is 14. Final answer: 15.")  # the last answer line counts
    assert not tasks.check(item, "")


def test_list_checker_needs_every_item_in_order():
    item = tasks.Item("list", "Take the numbers 4, 9, 2. Add 3 to each number.",
                      "4 + 3 = 7. 9 + 3 = 12. 2 + 3 = 5. The answer is 7, 12, 5.", "7, 12, 5")
    assert tasks.check(item, "So the new list is 7, 12, 5.")
    assert not tasks.check(item, "The answer is 7, 5, 12.")          # order matters
    assert not tasks.check(item, "The answer is 7, 12.")             # an item missing
    assert not tasks.check(item, "The answer is 7, 12, 5, 5.")       # an item too many
    assert not tasks.check(item, "The answer is 7, 12, 6.")


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="family"):
        tasks.make_item("poetry", random.Random(0))


def test_training_stream_favours_word_problems_and_drills_lists_past_twenty():
    stream = tasks.train_stream(seed=5, copy_drills=False)
    items = [next(stream) for _ in range(1500)]
    words = sum(item.family == "word" for item in items)
    assert 0.34 < words / len(items) < 0.46       # two in five: word, word, list, pick, team
    lists = [item for item in items if item.family == "list"]
    biggest = [max(map(int, re.findall(r"\d+", item.prompt.split(".")[0]))) for item in lists]   # the list sentence
    assert 0.35 < sum(b > 20 for b in biggest) / len(lists) < 0.55
    assert max(biggest) <= tasks.DRILL_TOP


def test_word_lists_are_large_and_a_fixed_part_is_held_out():
    assert len(tasks.NAMES) >= 300 and len(tasks.OBJECTS) >= 150 and len(tasks.PLACES) >= 100
    assert len(tasks.HELD_OUT_NAMES) >= 50 and len(tasks.HELD_OUT_OBJECTS) >= 30 and tasks.HELD_OUT_PLACES
    assert not set(tasks.NAMES) & set(tasks.HELD_OUT_NAMES)
    assert not set(tasks.OBJECTS) & set(tasks.HELD_OUT_OBJECTS)
    assert {"Tom", "Nora", "apples", "shells", "at the beach"} <= set(tasks.NAMES + tasks.OBJECTS + tasks.PLACES)


def test_training_never_uses_a_held_out_name_object_or_place():
    held = set(tasks.HELD_OUT_NAMES) | set(tasks.HELD_OUT_OBJECTS) | set(tasks.HELD_OUT_PLACES)
    pattern = re.compile(r"(?<![A-Za-z])(?:" + "|".join(map(re.escape, sorted(held, key=len, reverse=True)))
                         + r")(?![A-Za-z])")
    stream = tasks.train_stream(seed=4)
    for _ in range(3000):
        item = next(stream)
        assert not item.held_out
        assert not pattern.search(item.prompt + " " + item.answer), item


def test_half_the_held_out_word_problems_use_held_out_words_and_name_them():
    split = tasks.make_split("word")
    held = [item for item in split if item.held_out]
    assert len(held) == len(split) // 2
    for item in split:
        name, obj = item.entities
        assert (name in tasks.HELD_OUT_NAMES) == item.held_out and (obj in tasks.HELD_OUT_OBJECTS) == item.held_out
        assert name in item.prompt and obj in item.prompt


def test_the_data_gaps_of_issue_16_are_filled():
    rng = random.Random(16)
    words = [tasks.make_item("word", rng) for _ in range(3000)]
    lists = [tasks.make_item("list", rng) for _ in range(3000)]
    assert any(re.search(r"\b(\d+) - \1 = 0\b", i.answer) for i in lists)       # "1 - 1 = 0"
    assert any(re.search(r"\b(\d+) - \1 = 0\b", i.answer) for i in words)
    starts = [int(re.search(r"\d+", i.prompt).group()) for i in words]
    assert 0.25 < sum(s > 20 for s in starts) / len(starts) < 0.45                # word problems start above 20
    assert any(re.search(r"\b(He|She) buys \d+ more\.", i.prompt) for i in words)  # "He buys 3 more."
    assert all(int(n) <= 200 for i in words + lists for n in re.findall(r"\d+", i.answer))


def test_copy_drills_repeat_their_words_in_order_and_are_a_sixth_of_training():
    stream = tasks.train_stream(seed=6)
    items = [next(stream) for _ in range(1200)]
    drills = [item for item in items if item.family == "copy"]
    assert 0.12 < len(drills) / len(items) < 0.22
    for item in drills:
        assert item.target in item.prompt and item.answer.endswith(item.target + ".")
        assert 2 <= len(item.entities) <= 5


def test_every_trained_and_held_out_prompt_lies_inside_the_trained_tasks():
    stream = tasks.train_stream(seed=5)
    training = [next(stream) for _ in range(600)]
    for item in training + [i for family in tasks.FAMILIES for i in tasks.make_split(family)]:
        assert scope.outside(item.prompt) == [], item.prompt
        assert scope.task_shape(item.prompt) == item.family, item.prompt
    for item in ISSUE_PROMPTS:
        assert scope.outside(item.prompt) == [], item.prompt


@pytest.mark.parametrize("prompt, reason", [
    ("What is the capital of France?", "no word problem"),
    ("Tom has 500 apples. He buys 3 more. How many apples does Tom have now?", "numbers above 200"),
    ("Tom has 90 apples. He buys 3 more. How many apples does Tom have now?", "start from 2 to 60"),
    ("Tom has 9 apples. He shares them with 3 friends. How many apples does each friend get?", "only adding"),
    ("Tom has 5 apples. He buys 1. He buys 2. He buys 3. He buys 4. He buys 5. He buys 6. He buys 7. He buys 8. He "
     "buys 9. How many apples does Tom have?", "9 changes"),
    ("Here is a list: 4, 9. Add 2 to each number.", "a list of 2"),
    ("Here is a list: 4, 9, 170. Add 2 to each number.", "trained up to 100"),
    ("Here is a list: 4, 9, 7. Add 25 to each number.", "1 to 20"),
    ("Here is a list: 4, 9, 7. Subtract 5 from each number.", "below 0"),
    ("Here is a list: 4, 9, 7. Multiply every number by 3.", "only adding"),
])
def test_prompts_outside_the_trained_tasks_are_told_why(prompt, reason):
    assert any(reason in why for why in scope.outside(prompt)), scope.outside(prompt)


def test_a_copy_drill_is_a_trained_shape():
    assert scope.task_shape("Repeat the words Brenda, dweebs, postcards.") == "copy"
    assert scope.outside("Repeat the words Brenda, dweebs, postcards.") == []
    assert scope.outside("Copy this list: half, phones, beetles.") == []    # a word to copy, not an operation


def test_training_also_gives_things_away_with_then_which_the_add_wording_starts_with():
    """A new user's "Then she gives 3 shells to her brother" must be a subtraction the model has seen."""
    stream = tasks.train_stream(seed=7)
    words = [item for item in (next(stream) for _ in range(3000)) if item.family == "word"]
    away = [item for item in words if re.search(r"Then (he|she) gives \d+ \w+ to ", item.prompt)]
    assert away
    for item in away:
        given = int(re.search(r"Then (?:he|she) gives (\d+)", item.prompt).group(1))
        assert f"- {given} =" in item.answer


# ----------------------------------------------------------------------------- the chain family

@pytest.fixture(scope="module")
def shipped_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tasks.WORDLISTS.parents[0] / "dico-tiny")


def _tokens(tokenizer, text, special=False):
    return len(tokenizer(text, add_special_tokens=special)["input_ids"])


def test_chain_answers_are_as_long_as_gsm8k_answers_under_gen_256_and_prompts_fit_the_rest(shipped_tokenizer):
    """Median at least 120 answer tokens, every answer leaving end-of-text room in gen 256, every prompt (with its
    [CLS] and [SEP]) within the 128 positions the model has left beside a response of 256."""
    stream = tasks.train_stream(seed=5, families=("chain",), mix=(("chain", 1),))
    trained = [item for item in (next(stream) for _ in range(1500)) if item.family == "chain"]
    for items in (tasks.make_split("chain"), trained):
        answers = sorted(_tokens(shipped_tokenizer, item.answer) for item in items)
        assert answers[len(answers) // 2] >= 120
        assert answers[-1] <= 250
        assert max(_tokens(shipped_tokenizer, item.prompt, special=True) for item in items) <= 128


def test_a_chain_answer_takes_one_numbered_step_per_change_and_keeps_every_count_one_token():
    for item in tasks.make_split("chain"):
        steps = re.findall(r"Step (\d+): [^,]+, so (\d+) ([-+*/]) (\d+) = (\d+)\.", item.answer)
        assert tasks.CHAIN_CHANGES[0] <= len(steps) <= tasks.CHAIN_CHANGES[1]
        assert [int(s[0]) for s in steps] == list(range(1, len(steps) + 1))
        for _, a, op, b, c in steps:
            a, b, c = int(a), int(b), int(c)
            assert c == {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op] and (op != "/" or a % 2 == 0)
        assert steps[-1][-1] == item.target and tasks.check(item, item.answer)
        assert max(int(n) for n in re.findall(r"\d+", item.prompt + item.answer)) <= tasks.MAX_NUMBER


def test_a_chain_answers_length_follows_from_its_prompt(shipped_tokenizer):
    """Every form a part of the worked answer may take has one token count: Vanilla non-AR decides an answer's
    length before its words, and a coin-flip of wording would make that length a guess."""
    words = {"he": "she", "He": "She", "obj": "snow globes", "Name": "Robyn", "v": 127, "b": 7}
    for forms in (tasks._CHAIN_START, tasks._CHAIN_NOW, tasks._CHAIN_CLOSE, *tasks._CHAIN_WHY.values()):
        assert len({_tokens(shipped_tokenizer, form.format(**words)) for form in forms}) == 1, forms


def test_half_the_held_out_chain_problems_use_held_out_words():
    split = tasks.make_split("chain")
    assert sum(item.held_out for item in split) == len(split) // 2
    for item in split:
        name, obj = item.entities
        assert (name in tasks.HELD_OUT_NAMES) == item.held_out and (obj in tasks.HELD_OUT_OBJECTS) == item.held_out
