"""The command line, ``python -m dico generate``, offline, on a tiny BertForMaskedLM saved to a temporary folder.

A successful run and a refused one go as a user would, in a subprocess (each costs seconds of imports, so they
run side by side in one module fixture); every bad input and --help also run in-process through ``main(argv)``.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from dico.__main__ import build_parser, main  # noqa: E402
from dico.trace import Trace  # noqa: E402
from standins import tiny_model_folder  # noqa: E402

PROMPT = "Tom has 5 apples . How many apples does Tom have now ?"
LAST_LINE = re.compile(r"^nfe=(\d+) tokens_per_s=(\d+(?:\.\d+)?) wall_s=(\d+(?:\.\d+)?)$")

# name -> (arguments after "generate", the field the one-line error must name); {tiny} and {tmp} are filled in
BAD_INPUTS = {
    "empty prompt": (["--model", "{tiny}", "--prompt", ""], "prompt"),
    "tau1 outside (0, 1]": (["--model", "{tiny}", "--prompt", PROMPT, "--gen-length", "8", "--tau1", "1.5"], "tau1"),
    "gen length 0": (["--model", "{tiny}", "--prompt", PROMPT, "--gen-length", "0"], "gen_length"),
    "block length does not divide gen length": (["--model", "{tiny}", "--prompt", PROMPT, "--mode", "semi-ar",
                                                 "--gen-length", "10", "--block-length", "4"], "block_length"),
    "missing model": (["--model", "{tmp}/no-such-model", "--prompt", PROMPT], "model"),
    "unknown method": (["--model", "{tiny}", "--prompt", PROMPT, "--method", "greedy"], "method"),
}
IN_A_SUBPROCESS = ("tau1 outside (0, 1]",)


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dico", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("cli")
    tiny = tiny_model_folder(tmp / "tiny")

    def fill(args: list[str]) -> list[str]:
        return [a.format(tiny=tiny, tmp=tmp) for a in args]

    commands = {
        "generate": ["generate", "--model", str(tiny), "--prompt", PROMPT, "--gen-length", "12", "--seeds", "2",
                     "--tau1", "0.2", "--no-guidance", "--json", str(tmp / "trace.json")],
        **{name: ["generate", *fill(BAD_INPUTS[name][0])] for name in IN_A_SUBPROCESS},
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(commands, pool.map(_run, commands.values())))
    done["trace path"], done["fill"] = tmp / "trace.json", fill
    return done


def test_generate_prints_the_answer_then_nfe_tokens_per_s_and_wall_s(results):
    run = results["generate"]
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stdout.rstrip("\n").split("\n")
    match = LAST_LINE.match(lines[-1])
    assert match, lines[-1]
    trace = Trace.load(results["trace path"])
    assert "\n".join(lines[:-1]) == trace.text
    assert int(match.group(1)) == trace.nfe == len(trace.steps)
    assert float(match.group(3)) == pytest.approx(trace.wall_s, abs=1e-3)


def test_generate_json_writes_a_loadable_trace_with_the_settings_given(results):
    trace = Trace.load(results["trace path"])
    assert trace.method == "dico" and trace.mode == "non-ar" and trace.gen_length == 12
    assert trace.prompt == PROMPT and len(trace.response) == 12 and not trace.stopped
    assert trace.settings["seeds"] == 2 and trace.settings["tau1"] == 0.2 and trace.settings["guidance"] is False
    assert trace.settings["tau2"] == 0.6                                    # the rest keep the paper defaults


def check_one_error_line(name: str, code: int, stdout: str, stderr: str) -> None:
    assert code == 2
    assert "Traceback" not in stderr and stdout == ""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and stderr.rstrip("\n").split("\n")[-1] == errors[0]
    field = BAD_INPUTS[name][1]
    assert re.search(rf"\b(--)?{field.replace('_', '[-_]')}\b", errors[0]), errors[0]
    if name != "unknown method":          # argparse prints its usage above its own errors; ours are one line
        assert stderr.strip() == errors[0]


@pytest.mark.parametrize("name", IN_A_SUBPROCESS)
def test_bad_input_exits_2_with_one_error_line_naming_the_field(results, name):
    run = results[name]
    check_one_error_line(name, run.returncode, run.stdout, run.stderr)


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_main_refuses_bad_input_with_code_2_and_one_error_line_naming_the_field(results, name, capsys):
    try:
        code = main(results["fill"](["generate", *BAD_INPUTS[name][0]]))
    except SystemExit as exit_:           # argparse's own errors
        code = exit_.code
    out = capsys.readouterr()
    check_one_error_line(name, code, out.out, out.err)


def _generate_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["generate"]


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    options = [opt for action in _generate_parser()._actions for opt in action.option_strings if opt.startswith("--")]
    assert len(options) > 20
    missing = [opt for opt in options if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", help_text)]
    assert not missing
    assert "nfe=<int> tokens_per_s=<float> wall_s=<float>" in " ".join(help_text.split())   # the last line's form


def test_top_level_help_lists_the_generate_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "generate" in capsys.readouterr().out
