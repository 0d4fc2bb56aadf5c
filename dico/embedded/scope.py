"""What the embedded model was trained on: the task shape of a prompt, and why a prompt lies outside it."""
from __future__ import annotations

import re

from dico.embedded.tasks import (
    CHAIN_CHANGES,
    DRILL_STEP,
    DRILL_TOP,
    FAMILIES,
    LIST_ITEMS,
    MAX_NUMBER,
    WORD_START,
)

_BEFORE_MIX = ("word", "list")     # what a run without --mix learned

_HOW_MANY = re.compile(r"\bhow many\b", re.IGNORECASE)
_LIST_OP = re.compile(r"\b(add|increase|subtract|take|smaller|double|twice|multiply)\b", re.IGNORECASE)
_COPY = re.compile(r"^(here are some words|repeat the words|copy this list|say these names again|write down)\b",
                   re.IGNORECASE)
_UNTRAINED_OP = re.compile(r"\b(divide[sd]?|half|halves|triples?|tripled|times|percent|shares?|splits?|per|"
                           r"multipl\w*[^.]*?\bby (?!2\b)\d+)\b", re.IGNORECASE)
WORD_CHANGES = (1, 3)       # a word problem's changes (tasks._word_item); from 4 on, a problem is a long one (chain)
# A word problem's clauses (split at marks, "and" and "then"), for counting its changes and finding its halvings.
_CLAUSE = re.compile(r"[.!?;,]|\band\b|\bthen\b", re.IGNORECASE)
_DOUBLING = re.compile(r"\b(doubles?|doubled|doubling|twice)\b", re.IGNORECASE)
# Halving as the chain family asks it ("gives half of his plates to", "loses half of them", "shares them equally with
# a friend") and as a visitor may ("halves her coins"). A clause with a number is not one: "shares them equally with
# 3 friends" divides by 4, never trained.
_HALF = re.compile(r"\b(half|halves|halved|halve|halving)\b", re.IGNORECASE)
_EQUALLY = re.compile(r"\b(shares?|shared|sharing|splits?|splitting|divides?|divided|dividing)\b.*\b(equally|evenly)\b",
                      re.IGNORECASE)
_SUBTRACT = re.compile(r"\b(subtract|take \d+ away|smaller by)\b", re.IGNORECASE)
_NUMBER_LIST = re.compile(r"\d+(?:\s*,\s*\d+)+")
_TEAM = re.compile(r"\b(leader|lead|team)\b", re.IGNORECASE)
_PICK = re.compile(r"\b(pick|choose|take)\b[^.?]*?\b(one|two|three|four|five|six)\b|\b(one|two|three|four)\b[^.?]*?\b"
                   r"(of them|of these)\b", re.IGNORECASE)


def _is_halving(clause: str) -> bool:
    return not re.search(r"\d", clause) and not re.search(r"\bamong\b", clause, re.IGNORECASE) and \
        bool(_HALF.search(clause) or _EQUALLY.search(clause))


def changes(prompt: str) -> int:
    """How many times a word problem's count changes: its numbers after the start, and its doublings and halvings,
    which have none ("He doubles his coins", "She shares them equally with a friend")."""
    numbered = max(len(re.findall(r"\d+", prompt)) - 1, 0)
    return numbered + sum(1 for clause in _CLAUSE.split(prompt) if not re.search(r"\d", clause) and
                          (_DOUBLING.search(clause) or _is_halving(clause)))


def task_shape(prompt: str) -> str | None:
    """The trained task this prompt looks like: "word" (a "How many ...?" question with numbers, 1 to 3 changes),
    "chain" (one with 4 changes or more: the long word problems), "list" (numbers and an operation on them), "team"
    (choose a leader or a team of two from full names), "pick" (pick a number of the things listed), "copy" (a copy
    drill), or None."""
    numbers = re.findall(r"\d+", prompt)
    if not numbers and _TEAM.search(prompt):
        return "team"
    if not numbers and _PICK.search(prompt):
        return "pick"
    if _HOW_MANY.search(prompt) and numbers:
        return "chain" if changes(prompt) > WORD_CHANGES[1] else "word"
    if len(numbers) >= 2 and _LIST_OP.search(prompt):
        return "list"
    return "copy" if _COPY.search(prompt.strip()) else None


def trained_families(log: dict) -> tuple[str, ...]:
    """The task families a model folder's train_log.json says it was trained on: its run's ``--mix``, else word
    problems and lists (a model trained before pick, team and chain existed: not NUMBER_FAMILIES, which has chain)."""
    mix = (log.get("args") or {}).get("mix")
    return tuple(family for family, _ in mix) if mix else _BEFORE_MIX


