"""The command line, ``python -m dico generate``, offline, on a tiny BertForMaskedLM saved to a temporary folder.

A successful run and a refused one go as a user would, in a subprocess (each costs seconds of imports, so they
run side by side in one module fixture); every bad input and --help also run in-process through ``main(argv)``.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from dico.__main__ import build_parser, given_settings, main
from dico.settings import SETTINGS, specs
from dico.trace import Trace
from standins import tiny_model_folder

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Tom has 5 apples . How many apples does Tom have now ?"
NUMBER = r"(\d+(?:\.\d+)?)"
LAST_LINE = re.compile(rf"^nfe=(\d+) answer_nfe=(\d+) answer_tokens=(\d+) padding_tokens=(\d+) "
                       rf"tokens_per_s={NUMBER} wall_s={NUMBER}$")

# name -> (arguments after "generate", the field the one-line error must name); {tiny} and {tmp} are filled in
BAD_INPUTS = {
    "empty prompt": (["--model", "{tiny}", "--prompt", ""], "prompt"),
    "tau1 outside (0, 1]": (["--model", "{tiny}", "--prompt", PROMPT, "--gen-length", "8", "--tau1", "1.5"], "tau1"),
    "gen length 0": (["--model", "{tiny}", "--prompt", PROMPT, "--gen-length", "0"], "gen_length"),
    "block length does not divide gen length": (["--model", "{tiny}", "--prompt", PROMPT, "--mode", "semi-ar",
                                                 "--gen-length", "10", "--block-length", "4"], "block_length"),
    "missing model": (["--model", "{tmp}/no-such-model", "--prompt", PROMPT], "model"),
    "unknown method": (["--model", "{tiny}", "--prompt", PROMPT, "--method", "greedy"], "method"),
    "another method's setting": (["--model", "{tiny}", "--prompt", PROMPT, "--method", "vanilla", "--tau1", "0.2"],
                                 "tau1"),
    "seeds over the range": (["--model", "{tiny}", "--prompt", PROMPT, "--seeds", "65"], "seeds"),
}
IN_A_SUBPROCESS = ("tau1 outside (0, 1]",)


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "dico", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    """A tiny model saved to a folder, and ``fill``, which puts its path ({tiny}) and the temporary folder's ({tmp})
    into a command's arguments."""
    tmp = tmp_path_factory.mktemp("cli")
    folder = tiny_model_folder(tmp / "tiny")

    def fill(args: list[str]) -> list[str]:
        return [a.format(tiny=folder, tmp=tmp) for a in args]
    return {"tmp": tmp, "folder": str(folder), "fill": fill}


@pytest.fixture(scope="module")
def results(tiny) -> dict:
    """The commands run in a subprocess, side by side: a successful generate and the refused inputs."""
    tmp, fill = tiny["tmp"], tiny["fill"]
    commands = {
        "generate": ["generate", "--model", tiny["folder"], "--prompt", PROMPT, "--gen-length", "12", "--seeds", "2",
                     "--tau1", "0.2", "--no-guidance", "--json", str(tmp / "trace.json")],
        **{name: ["generate", *fill(BAD_INPUTS[name][0])] for name in IN_A_SUBPROCESS},
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(commands, pool.map(_run, commands.values())))
    done["trace path"] = tmp / "trace.json"
    return done


@pytest.mark.subprocess
def test_generate_prints_the_answer_then_nfe_answer_and_padding_counts_and_timing(results):
    run = results["generate"]
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stdout.rstrip("\n").split("\n")
    match = LAST_LINE.match(lines[-1])
    assert match, lines[-1]
    nfe, answer_nfe, answer_tokens, padding_tokens = (int(match.group(i)) for i in range(1, 5))
    trace = Trace.load(results["trace path"])
    assert "\n".join(lines[:-1]) == trace.text
    assert nfe == trace.nfe == len(trace.steps)
    assert answer_tokens + padding_tokens == trace.gen_length
    assert float(match.group(6)) == pytest.approx(trace.wall_s, abs=1e-3)
    # what the steps themselves show: the answer is complete after step answer_nfe - 1, and not before
    answer = set(range(answer_tokens))
    committed_by = [set(p for s in trace.steps[:k] for p in s.committed) for k in range(nfe + 1)]
    assert answer <= committed_by[answer_nfe]
    assert answer_nfe == 0 or not answer <= committed_by[answer_nfe - 1]
    assert answer_tokens == trace.answer_length
    assert all(set(trace.answer_commits(s)) | set(trace.padding_commits(s)) == set(s.committed) for s in trace.steps)


@pytest.mark.subprocess
def test_generate_json_writes_a_loadable_trace_with_the_settings_given(results):
    trace = Trace.load(results["trace path"])
    assert trace.method == "dico" and trace.mode == "non-ar" and trace.gen_length == 12
    assert trace.prompt == PROMPT and len(trace.response) == 12 and not trace.stopped
    assert trace.settings["seeds"] == 2 and trace.settings["tau1"] == 0.2 and trace.settings["guidance"] is False
    assert trace.settings["tau2"] == 0.6                                    # the rest keep the paper defaults


def test_authors_code_decodes_as_the_release_and_options_given_beside_it_win(tiny, capsys, tmp_path):
    assert main(["generate", "--model", tiny["folder"], "--prompt", PROMPT, "--gen-length", "8", "--authors-code",
                 "--seeds", "8", "--no-grow-through-commits", "--json", str(tmp_path / "preset.json")]) == 0
    capsys.readouterr()
    settings = Trace.load(tmp_path / "preset.json").settings
    assert settings["authors_code"] is True and settings["seeds"] == 8 and settings["grow_through_commits"] is False
    assert settings["conquer_fallback"] == "window" and settings["short_right_growth"] is True
    assert settings["mask_in_softmax"] is True


