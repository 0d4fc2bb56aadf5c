"""Pick and team: answers with several valid forms whose tokens depend on each other."""
import itertools
import random

import pytest

from dico.embedded import picks, scope, tasks


def _answer(item, names):
    return f"I pick {picks.joined(names)}." if item.family == "pick" else \
        f"The {'leader' if item.count == 1 else 'team'} is {picks.joined(names)}."


@pytest.mark.parametrize("family", ("pick", "team"))
def test_every_choice_of_distinct_offered_items_in_any_order_is_right(family):
    for item in tasks.make_split(family)[:40]:
        for names in itertools.permutations(item.offered, item.count):
            assert tasks.check(item, _answer(item, names)), (item.prompt, names)


@pytest.mark.parametrize("family", ("pick", "team"))
def test_repeats_items_not_offered_and_wrong_counts_are_wrong(family):
    for item in tasks.make_split(family)[:40]:
        first = item.offered[0]
        if item.count >= 2:
            assert not tasks.check(item, _answer(item, [first] * item.count))                # a repeat
        assert not tasks.check(item, _answer(item, list(item.offered[:item.count - 1]) + ["Zed Quux"]))
        if item.count < len(item.offered) and not (family == "team" and item.count == 1):
            assert not tasks.check(item, _answer(item, item.offered[:item.count + 1]))        # one too many


def test_a_mixture_of_two_people_is_nobody_on_the_list():
    """First names differ and surnames differ, so 'Ben' of one person and 'Howard' of another is wrong."""
    for item in tasks.make_split("team")[:100]:
        (a_first, _), (_, b_last) = item.offered[0].split(), item.offered[1].split()
        assert f"{a_first} {b_last}" not in item.offered
        mixed = [f"{a_first} {b_last}"] + list(item.offered[2:2 + item.count - 1])
        assert not tasks.check(item, _answer(item, mixed))


def test_broken_sentences_are_wrong():
    item = next(i for i in tasks.make_split("pick") if i.count == 2)
    a, b = item.offered[:2]
    for text in (f"I pick {a}, {b}.", f"I pick {a} and {b}", f"I pick {a} and and {b}.", f"pick {a} and {b}.",
                 f"I pick {a} and {b}. I pick {a} and {b}.", f"I {a} and {b}.", ""):
        assert not tasks.check(item, text), text
    assert tasks.check(item, f"  I pick {b} and {a}.  ")      # surrounding space is not an error
    team = next(i for i in tasks.make_split("team") if i.count == 1)
    assert not tasks.check(team, f"The team is {team.offered[0]}.")     # one person is a leader, not a team


@pytest.mark.parametrize("family", ("pick", "team"))
def test_a_prompt_tells_how_long_its_answer_is(family):
    """Every item a prompt offers has the same number of tokenizer pieces, so every valid answer to it has one
    length (Vanilla non-AR places the end-of-text from the prompt alone)."""
    for item in tasks.make_split(family):
        assert len({picks.pieces(option) for option in item.offered}) == 1, item.prompt


@pytest.mark.parametrize("family", ("pick", "team"))
def test_pick_and_team_prompts_are_trained_shapes(family):
    for item in tasks.make_split(family):
        assert scope.task_shape(item.prompt) == family and scope.outside(item.prompt) == [], item.prompt


def test_prompts_past_the_trained_picks_are_told_why():
    assert scope.outside("Pick four of these: cards, shells, coins, eggs and pens.") == \
        ["picks of two or three things were trained"]
    assert "at most five" in scope.outside("Pick two of these: a, b, c, d, e and f.")[0]


def test_training_offers_the_new_families_a_fifth_each():
    stream = tasks.train_stream(5)
    families = [next(stream).family for _ in range(3000)]
    for family in ("pick", "team"):
        assert 0.13 < families.count(family) / len(families) < 0.21


def test_items_are_drawn_from_the_training_word_lists_only():
    words = set(tasks.OBJECTS) | set(tasks.NAMES) | set(tasks.TEAM_SURNAMES)
    rng = random.Random(3)
    for family in ("pick", "team"):
        for _ in range(200):
            item = tasks.make_item(family, rng)
            assert all(part in words for option in item.offered for part in option.split())


@pytest.mark.parametrize("family", ("pick", "team"))
def test_training_can_mask_one_chosen_item_whole_with_the_others_visible(family):
    """What committing one slot at a time needs: the masked slot is an offered item not yet named."""
    from transformers import AutoTokenizer

    from dico.embedded import objective

    tokenizer = AutoTokenizer.from_pretrained(tasks.WORDLISTS.parent / "dico-tiny")
    items = tasks.make_split(family)[:8]
    ids, _, response, extra = objective.make_batch(items, tokenizer, random.Random(0), 64, occurrence_share=1.0)
    for row, item in enumerate(items):
        masked = tokenizer.decode(ids[row][extra[row]]).strip()
        assert masked in objective.chosen_items(item) and extra[row].sum() == picks.pieces(masked), item.answer


def test_a_model_not_trained_on_a_family_has_its_prompts_called_outside():
    """A model whose run did not mix pick and team in (no --mix: the step-51,075 model) learned word problems and
    lists: the app's banner calls a pick prompt outside its training instead of showing its guesses as answers.
    The shipped model's run mixed the first four in; the chain family is a later stage's, so the shipped
    model calls a chain prompt outside its training."""
    from dico.models import train_log

    prompt = tasks.make_split("pick")[0].prompt
    older = scope.trained_families({"args": {}})
    assert older == ("word", "list")
    assert scope.outside(prompt, older) == ["pick tasks are not in its training (it learned word, list)"]
    shipped = scope.trained_families(train_log(None))
    assert set(shipped) >= {"word", "list", "pick", "team"}
    if "chain" not in shipped:
        chain = tasks.make_split("chain")[0].prompt
        assert any("word problems were trained with 1 to 3" in reason for reason in scope.outside(chain, shipped))
    mixed = scope.trained_families({"args": {"mix": [["word", 2], ["list", 1], ["pick", 3], ["team", 3]]}})
    assert scope.outside(prompt, mixed) == [] and scope.outside(prompt) == []