def outside(prompt: str, trained=FAMILIES) -> list[str]:
    """Why a prompt lies outside what the embedded model was trained on, in words a visitor can act on ([] when it
    has a trained shape within the trained ranges). The tokenizer has no unknown token, so the words cannot tell
    (any name is copied piece by piece): the task's shape and its numbers can. Passing does not promise an
    answer; failing says not to read a wrong one as the decoder's fault. ``trained``: the families the model
    learned (see trained_families); a prompt of another family is outside."""
    shape = task_shape(prompt)
    if shape == "chain" and "chain" not in trained and "word" in trained:
        shape = "word"          # a model without long word problems: a long one is a word problem of too many changes
    if shape in FAMILIES and shape not in trained:
        return [f"{shape} tasks are not in its training (it learned {', '.join(trained)})"]
    if shape is None:
        return ["no word problem (a 'How many ...?' question with numbers), list task, pick or team task or copy "
                "drill recognised"]
    numbers = [int(n) for n in re.findall(r"\d+", prompt)]
    reasons = []
    if shape in ("word", "chain"):
        reasons += _operation_reasons(prompt, shape, halving_trained="chain" in trained)
    elif shape != "copy" and _UNTRAINED_OP.search(prompt):     # a copy drill copies any word, "half" too
        reasons.append("only adding, taking away and doubling were trained")
    if numbers and max(numbers) > MAX_NUMBER:
        reasons.append(f"numbers above {MAX_NUMBER} were never computed with")
    if shape in ("word", "chain"):
        reasons += _word_reasons(numbers, changes(prompt), shape)
    elif shape in ("pick", "team"):
        reasons += _choice_reasons(prompt, shape)
    elif shape == "list":
        reasons += _list_reasons(prompt, numbers)
    return reasons


def _operation_reasons(prompt: str, shape: str, halving_trained: bool) -> list[str]:
    """A word problem's operations: adding, taking away and doubling were trained in all of them, halving only in the
    long ones (the chain family), anything else ("triples", "shares them with 3 friends", "per day") in none."""
    clauses = _CLAUSE.split(prompt)
    halvings = [clause for clause in clauses if _is_halving(clause)]
    others = [clause for clause in clauses if not _is_halving(clause) and _UNTRAINED_OP.search(clause)]
    reasons = []
    if others:
        reasons.append("only adding, taking away, doubling and halving were trained" if shape == "chain" else
                       "only adding, taking away and doubling were trained")
    if halvings and shape == "word":
        reasons.append(f"halving was trained only in long word problems of {CHAIN_CHANGES[0]} to {CHAIN_CHANGES[1]} "
                       "changes" if halving_trained else "halving was never trained")
    return reasons


def _word_reasons(numbers: list[int], count: int, shape: str) -> list[str]:
    """A word problem's start and number of changes against the trained ranges: 1 to 3 for word problems, the chain
    family's (tasks.CHAIN_CHANGES) for long ones, and what lies between the two if they leave a gap."""
    kind = "long word problems" if shape == "chain" else "word problems"
    reasons = []
    if not WORD_START[0] <= numbers[0] <= WORD_START[1]:
        reasons.append(f"it starts from {numbers[0]}; {kind} were trained to start from "
                       f"{WORD_START[0]} to {WORD_START[1]}")
    low, high = CHAIN_CHANGES
    if shape == "word" and count > WORD_CHANGES[1]:
        reasons.append(f"{count} changes; word problems were trained with {WORD_CHANGES[0]} to {WORD_CHANGES[1]}")
    elif shape == "chain" and count < low:
        reasons.append(f"{count} changes: between the trained ranges (word problems of {WORD_CHANGES[0]} to "
                       f"{WORD_CHANGES[1]} changes, long word problems of {low} to {high})")
    elif shape == "chain" and count > high:
        reasons.append(f"{count} changes; long word problems were trained with {low} to {high}")
    return reasons


def _choice_reasons(prompt: str, shape: str) -> list[str]:
    """A pick or team task's count to pick and the number of things offered (read from the sentence with the most
    commas) against the trained ones."""
    reasons = []
    listing = max(re.split(r"[.?:]", prompt), key=lambda sentence: sentence.count(","))
    offered = listing.rsplit(" and ", 1)[0].count(",") + (2 if " and " in listing else 1)
    if shape == "pick" and re.search(r"\b(four|five|six|seven|eight|nine|ten)\b", prompt, re.IGNORECASE):
        reasons.append("picks of two or three things were trained")
    if offered > 5:
        reasons.append("lists of at most five things to choose from were trained")
    return reasons


def _list_reasons(prompt: str, numbers: list[int]) -> list[str]:
    """A list task's length, items and step (the numbers outside the list) against the trained ranges."""
    reasons = []
    span = _NUMBER_LIST.search(prompt)
    items = [int(n) for n in re.findall(r"\d+", span.group())] if span else numbers
    rest = [int(n) for n in re.findall(r"\d+", prompt[:span.start()] + prompt[span.end():])] if span else []
    if not LIST_ITEMS[0] <= len(items) <= LIST_ITEMS[1]:
        reasons.append(f"a list of {len(items)}; lists were trained with {LIST_ITEMS[0]} to {LIST_ITEMS[1]} "
                       "numbers")
    if max(items) > DRILL_TOP:
        reasons.append(f"list numbers were trained up to {DRILL_TOP}")
    if any(k > DRILL_STEP for k in rest):
        reasons.append(f"lists were trained to add or take away 1 to {DRILL_STEP}")
    if rest and _SUBTRACT.search(prompt) and max(rest) > min(items):
        reasons.append("results below 0 were never trained")
    return reasons
