"""The benchmark's files and tables: reading a result JSON (old files included) and every table as Markdown, each
from the rows (and record) its command writes, so a table regenerated from the committed JSON is the one the
command printed. ``render(record)`` picks the table by what the record holds. Plain Python: the app reads these
without torch.
"""
from __future__ import annotations

import json

from dico.bench.core import FLOOR, aup_of_rows, floor_ratios, wilson
from dico.bench.hardware import counted
from dico.settings import METHOD_LABELS, MODES, method_id
from dico.trace import FLOOR_BOUND

ROW_FIELDS = ("method", "label", "mode", "task", "n", "accuracy", "nfe_mean", "tokens_per_s", "speedup_nfe",
              "speedup_wall")
FRONTIER_FIELDS = ROW_FIELDS + ("sweep", "knob", "value", "accuracy_low", "accuracy_high", "answer_nfe_mean")
THROUGHPUT_FIELDS = ("method", "label", "batch_size", "n", "tokens_per_s", "speedup_batch")


def read_results(path, fields=ROW_FIELDS) -> tuple[list[dict], dict]:
    """Rows and the run's own record (title, command, machine, seconds) of a ``--json`` file written by
    ``dico.bench``, checked field by field (the app shows them). Files from before rows carried ``label`` (their
    ``method`` was the display label) are read with the method id restored, and a method's old id as today's."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: no benchmark rows")
    by_label = {label: method for method, label in METHOD_LABELS.items()}
    for i, row in enumerate(rows):
        if "label" not in row and isinstance(row, dict) and "method" in row:
            row["label"] = row["method"]
            label = row["label"]
            row["method"] = by_label.get(label) or by_label.get(label.split(" (")[0]) or \
                ("dico" if "DiCo" in label else label)
            row.setdefault("gen_length", data.get("gen_length"))
        if isinstance(row, dict) and "method" in row:
            row["method"] = method_id(row["method"])
        missing = [k for k in fields if k not in row]
        if missing:
            raise ValueError(f"{path}: rows[{i}] misses {', '.join(missing)}")
    return rows, {k: v for k, v in data.items() if k != "rows"}


def _x(value, ratio) -> str:
    return "-" if value is None else f"{value:.1f} ({ratio:.1f}x)"


def _of_each_row(rows: list[dict], by_index: dict[int, float]) -> dict[int, float]:
    """Values the bench gives by row index (``floor_ratios``, ``aup_of_rows``), found by the row itself (its id: a
    row is a dict, and a renderer walks rows, not indices)."""
    return {id(rows[i]): value for i, value in by_index.items()}


def markdown(rows, title: str) -> str:
    """Rows laid out like the paper's Table 1: a row per task, method and length, a column group per mode."""
    modes = sorted({r["mode"] for r in rows}, key=list(MODES).index)
    ratios = _of_each_row(rows, floor_ratios(rows))
    floor = " | {m} NFE / floor" if ratios else ""
    width = 6 if ratios else 5
    head = "| Task | Method | gen / block | " + " | ".join(
        f"{m} accuracy (95% CI) | {m} NFE | {m} answer NFE | {m} tokens/s | {m} AUP{floor.format(m=m)}"
        for m in modes) + " |"
    lines = [f"**{title}**", "", head, "|" + "---|" * (3 + width * len(modes))]
    index = {(r["task"], r["label"], r.get("gen_length"), r["mode"]): r for r in rows}
    aups = _of_each_row(rows, aup_of_rows(rows))
    for task in dict.fromkeys(r["task"] for r in rows):
        for label in dict.fromkeys(r["label"] for r in rows):
            for gen in dict.fromkeys(r.get("gen_length") for r in rows):
                found = [index.get((task, label, gen, mode)) for mode in modes]
                if not any(found):
                    continue
                block = next((r["block_length"] for r in found if r and r.get("block_length")), None)
                cells = []
                for r in found:
                    if r is None:
                        cells += ["-"] * width
                        continue
                    ci = (f" ({100 * r['accuracy_low']:.0f}-{100 * r['accuracy_high']:.0f})" if "accuracy_low" in r
                          else "")
                    cells += [f"{100 * r['accuracy']:.1f}%{ci}", _x(r["nfe_mean"], r["speedup_nfe"]),
                              _x(r.get("answer_nfe_mean"), r.get("speedup_answer_nfe")),
                              f"{r['tokens_per_s']:.0f} ({r['speedup_wall']:.1f}x)",
                              f"{aups[id(r)]:.0f}" if id(r) in aups else "-"]
                    if ratios:
                        cells.append(f"{ratios[id(r)]:.1f}" if id(r) in ratios else "-")
                shape = f"{gen} / {block}" if block else str(gen or "")
                lines.append(f"| {task} | {label} | {shape} | " + " | ".join(cells) + " |")
    n = max(r["n"] for r in rows)
    batch = rows[0].get("batch_size")
    lines += ["", f"n = {n} held-out items per task; 95% Wilson interval in brackets; speed-ups (x) against Vanilla "
                  "in the same run; answer NFE = forward passes until the last answer token was committed; "
                  f"{AUP_NOTE}" + (f"; decoded {batch} prompts per forward pass." if batch else ".") + floor_note(rows)]
    return "\n".join(lines)


