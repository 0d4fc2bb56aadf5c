"""Right or wrong for any prompt of a trained shape: the task item read back from the prompt itself (the choices a
pick or team prompt names, the answer a list or word problem computes to), so the family's own checker
(``tasks.check``) can judge every answer. Where a prompt cannot be read with certainty, there is no item: the app
says it cannot judge rather than guess.

    item = item_for("Pick two of these: kites, drums, hats and cups.")
    tasks.check(item, "I pick dres and dres.")      # False
"""
from __future__ import annotations

import re

from dico.embedded.picks import _joined
from dico.embedded.scope import task_shape
from dico.embedded.tasks import Item, check

COUNTS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_COUNT = re.compile(r"\b(one|two|three|four|five|six)\b", re.IGNORECASE)
_OBJECT = r"[a-z]+(?: (?:cars|pieces|games|cranes|soldiers|bears))?"   # tasks.OBJECTS' two-word ones end so
_PERSON = r"[A-Z][a-z]+ [A-Z][a-z]+"
_NUMBER = re.compile(r"\d+")


def _listed(pattern: str, text: str) -> list[str] | None:
    """The longest 'a, b and c' list of ``pattern`` items in ``text``, as its items."""
    lists = re.findall(rf"\b((?:{pattern}, )*{pattern} and {pattern})\b", text)
    if not lists:
        return None
    return re.split(r", | and ", max(lists, key=len))


def _choice(shape: str, prompt: str) -> Item | None:
    """A pick or team item: the things (full names) the prompt offers and how many to choose."""
    offered = _listed(_OBJECT if shape == "pick" else _PERSON, prompt)
    if shape == "pick":
        words = _COUNT.findall(prompt)
        count = COUNTS[words[-1].lower()] if words else 0
    else:
        team = re.search(r"\bteam of (\w+)|(\w+) people\b", prompt)
        word = (team.group(1) or team.group(2)).lower() if team else "one"
        count = COUNTS.get(word, 0)
    if not offered or not 0 < count < len(offered) + 1 or len(set(offered)) != len(offered):
        return None
    return Item(shape, prompt, "", _joined(offered[:count]), offered=tuple(offered), count=count)


def _list_result(prompt: str) -> list[int] | None:
    span = re.search(r"\d+(?:\s*,\s*\d+)+", prompt)
    if not span:
        return None
    items = [int(n) for n in _NUMBER.findall(span.group())]
    rest = [int(n) for n in _NUMBER.findall(prompt[:span.start()] + prompt[span.end():])]
    if re.search(r"\b(double|twice)\b", prompt, re.IGNORECASE) and not rest:
        return [x * 2 for x in items]
    if len(rest) != 1:
        return None
    k = rest[0]
    if re.search(r"\bmultiply\b", prompt, re.IGNORECASE):
        return [x * k for x in items]
    if re.search(r"\b(subtract|away|smaller)\b", prompt, re.IGNORECASE):
        return [x - k for x in items]
    if re.search(r"\b(add|increase)\b", prompt, re.IGNORECASE):
        return [x + k for x in items]
    return None


# The asked-about person is the subject ("She gives 3 shells to her brother", "He sells 2"): the count goes down;
# someone else gives to them ("Then her brother gives Nora 3 shells", "Grandma gives him 4 more"): it goes up.
_TAKE = re.compile(r"\b(loses|uses|sells|eats|breaks|spends|drops)\b|\b(he|she|they) gives\b", re.IGNORECASE)
_GIVE = re.compile(r"\b(buys|finds|gets|wins|receives|picks up)\b|\bgives \D+ \d+", re.IGNORECASE)


def _change(sentence: str, value: int) -> int | None:
    """The count after one sentence of a word problem; None when the sentence cannot be read with certainty."""
    numbers = [int(n) for n in _NUMBER.findall(sentence)]
    if re.search(r"\b(doubles?|twice)\b", sentence, re.IGNORECASE):
        return value * 2 if not numbers else None
    if not numbers:
        return value                     # a sentence that changes nothing ("It is a sunny day.")
    if len(numbers) > 1:
        return None
    if _TAKE.search(sentence):
        return value - numbers[0]
    if _GIVE.search(sentence):
        return value + numbers[0]
    return None


def _word_result(prompt: str) -> int | None:
    """Start from the first sentence's number, apply each later sentence's change, stop at 'How many'."""
    sentences = [s for s in re.split(r"(?<=[.?!])\s+", prompt.strip()) if s]
    if len(sentences) < 2 or not re.match(r"how many\b", sentences[-1], re.IGNORECASE):
        return None
    first = [int(n) for n in _NUMBER.findall(sentences[0])]
    if len(first) != 1 or _NUMBER.search(sentences[-1]):
        return None
    value = first[0]
    for sentence in sentences[1:-1]:
        value = _change(sentence, value)
        if value is None or value < 0:
            return None
    return value


def item_for(prompt: str) -> Item | None:
    """The task item a prompt asks for, read from the prompt (any prompt of a trained shape, shipped or typed), or
    None when its shape is not a task the app can check or the prompt cannot be read with certainty."""
    shape = task_shape(prompt or "")
    if shape in ("pick", "team"):
        return _choice(shape, prompt)
    result = _list_result(prompt) if shape == "list" else _word_result(prompt) if shape == "word" else None
    if result is None or (isinstance(result, list) and min(result) < 0):
        return None
    target = ", ".join(map(str, result)) if isinstance(result, list) else str(result)
    return Item(shape, prompt, "", target)


def judge(prompt: str, response: str) -> bool | None:
    """Whether ``response`` answers ``prompt`` right by its family's checker; None when the app cannot judge it."""
    item = item_for(prompt)
    return None if item is None else check(item, response)
