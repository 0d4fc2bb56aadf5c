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
