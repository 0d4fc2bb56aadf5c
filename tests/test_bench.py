"""The benchmark on a tiny subset: rows name the method and its label, carry answer NFE and a Wilson interval,
and two lengths decode side by side in one run. That README and docs/ show exactly the shipped tables is
tests/test_docs_tables.py's."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dico.bench.core import FLOOR, FLOOR_ROW, wilson
from dico.bench.tables import ROW_FIELDS, read_results, throughput_markdown
from dico.embedded import tasks
from dico.lanes import default_label
from dico.loop import pass_limit
from dico.methods import make_rule
from dico.settings import METHODS, decodes_in

ROOT = Path(__file__).resolve().parent.parent


def bench(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "dico.bench", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=timeout)


@pytest.mark.subprocess
def test_table1_rows_at_two_lengths_side_by_side(tmp_path):
    out, md = tmp_path / "rows.json", tmp_path / "table.md"
    families = ("word", "pick")          # every short family by default (test_table1_methods_...); two are enough here
    result = bench("--items", "2", "--lengths", "16/8,24/8", "--families", ",".join(families), "--batch-size", "2",
                   "--jobs", "2", "--json", str(out), "--markdown", str(md), "--no-progress")
    assert result.returncode == 0, result.stderr[-2000:]
    rows, run = read_results(out)
    assert run["lengths"] == [[16, 8], [24, 8]] and (run["batch_size"], run["jobs"]) == (2, 2)
    configs = [(m, default_label(m)) for m in METHODS] + [("dico", "DiCo (authors' code)"), FLOOR_ROW[1::-1]]
    assert {(r["method"], r["label"], r["mode"], r["task"], r["gen_length"]) for r in rows} == {
        (m, label, mode, t, g) for m, label in configs for mode in ("non-ar", "semi-ar")
        for t in families for g in (16, 24)
        if decodes_in(m, mode)}                                 # every family asked, every mode the method decodes in
    assert {r["settings"].get("authors_code") for r in rows if r["label"] == "DiCo (authors' code)"} == {True}
    for r in rows:
        assert set(ROW_FIELDS) <= r.keys() and r["n"] == 2
        assert r["block_length"] == (8 if r["mode"] == "semi-ar" else None)
        assert r["accuracy_low"] <= r["accuracy"] <= r["accuracy_high"]
        assert (r["accuracy_low"], r["accuracy_high"]) == tuple(round(v, 4) for v in wilson(r["correct"], 2))
        # a revising or editing rule may take more passes than gen_length: the loop's limit for it
        limit = r["gen_length"] if r["method"] == FLOOR else \
            pass_limit(make_rule(r["method"], r["mode"], r["settings"]), r["gen_length"], r["block_length"])
        assert 1 <= r["answer_nfe_mean"] <= r["nfe_mean"] <= limit and r["tokens_per_s"] > 0
        assert min(r["speedup_nfe"], r["speedup_answer_nfe"], r["speedup_wall"]) > 0
        if r["method"] == "vanilla":
            assert r["nfe_mean"] == r["gen_length"] and r["speedup_nfe"] == r["speedup_answer_nfe"] == 1.0
    table = md.read_text()
    assert "| word | DiCo | 16 / 8 |" in table and "| word | DiCo | 24 / 8 |" in table
    assert "non-ar NFE / floor" in table and f"| word | {FLOOR_ROW[0]} | 24 / 8 |" in table


def test_wilson_interval_matches_the_textbook_values():
    low, high = wilson(35, 40)
    assert (round(low, 3), round(high, 3)) == (0.739, 0.945)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == pytest.approx(1.0)


def test_old_result_files_read_with_method_ids_and_labels():
    rows, _ = read_results(ROOT / "assets" / "bench" / "table1_gen256.json")
    assert all(r["method"] in METHODS for r in rows)
    assert {r["method"]: r["label"] for r in rows}["fast-factor"] == "Fast-dLLM (factor)"
    # rows written when PC-Sampler's id was pc_sampler: read with today's id (the file stays as its command wrote it)
    rows, _ = read_results(ROOT / "assets" / "bench" / "table1_llada21_t2m_dinfer_prophet_pcsampler_remdm.json")
    assert all(r["method"] in METHODS for r in rows) and "pc-sampler" in {r["method"] for r in rows}


def test_parts_decoded_on_a_gpu_or_in_another_dtype_are_kept_apart_from_the_cpus():
    from dico.bench.hardware import decoded_on, machine

    assert decoded_on((None, None, None)) == decoded_on((None, "cpu", "float32")) == {}     # as parts saved before
    assert decoded_on((None, "cpu", "bf16")) == {"device": "cpu", "dtype": "bfloat16"}
    assert decoded_on((None, "cuda", None)) == {"device": "cuda", "dtype": "bfloat16"}
    assert "torch thread" in machine(1, (None, "cpu", None))


def test_the_throughput_table_names_the_families_its_prompts_came_from():
    row = {"method": "dico", "label": "DiCo", "batch_size": 1, "n": 8, "gen_length": 96, "tokens_per_s": 10.0,
           "speedup_batch": 1.0}
    assert "prompts (word, list, pick, team)" in throughput_markdown([row | {"families": list(tasks.SHORT_FAMILIES)}])
    assert "prompts (both families)" in throughput_markdown([row])         # a file from before pick and team
    assert "every batch size decoded the same texts" in throughput_markdown([row])
    on_gpu = throughput_markdown([row, row | {"batch_size": 8, "texts_changed": 1}])      # bf16 sums in a batch
    assert "1 of 8 texts differ from batch 1's" in on_gpu


def refused(args, capsys, says: str | None = None) -> tuple[int, str | None]:
    """``python -m dico.bench ARGS`` in this process: its exit status, and ``says`` if its error message holds it."""
    from dico.bench.cli import main
    try:
        status = main(list(args))
    except SystemExit as exit:                  # argparse's own refusals
        status = exit.code
    err = capsys.readouterr().err
    return status, says if says is not None and says in err and "Traceback" not in err else err


@pytest.mark.parametrize("args", [("ablation", "colour"), ("--batch-size", "0"), ("--jobs", "0"), ("--modes", "ar"),
                                  ("speed", "--device", "tpu"), ("--dtype", "float8")])
def test_bench_refuses_bad_requests_with_a_message(args, capsys):
    assert refused(args, capsys, "error:") == (2, "error:")


@pytest.mark.subprocess
def test_a_refused_bench_ends_the_process_with_the_message_and_no_traceback():
    result = bench("--lengths", "96/40", timeout=120)
    assert result.returncode == 2 and "error:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [("--refresh", "-1"), ("--refresh", "often"), ("--modes", "sideways"),
                                  ("--speed-items", "0"), ("--none-from", "no-such-folder"),
                                  ("--methods", "fast,slow"), ("--cache-prompt", "sometimes"), ("--device", "tpu"),
                                  ("--dtype", "float8")])
def test_the_cache_bench_refuses_a_bad_refresh_or_mode_naming_it(args, capsys):
    from dico.bench.cli import main

    assert main(["cache", "--items", "2", *args, "--no-progress"]) == 2
    assert f"error: {args[0][2:]}:" in capsys.readouterr().err


def test_the_docs_show_the_shipped_cache_tables_as_generated_tables():
    from dico.bench.docs import marked_tables, pages

    marked = {path for page in pages(ROOT) for path in marked_tables(page.read_text())}
    assert "assets/bench/cache.json" in marked, "the cache tables are not generated into docs/ (or README)"


def test_a_table_names_the_training_step_of_the_weights_it_measured(tmp_path):
    """The embedded model is retrained under one name: each table says which weights made it."""
    import json

    from dico.bench.hardware import training_step

    assert training_step(None) == json.loads((ROOT / "assets" / "dico-tiny" / "train_log.json").read_text())["step"]
    assert training_step(str(tmp_path)) is None                       # a hub id or a folder without a train log
    (tmp_path / "train_log.json").write_text('{"step": 1234}')
    assert training_step(str(tmp_path)) == 1234


def test_the_cache_bench_compares_each_kind_with_no_cache_on_the_same_items(tmp_path, monkeypatch):
    import dico
    import dico.loop
    from dico.bench.cache import CACHE_SERVES, cache_bench, cache_cases
    from dico.bench.parts import Parts
    from dico.bench.tables import cache_markdown

    cases = cache_cases(((16, 8),))
    assert {(c[1], c[4]) for c in cases} == set(CACHE_SERVES.items())
    assert {c[0] for c in cases} == set(METHODS) - {"wino", "prophet"}       # refused a cache (Rule.cannot)
    assert ("remdm", "semi-ar") not in {(c[0], c[1]) for c in cases}           # non-AR only (decodes_in)
    assert {c[5] for c in cache_cases(((16, 8),), (0, 4))} == {0, 4}
    assert {c[1] for c in cache_cases(((16, 8),), modes=("non-ar",))} == {"non-ar"}
    assert {str(c[6:]) for c in cache_cases(((16, 8),), keep_prompt=(True, False))} == \
        {"()", "({'cache_prompt': False},)"}          # the cases keeping the prompt keep their saved parts' keys
    predictor = dico.load_model(attention=False)
    cases = [("fast", "semi-ar", 16, 8, ("prefix", "dual"), 0), ("topk", "non-ar", 16, None, ("delayed",), 1)]
    rows = cache_bench(predictor, cases, ("word",), 2, progress=False, parts=Parts(tmp_path, {"bench": "cache"}))
    monkeypatch.setattr(dico.loop, "generate", lambda *a, **k: pytest.fail("a saved case was decoded again"))
    assert cache_bench(predictor, cases, ("word",), 2, progress=False,
                       parts=Parts(tmp_path, {"bench": "cache"})) == rows      # a rerun reads the finished case
    prefix, r, every_pass = rows
    none = ("accuracy_none", "nfe_none", "token_forwards_none", "tokens_per_s_none")
    assert [prefix[k] for k in none] == [r[k] for k in none]      # a case's kinds share one decode without a cache
    assert prefix["cache"] == "prefix" and prefix["token_forwards_cache"] > r["token_forwards_cache"]
    assert r["by_family"] == {"word": {"n": 2, "right_none": round(2 * r["accuracy_none"]),
                                       "right_cache": round(2 * r["accuracy_cache"]),
                                       "changed": round(2 * r["changed"])}}
    assert (every_pass["cache_refresh"], every_pass["changed"]) == (1, 0)        # refresh 1: exactly no cache
    assert every_pass["nfe_cache"] == every_pass["nfe_none"] and every_pass["accuracy_cache"] == \
        every_pass["accuracy_none"]
    assert "| Top-4 per step | non-ar | 16 / - | delayed, refresh 1 | 2 |" in cache_markdown(rows, "t")
    assert (r["method"], r["cache"], r["cache_refresh"], r["n"], r["block_length"]) == ("fast", "dual", 0, 2, 8)
    assert 0 < r["token_forwards_cache"] < r["token_forwards_none"] and 0 <= r["changed"] <= 1
    assert r["accuracy_none_low"] <= r["accuracy_none"] <= r["accuracy_none_high"]
    assert r["tokens_per_s_none"] > 0 and r["tokens_per_s_cache"] > 0
    assert "| Fast-dLLM | semi-ar | 16 / 8 | dual | 2 |" in cache_markdown(rows, "t")
    monkeypatch.undo()
    fresh, = cache_bench(predictor, [("fast", "semi-ar", 16, 16, ("prefix",), 0, {"cache_prompt": False})], ("word",),
                         2, progress=False)
    assert fresh["cache_prompt"] is False
    assert "| 16 / 16 | prefix, prompt computed | 2 |" in cache_markdown([fresh], "t")
    assert fresh["changed"] == 0 and fresh["token_forwards_cache"] == fresh["token_forwards_none"]   # one block: exact


@pytest.mark.slow
def test_the_cache_bench_can_take_its_decodes_without_a_cache_from_table_1(tmp_path, monkeypatch):
    """At gen 256 the decodes without a cache are most of the cache bench's work, and Table 1 has decoded them: against
    Table 1's saved parts only the cached side is decoded (batched), and every row is what the bench decoding both
    sides itself gives, less the timings (no baseline decoded beside it)."""
    import dico
    from dico.bench.cache import cache_against, cache_bench, table1_none, table1_parts
    from dico.bench.cli import main
    from dico.bench.parts import weights_id

    families = ("word", "pick")
    assert main(["--items", "2", "--lengths", "32/16", "--families", ",".join(families), "--methods", "fast",
                 "--parts", str(tmp_path), "--no-progress"]) == 0       # Fast-dLLM's rows, and Vanilla's beside them
    saved, weights = table1_parts(tmp_path), weights_id(None)
    cases = [("fast", "semi-ar", 32, 16, ("prefix", "dual"), 0), ("vanilla", "non-ar", 32, None, ("delayed",), 0)]
    predictor = dico.load_model(attention=False)
    against = [row for case in cases for row in
               cache_against(predictor, case, families, 2, table1_none(saved, weights, 2, families, case), 3)]
    timing = ("tokens_per_s_none", "tokens_per_s_cache", "speedup_wall")
    assert all(row[k] is None for row in against for k in timing)
    assert [{k: v for k, v in row.items() if k not in timing} for row in against] == \
        [{k: v for k, v in row.items() if k not in timing} for row in cache_bench(predictor, cases, families, 2, False)]
    assert table1_none(saved, weights, 3, families, cases[0]) is None          # other items: nothing to take
    assert table1_none(saved, "sha256:other", 2, families, cases[0]) is None   # other weights neither

    # A case stopped halfway goes on from its finished (kind, family) pieces, and a piece from its finished chunks
    # of items; once the case's rows are saved, pieces and chunks go.
    from dico.bench import cache as cache_module
    from dico.bench.parts import Parts

    store, case = Parts(tmp_path / "cache", {"bench": "cache"}), cases[0]
    none = table1_none(saved, weights, 2, families, case)
    real_piece, real_chunk, decoded = cache_module._piece, cache_module._chunk, []
    monkeypatch.setattr(cache_module, "PIECE_CHUNK", 1)

    def stopped_in_the_third_piece(predictor, case, kind, items, start, *rest):
        if len(decoded) == 5:
            raise KeyboardInterrupt
        decoded.append((kind, items[start].family, start))
        return real_chunk(predictor, case, kind, items, start, *rest)

    monkeypatch.setattr(cache_module, "_chunk", stopped_in_the_third_piece)
    with pytest.raises(KeyboardInterrupt):
        cache_against(predictor, case, families, 2, none, 3, store)

    def saved_parts():
        return len(list((tmp_path / "cache").glob("part-*.json")))

    assert saved_parts() == 3                           # two pieces (their chunks dropped) and the third's first chunk
    resumed, taken_back = [], []

    def noting_pieces(predictor, case, kind, family, *rest):
        resumed.append(store.load([*case, kind, family]) is None)
        return real_piece(predictor, case, kind, family, *rest)

    def noting_chunks(predictor, case, kind, items, start, *rest):
        taken_back.append(store.load([*case, kind, items[start].family, start]) is not None)
        return real_chunk(predictor, case, kind, items, start, *rest)

    monkeypatch.setattr(cache_module, "_piece", noting_pieces)
    monkeypatch.setattr(cache_module, "_chunk", noting_chunks)
    rows = cache_against(predictor, case, families, 2, none, 3, store)
    assert resumed == [False, False, True, True] and rows == against[:2]       # two pieces taken back, two decoded
    assert taken_back == [True, False, False, False]                           # the third piece's first chunk too
    assert saved_parts() == 1                                                   # the case's rows alone


def test_a_long_run_killed_halfway_goes_on_from_its_saved_parts(tmp_path, monkeypatch):
    """Table 1 at gen 256 takes hours here: each finished (family, length, mode) part is saved, a rerun decodes only
    the parts missing, and a part saved under other weights or settings is decoded again."""
    import dico
    from dico.bench import benchmark, parts
    from dico.bench.parts import Parts, weights_id

    predictor = dico.load_model(attention=False)
    configs, lengths = [benchmark.TABLE[0], ("Top-2 per step", "topk", {"k": 2})], ((16, 8),)
    key = {"bench": "Table 1", "weights": weights_id(None), "items": 2, "batch_size": 2,
           "configs": [list(c) for c in configs]}
    decoded, real_run = [], benchmark.run

    def counted_run(predictor, configs, families, modes, *args, **kwargs):
        if len(decoded) == 1 and stop_after_one:
            raise KeyboardInterrupt                                     # the session ends after one part
        decoded.append((families, modes))
        return real_run(predictor, configs, families, modes, *args, **kwargs)

    stop_after_one = True
    with pytest.raises(KeyboardInterrupt):
        parts.run_parts(counted_run, None, configs, ("word",), ("non-ar", "semi-ar"), 2, lengths, 2,
                        parts=Parts(tmp_path, key), predictor=predictor, progress=False)
    assert decoded == [(("word",), ("non-ar",))] and len(list(tmp_path.glob("part-*.json"))) == 1

    stop_after_one = False
    rows, how = parts.run_parts(counted_run, None, configs, ("word",), ("non-ar", "semi-ar"), 2, lengths, 2,
                                parts=Parts(tmp_path, key), predictor=predictor, progress=False)
    assert decoded[1:] == [(("word",), ("semi-ar",))]                   # only the missing part decoded
    assert (how["parts"], how["parts_resumed"]) == (2, 1) and how["decode_seconds"] >= 0
    whole = real_run(predictor, configs, ("word",), ("non-ar", "semi-ar"), 2, lengths, 2, progress=False)

    def strip(rs):
        return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "speedup_wall")} for r in rs]

    assert strip(rows) == strip(whole)                                  # the same rows as one uninterrupted run

    del decoded[:]
    parts.run_parts(counted_run, None, configs, ("word",), ("non-ar", "semi-ar"), 2, lengths, 2,
                    parts=Parts(tmp_path, {**key, "weights": "sha256:other"}), predictor=predictor, progress=False)
    assert len(decoded) == 2                                            # other weights: nothing reused
    assert weights_id(None).startswith("sha256:") and weights_id("GSAI-ML/LLaDA-8B-Instruct") == \
        "GSAI-ML/LLaDA-8B-Instruct"


def test_table1_with_parts_saves_every_configs_chunk_and_a_rerun_or_a_larger_run_reuses_them(tmp_path, monkeypatch):
    """A gen-256 cell of 100 items is an hour of one core: with a store Table 1 decodes its items a chunk at a time,
    every config's chunk before the next chunk, so a run stopped anywhere keeps the same items for every config; a
    rerun decodes only what is missing, a run with more items reuses the first ones, and the rows are those of one
    uninterrupted run."""
    import dico
    from dico.bench import benchmark, core
    from dico.bench.parts import Parts

    predictor = dico.load_model(attention=False)
    configs, lengths = [benchmark.TABLE[0], ("Top-2 per step", "topk", {"k": 2})], ((16, 8),)
    monkeypatch.setattr(benchmark, "CHUNK_ITEMS", 1)
    store = Parts(tmp_path, {"bench": core.TABLE_CELLS, "weights": "w"})
    decoded, real = [], benchmark.decode_cell

    def counted(predictor, cell, items, *rest):
        if stop_at is not None and len(decoded) == stop_at:
            raise KeyboardInterrupt
        decoded.append((cell.label, items[0].prompt))
        return real(predictor, cell, items, *rest)

    monkeypatch.setattr(benchmark, "decode_cell", counted)
    stop_at = 3
    with pytest.raises(KeyboardInterrupt):
        benchmark.run(predictor, configs, ("word",), ("non-ar",), 2, lengths, 2, progress=False, store=store)
    first, second = (item.prompt for item in tasks.make_split("word", "test", 2))
    assert decoded == [("Vanilla", first), ("Top-2 per step", first), ("Vanilla", second)]   # chunk by chunk

    stop_at = None
    rows = benchmark.run(predictor, configs, ("word",), ("non-ar",), 2, lengths, 2, progress=False, store=store)
    assert decoded[3:] == [("Top-2 per step", second)]                  # only the missing chunk decoded
    more = benchmark.run(predictor, configs, ("word",), ("non-ar",), 3, lengths, 2, progress=False, store=store)
    assert len(decoded) == 6 and {prompt for _, prompt in decoded[4:]} == \
        {tasks.make_split("word", "test", 3)[2].prompt}                 # a larger run decodes the new item only
    whole = benchmark.run(predictor, configs, ("word",), ("non-ar",), 2, lengths, 2, progress=False)

    def strip(rs):
        return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "speedup_wall")} for r in rs]

    assert strip(rows) == strip(whole) and [r["n"] for r in more] == [3, 3]


def _bench_imports() -> dict[str, list[tuple[str, str]]]:
    """Each module of dico/bench and what it imports from its siblings: (module, name) pairs, the name None for a
    whole module."""
    import ast

    found = {}
    for path in sorted((ROOT / "dico" / "bench").glob("*.py")):
        pairs = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path.name}: a relative import; name dico.bench modules in full")
            if isinstance(node, ast.ImportFrom) and node.module == "dico.bench":
                pairs += [(f"dico.bench.{a.name}", None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dico.bench."):
                pairs += [(node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                pairs += [(a.name, None) for a in node.names if a.name.startswith("dico.bench.")]
        found[f"dico.bench.{path.stem}"] = pairs
    return found


def test_no_bench_module_imports_a_siblings_private_names():
    private = [(module, f"{source}.{name}") for module, pairs in _bench_imports().items() for source, name in pairs
               if name and name.startswith("_")]
    assert not private, f"private names imported from a sibling: {private}"


def test_the_bench_modules_import_each_other_without_a_cycle():
    imports = _bench_imports()
    graph = {module: {source for source, _ in pairs if source in imports and source != module}
             for module, pairs in imports.items()}
    assert graph["dico.bench.parts"] == {"dico.bench.hardware"} and "dico.bench.cli" in graph["dico.bench.__main__"]
    done, path = set(), []

    def visit(module):
        assert module not in path, f"import cycle: {' -> '.join(path[path.index(module):] + [module])}"
        if module in done:
            return
        path.append(module)
        for source in sorted(graph[module]):
            visit(source)
        path.pop()
        done.add(module)

    for module in graph:
        visit(module)


def test_the_cycle_check_sees_a_cycle(tmp_path, monkeypatch):
    """The check above fails on a circle (a stand-in package with one): it is not a test that cannot fail."""
    (tmp_path / "dico" / "bench").mkdir(parents=True)
    (tmp_path / "dico" / "bench" / "a.py").write_text("from dico.bench.b import run\n")
    (tmp_path / "dico" / "bench" / "b.py").write_text("from dico.bench import a\nfrom dico.bench.c import _x\n")
    for empty in ("c.py", "hardware.py", "cli.py"):
        (tmp_path / "dico" / "bench" / empty).write_text("")
    (tmp_path / "dico" / "bench" / "parts.py").write_text("from dico.bench.hardware import load_bench_model\n")
    (tmp_path / "dico" / "bench" / "__main__.py").write_text("from dico.bench.cli import main\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="import cycle: dico.bench.a -> dico.bench.b -> dico.bench.a"):
        test_the_bench_modules_import_each_other_without_a_cycle()
    with pytest.raises(AssertionError, match=r"dico.bench.c._x"):
        test_no_bench_module_imports_a_siblings_private_names()


@pytest.mark.parametrize("argv, what", [(["--items", "2"], "table1"), (["--items", "2", "frontier"], "frontier"),
                                        (["ablation", "tg", "--items", "3"], "ablation"), (["readme"], "readme"),
                                        (["--jobs", "2", "breaks", "--items", "200"], "breaks")])
def test_the_command_lines_in_the_docs_name_the_same_subcommand_as_before(argv, what):
    from dico.bench.cli import parser, with_subcommand

    top, names = parser()
    args = top.parse_args(with_subcommand(argv, names))
    assert args.what == what and callable(args.run)


def _command_lines() -> list[str]:
    """Every ``python -m dico.bench`` command line the README, the docs and the result files' records show (an
    inline code span broken over two lines joined, and a shell line continued with a backslash; shell comments and a
    trailing ``&`` left out)."""
    import json
    import re

    found = [json.loads(p.read_text()).get("command", "") for p in sorted((ROOT / "assets" / "bench").rglob("*.json"))
             if "parts" not in p.parts and isinstance(json.loads(p.read_text()), dict)]
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = page.read_text().splitlines() + [""]
        for i, line in enumerate(lines):
            at = line.find("python -m dico.bench ")
            if at < 0:
                continue
            text = line[at:]
            if line[:at].count("`") % 2 and "`" not in text:       # an inline span going on on the next line
                text += " " + lines[i + 1].split("`")[0]
            j = i
            while text.rstrip().endswith("\\"):                    # a shell line going on on the next line
                j += 1
                text = text.rstrip()[:-1] + " " + lines[j].strip()
            found.append(re.split(r"[`\"#]", text)[0])
    return sorted({c.strip().rstrip("&),. ").strip() for c in found if c.startswith("python -m dico.bench ")})


def test_every_command_line_in_the_docs_and_the_result_files_still_parses():
    """The commands that made the shipped tables, and those the docs tell a reader to run, keep their meaning: each
    names a subcommand and its options parse (``--help`` text aside, nothing is run)."""
    import shlex

    from dico.bench.cli import parser, with_subcommand

    commands = _command_lines()
    assert len(commands) >= 20 and any(c.startswith("python -m dico.bench ablation") for c in commands)
    for command in commands:
        top, names = parser()
        try:
            top.parse_args(with_subcommand(shlex.split(command)[3:], names))
        except SystemExit:
            pytest.fail(f"no longer parses: {command}")


def test_table1_methods_decodes_only_the_chosen_rows_and_refuses_an_unknown_one(capsys):
    """``--methods`` keeps Table 1's configs of the named methods (dico: both DiCo rows); Vanilla, the reference,
    decodes in every part whichever are chosen; without it every config is decoded."""
    from dico.bench import benchmark
    from dico.bench.cli import main, parser, with_subcommand
    from dico.bench.core import REFERENCE, TABLE

    top, names = parser()
    chosen = benchmark.plan(top.parse_args(with_subcommand(["--methods", "saber,eb", "--quick"], names)))
    assert [c[0] for c in chosen.configs] == ["EB-Sampler", "Saber"] and REFERENCE not in chosen.configs
    assert chosen.families == tasks.SHORT_FAMILIES and chosen.modes == ("non-ar", "semi-ar")    # the default scope
    assert chosen.title.startswith("Table 1 (small scale): EB-Sampler, Saber;")
    assert [c[0] for c in benchmark.table_configs("dico")] == ["DiCo", "DiCo (authors' code)"]
    assert benchmark.table_configs(None) == list(TABLE) + [FLOOR_ROW]           # the floor each row is read against
    assert main(["--methods", "eb,beam", "--no-progress"]) == 2
    assert "error: methods: unknown method 'beam'" in capsys.readouterr().err


def _table_record(labels, n=2, step=7, command="python -m dico.bench --items 2"):
    rows = [{"method": "m", "label": label, "mode": mode, "task": "pick", "gen_length": 96, "block_length": None,
             "n": n, "correct": 1, "accuracy": 0.5, "accuracy_low": 0.1, "accuracy_high": 0.9, "nfe_mean": 9.0,
             "answer_nfe_mean": 8.0, "tokens_per_s": 10.0, "speedup_nfe": 1.0, "speedup_answer_nfe": 1.0,
             "speedup_wall": 1.0} for label in labels for mode in ("non-ar", "semi-ar")]
    return {"title": "T1", "model": "dico-tiny", "model_step": step, "lengths": [[96, 32]], "batch_size": 8,
            "command": command, "rows": rows}


def test_combine_puts_runs_side_by_side_and_docs_follow_their_sources(tmp_path, capsys):
    """The combined table keeps the first run's rows, adds only the new rows of the next (its Vanilla, decoded again
    as its reference, is left out), says each run's n and command, and is made again by ``docs`` when a source
    changes; runs of other weights are refused."""
    import json

    from dico.bench import docs
    from dico.bench.cli import main
    from dico.bench.combine import combine
    from dico.bench.tables import render

    old, new = _table_record(["Vanilla", "DiCo"], n=200), _table_record(["Vanilla", "Saber"], n=40)
    a, b = "assets/bench/a.json", "assets/bench/b.json"          # sources are named from the project's root
    record = combine([(a, old), (b, new)], "Both")
    assert [(r["label"], r["n"]) for r in record["rows"]] == [("Vanilla", 200)] * 2 + [("DiCo", 200)] * 2 + \
        [("Saber", 40)] * 2
    table = render({**record, "command": "c"})
    assert table.startswith("**Both**") and "| pick | Saber | 96 |" in table
    assert f"4 rows from `{a}` (n = 200 items per task" in table and f"2 rows from `{b}` (n = 40" in table
    with pytest.raises(ValueError, match="sources: b.json's model_step is 8, not 7 as in a.json"):
        combine([("a.json", old), ("b.json", _table_record(["Saber"], step=8))])
    assert not (tmp_path / "assets").exists()
    bench = tmp_path / "assets" / "bench"
    bench.mkdir(parents=True)
    (bench / "a.json").write_text(json.dumps(old))
    (bench / "b.json").write_text(json.dumps(new))
    (bench / "ab.json").write_text(json.dumps({**record, "command": "python -m dico.bench combine a.json b.json"}))
    (bench / "b.json").write_text(json.dumps(_table_record(["Vanilla", "Saber", "WINO"], n=40)))
    (bench / "ab.md").write_text("stale\n")
    files = docs.regenerated(tmp_path)
    again = json.loads(files[bench / "ab.json"])
    assert [r["label"] for r in again["rows"]][-2:] == ["WINO", "WINO"] and again["command"].endswith("b.json")
    assert "| pick | WINO | 96 |" in files[bench / "ab.md"] and (bench / "ab.md").read_text() == "stale\n"
    assert main(["combine", str(tmp_path / "nothing.json")]) == 2
    assert "error: sources:" in capsys.readouterr().err


def test_combine_puts_a_frontier_beside_the_floor_decoded_in_another_run_and_refuses_mixing_kinds():
    """The shipped frontier and a later run of the floor's point on the same items read as one table, each row with
    its passes over the floor's; a Table 1 file and a frontier file do not combine."""
    from dico.bench.combine import combine
    from dico.bench.tables import render

    def frontier_record(points, n=60):
        record = _table_record([label for label, _, _ in points], n=n)
        methods = {label: (method, sweep) for label, method, sweep in points}
        for r in record["rows"]:
            r["method"], r["sweep"] = methods[r["label"]]
            r |= {"knob": "k", "value": 1, "nfe_mean": 96.0 if r["method"] == "topk" else 4.0}
        return {**{k: v for k, v in record.items() if k != "lengths"}, "gen_length": 96, "block_length": 32}

    one_a_step = ("Top-1 per step", "topk", "Top-k per step")
    shipped = frontier_record([one_a_step, ("Fast-dLLM 0.9", "fast", "Fast-dLLM threshold")])
    floor = frontier_record([one_a_step, ("Floor", "floor", "Floor")])
    record = combine([("frontier.json", shipped), ("frontier_floor.json", floor)], "Frontier")
    assert [r["label"] for r in record["rows"]] == ["Top-1 per step", "Top-1 per step", "Fast-dLLM 0.9",
                                                    "Fast-dLLM 0.9", "Floor", "Floor"]
    table = render({**record, "command": "c"})
    assert "| pick | non-ar | Fast-dLLM threshold | k = 1 |" in table and "| NFE / floor |" in table
    assert "| 24.0 |" in table and "2 rows from `frontier_floor.json` (n = 60 items per task" in table
    with pytest.raises(ValueError, match="a frontier file and t1.json is not"):
        combine([("t1.json", _table_record(["Vanilla"])), ("f.json", floor)])


