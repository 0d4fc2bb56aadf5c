"""Every benchmark table in docs/ (and README.md) is written by ``python -m dico.bench docs`` from the committed
JSON, never by hand: a table sits between ``<!-- table: assets/bench/NAME.json -->`` and ``<!-- /table -->`` and
holds exactly what that JSON renders, the table its measuring command printed (and wrote to NAME.md)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dico.bench import docs
from dico.bench.tables import render

ROOT = Path(__file__).resolve().parent.parent
MARKED = [(page, path) for page in docs.pages(ROOT) for path in docs.marked_tables(page.read_text(encoding="utf-8"))]


def test_docs_has_marked_tables():
    assert (ROOT / "docs").is_dir(), "docs/ is missing"
    in_docs = [path for page, path in MARKED if page.parent == ROOT / "docs"]
    assert in_docs, "no <!-- table: assets/bench/NAME.json --> marker in docs/*.md: tables there are spliced by hand"


@pytest.mark.parametrize("page, path", MARKED, ids=[f"{page.name}:{path}" for page, path in MARKED])
def test_a_marked_table_is_what_its_json_renders(page, path):
    assert (ROOT / path).is_file(), f"{page.name}: the marker names {path}, which does not exist"
    body = next(m["body"] for m in docs.TABLE.finditer(page.read_text(encoding="utf-8")) if m["path"] == path)
    assert body == docs.rendered(path, ROOT) + "\n", \
        f"{page.relative_to(ROOT)}: the table of {path} is stale: run python -m dico.bench docs"


def test_every_markers_pair_is_closed():
    """An opening marker without its closing one would silently leave a table unchecked."""
    for page in docs.pages(ROOT):
        text = page.read_text(encoding="utf-8")
        assert text.count("<!-- table: ") == len(docs.marked_tables(text)) and \
            text.count("<!-- /table -->") == len(docs.marked_tables(text)), f"{page.name}: an unpaired table marker"


@pytest.mark.parametrize("md", sorted(p for p in (ROOT / "assets" / "bench").rglob("*.md")
                                      if p.with_suffix(".json").exists() and "parts" not in p.parts
                                      and docs.renders_here(p.with_suffix(".json"))),
                         ids=lambda p: p.name)
def test_each_shipped_table_file_is_what_its_json_renders(md):
    record = json.loads(md.with_suffix(".json").read_text())
    assert md.read_text() == render(record) + "\n", f"{md.name}: run python -m dico.bench docs"


def test_the_docs_command_rewrites_a_stale_table_and_check_names_it(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "assets").symlink_to(ROOT / "assets")
    page = tmp_path / "docs" / "benchmarks.md"
    page.write_text("# Benchmarks\n\n<!-- table: assets/bench/throughput.json -->\nold\n<!-- /table -->\n\nprose\n")
    files = docs.regenerated(tmp_path)
    assert docs.stale({page: files[page]}, tmp_path) == ["docs/benchmarks.md: assets/bench/throughput.json"]
    table = render(json.loads((ROOT / "assets" / "bench" / "throughput.json").read_text()))
    assert files[page] == f"# Benchmarks\n\n<!-- table: assets/bench/throughput.json -->\n{table}\n<!-- /table -->" \
                          "\n\nprose\n"
    assert docs.fill_tables(files[page], tmp_path) == files[page]               # a second run changes nothing
    page.write_text("<!-- table: assets/bench/nothing.json -->\n<!-- /table -->\n")
    with pytest.raises(ValueError, match="table: assets/bench/nothing.json: no such file"):
        docs.regenerated(tmp_path)


def test_python_m_dico_bench_docs_check_passes_on_the_repository():
    result = subprocess.run([sys.executable, "-m", "dico.bench", "docs", "--check"], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_another_tools_result_file_keeps_its_markdown_and_a_bench_file_without_a_renderer_is_an_error(tmp_path):
    """The fidelity run (tests/fidelity_run.py) writes its own JSON and Markdown: docs leaves them; a file a bench
    command wrote that no renderer knows stops docs with the file named."""
    bench = tmp_path / "assets" / "bench"
    bench.mkdir(parents=True)
    (bench / "own.json").write_text(json.dumps({"command": "python tests/fidelity_run.py", "runs": []}))
    (bench / "own.md").write_text("# by hand\n")
    assert not docs.renders_here(bench / "own.json") and docs.table_files(tmp_path) == []
    (bench / "odd.json").write_text(json.dumps({"command": "python -m dico.bench odd", "rows": [{"x": 1}]}))
    (bench / "odd.md").write_text("odd\n")
    with pytest.raises(ValueError, match="table: assets/bench/odd.json: no table renders this record"):
        docs.table_files(tmp_path)


def _bench_folder(tmp_path, records: dict) -> Path:
    bench = tmp_path / "assets" / "bench"
    bench.mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    for name, record in records.items():
        (bench / f"{name}.json").write_text(json.dumps(record))
    return bench


def test_a_quoted_number_must_be_one_its_table_prints_to_the_precision_quoted(tmp_path):
    """Between ``numbers`` markers, every decimal or per cent (each end of a range) is a number the named table
    prints, rounded as quoted; counts and lengths ("200 items", "gen 96") and settings in backticks are not measured
    values and pass."""
    throughput = json.loads((ROOT / "assets" / "bench" / "throughput.json").read_text())
    _bench_folder(tmp_path, {"t": throughput})
    printed = docs._printed("assets/bench/t.json", tmp_path)
    shown = next(n for n in printed if n != int(n))           # a value the table prints with a decimal
    text = (f"<!-- numbers: assets/bench/t.json -->\nOn 200 items at gen 96: {shown} and {round(shown)}%-ish, "
            f"{shown}-{shown}%.\n<!-- /numbers -->\n")
    assert docs.unfound_numbers(text, tmp_path) == []
    wrong = round(max(printed) + 1.3, 1)
    missing = docs.unfound_numbers(text.replace(f"{shown} and", f"{wrong} and"), tmp_path)
    assert missing == [f'{wrong} (after "items at gen 96:") is in no table of assets/bench/t.json']
    assert docs.unfound_numbers("outside any marker: 12345.6%\n", tmp_path) == []
    assert docs.unfound_numbers(text.replace("On 200", "At `threshold=987.65` on 200"), tmp_path) == []  # a setting
    with pytest.raises(ValueError, match="numbers: assets/bench/gone.json: no such file"):
        docs.unfound_numbers("<!-- numbers: assets/bench/gone.json -->\n1.5\n<!-- /numbers -->\n", tmp_path)


def test_the_index_lists_every_result_file_with_its_model_weights_and_command(tmp_path):
    bench = _bench_folder(tmp_path, {
        "t1": {**json.loads((ROOT / "assets" / "bench" / "throughput.json").read_text()), "title": "T | one"},
        "own": {"command": "python tests/fidelity_run.py", "model": "dico-tiny", "runs": []}})
    (bench / "own.md").write_text("# Fidelity of one rule\n\nbody\n")
    page = tmp_path / "docs" / "benchmarks.md"
    page.write_text("# B\n\n<!-- index -->\nold\n<!-- /index -->\n\n[gone](../assets/bench/gone.md) "
                    "[here](../assets/bench/own.md)\n")
    index = docs.fill_index(page.read_text(), tmp_path)
    rows = [line for line in index.splitlines() if line.startswith("| [")]
    assert rows[0].startswith("| [own.md](../assets/bench/own.md) | Fidelity of one rule | dico-tiny | "
                              "`python tests/fidelity_run.py` |")
    t1 = json.loads((bench / "t1.json").read_text())
    assert rows[1] == (f"| [t1.json](../assets/bench/t1.json) | T \\| one | dico-tiny ({t1['model_step']:,}, "
                       f"`{t1['weights']}`) | `{t1['command']}` |")
    assert docs.fill_index(index, tmp_path) == index                       # a second run changes nothing
    assert docs.broken_links(page, tmp_path) == ["../assets/bench/gone.md"]
    assert docs.unchecked(tmp_path) == ["missing: docs/benchmarks.md: ../assets/bench/gone.md"]


def test_a_combined_table_whose_runs_were_removed_stands_on_its_own_rows(tmp_path):
    """Once its sources are gone (the combined file is the published table), ``docs`` keeps the combined record as
    it is and its Markdown is what that record renders, each run's command still under the table."""
    combined = json.loads((ROOT / "assets" / "bench" / "table1_gen96.json").read_text())
    assert combined["sources"] and not any((ROOT / s["path"]).exists() for s in combined["sources"])
    bench = _bench_folder(tmp_path, {"t": combined})
    (bench / "t.md").write_text("stale\n")
    files = docs.regenerated(tmp_path)
    assert bench / "t.json" not in files and files[bench / "t.md"] == render(combined) + "\n"
    assert all(s["command"] in files[bench / "t.md"] for s in combined["sources"])


def test_every_result_file_records_the_digest_of_the_weights_it_measured():
    """The index's digest is the record's own: every run writes ``weights`` (``parts.weights_id``), and the shipped
    records of an embedded model's current training step carry the digest of the weights shipped now. (The lead's
    chain-stage run, being written as this lands, is left to its own commit.)"""
    import argparse

    from dico.bench.hardware import training_step
    from dico.bench.parts import weights_id
    from dico.bench.runner import Session

    about = Session(argparse.Namespace(model="dico-tiny"), (None, None, None), None, 0.0).about()
    assert about == {"model": "dico-tiny", "model_step": training_step("dico-tiny"), "weights": weights_id("dico-tiny")}
    for path in docs.result_files(ROOT):
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or "model" not in record:
            continue                    # the selection-cost run of 2026-11-22 recorded no model
        assert str(record.get("weights", "")).startswith("sha256:"), f"{path.name}: no weights digest"
        model = record.get("model")
        if model in ("dico-tiny", "dico-tiny-long") and record.get("model_step") == training_step(model):
            assert record["weights"] == weights_id(model), path.name