def test_several_prompts_in_one_batch_print_what_each_prints_alone(tiny, capsys, tmp_path):
    prompts = [PROMPT, "Anna has 3 books .", "How many apples ?"]
    common = ["generate", "--model", tiny["folder"], "--gen-length", "10", "--method", "fast"]
    alone = []
    for prompt in prompts:
        assert main([*common, "--prompt", prompt]) == 0
        alone.append(capsys.readouterr().out.splitlines())
    (tmp_path / "prompts.txt").write_text("\n".join(prompts[1:]) + "\n\n")
    assert main([*common, "--prompt", prompts[0], "--prompts-file", str(tmp_path / "prompts.txt"),
                 "--batch-size", "2", "--json", str(tmp_path / "bundle.json")]) == 0
    together = capsys.readouterr().out.splitlines()
    nfe_part = re.compile(r" tokens_per_s=.*$")          # timings differ run to run; the decode must not
    assert [nfe_part.sub("", line) for line in together] == [nfe_part.sub("", line) for out in alone for line in out]
    from dico.trace import read_traces
    assert [t.prompt for t in read_traces((tmp_path / "bundle.json").read_bytes())] == prompts


def check_one_error_line(name: str, code: int, stdout: str, stderr: str) -> None:
    assert code == 2
    assert "Traceback" not in stderr and stdout == ""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and stderr.rstrip("\n").split("\n")[-1] == errors[0]
    field = BAD_INPUTS[name][1]
    assert re.search(rf"\b(--)?{field.replace('_', '[-_]')}\b", errors[0]), errors[0]
    if name != "unknown method":          # argparse prints its usage above its own errors; ours are one line
        assert stderr.strip() == errors[0]


@pytest.mark.subprocess
@pytest.mark.parametrize("name", IN_A_SUBPROCESS)
def test_bad_input_exits_2_with_one_error_line_naming_the_field(results, name):
    run = results[name]
    check_one_error_line(name, run.returncode, run.stdout, run.stderr)


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_main_refuses_bad_input_with_code_2_and_one_error_line_naming_the_field(tiny, name, capsys):
    try:
        code = main(tiny["fill"](["generate", *BAD_INPUTS[name][0]]))
    except SystemExit as exit_:           # argparse's own errors
        code = exit_.code
    out = capsys.readouterr()
    check_one_error_line(name, code, out.out, out.err)


def _valid_other_value(spec):
    """A value of the setting that is not its default, inside its range."""
    if spec.type is bool:
        return not spec.default
    if spec.choices:
        return next(c for c in spec.choices if c != spec.default)
    lo, hi = spec.range
    return spec.type(hi) if spec.default != hi else spec.type(lo + (hi - lo) / 2)


@pytest.mark.parametrize("method", SETTINGS)
def test_every_setting_of_a_method_is_an_option_that_reaches_the_method(method):
    for spec in specs(SETTINGS[method]):
        value = _valid_other_value(spec)
        flag = "--" + spec.name.replace("_", "-")
        argv = ["generate", "--prompt", "p", "--method", method] + (
            [flag if value else "--no-" + spec.name.replace("_", "-")] if spec.type is bool else [flag, str(value)])
        assert given_settings(build_parser().parse_args(argv)) == {spec.name: value}


def test_help_explains_every_setting_and_the_last_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--help"])
    assert exit_.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for spec in (s for cls in SETTINGS.values() for s in specs(cls)):
        assert "--" + spec.name.replace("_", "-") in help_text and " ".join(spec.help.split()) in help_text
    assert "nfe=<int> answer_nfe=<int> answer_tokens=<int> padding_tokens=<int>" in help_text


def test_top_level_help_lists_the_generate_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "generate" in capsys.readouterr().out


def test_docs_settings_block_is_what_the_settings_declare():
    from dico.__main__ import settings_markdown
    page = (ROOT / "docs" / "settings.md").read_text()
    block = page.split("<!-- settings:start -->\n", 1)[1].split("<!-- settings:end -->", 1)[0]
    assert block == settings_markdown(), "docs/settings.md is stale: paste `python -m dico settings` between markers"


def test_constrain_fixes_words_and_fork_rewinds_a_saved_run_and_edits_it(tiny, capsys, tmp_path):
    common = ["generate", "--model", tiny["folder"], "--gen-length", "12", "--method", "topk", "--k", "3"]
    assert main([*common, "--prompt", PROMPT, "--constrain", "0:Tom", "--json", str(tmp_path / "run.json")]) == 0
    parent = Trace.load(tmp_path / "run.json")
    assert parent.constraints and parent.response[0] == int(next(iter(parent.constraints.values())))
    capsys.readouterr()
    assert main(["generate", "--model", tiny["folder"], "--fork", str(tmp_path / "run.json"), "--at", "1",
                 "--force", "5=#42", "--remask", str(parent.steps[0].committed[-1]),
                 "--json", str(tmp_path / "fork.json")]) == 0
    child = Trace.load(tmp_path / "fork.json")
    assert child.fork["at"] == 1 and child.fork["force"] == {"5": 42} and child.response[5] == 42
    assert LAST_LINE.match(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("args, field", [
    (["--prompt", PROMPT, "--constrain", "Tom"], "constraints"),
    (["--prompt", PROMPT, "--constrain", "99:Tom"], "constraints"),
    (["--prompt", PROMPT, "--at", "3"], "at"),
    (["--fork", "{tmp}/missing.json"], "fork"),
])
def test_bad_constraints_and_forks_exit_2_naming_the_field(tiny, capsys, args, field):
    assert main(tiny["fill"](["generate", "--model", "{tiny}", "--gen-length", "12", *args])) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: {field}:")
