"""Task families whose answers have several valid forms with tokens that depend on each other (committing
several of them in one pass can break the answer).

- ``pick``: "Pick three of these: cards, shells, coins and eggs." -> "I pick shells, eggs and cards." Any choice
  of distinct items, in any order, is right. Each answer slot alone is equally likely to be any item, so two
  slots committed in one step from their separate marginals tend to take the same item ("I pick shells, shells
  and cards") or the pieces of two items ("she" + "ins").
- ``team``: full names chosen from a list: "Choose a leader from Ben Chase, Tim Howard and Dan Ross." ->
  "The leader is Tim Howard." A first name and a surname committed together from their marginals mix people
  ("Ben Howard"), the "New Diego" of the paper's motivation.

The answer's frame is one per family and every item of one prompt has the same number of tokenizer pieces, so a
prompt tells how long its answer is (Vanilla non-AR commits end-of-text from the right first; an answer whose
length depends on the choice would be cut). This is what makes committing one token at a time safe and several at
once unsafe, as on a real dLLM: the dependency is between the answer's tokens, not on the prompt. The checkers
accept every valid answer and reject repeats, items not offered, mixtures and broken sentences.
"""
from __future__ import annotations

import functools
import random
import re
from pathlib import Path

COUNT_WORDS = {1: "one", 2: "two", 3: "three"}
PICK_COUNTS = (2, 3)           # items to pick; the list offers 1 or 2 more, at most 5
TEAM_COUNTS = (1, 2)           # people to choose; the list offers 3 to 5
# Common English surnames of two pieces each (a team's full names then differ in length only by the first name).
SURNAMES = ("Jones", "Hall", "King", "Hill", "Bell", "Howard", "Ward", "Wood", "Ross", "Ford", "Wells", "West", "Cole",
            "Hunt", "Stone", "Lane", "Shaw", "Lake", "Hart", "Dean", "Lee", "Chase", "Page", "Ray", "Moss", "Nash",
            "Webb", "Park", "Vance", "Wade", "York", "Bond", "Day", "Fry", "Gill", "Hood", "Hull", "May", "Tate",
            "Carr")
# Items of two pieces only (56 objects, 84 first names): the step-54,940 candidate, trained on items of two and
# three pieces, was right with Vanilla on 7 of 40 picks; a smaller space of answers is learned sooner, and two
# pieces are enough for a mixture ("post" + "cles").
ITEM_PIECES = (2,)
TOKENIZER = Path(__file__).resolve().parents[2] / "assets" / "dico-tiny" / "tokenizer.json"


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(TOKENIZER))


def pieces(word: str) -> int:
    """How many pieces of the embedded model's tokenizer ``word`` is after a space (as it stands in an answer)."""
    return len(_tokenizer().encode(" " + word, add_special_tokens=False).ids)


@functools.cache
def by_pieces(words: tuple[str, ...]) -> dict[int, list[str]]:
    """``words`` grouped by their piece count (a prompt's items all share one, so its answer has one length)."""
    groups: dict[int, list[str]] = {}
    for word in words:
        groups.setdefault(pieces(word), []).append(word)
    return groups


def joined(words) -> str:
    """'a', 'a and b', 'a, b and c'."""
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _draw(rng: random.Random, groups: dict[int, list[str]], lengths, size: int) -> list[str]:
    return rng.sample(groups[rng.choice(lengths)], size)


def pick_item(rng: random.Random, objects) -> tuple[str, str, tuple, int]:
    """Prompt, one valid answer, the items offered and how many to pick."""
    k = rng.choice(PICK_COUNTS)
    offered = _draw(rng, by_pieces(tuple(objects)), ITEM_PIECES, k + rng.randint(1, 2))
    count, listed = COUNT_WORDS[k], joined(offered)
    prompt = rng.choice([f"Pick {count} of these: {listed}.", f"Here are some things: {listed}. Pick {count}.",
                         f"Choose {count} from {listed}.", f"From {listed}, take {count}.",
                         f"We have {listed}. Pick {count} of them."])
    return prompt, f"I pick {joined(rng.sample(offered, k))}.", tuple(offered), k


def team_item(rng: random.Random, names, surnames=SURNAMES) -> tuple[str, str, tuple, int]:
    """Prompt, one valid answer, the full names offered and how many to choose. First names differ and surnames
    differ, so a mixture of two people is never a third person on the list."""
    k = rng.choice(TEAM_COUNTS)
    size = rng.randint(3, 4) if k == 1 else rng.randint(3, 5)
    groups = by_pieces(tuple(names))
    firsts = _draw(rng, groups, ITEM_PIECES, size)
    surnames = rng.sample([n for n in surnames if n not in firsts], size)
    offered = [f"{a} {b}" for a, b in zip(firsts, surnames)]
    listed = joined(offered)
    if k == 1:
        prompt = rng.choice([f"Choose a leader from {listed}.", f"Who should lead: {listed}? Pick one.",
                             f"Pick one leader of {listed}.", f"{listed} want to lead. Choose one."])
        answer = f"The leader is {rng.choice(offered)}."
    else:
        prompt = rng.choice([f"Make a team of two from {listed}.", f"Pick two people of {listed} for a team.",
                             f"Choose a team of two: {listed}.", f"{listed} want to play. Pick a team of two."])
        answer = f"The team is {joined(rng.sample(offered, 2))}."
    return prompt, answer, tuple(offered), k


# The sentence each family's answer is: its chosen items, joined as ``joined`` writes them
ANSWER_FRAMES = {"pick": re.compile(r"I pick (.+)\."), "team": re.compile(r"The (?:leader|team) is (.+)\.")}


def chosen(family: str, text: str) -> list[str] | None:
    """The items an answer names, in order, or None when it is not one well-formed answer sentence of the family."""
    match = ANSWER_FRAMES[family].fullmatch(text.strip())
    if not match:
        return None
    body = match.group(1)
    items = re.split(r", | and ", body)
    return items if joined(items) == body else None


def check_choice(family: str, offered, count: int, text: str) -> bool:
    """Right when the answer names ``count`` distinct offered items in its family's sentence (any order); a team
    of one is announced as a leader, a team of two as a team."""
    items = chosen(family, text)
    if items is None or len(items) != count or len(set(items)) != count or not set(items) <= set(offered):
        return False
    return family != "team" or text.strip().startswith("The leader is" if count == 1 else "The team is")