def floor_note(rows) -> str:
    """What a table's floor rows are, when it has any, and on which items its ratios are read."""
    found = [r for r in rows if r["method"] == FLOOR]
    if not found:
        return ""
    floor_n, row_n = max(r["n"] for r in found), {r["n"] for r in rows if r["method"] != FLOOR}
    items = ("" if row_n <= {floor_n} else
             f" The floor's mean is over the first {floor_n} of a row's {max(row_n)} items: the ratio compares means "
             "over different items.")
    return (f" NFE / floor = the row's mean passes over the floor's in the same cell; the floor (n = {floor_n} items, "
            "the first of each family's held-out items) commits, each step, the most confident masked positions one "
            f"at a time while the step's clash stays within {FLOOR_BOUND:g} nats, and ends the step at the first that "
            "would not (dico.observe.floor): a greedy bound on the steps this model needs without committing tokens "
            "that clash, not the fewest possible (another order of commits may need fewer)." + items +
            " It is a bound, not a decoder: the passes that check each addition are not in its NFE, and it has no AUP.")


AUP_NOTE = ("AUP = accuracy under parallelism (d3LLM): the area under the curve from Vanilla's point (1 token a pass) "
            "to the row's (gen_length / NFE tokens a pass, its accuracy in %), weighted down where accuracy falls "
            "below the cell's best; a row more than 5 points below Vanilla keeps only Vanilla's point "
            "(docs/benchmarks.md)")


def _accuracy(row: dict) -> str:
    return f"{100 * row['accuracy']:.1f}% ({100 * row['accuracy_low']:.0f}-{100 * row['accuracy_high']:.0f})"


def frontier_markdown(rows, title: str) -> str:
    """The frontier as one table: a row per task, mode and point, each line's points in its knob's order."""
    ratios = _of_each_row(rows, floor_ratios(rows))
    floor = " NFE / floor |" if ratios else ""
    lines = [f"**{title}**", "", f"| Task | mode | line | setting | accuracy (95% CI) | NFE | answer NFE |{floor}",
             "|---|---|---|---|---|---|---|" + ("---|" if ratios else "")]
    for r in rows:
        ratio = (f" {ratios[id(r)]:.1f} |" if id(r) in ratios else " - |") if ratios else ""
        lines.append(f"| {r['task']} | {r['mode']} | {r['sweep']} | {r['knob']} = {r['value']} | {_accuracy(r)} | "
                     f"{_x(r['nfe_mean'], r['speedup_nfe'])} | {_x(r['answer_nfe_mean'], r['speedup_answer_nfe'])} |"
                     + ratio)
    lines += ["", f"n = {max(r['n'] for r in rows)} held-out items per task; 95% Wilson interval in brackets; NFE = "
                  "forward passes (mean), answer NFE = passes until the last answer token was committed; (x) against "
                  "one token a step on the same items. Top-k per step commits the k most confident masked positions "
                  "each pass (LLaDA's Vanilla with steps = gen / k)." + floor_note(rows)]
    return "\n".join(lines)