def test_combine_puts_a_lane_decoded_again_in_place_of_its_older_rows_in_the_breaks_table():
    """A breaks lane decoded again by a newer run (named first) replaces the older run's rows of that lane; the
    rest come from the older run, each family and mode's lanes together."""
    from dico.bench.combine import combine
    from dico.bench.tables import render

    def breaks_record(labels, said, n=200):
        rows = [{"family": family, "mode": mode, "label": label, "n": n, "right": 1, "nfe_mean": 9.0, "repeat": 0,
                 "mixed": n - 1, "malformed": 0, "wrong_together": 0, "right_together": 0,
                 "example": {"text": said, "kind": "mixed", "together": False}}
                for family in ("pick", "team") for mode in ("non-ar", "semi-ar") for label in labels]
        return {"title": "Breaks", "model": "dico-tiny", "model_step": 7, "command": "c", "rows": rows}

    newer, older = breaks_record(["LLaDA 2.1"], "new"), breaks_record(["LLaDA 2.1", "Prophet"], "old")
    record = combine([("breaks_llada21.json", newer), ("breaks_2026.json", older)])
    assert [(r["family"], r["mode"], r["label"], r["example"]["text"]) for r in record["rows"]] == [
        (family, mode, label, "new" if label == "LLaDA 2.1" else "old") for family in ("pick", "team")
        for mode in ("non-ar", "semi-ar") for label in ("LLaDA 2.1", "Prophet")]
    table = render({**record, "note": "Decoded again."})
    assert "| pick | semi-ar | Prophet | 1/200" in table and "4 rows from `breaks_2026.json`" in table
    assert table.endswith("Decoded again.")
    with pytest.raises(ValueError, match="sources: t1.json is a Table 1 file and breaks_2026.json is not"):
        combine([("breaks_2026.json", older), ("t1.json", _table_record(["Vanilla"]))])


