"""gen_length "auto" (docs/decoding.md §7.5): DAEDAL's initial-length phase chooses the response length before
decoding; any method can use it, the trace records the lengths tried, and a prompt with no room is refused."""
from __future__ import annotations

import pytest
import torch

from dico import Trace, generate
from dico.length import AUTO_START, AUTO_STEP, AUTO_WINDOW, end_confidence

WORD = "Tom has 5 apples. He buys 3 more apples. How many apples does Tom have now?"


def test_the_tail_reading_sums_end_of_text_confidence_over_predicted_ends_from_the_right():
    p = torch.tensor([0.9, 0.1, 0.8, 0.6])
    ends = torch.tensor([True, False, True, True])
    assert end_confidence(p, ends) == pytest.approx((0.9 + 0.8 + 0.6) / AUTO_WINDOW)


@pytest.mark.parametrize("method", ["fast", pytest.param("vanilla", marks=pytest.mark.slow),
                                    pytest.param("dico", marks=pytest.mark.slow),
                                    pytest.param("saber", marks=pytest.mark.slow)])
def test_auto_grows_until_the_tail_reads_as_ended_then_adds_half_a_window(predictor, method):
    trace = generate(predictor, WORD, method, gen_length="auto")
    search = trace.length_search
    assert search["tried"] == list(range(AUTO_START, search["tried"][-1] + 1, AUTO_STEP))
    assert all(c < 0.5 for c in search["end_confidence"][:-1]) and search["end_confidence"][-1] >= 0.5
    assert trace.gen_length == search["chosen"] == search["tried"][-1] + AUTO_WINDOW // 2
    assert len(trace.response) == trace.gen_length and "8" in trace.text
    assert Trace.from_json(trace.to_json()) == trace


def test_auto_in_semi_ar_rounds_up_to_whole_blocks(predictor):
    trace = generate(predictor, WORD, "fast", gen_length="auto", mode="semi-ar", block_length=32)
    assert trace.gen_length % 32 == 0 and trace.gen_length >= trace.length_search["tried"][-1] + AUTO_WINDOW // 2


def test_auto_where_the_prompt_leaves_no_room_is_refused_naming_gen_length(predictor):
    long_prompt = " ".join(["Tom has 5 apples."] * 70)
    with pytest.raises(ValueError, match=r"^(gen_length: auto needs|prompt:)"):
        generate(predictor, long_prompt, "fast", gen_length="auto")


def test_a_length_that_is_neither_a_number_nor_auto_is_refused(predictor):
    with pytest.raises(ValueError, match=r"^gen_length: must be a whole number >= 1 or 'auto'"):
        generate(predictor, WORD, "fast", gen_length="long")