def throughput_markdown(rows) -> str:
    batches = list(dict.fromkeys(r["batch_size"] for r in rows))
    labels = list(dict.fromkeys(r["label"] for r in rows))
    lines = ["**Throughput by batch size**", "",
             "| Method | " + " | ".join(f"batch {b} tokens/s" for b in batches) + " |",
             "|" + "---|" * (1 + len(batches))]
    for label in labels:
        cells = {r["batch_size"]: r for r in rows if r["label"] == label}
        lines.append(f"| {label} | " + " | ".join(f"{cells[b]['tokens_per_s']:.0f} ({cells[b]['speedup_batch']:.2f}x)"
                                                  for b in batches) + " |")
    families = ", ".join(rows[0].get("families", ())) or "both families"      # files from before pick and team
    changed = sum(r.get("texts_changed", 0) for r in rows)
    same = ("every batch size decoded the same texts." if not changed else
            f"{changed} of {rows[0]['n'] * (len(batches) - 1) * len(labels)} texts differ from batch "
            f"{batches[0]}'s (another order of sums in a batch: near decisions).")
    lines += ["", f"The same {rows[0]['n']} held-out prompts ({families}), gen {rows[0]['gen_length']} non-AR, at "
                  f"each batch size one after the other; (x) against batch {batches[0]}; {same}"]
    return "\n".join(lines)




BREAK_KINDS = ("repeat", "mixed", "malformed")
DICO_PHASES = ("divide", "conquer", "finalize")


def _said(example: dict | None) -> str:
    """A break as the table quotes it: the answer and, when one step committed its clash, that step's tokens."""
    if example is None:
        return "—"
    said = f"“{example['text']}”"
    if example.get("step"):
        s = example["step"]
        phase = f" ({s['phase']})" if s["phase"] in DICO_PHASES else ""     # "vanilla"/"fast" name no phase
        said += (f": step {s['index']}{phase} committed " + " + ".join(
            f"`{t.strip()}` ({'edited' if c is None else f'{c:.2f}'})" for t, c in zip(s["tokens"], s["confidence"]))
            if s["tokens"] else
            f": step {s['index']} wrote them by editing (runs before the breaks bench read edits name no tokens)")
    return said


def _broken_by_cache(r: dict) -> str:
    if "broken_by_cache" not in r:
        return "— | — | "
    return (f"{r['broken_by_cache']}: {' / '.join(str(r['broken'][k]) for k in BREAK_KINDS)} "
            f"({r['broken_together']}) | {r['mended_by_cache']} | ")


def breaks_markdown(rows: list[dict], title: str) -> str:
    """``python -m dico.bench breaks``: a row per family, mode and lane; with a cache lane, what the cache broke; with
    a revising lane (WINO, Saber), the clashing commits it took back and the answers that then ended right."""
    cached = any("broken_by_cache" in r for r in rows)
    revising = any("clash_taken_back" in r for r in rows)
    lines = [f"**{title}**", "", "| family | mode | lane | right [95%] | passes | wrong: repeat / mixed / malformed | "
             "wrong, clashing tokens committed by one step | right, 2+ choice tokens committed by one step | "
             + ("the cache broke: repeat / mixed / malformed (by one step) | mended | " if cached else "")
             + ("taken back a run | clashing commits taken back: answers (right after) | " if revising else "")
             + "a break |", "|---|---|---|---|---|---|---|---|" + ("---|---|" if cached else "")
             + ("---|---|" if revising else "") + "---|"]
    for r in rows:
        wrong = r["n"] - r["right"]
        by_cache = _broken_by_cache(r) if cached else ""
        revised = _revised(r) if revising else ""
        low, high = wilson(r["right"], r["n"])
        lines.append(f"| {r['family']} | {r['mode']} | {r['label']} | {r['right']}/{r['n']} [{100 * low:.0f}-"
                     f"{100 * high:.0f}%] | {r['nfe_mean']:.1f} | {r['repeat']} / "
                     f"{r['mixed']} / {r['malformed']} | {r['wrong_together']} of {wrong} | {r['right_together']} of "
                     f"{r['right']} | {by_cache}{revised}{_said(r['example'])} |")
    if revising:
        lines += ["", "Clashing commits taken back: answers in which a step committed clashing tokens together (the "
                      "final answer with that step's taken-back commits put back reads wrong, its clash from that "
                      "step) and the rule took one or more of them back; in brackets, how many of those answers ended "
                      "right. A commit counts where it stands: a token taken back and committed again counts at its "
                      "last commit. An editing rule's replacement (LLaDA 2.1) takes a token back and writes another "
                      "in one step: it counts as taken back, and its replacements a run are given beside the "
                      "take-backs."]
    return "\n".join(lines)