def test_takeback_counts_misses_mended_by_any_and_by_the_first_take_back():
    from dico.bench.tables import render
    from dico.bench.takeback import takeback_row

    misses = [{"kind": "repeat", "step": 5, "positions": [3, 6], "right": [False, True], "texts": ["a", "b"]},
              {"kind": "repeat", "step": 2, "positions": [4, 7], "right": [True, False], "texts": ["c", "d"]},
              {"kind": "mixed", "step": None, "positions": [], "right": [], "texts": []}]
    row = takeback_row("Top-4 per step", "topk", {"k": 4}, "non-ar", "pick", 5, misses)
    assert (row["wrong"], row["clash_one_step"], row["forks"], row["forks_right"]) == (3, 2, 4, 2)
    assert (row["any_right"], row["first_right"]) == (2, 1) and row["first_low"] < 0.5 < row["first_high"]
    table = render({"title": "T", "rows": [row]})
    assert "| Top-4 per step | non-ar | pick | 3 of 5 | 2 | 4 (2) | 2/2 = 100% [34-100] | 1/2 = 50% [9-91] |" in table


def test_takeback_forks_a_top4_miss_after_the_step_that_committed_its_clash(predictor):
    """A real miss: the forks start after the clash step with one clashing position taken back."""
    from dico.batch import decode_batch, drain
    from dico.bench.takeback import CASES, clash_step, take_back

    items = tasks.make_split("pick", "test", 4)
    traces = drain(decode_batch(predictor, [i.prompt for i in items], "topk", mode="non-ar", gen_length=24,
                                settings={"k": 4}), lambda: None)
    assert CASES[0][:4] == ("Top-4 per step", "topk", {"k": 4}, "non-ar")
    item, trace = next((i, t) for i, t in zip(items, traces) if not tasks.check(i, t.text))   # Top-4 misses ~96%
    kind, k, positions = clash_step(predictor, item, trace)
    found = take_back(predictor, item, trace)
    assert (found["kind"], found["step"], found["positions"]) == (kind, k, positions)
    assert len(found["right"]) == len(found["texts"]) == len(positions)
    assert all(not text.startswith("error") for text in found["texts"])


def test_a_family_is_refused_at_a_gen_length_its_answers_do_not_fit_before_anything_decodes():
    from dico.bench import options

    with pytest.raises(ValueError, match=r"lengths: chain answers need gen >= 256, got 96; .*--lengths 256/32"):
        options.fitting(("word", "chain"), ((96, 32), (256, 32)))
    options.fitting(("word", "chain"), ((256, 32),))
    assert "chain" not in tasks.SHORT_FAMILIES and set(tasks.SHORT_FAMILIES) | {"chain"} == set(tasks.FAMILIES)
