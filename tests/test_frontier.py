"""The speed-accuracy frontier: each method's main knob swept per family and mode, rows that carry their
line, knob and value beside Table 1's fields, a figure drawn from the rows alone, and clear refusals."""
import json
from pathlib import Path

import pytest

from dico.bench.core import FLOOR, wilson
from dico.bench.frontier import TOPK, naive_topk, sweep
from dico.bench.tables import FRONTIER_FIELDS, read_results
from dico.settings import METHODS, REVISING, decodes_in, settings_for
from tests.test_bench import bench, refused


def test_each_line_turns_one_knob_and_one_token_a_step_comes_first():
    points = sweep(96)
    assert [p.value for p in points if p.sweep == "Top-k per step"] == list(TOPK) and points[0].value == 1
    assert [p.settings["k"] for p in points if p.knob == "k"] == [1, 2, 4, 8, 16]
    assert naive_topk(4, 96) == ("topk", {"k": 4})
    thresholds = [p.value for p in points if p.sweep == "Fast-dLLM threshold"]
    assert min(thresholds) == 0.5 and max(thresholds) == 0.99 and len(thresholds) >= 4
    assert len({p.value for p in points if p.sweep == "Fast-dLLM factor"}) >= 3
    assert len([p for p in points if p.method == "dico"]) >= 3
    assert len({p.label for p in points}) == len(points)
    decoders = [p for p in points if p.method != FLOOR]
    for p in decoders:                                 # every point is a config the library accepts
        assert p.method in METHODS and settings_for(p.method, p.settings)
    assert [p for p in points if p.method == FLOOR] == [p for p in points if p.sweep == "Floor"] == points[-1:]


@pytest.mark.subprocess
def test_a_tiny_real_sweep_writes_rows_json_and_markdown(tmp_path):
    out, md = tmp_path / "frontier.json", tmp_path / "frontier.md"
    result = bench("frontier", "--items", "2", "--families", "word", "--gen", "32", "--model", "assets/dico-tiny",
                   "--lines", "topk,fast,remdm", "--jobs", "2", "--json", str(out), "--markdown", str(md),
                   "--no-progress")                                                             # a process per mode
    assert result.returncode == 0, result.stderr[-2000:]
    rows, run = read_results(out, FRONTIER_FIELDS)
    assert (run["gen_length"], run["block_length"]) == (32, 32) and run["command"].startswith("python -m dico.bench")
    points = sweep(32, ("topk", "fast", "remdm"))
    assert [(r["label"], r["mode"]) for r in rows] == [(p.label, m) for m in ("non-ar", "semi-ar") for p in points
                                                       if decodes_in(p.method, m)]
    for r in rows:
        assert (r["task"], r["n"], r["gen_length"]) == ("word", 2, 32)
        assert r["block_length"] == (32 if r["mode"] == "semi-ar" else None)
        assert (r["accuracy_low"], r["accuracy_high"]) == tuple(round(v, 4) for v in wilson(r["correct"], 2))
        assert 1 <= r["answer_nfe_mean"] <= r["nfe_mean"] <= 32 * (4 if r["method"] in REVISING else 1)
        if r["knob"] == "k":                           # naive top-k: exactly gen / k passes
            assert r["nfe_mean"] == 32 / r["value"] and r["speedup_nfe"] == r["value"]
    assert "| word | semi-ar | Top-k per step | k = 4 |" in md.read_text()


@pytest.mark.parametrize("args, says", [
    (("frontier", "--gen", "40"), "gen: must be a positive multiple of 16"),
    (("frontier", "--gen", "48"), "semi-AR decodes in blocks of 32"),
    (("frontier", "--families", "word,colour"), "families: unknown family 'colour'"),
    (("frontier", "--modes", "ar"), "modes: unknown mode 'ar'"),
    (("frontier", "--items", "100000"), "items: must be in"),
    (("frontier", "--lengths", "96/32"), "unrecognized arguments: --lengths"),     # the frontier takes --gen
    (("frontier", "--jobs", "0"), "jobs, batch_size: must be >= 1"),
    (("--gen", "96"), "unrecognized arguments: --gen"),           # only the frontier takes --gen
])
def test_bad_frontier_options_are_refused_with_a_message(args, says, capsys):
    assert refused(args, capsys, says) == (2, says)


@pytest.mark.subprocess
def test_a_refused_frontier_ends_the_process_with_the_message_and_no_traceback():
    result = bench("frontier", "--gen", "40", timeout=120)
    assert result.returncode == 2 and "gen: must be a positive multiple of 16" in result.stderr
    assert "Traceback" not in result.stderr


def fixed_rows() -> list[dict]:
    rows = []
    for task in ("word", "pick"):
        for mode in ("non-ar", "semi-ar"):
            for sweep_name, method, values in (("Top-k per step", "topk", (1, 2, 4)), ("Fast-dLLM threshold", "fast",
                                               (0.5, 0.9)), ("DiCo", "dico", (0.3, 0.6))):
                for i, value in enumerate(values):
                    acc = 0.9 - 0.2 * i
                    rows.append(dict(method=method, label=f"{sweep_name} {value}", sweep=sweep_name, knob="k",
                                     value=value, task=task, mode=mode, n=10, accuracy=acc, accuracy_low=acc - 0.2,
                                     accuracy_high=min(1.0, acc + 0.1), nfe_mean=96 / (i + 1), answer_nfe_mean=40.0))
    return rows


