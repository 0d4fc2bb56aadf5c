"""Naive top-k ("Top-k per step"): the k most confident masked positions of the window each step, the commits of
the paper's Observation I. It is a method by name (CLI, app, API, benchmark), and it commits exactly what LLaDA's
low-confidence sampler commits with steps = gen_length / k."""
import pytest

import dico
from dico.batch import generate_batch
from dico.embedded import tasks
from dico.settings import CACHE_KINDS, MODES, settings_for

GEN, BLOCK = 32, 8


@pytest.fixture(scope="module")
def prompts():
    return [item.prompt for item in tasks.make_split("word", "test", 3)]


def run(predictor, prompt, method, mode, gen_length=GEN, block_length=BLOCK, **settings):
    return dico.generate(predictor, prompt, method, mode=mode, gen_length=gen_length,
                         block_length=block_length if mode == "semi-ar" else None, **settings)


def commits(trace) -> list:
    return [(s.committed, s.tokens) for s in trace.steps]


@pytest.mark.parametrize("mode", MODES)
def test_top_1_commits_exactly_what_vanilla_one_token_a_step_commits(predictor, prompts, mode):
    top1 = run(predictor, prompts[0], "topk", mode, k=1)
    vanilla = run(predictor, prompts[0], "vanilla", mode)
    assert commits(top1) == commits(vanilla) and top1.text == vanilla.text and top1.nfe == GEN


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", [3, 4])
def test_top_k_commits_k_a_step_and_what_is_left_at_the_end_of_a_window(predictor, prompts, mode, k):
    trace = run(predictor, prompts[1], "topk", mode, k=k)
    assert trace.method == "topk" and trace.settings["k"] == k and not trace.stopped
    decoded: set[int] = set()
    for step in trace.steps:
        start, end = step.window
        left = sum(1 for p in range(start, end) if p not in decoded)
        assert len(step.committed) == min(k, left)
        # the most confident of the window's masked positions: none left behind is more confident than a commit
        behind = [step.confidence[p] for p in range(start, end) if p not in decoded and p not in step.committed]
        assert not behind or max(behind) <= min(step.confidence[p] for p in step.committed)
        decoded.update(step.committed)
    width = BLOCK if mode == "semi-ar" else GEN
    assert trace.nfe == (GEN // width) * -(-width // k)


@pytest.mark.parametrize("mode,gen_length,block_length", [("non-ar", 96, None), ("semi-ar", 96, 32),
                                                          ("semi-ar", GEN, BLOCK)])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_top_k_is_llada_vanilla_with_steps_gen_length_over_k(predictor, prompts, mode, gen_length, block_length, k):
    """LLaDA's generate.py with steps = gen_length / k, low_confidence remasking, greedy: k tokens a step."""
    topk = run(predictor, prompts[2], "topk", mode, gen_length, block_length, k=k)
    llada = run(predictor, prompts[2], "vanilla", mode, gen_length, block_length, steps=gen_length // k)
    assert commits(topk) == commits(llada) and topk.text == llada.text and topk.nfe == gen_length // k


@pytest.mark.parametrize("mode", MODES)
def test_a_batch_of_top_k_decodes_commits_what_each_prompt_alone_commits(predictor, prompts, mode):
    batch = generate_batch(predictor, prompts, "topk", batch_size=2, mode=mode, gen_length=GEN,
                           block_length=BLOCK, settings={"k": 3})
    for prompt, trace in zip(prompts, batch):
        assert commits(trace) == commits(run(predictor, prompt, "topk", mode, k=3))


@pytest.mark.parametrize("mode", MODES)
def test_top_k_decodes_with_every_cache_kind_and_a_refresh_every_pass_is_no_cache(predictor, prompts, mode):
    plain = run(predictor, prompts[0], "topk", mode, k=3)
    for kind in CACHE_KINDS[1:]:
        assert commits(run(predictor, prompts[0], "topk", mode, k=3, cache=kind, cache_refresh=1)) == commits(plain)
        cached = run(predictor, prompts[0], "topk", mode, k=3, cache=kind)
        assert cached.token_forwards < plain.token_forwards and len(cached.response) == GEN
        assert all(len(s.committed) <= 3 for s in cached.steps)


@pytest.mark.parametrize("value,message", [(0, r"k: must be in \[1, 4096\], got 0"), (2.5, "k: must be a whole number"),
                                           ("4", "k: must be a number")])
def test_a_bad_k_is_a_clear_message_naming_it(predictor, prompts, value, message):
    with pytest.raises(ValueError, match=message):
        settings_for("topk", {"k": value})
    with pytest.raises(ValueError, match=message):
        run(predictor, prompts[0], "topk", "non-ar", k=value)
    with pytest.raises(ValueError, match="threshold: not a setting of 'topk'"):
        settings_for("topk", {"threshold": 0.9})
    with pytest.raises(ValueError, match="k: not a setting of 'fast'"):
        settings_for("fast", {"k": 2})


def test_the_command_line_offers_top_k_by_name(capsys, tmp_path):
    from dico.__main__ import build_parser, main
    from dico.trace import Trace

    prompt = tasks.make_split("word", "test", 1)[0].prompt
    assert main(["generate", "--method", "topk", "--k", "4", "--prompt", prompt, "--gen-length", "16",
                 "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    trace = Trace.load(tmp_path / "t.json")
    assert trace.method == "topk" and trace.settings["k"] == 4 and trace.nfe == 4 and "nfe=4 " in out
    assert main(["generate", "--method", "topk", "--k", "0", "--prompt", prompt]) == 2
    assert capsys.readouterr().err.strip() == "error: k: must be in [1, 4096], got 0"
    assert main(["generate", "--method", "fast", "--k", "2", "--prompt", prompt]) == 2
    assert "k: not a setting of method 'fast' (--k)" in capsys.readouterr().err
    help_text = build_parser()._subparsers._group_actions[0].choices["generate"].format_help()
    assert "topk" in help_text and "--k INT" in help_text