def _revised(row: dict) -> str:
    if "clash_taken_back" not in row:
        return "- | - | "
    replaced = f" + {row['replaced_mean']:.2f} replaced" if "replaced_mean" in row else ""
    return f"{row['remasks_mean']:.2f}{replaced} | {row['clash_taken_back']} ({row['repaired']} right) | "


def _num(value, spec: str = ".1f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def cache_markdown(rows: list[dict], title: str) -> str:
    """The cache benchmark as a Markdown table: accuracy without -> with the cache (95% interval of the first)."""
    lines = [f"**{title}**", "", "| Method | mode | gen / block | cache | n | accuracy: none [95%] -> cache | text "
             "changed | NFE none -> cache | token forwards none -> cache | tokens/s none -> cache | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        how = (f", refresh {r['cache_refresh']}" if r.get("cache_refresh") else "") + \
            (", prompt computed" if r.get("cache_prompt") is False else "")      # the cache's settings besides its kind
        lines.append(f"| {r['label']} | {r['mode']} | {r['gen_length']} / {r['block_length'] or '-'} | {r['cache']}"
                     f"{how} | "
                     f"{r['n']} | {100 * r['accuracy_none']:.1f}% [{100 * r['accuracy_none_low']:.0f}-"
                     f"{100 * r['accuracy_none_high']:.0f}] -> {100 * r['accuracy_cache']:.1f}% | "
                     f"{100 * r['changed']:.0f}% | {r['nfe_none']:.1f} -> {r['nfe_cache']:.1f} | "
                     f"{r['token_forwards_none']:.0f} -> {r['token_forwards_cache']:.0f} | "
                     f"{_num(r['tokens_per_s_none'])} -> {_num(r['tokens_per_s_cache'])} | "
                     f"{_num(r['speedup_wall'], '.2f', 'x')} |")
    return "\n".join(lines)


def _per_family(rows: list[dict]) -> int | None:
    """Items per family of a cache part, from its first row (``n`` counts every family's items)."""
    return rows[0]["n"] // len(rows[0]["families"]) if rows else None


def cache_tables(record: dict) -> str:
    """``python -m dico.bench cache``: the speed cases' table (when there are any), then the accuracy cases'."""
    speed, accuracy = record["speed"], record["accuracy"]
    n_items = record.get("items") or _per_family(accuracy)
    tables = [cache_markdown(speed, f"KV cache speed (word problems, {counted(speed[0]['n'], 'item')})")] \
        if speed else []
    tables.append(cache_markdown(accuracy, f"KV cache accuracy (Table 1's items, {n_items} per family)"))
    return "\n\n".join(tables)


def speed_markdown(rows: list[dict], title: str) -> str:
    """``python -m dico.bench speed``: each rule's selection time per step against the forward pass."""
    lines = [f"**{title}**", "",
             "| Method | steps | forward ms (median) | selection ms (median) | selection / forward |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['label']} | {r['steps']} | {r['forward_ms']:.2f} | {r['select_ms']:.3f} | "
              f"{100 * r['select_share']:.1f}% |" for r in rows]
    return "\n".join(lines)


def gpu_cache_speed_markdown(rows: list[dict], title: str) -> str:
    """``tests/gpu_cache_speed.py``: a LLaDA-shaped model's tokens/s with each cache kind on a GPU."""
    lines = [title, "", "| mode | batch | cache | tokens/s | speed-up | token forwards |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['mode']} | {r['batch']} | {r['cache']} | {r['tokens_per_s']:.0f} | {r['speedup']:.2f}x | "
              f"{r['token_forwards']} |" for r in rows]
    return "\n".join(lines)


def blocks_markdown(rows: list[dict], title: str) -> str:
    """``python -m dico.bench blocks``: a block diffusion stand-in's decodes with and without its block cache."""
    lines = [f"**{title}**", "",
             "| gen | cache | passes | ms a pass | tokens/s | positions computed | speed-up | same response |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['gen_length']} | {r['cache']} | {r['passes']} | {r['ms_per_pass']:.1f} | "
              f"{r['tokens_per_s']:.1f} | {r['positions']} | {r['speedup_cache']:.2f}x | "
              f"{'yes' if r['same_response'] else 'no'} |" for r in rows]
    lines += ["", "Speed-up: no cache's seconds over this row's, at the same gen. Positions computed: what the passes "
                  "put through the model (the cache's storing passes included). Same response: the tokens no cache "
                  "wrote."]
    return "\n".join(lines)


def takeback_markdown(rows: list[dict], title: str) -> str:
    """``python -m dico.bench takeback``: a row per lane and family: its misses and how many one take-back mended."""
    lines = [f"**{title}**", "", "| lane | mode | family | wrong of n | clash committed by one step | forks (right) | "
             "mended by any one take-back [95%] | mended by taking back the first [95%] |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["clash_one_step"]
        lines.append(f"| {r['label']} | {r['mode']} | {r['family']} | {r['wrong']} of {r['n']} | {m} | "
                     f"{r['forks']} ({r['forks_right']}) | {_rate(r['any_right'], m, r['any_low'], r['any_high'])} | "
                     f"{_rate(r['first_right'], m, r['first_low'], r['first_high'])} |")
    lines += ["", "Each miss whose clashing tokens one step k committed is forked after step k (dico.fork at k + 1) "
                  "with one of those tokens taken back, once per clashing position; the fork decodes on with the same "
                  "method and settings. 'any': one of its forks answers right; 'first': the fork taking back the "
                  "first clashing position (in response order) does. Intervals: 95% Wilson, over the misses forked."]
    return "\n".join(lines)


def _rate(right: int, n: int, low: float, high: float) -> str:
    if not n:
        return "-"
    return f"{right}/{n} = {100 * right / n:.0f}% [{100 * low:.0f}-{100 * high:.0f}]"


def combined_markdown(record: dict) -> str:
    """``python -m dico.bench combine``: Table 1's rows from several runs side by side, each run's n and command
    said under the table (decodes are deterministic: a row is what it would be in one run of every method)."""
    table = markdown(record["rows"], record.get("title", "")).split("\n")
    return "\n".join(table[:-1] + [f"{_sources(record)}. 95% Wilson interval in brackets; speed-ups (x) against "
                                    "Vanilla in the row's own run; answer NFE = forward passes until the last answer "
                                    "token was committed." + floor_note(record["rows"]) + " "
                                    + record.get("note", "")]).rstrip()


def _sources(record: dict) -> str:
    """Where a combined file's rows come from: each run's rows, n and command."""
    return "; ".join(f"{s['rows']} rows from `{s['path']}` (n = {s['n']} items per task, `{s['command']}`)"
                     for s in record["sources"])


def _ci(ci: dict, spec: str = ".2f") -> str:
    if not ci or ci.get("mean") is None:
        return "-"
    return f"{ci['mean']:{spec}} ({ci['low']:{spec}}-{ci['high']:{spec}})"


def observe_markdown(rows: list[dict], title: str) -> str:
    """``python -m dico.bench observe``: Observation II by lens and stage, Observation III and the floor, the clash
    of each method's steps against its answers."""
    from dico.observe import CLASH_LIMIT, CLASH_MARK, WITHIN
    observed = [r for r in rows if r["kind"] == "observe"]
    lines = [f"**{title}**", "", f"Observation II: of the dependency (or attention) among masked answer positions, "
             f"the share within {WITHIN} positions against an even spread's share, the mean distance and the total "
             "(nats, summed over every write and every position it moves; for attention the share going to the "
             "response)", "",
             "| family | mode | lens and stage | share within | even share | mean distance | total |",
             "|---|---|---|---|---|---|---|"]
    for r in observed:
        for key, found in r["lenses"].items():
            lines.append(f"| {r['family']} | {r['mode']} | {key} | {_ci(found['within'])} | {_ci(found['even'])} | "
                         f"{_ci(found['mean_distance'], '.1f')} | {_ci(found['total'], '.1f')} |")
    lines += ["", "Observation III and the floor: runs of two or more adjacent masked answer positions with "
              "confidence in [0.3, 0.6) (DiCo's seed and cluster thresholds), how many a step, how long, the share "
              "of their positions Vanilla commits within 3 steps, positions left masked 10 or more steps after they "
              "were moderate; the floor's steps (each step's clash within 0.1 nats) and right answers beside "
              "Vanilla's", "",
              "| family | mode | n | runs a step | run length | committed within 3 steps | overlooked an item | "
              "Vanilla right (NFE) | floor right (NFE) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in observed:
        lines.append(f"| {r['family']} | {r['mode']} | {r['n']} | {_ci(r['moderate_runs_per_step'])} | "
                     f"{_ci(r['moderate_run_length'], '.1f')} | {_ci(r['moderate_committed_soon'])} | "
                     f"{_ci(r['overlooked_per_item'], '.1f')} | {_share(r['vanilla_right'], r['n'])} "
                     f"({r['vanilla_nfe']}) | {_share(r['floor_right'], r['n'])} ({_ci(r['floor_nfe'], '.1f')}) |")
    clashed = [r for r in rows if r["kind"] == "clash"]
    if clashed:
        lines += ["", f"The clash against the answers: answers with a step whose clash passed {CLASH_MARK} nats (a "
                  f"step's {CLASH_LIMIT} most confident tokens measured)", "",
                  "| family | mode | method | NFE | wrong with a clash | right with a clash | largest clash a run |",
                  "|---|---|---|---|---|---|---|"]
        for r in clashed:
            lines.append(f"| {r['family']} | {r['mode']} | {r['label']} | {r['nfe']:.1f} | "
                         f"{r['wrong_marked']}/{r['wrong']} | {r['right_marked']}/{r['right']} | "
                         f"{_ci(r['largest_clash'], '.1f')} |")
    return "\n".join(lines)


def _share(right: int, n: int) -> str:
    low, high = wilson(right, n)
    return f"{100 * right / n:.0f}% ({100 * low:.0f}-{100 * high:.0f})" if n else "-"


def _has(*fields):
    return lambda rows: bool(rows) and all(k in rows[0] for k in fields)


# Each kind of result file: what its first row holds, and its table (the one the command that wrote it printed).
KINDS = (
    ("frontier", _has("sweep", "knob", "value"), frontier_markdown),
    ("observe", _has("lenses", "floor_nfe"), observe_markdown),
    ("breaks", _has("right_together", "wrong_together"), breaks_markdown),
    ("takeback", _has("clash_one_step", "any_right", "first_right"), takeback_markdown),
    ("throughput", _has("speedup_batch"), lambda rows, title: throughput_markdown(rows)),
    ("speed", _has("select_ms", "forward_ms"), speed_markdown),
    ("blocks", _has("cache", "passes", "ms_per_pass", "speedup_cache"), blocks_markdown),
    ("gpu cache speed", _has("batch", "cache", "speedup", "token_forwards"), gpu_cache_speed_markdown),
    ("table", _has(*ROW_FIELDS), markdown),         # Table 1 and the ablations
)


def kind(record: dict) -> str:
    """What a result file holds: cache (its speed and accuracy rows) or one of ``KINDS``; ValueError if none."""
    if isinstance(record, dict) and "speed" in record and "accuracy" in record:
        return "cache"
    rows = record.get("rows") if isinstance(record, dict) else None
    found = next((name for name, holds, _ in KINDS if isinstance(rows, list) and holds(rows)), None)
    if found is None:
        raise ValueError("no table renders this record: expected a cache record (speed, accuracy) or rows of one of "
                         + ", ".join(name for name, _, _ in KINDS))
    return found


def render(record: dict) -> str:
    """The Markdown table of a result file's record: what the command that wrote the file printed."""
    name = kind(record)
    if name == "cache":
        return cache_tables(record)
    if name == "table" and "sources" in record:
        return combined_markdown(record)
    renderer = next(r for n, _, r in KINDS if n == name)
    table = renderer(record["rows"], record.get("title", ""))
    if "sources" in record:             # a combined frontier or breaks table: where its rows come from
        return f"{table}\n\n{_sources(record)}. {record.get('note', '')}".rstrip()
    return table