def test_the_frontier_figure_draws_a_line_per_method_and_panel_with_intervals():
    from visuals import frontier_figure

    rows = fixed_rows()
    fig = frontier_figure(rows)
    assert len(fig.data) == 3 * 4                           # a line per method in each task x mode panel
    assert [d.name for d in fig.data if d.showlegend] == ["Top-k per step", "Fast-dLLM threshold", "DiCo"]
    assert {(d.xaxis, d.yaxis) for d in fig.data} == {("x", "y"), ("x2", "y2"), ("x3", "y3"), ("x4", "y4")}
    first = fig.data[0]
    assert list(first.x) == [96, 48, 32] and list(first.y) == pytest.approx([0.9, 0.7, 0.5])
    assert list(first.error_y.array) == pytest.approx([0.1, 0.1, 0.1])
    assert list(first.error_y.arrayminus) == pytest.approx([0.2, 0.2, 0.2])
    assert fig.layout.xaxis.type == "log" and list(fig.layout.yaxis.range) == [-0.03, 1.04]
    assert {a.text for a in fig.layout.annotations} >= {"word · non-ar", "word · semi-ar", "pick · non-ar"}
    with pytest.raises(ValueError, match=r"rows\[0\]: missing sweep"):
        frontier_figure([{k: v for k, v in rows[0].items() if k != "sweep"}])
    assert "No frontier results yet" in frontier_figure([]).layout.annotations[0].text


def test_the_app_shows_the_shipped_frontier_or_says_how_to_make_it(tmp_path):
    from dico_ui.layout import frontier_view

    fig, note = frontier_view(tmp_path / "missing.json")
    assert "No speed-accuracy frontier is shipped" in note and "python -m dico.bench frontier" in note
    path = tmp_path / "frontier.json"
    path.write_text(json.dumps({"title": "Speed-accuracy frontier: gen 96", "model": "m", "command": "c", "seconds": 60,
                                "machine": "here", "rows": [dict(r, tokens_per_s=1.0, speedup_nfe=1.0, speedup_wall=1.0)
                                                            for r in fixed_rows()]}))
    fig, note = frontier_view(path)
    assert len(fig.data) == 12 and "Regenerate with `c`" in note and "10 held-out items" in note
    fig, note = frontier_view()                # the shipped one: the frontier and the floor on the same items
    assert "Floor" in {trace.name for trace in fig.data} and "with the floor" in note


def test_the_figure_exports_as_html_and_as_a_png_without_kaleido(tmp_path):
    from visuals import frontier_figure
    from visuals.export import CHROMIUM, main, save

    fig = frontier_figure(fixed_rows())
    assert save(fig, tmp_path / "f.html") == "html" and "plotly" in (tmp_path / "f.html").read_text()
    with pytest.raises(ValueError, match=r"out: write \.png, \.svg, \.pdf or \.html"):
        save(fig, tmp_path / "f.gif")
    (tmp_path / "rows.json").write_text(json.dumps({"rows": fixed_rows()}))
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing")
    assert main([str(tmp_path / "rows.json"), str(tmp_path / "f.png")]) == 0
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_published_decoders_lines_turn_their_knobs_through_their_defaults(capsys):
    """EB-Sampler's gamma, KLASS's confidence, WINO's threshold, Saber's n and the other published decoders' knobs each
    make a line through the method's default; ``--lines`` picks lines, one token a step (the reference) always first;
    an unknown line is refused."""
    from dico.bench.cli import main
    from dico.bench.frontier import LINES
    from dico.settings import SETTINGS

    assert set(LINES) == {"topk", "fast", "fast-factor", "dico", "eb", "klass", "wino", "saber", "llada21", "t2m",
                          "hierarchy", "credit", "pc-sampler", "prophet", "remdm", "floor"}
    points = sweep(96, ("saber", "eb"))
    assert (points[0].label, points[0].value) == ("Top-1 per step", 1)
    assert [p.sweep for p in points[1:]] == ["EB-Sampler gamma"] * 5 + ["Saber n"] * 4
    for method, knob in (("eb", "gamma"), ("klass", "confidence"), ("wino", "threshold"), ("saber", "n"),
                         ("llada21", "threshold"), ("t2m", "threshold"), ("hierarchy", "threshold"),
                         ("credit", "threshold"), ("pc-sampler", "num_transfer_tokens"), ("remdm", "unmask_k")):
        line = [p for p in sweep(96, (method,)) if p.method == method]
        default = getattr(SETTINGS[method](), knob)
        assert default in [p.value for p in line] and all(p.settings == {knob: p.value} for p in line)
        assert [p.value for p in line] == sorted(p.value for p in line)
        for p in line:
            SETTINGS[method].from_dict(p.settings)          # every point is a setting the method accepts
    prophet = [p for p in sweep(96, ("prophet",)) if p.method == "prophet"]     # its three gaps, scaled together
    assert {"early": 7.5, "mid": 5.0, "late": 2.5} in [p.settings for p in prophet]
    assert all(p.settings["early"] / 7.5 == p.settings["mid"] / 5.0 == p.settings["late"] / 2.5 == p.value
               for p in prophet)
    assert [p.value for p in sweep(96, ("remdm",)) if p.method == "remdm"] == [1, 2, 4]   # those dividing 96 x 0.875
    assert [p.value for p in sweep(112, ("remdm",)) if p.method == "remdm"] == [1, 2]     # ... and 112 x 0.875 = 98
    assert sweep(96, ("topk",)) == sweep(96)[:5]
    assert main(["frontier", "--lines", "eb,beam", "--no-progress"]) == 2
    assert "error: lines: unknown line 'beam'" in capsys.readouterr().err
