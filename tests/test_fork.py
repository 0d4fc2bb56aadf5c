"""Starting a decode from a state (docs/decoding.md §8): words fixed before it starts, and forks of a recorded run.

A fork at step k with no edit continues exactly as the original run did (every later step, every commit, the same
text and NFE), for every method, both modes, with and without each cache, batched and sampled: the test that the
state a fork rebuilds (ids, masks, window, the rule's memory, the random stream, the cache) is complete. Edits are
a token forced at a position (fixed from then on) or a decoded token taken back. Bad input names its field.
"""
from __future__ import annotations

import pytest
import torch

import dico
from dico import Trace, fork, generate, generate_batch
from dico.constraints import parse_constraints
from dico.forking import decode_fork
from standins import tiny_model_folder

GEN, BLOCK = 16, 8
PROMPTS = ["Tom has 5 apples.", "Pick one of Lily, Don and Sara."]
EVERY = [("vanilla", {}), ("topk", {"k": 3}), ("fast", {"threshold": 0.2}), ("fast-factor", {}), ("dico", {}),
         ("eb", {"gamma": 1.0}), ("klass", {"confidence": 0.05, "kl": 1.0}), ("wino", {"threshold": 0.1}),
         ("saber", {})]
CACHES = ["none", "prefix", "dual", "delayed"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.set_num_threads(1)
    return dico.load_model(tiny_model_folder(tmp_path_factory.mktemp("tiny")), dtype="float32", device="cpu")


def story(trace: Trace) -> list:
    return [(s.window, s.committed, s.tokens, s.remasked) for s in trace.steps]


def run(tiny, method, settings, mode, cache="none", **kw):
    options = dict(settings) if cache == "none" or method == "wino" else {**settings, "cache": cache}
    return generate(tiny, PROMPTS[0], method, mode=mode, gen_length=GEN, block_length=BLOCK, **options, **kw)


@pytest.mark.parametrize("method, settings", EVERY, ids=[m for m, _ in EVERY])
@pytest.mark.parametrize("mode", ["non-ar", "semi-ar"])
def test_a_fork_with_no_edit_continues_exactly_as_its_parent(tiny, method, settings, mode):
    parent = run(tiny, method, settings, mode)
    for at in sorted({0, 1, parent.nfe // 2, parent.nfe}):
        child = fork(tiny, parent, at)
        assert story(child) == story(parent) and child.text == parent.text and child.nfe == parent.nfe
        assert child.fork == {"parent": parent.name, "at": at, "method": method, "force": {}, "remask": []}


@pytest.mark.slow
@pytest.mark.parametrize("cache", CACHES[1:])
@pytest.mark.parametrize("method, settings", [EVERY[0], EVERY[4], EVERY[8]], ids=["vanilla", "dico", "saber"])
@pytest.mark.parametrize("mode", ["non-ar", "semi-ar"])
def test_a_fork_of_a_cached_run_restores_its_cache(tiny, method, settings, mode, cache):
    parent = run(tiny, method, settings, mode, cache=cache)
    child = fork(tiny, parent, parent.nfe // 2)
    assert story(child) == story(parent) and [s.refresh for s in child.steps] == [s.refresh for s in parent.steps]


def test_a_fork_of_a_sampled_run_continues_its_random_stream(tiny):
    parent = run(tiny, "dico", {}, "non-ar", temperature=1.0, random_seed=3)
    assert story(fork(tiny, parent, 2)) == story(parent)


def test_a_fork_of_a_batched_run_continues_as_the_batch_did(tiny):
    parents = generate_batch(tiny, PROMPTS, "fast", batch_size=2, gen_length=GEN, threshold=0.2)
    for parent in parents:
        assert story(fork(tiny, parent, 1)) == story(parent)


def test_a_forced_token_is_written_fixed_and_recorded(tiny):
    parent = run(tiny, "saber", {}, "non-ar")
    token = parent.response[3] + 1
    child = fork(tiny, parent, 1, force={3: token})
    assert child.response[3] == token and story(child)[:1] == story(parent)[:1]
    assert all(3 not in s.committed and 3 not in s.remasked for s in child.steps[1:])    # fixed: never touched
    assert child.fork["force"] == {"3": token} and "fork at step 1" in child.label
    assert Trace.from_json(child.to_json()) == child


def test_a_token_taken_back_is_decoded_again(tiny):
    parent = run(tiny, "topk", {"k": 3}, "semi-ar")
    first = parent.steps[0].committed[0]
    child = fork(tiny, parent, parent.nfe, remask=[first])      # after the last step: only it is left
    assert child.nfe == parent.nfe + 1 and child.steps[-1].committed == [first]
    assert child.fork["remask"] == [first] and "take back" in child.label


def test_a_fork_may_go_on_with_another_lanes_method(tiny):
    parent = run(tiny, "vanilla", {}, "non-ar")
    child = fork(tiny, parent, 4, method="topk", settings={"k": 4})
    assert story(child)[:4] == story(parent)[:4] and child.method == "topk"
    assert all(len(s.committed) == 4 for s in child.steps[4:-1]) and child.fork["method"] == "vanilla"
    assert child.label == "Vanilla, fork at step 4: no edit, then Top-4 per step"


def test_the_generator_form_yields_only_the_forks_own_steps(tiny):
    parent = run(tiny, "fast", {"threshold": 0.2}, "non-ar")
    yielded = [step.index for _, step in decode_fork(tiny, parent, 2)]
    assert yielded == list(range(2, parent.nfe))


def test_constraints_fix_words_before_decoding_and_are_never_overwritten(tiny):
    trace = generate(tiny, PROMPTS[0], "saber", gen_length=GEN, constraints={0: "Tom", 5: 42})
    want = tiny.encode_word("Tom")
    assert trace.response[:len(want)] == want and trace.response[5] == 42
    fixed = set(range(len(want))) | {5}
    assert all(not fixed & set(s.committed + s.remasked) for s in trace.steps)
    assert all(trace.steps[0].confidence[p] is None for p in fixed)
    assert Trace.from_json(trace.to_json()) == trace
    assert story(fork(tiny, trace, 2)) == story(trace)


def test_constraints_read_as_llada_s_demo_writes_them():
    assert parse_constraints("0:The, 5:leader") == {0: "The", 5: "leader"}
    with pytest.raises(ValueError, match="^constraints: 'The' is not offset:word"):
        parse_constraints("The")


@pytest.mark.parametrize("constraints, message", [
    ({GEN: "Tom"}, r"^constraints: offset 16 lies outside the response"),
    ({-1: "Tom"}, r"^constraints: offset -1 lies outside"),
    ({GEN - 1: 10**7}, r"^constraints: token id 10000000 at 15 is not a token of the model"),
    ({0: "  "}, r"^constraints: the word at 0 is empty"),
])
def test_bad_constraints_are_refused_naming_the_field(tiny, constraints, message):
    with pytest.raises(ValueError, match=message):
        generate(tiny, PROMPTS[0], "fast", gen_length=GEN, constraints=constraints)


def test_constraints_that_overlap_or_overflow_are_refused(tiny):
    pieces = tiny.encode_word("Tomorrow apples")
    assert len(pieces) >= 2
    with pytest.raises(ValueError, match="^constraints: .* overlaps another word"):
        generate(tiny, PROMPTS[0], "fast", gen_length=GEN, constraints={0: "Tomorrow apples", 1: 42})
    with pytest.raises(ValueError, match="^constraints: .* overflows the response"):
        generate(tiny, PROMPTS[0], "fast", gen_length=GEN, constraints={GEN - 1: "Tomorrow apples"})


def test_bad_forks_are_refused_naming_the_field(tiny, tmp_path_factory):
    parent = generate(tiny, PROMPTS[0], "fast", gen_length=GEN, constraints={0: 42})
    cases = [
        (dict(at=parent.nfe + 1), r"^at: must be a step of the run"),
        (dict(at=1, remask=[GEN]), r"^remask: position 16 lies outside the response"),
        (dict(at=1, force={0: 43}), r"^force: position 0 is fixed by a constraint"),
        (dict(at=0, remask=[3]), r"^remask: position 3 is still masked at this step"),
        (dict(at=1, force={1: "  "}), r"^force: the word at 1 is empty"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError, match=message):
            fork(tiny, parent, **options)
    other = Trace.from_dict({**parent.to_dict(), "model": "another-model"})
    with pytest.raises(ValueError, match=r"^trace: was decoded by model 'another-model'"):
        fork(tiny, other, 1)
    moved = Trace.from_dict({**parent.to_dict(), "prompt": "An entirely different and much longer prompt here"})
    with pytest.raises(ValueError, match=r"^trace: "):
        fork(tiny, moved, 1)


def test_a_trace_whose_near_ties_fell_otherwise_on_another_machine_forks_here_the_recorded_way():
    """Another CPU's last bits may order near-tied positions otherwise (docs/decoding.md §2.2): its trace replays here
    with each near-tie (within NEAR_TIE) falling the recorded way; positions further apart than that do not."""
    from dico.trace import NEAR_TIE
    from standins import RULE_PROMPT, scripted, settle

    def machine(second, third):          # one step's confidences, then every position sure (lowest first);
        return scripted([([0.5, second, third, 0.3], [20, 30, 30, 40])], 4, then=settle())    # one decode each

    def decode(predictor):
        return generate(predictor, RULE_PROMPT, "topk", gen_length=4, k=1)

    there = decode(machine(0.9, 0.9 + NEAR_TIE / 2))
    assert there.steps[0].committed == [2] and decode(machine(0.9, 0.9)).steps[0].committed == [1]   # exact tie: lower
    for at in range(1, len(there.steps) + 1):              # a fork at 0 replays nothing: it decodes here
        child = fork(machine(0.9, 0.9), there, at)
        assert story(child) == story(there) and child.text == there.text
    apart = machine(0.9 + 1.5 * NEAR_TIE, 0.9)              # each value leans by NEAR_TIE / 2: too far apart
    with pytest.raises(ValueError, match=r"^trace: step 0 does not replay on model 'scripted' \(it committed \[1\] "
                                         r"where the trace says \[2\]\)"):
        fork(apart, there, 1)


def test_a_take_back_near_tied_on_another_machine_replays_the_recorded_way():
    """The lean covers what each rule decides by (``Rule.leans``), not only confidence: ReMDM takes back the written
    token the model now finds least likely (its ``token_prob``), and two of them less than NEAR_TIE apart fall as the
    trace recorded. Further apart than that, the replay is refused: the lean moves each value by NEAR_TIE / 2."""
    from dico.trace import NEAR_TIE
    from standins import RULE_PROMPT, scripted, settle

    def machine(first, second):     # commit 0 then 1; then the written tokens' probabilities, one of them taken back
        sure = ([0.9, 0.8, 0.3, 0.3], [20, 30, 40, 50])
        return scripted([sure, sure, ([first, second, 0.3, 0.3], [20, 30, 40, 50])], 4, then=settle())

    def decode(predictor):
        return generate(predictor, RULE_PROMPT, "remdm", gen_length=4, init_unmask_ratio=0.5, loop_steps=1)

    there = decode(machine(0.9, 0.9 - NEAR_TIE / 2))
    assert there.steps[2].remasked == [1] and decode(machine(0.9 - NEAR_TIE / 4, 0.9)).steps[2].remasked == [0]
    for at in range(3, len(there.steps) + 1):             # a fork at 3 or later replays the take-back at step 2
        child = fork(machine(0.9 - NEAR_TIE / 4, 0.9), there, at)
        assert story(child) == story(there) and child.text == there.text
    with pytest.raises(ValueError, match=r"^trace: step 2 does not replay on model 'scripted'"):
        fork(machine(0.9 - 1.5 * NEAR_TIE, 0.9), there, 3)


def test_the_candidates_at_a_step_are_the_models_top_tokens_in_that_steps_pass(tiny):
    parent = run(tiny, "dico", {}, "semi-ar")
    step = parent.steps[2]
    pos = next(p for p, c in enumerate(step.confidence) if c is not None)
    top = dico.candidates(tiny, parent, 2, pos, k=4)
    assert len(top) == 4 and [p for _, _, p in top] == sorted((p for _, _, p in top), reverse=True)
    assert top[0][0] == step.prediction[pos] and top[0][2] == pytest.approx(step.confidence[pos], abs=1e-4)
    with pytest.raises(ValueError, match="^position: position 99 lies outside"):
        dico.candidates(tiny, parent, 2, 99)
