"""The benchmark's --quick path on a tiny subset: rows have the documented fields and sane values."""
import json
import os
import subprocess
import sys
from pathlib import Path

from dico.bench import ROW_FIELDS

ROOT = Path(__file__).resolve().parent.parent


def test_quick_bench_rows(tmp_path):
    out, md = tmp_path / "rows.json", tmp_path / "table.md"
    result = subprocess.run([sys.executable, "-m", "dico.bench", "--quick", "--items", "1", "--gen-length", "64",
                             "--json", str(out), "--markdown", str(md), "--no-progress"],
                            cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert {(r["method"], r["mode"], r["task"]) for r in rows} == {
        (m, mode, t) for m in ("Vanilla", "Fast-dLLM (0.95)", "Fast-dLLM (factor)", "DiCo")
        for mode in ("non-ar", "semi-ar") for t in ("word", "list")}
    for r in rows:
        assert set(ROW_FIELDS) <= r.keys()
        assert r["n"] == 1 and 0 <= r["accuracy"] <= 1
        assert 1 <= r["nfe_mean"] <= 64 and r["tokens_per_s"] > 0
        assert r["speedup_nfe"] > 0 and r["speedup_wall"] > 0
        if r["method"] == "Vanilla":
            assert r["nfe_mean"] == 64 and r["speedup_nfe"] == 1.0
    assert "| word | DiCo |" in md.read_text()


def test_bench_refuses_unknown_ablation():
    result = subprocess.run([sys.executable, "-m", "dico.bench", "ablation", "colour"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "ablation" in result.stderr and "Traceback" not in result.stderr


def test_readme_shows_exactly_the_shipped_benchmark_tables_and_their_commands():
    from dico.bench import README_MARKERS, readme_section, splice_readme

    readme = (ROOT / "README.md").read_text()
    section = readme_section(ROOT / "assets" / "bench")
    assert f"{README_MARKERS[0]}\n{section}\n{README_MARKERS[1]}" in readme, \
        "README's benchmark block is stale: run python -m dico.bench readme"
    assert splice_readme(readme, section) == readme
    assert splice_readme("a\n<!-- bench:start -->\nold\n<!-- bench:end -->\nb", "new") == \
        "a\n<!-- bench:start -->\nnew\n<!-- bench:end -->\nb"
