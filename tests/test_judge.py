"""Right or wrong for any prompt the app can judge (issue 45 item 3): the task item read back from the prompt, the
family's checker on every lane's answer, a wrong answer ranked as wrong (never "3rd"), and "not judged" where the
app cannot read the prompt."""
import json
import re
from pathlib import Path

import pytest

from dico.embedded import tasks
from dico.embedded.judge import item_for, judge
from dico.trace import Step, Trace

ROOT = Path(__file__).resolve().parents[1]
PICK = "Pick two of these: kites, drums, hats and cups."


@pytest.mark.parametrize("family", tasks.FAMILIES)
def test_every_held_out_prompt_is_read_back_to_its_own_answer(family):
    for item in tasks.make_split(family, "test"):
        got = item_for(item.prompt)
        assert got is not None and got.family == family, item.prompt
        if family in tasks.NUMBER_FAMILIES:
            assert got.target == item.target, item.prompt
        else:
            assert (set(got.offered), got.count) == (set(item.offered), item.count), item.prompt
        assert tasks.check(got, item.answer), item.prompt         # the worked answer is right by the read item


def test_the_shipped_examples_with_a_target_are_read_to_it():
    for example in json.loads((ROOT / "assets" / "examples.json").read_text())["examples"]:
        item = item_for(example["prompt"])
        if example.get("family") in ("word", "list") or (example["family"] == "free" and example.get("target")):
            assert item is not None and item.target == example["target"], example["prompt"]


def test_a_typed_pick_prompt_is_judged():
    assert judge(PICK, "I pick dres and dres.") is False                   # not offered, and twice
    assert judge(PICK, "I pick drums and drums.") is False                 # a repeat
    assert judge(PICK, "I pick kites and cups.") is True
    assert judge(PICK, "I pick kites, hats and cups.") is False            # three, not two
    assert judge("Choose a leader from Ann Hill, Bo Ward and Cy Ford.", "The leader is Ann Ford.") is False
    assert judge("Choose a leader from Ann Hill, Bo Ward and Cy Ford.", "The leader is Bo Ward.") is True


@pytest.mark.parametrize("prompt, answer", [
    ("Tom has 5 apples. He buys 3 more. How many apples does Tom have now?", "8"),
    ("Nora has 14 shells. She gives 3 shells to her brother. Then her brother gives Nora 2 shells. "
     "How many shells does Nora have now?", "13"),
    ("Mia has 6 pens. She doubles her pens. She loses 4 of them. How many pens does Mia have left?", "8"),
    ("The list is 4, 9, 13. Add 3 to each number.", "7, 12, 16"),
    ("Here is a list: 5, 2, 8. Multiply every number by 3.", "15, 6, 24"),
])
def test_word_problems_and_lists_are_computed(prompt, answer):
    assert item_for(prompt).target == answer


@pytest.mark.parametrize("prompt", [
    "What is the capital of France?", "Write a poem about kites.", "",
    "Tom has 5 apples and 3 pears. How many fruits does Tom have?",      # two numbers in one sentence: unsure
    "Tom has 5 apples. He juggles 2. How many apples does Tom have?",     # a change the app cannot read
    "The list is 1, 2, 3. Subtract 5 from each number.",                  # below zero: never trained, not judged
])
def test_a_prompt_the_app_cannot_read_is_not_judged(prompt):
    assert item_for(prompt) is None and judge(prompt, "The answer is 8.") is None


def _lane(label: str, text: str, nfe: int) -> Trace:
    """A one-position lane that committed its answer at its last step."""
    steps = [Step(index=i, phase="vanilla", window=[0, 1], committed=[0] if i == nfe - 1 else [],
                  tokens=[1] if i == nfe - 1 else [], confidence=[0.9], prediction=[1]) for i in range(nfe)]
    return Trace(model="m", method="vanilla", mode="non-ar", settings={}, prompt=PICK, prompt_length=1, gen_length=1,
                 block_length=None, text=text, nfe=nfe, vocab={"1": text}, steps=steps, label=label, answer_length=1,
                 answer_nfe=nfe)


def test_a_wrong_answer_is_marked_wrong_and_takes_no_place():
    from dico_ui import render
    lanes = [(_lane("Fast", "I pick kites and cups.", 3), 2, "done"), (_lane("Top-4", "I pick dres and dres.", 2), 1,
             "done"), (_lane("Vanilla", "I pick hats and drums.", 9), 8, "done")]
    assert render.verdicts(lanes) == [True, False, True]
    html = render.lanes_html(lanes)
    cards = re.split(r'<div class="lane[ "]', html)[1:]
    assert 'class="place">1st' in cards[0] and 'class="place">2nd' in cards[2]   # Vanilla 2nd, not 3rd
    assert "wrong answer" in cards[1] and "place" not in cards[1]
    assert "Not judged" not in html


def test_a_prompt_that_cannot_be_judged_says_so_once_it_finishes():
    from dico_ui import render
    lane = _lane("Vanilla", "Kites fly.", 2)
    lane.prompt = "Write a poem about kites."
    assert "Not judged" in render.lanes_html([(lane, 1, "done")]) and "verdict" not in render.lanes_html(
        [(lane, 1, "done")])
    assert "Not judged" not in render.lanes_html([(lane, 0, "decoding")])
