"""The worked answers' wordings: the same held-out prompts answered in phrasings that teach a model different
kinds of uncertainty (``--wording`` of ``dico.embedded.train``; the card reads the one a model was trained in).

- "free" (the held-out split's): openings, summaries and leads of 0 to 6 tokens, so the length varies by up to a
  step, and Vanilla non-AR, which commits end-of-text from the right, writes answers a step or two short.
- "equal": one token count for every start, lead and closing, so the length follows from the prompt, but a model
  trained on it is sure of nearly every token at the first step.
- "shifted": as long as "equal", but each equation sits 1 to 3 tokens into its step, the opening moves the rest
  and the closing makes up the difference: unsure where each token sits, sure where the answer ends.
- "usual": "shifted", but each step and closing takes its first form USUAL_SHARE of the time. A model trained on
  "shifted" has three equally likely places for each token of a step, and DiCo's seeds of one step can disagree:
  "She" (0.42, for "She keeps 36") and "36" (0.71, for "Now she has 36") wrote "She keeps 36 36 6 = 30".
- "plain": "usual", but a list step reads "=" nine times in ten ("usual": two in three, else "is" or "gives"). On
  "usual" a list was certain once its opening was decoded except each step's "=" (about 0.65 sure), which every
  method then committed one a pass; a token about 0.9 sure is what DiCo's factor rule commits several of at once
  and Fast-dLLM's 0.95 threshold still waits on, as a real dLLM's fairly sure tokens are.

Every wording draws from lists of the same sizes, so the split's prompts do not depend on the wording.
"""
from __future__ import annotations

import random

WORDINGS = ("free", "equal", "shifted", "usual", "plain")
SHIFTED_KIND = ("shifted", "usual", "plain")     # the wordings built on the shifted steps, closings and lists
USUAL_KIND = ("usual", "plain")                  # the wordings whose steps and closings take their first form
USUAL_SHARE = 0.7
STEP_LEADS = ("Now {he} has", "Then {he} has", "So {he} has", "{He} now has", "This gives")     # equal
# (lead, trail) around "{equation} {object}": three tokens in all with the embedded model's tokenizer; the first
# of each is the usual one.
SHIFTED_STEPS = {"add": (("Now {he} has", ""), ("Adding {b} gives", ""), ("{He} has", " now"), ("So", " in all"),
                         ("Then {he} has", "")),
                 "sub": (("Now {he} has", ""), ("Then {he} has", ""), ("{He} has", " left"), ("So", " are left"),
                         ("{He} keeps", " now")),
                 "double": (("This gives", ""), ("{He} has", " now"), ("So", " in all"))}
CLOSINGS = ("The answer is {v}.", "Final answer: {v}.", "The answer: {v}.")     # the equal wording's
# The closing for each opening: together ten tokens (word problems) or eight and the list (lists).
SHIFTED_CLOSINGS = {"": ("So {he} has {v}. The answer is {v}.", "{He} has {v} now. The answer is {v}.",
                         "So {he} has {v}. Final answer: {v}."),
                    "Let us think. ": ("So the answer is {v}.", "So the answer: {v}.", "So the answer is {v}."),
                    **dict.fromkeys(("Let us solve it. ", "Step by step. "), CLOSINGS)}
# A list's opening per wording, lists of one size (the same draws, so the same split); lists open alike in
# "shifted", "usual" and "plain".
_SHIFTED_LIST = ("", "In order. ", "Let us think. ", "In order. ")
LIST_OPENINGS = {"free": ("", "We go through the list in order. ", "One number at a time. ", "Let us work in order. "),
                 "equal": ("",) * 4, **dict.fromkeys(SHIFTED_KIND, _SHIFTED_LIST)}
# What joins a list step's "a + k" to its result, one draw per step from a generator seeded by the list (the
# split's prompts stay the same): "=" two times in three in "shifted" and "usual", nine in ten in "plain".
_TWO_IN_THREE = (" = ",) * 4 + (" is ", " gives ")
LIST_LINKS = {"shifted": _TWO_IN_THREE, "usual": _TWO_IN_THREE, "plain": (" = ",) * 18 + (" is ", " gives ")}
SHIFTED_LIST_CLOSINGS = {"": ("So in the end the answer is {v}.", "In the end the new list is {v}.",
                              "So in the end the answer: {v}."),
                         "In order. ": ("The new list is {v}.", "So the answer is {v}.", "So the answer: {v}."),
                         "Let us think. ": CLOSINGS}


def check_wording(wording: str) -> None:
    if wording not in WORDINGS:
        raise ValueError(f"wording: {wording!r} is not one of {', '.join(WORDINGS)}")


def usual_pick(rng: random.Random, options, key: str):
    """The first option USUAL_SHARE of the time, else any. Takes the same one draw from ``rng`` as any other pick
    (the split's prompts stay the same in every wording) and decides with a generator seeded by ``key``."""
    picked = options[rng.randrange(len(options))]
    keep = (USUAL_SHARE - 1 / len(options)) / (1 - 1 / len(options))
    return options[0] if random.Random(key).random() < keep else picked
