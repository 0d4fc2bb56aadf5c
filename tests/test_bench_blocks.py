"""``python -m dico.bench blocks``: an SDAR-shaped stand-in decodes with and without its block cache and writes a row
for each, with the numbers the table prints; a bad request is refused before anything is built."""
import json

import pytest
import torch

from dico.bench.cli import main
from dico.bench.tables import kind, render


@pytest.fixture
def threads():
    """The bench runs on one torch thread (``Subcommand.threads``): put this process's count back afterwards."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_blocks_bench_writes_a_row_per_gen_and_cache(tmp_path, threads):
    out, md = tmp_path / "blocks.json", tmp_path / "blocks.md"
    assert main(["blocks", "--shape", "tiny", "--gen", "8,12", "--prompt-tokens", "8", "--json", str(out),
                 "--markdown", str(md), "--no-progress"]) == 0
    record = json.loads(out.read_text())
    rows = record["rows"]
    assert [(r["gen_length"], r["cache"]) for r in rows] == [(8, "none"), (8, "prefix"), (12, "none"), (12, "prefix")]
    for r in rows:
        # one token a pass (low_confidence_static, 4 steps a block of 4); a pass whose one pick drew the mask token
        # writes nothing and adds a pass, as SDAR's generate does
        assert r["passes"] >= r["gen_length"]
        assert r["ms_per_pass"] > 0 and r["tokens_per_s"] > 0
    none, prefix = rows[0], rows[1]
    assert none["speedup_cache"] == 1.0
    # no cache puts the whole sequence through every pass; the cache the current block, and each block once more
    assert none["positions"] == none["passes"] * (8 + 8)
    assert prefix["positions"] < none["positions"]
    assert record["model"] == "sdar-standin-tiny" and record["command"].startswith("python -m dico.bench blocks")
    assert kind(record) == "blocks" and md.read_text() == render(record) + "\n"


@pytest.mark.parametrize("args, option", [(("--gen", "6"), "gen"), (("--model", "JetLM/SDAR-4B-Chat"), "model"),
                                          (("--prompt-tokens", "10"), "prompt-tokens"), (("--rounds", "0"), "rounds"),
                                          (("--dtype", "float8"), "dtype")])
def test_the_blocks_bench_refuses_a_bad_request_naming_the_option(args, option, capsys, threads):
    assert main(["blocks", "--shape", "tiny", *args, "--no-progress"]) == 2
    assert f"error: {option}:" in capsys.readouterr().err
