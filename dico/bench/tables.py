"""The benchmark's files and tables: reading a result JSON (old files included), Table 1 and the throughput
table as Markdown, and README's benchmark block. Plain Python: the app reads these without torch."""
from __future__ import annotations

import json
from pathlib import Path

from dico.settings import METHOD_LABELS, MODES


ROW_FIELDS = ("method", "label", "mode", "task", "n", "accuracy", "nfe_mean", "tokens_per_s", "speedup_nfe",
              "speedup_wall")
FRONTIER_FIELDS = ROW_FIELDS + ("sweep", "knob", "value", "accuracy_low", "accuracy_high", "answer_nfe_mean")
THROUGHPUT_FIELDS = ("method", "label", "batch_size", "n", "tokens_per_s", "speedup_batch")


def read_results(path, fields=ROW_FIELDS) -> tuple[list[dict], dict]:
    """Rows and the run's own record (title, command, machine, seconds) of a ``--json`` file written by
    ``dico.bench``, checked field by field (the app shows them). Files from before rows carried ``label`` (their
    ``method`` was the display label) are read with the method id restored."""
    data = json.loads(open(path, encoding="utf-8").read())
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
        missing = [k for k in fields if k not in row]
        if missing:
            raise ValueError(f"{path}: rows[{i}] misses {', '.join(missing)}")
    return rows, {k: v for k, v in data.items() if k != "rows"}


def _x(value, ratio) -> str:
    return "-" if value is None else f"{value:.1f} ({ratio:.1f}x)"


def markdown(rows, title: str) -> str:
    """Rows laid out like the paper's Table 1: a row per task, method and length, a column group per mode."""
    modes = sorted({r["mode"] for r in rows}, key=list(MODES).index)
    head = "| Task | Method | gen / block | " + " | ".join(
        f"{m} accuracy (95% CI) | {m} NFE | {m} answer NFE | {m} tokens/s" for m in modes) + " |"
    lines = [f"**{title}**", "", head, "|" + "---|" * (3 + 4 * len(modes))]
    index = {(r["task"], r["label"], r.get("gen_length"), r["mode"]): r for r in rows}
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
                        cells += ["-"] * 4
                        continue
                    ci = f" ({100 * r['accuracy_low']:.0f}-{100 * r['accuracy_high']:.0f})" if "accuracy_low" in r else ""
                    cells += [f"{100 * r['accuracy']:.1f}%{ci}", _x(r["nfe_mean"], r["speedup_nfe"]),
                              _x(r.get("answer_nfe_mean"), r.get("speedup_answer_nfe")),
                              f"{r['tokens_per_s']:.0f} ({r['speedup_wall']:.1f}x)"]
                shape = f"{gen} / {block}" if block else str(gen or "")
                lines.append(f"| {task} | {label} | {shape} | " + " | ".join(cells) + " |")
    n = max(r["n"] for r in rows)
    batch = rows[0].get("batch_size")
    lines += ["", f"n = {n} held-out items per task; 95% Wilson interval in brackets; speed-ups (x) against Vanilla "
                  "in the same run; answer NFE = forward passes until the last answer token was committed"
                  + (f"; decoded {batch} prompts per forward pass." if batch else ".")]
    return "\n".join(lines)


def _accuracy(row: dict) -> str:
    return f"{100 * row['accuracy']:.1f}% ({100 * row['accuracy_low']:.0f}-{100 * row['accuracy_high']:.0f})"


def frontier_markdown(rows, title: str) -> str:
    """The frontier as one table: a row per task, mode and point, each line's points in its knob's order."""
    lines = [f"**{title}**", "", "| Task | mode | line | setting | accuracy (95% CI) | NFE | answer NFE |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['mode']} | {r['sweep']} | {r['knob']} = {r['value']} | {_accuracy(r)} | "
                     f"{_x(r['nfe_mean'], r['speedup_nfe'])} | {_x(r['answer_nfe_mean'], r['speedup_answer_nfe'])} |")
    lines += ["", f"n = {max(r['n'] for r in rows)} held-out items per task; 95% Wilson interval in brackets; NFE = "
                  "forward passes (mean), answer NFE = passes until the last answer token was committed; (x) against "
                  "one token a step on the same items. Top-k per step commits the k most confident masked positions "
                  "each pass (LLaDA's Vanilla with steps = gen / k)."]
    return "\n".join(lines)


def throughput_markdown(rows) -> str:
    batches = list(dict.fromkeys(r["batch_size"] for r in rows))
    labels = list(dict.fromkeys(r["label"] for r in rows))
    lines = ["**Throughput by batch size**", "",
             "| Method | " + " | ".join(f"batch {b} tokens/s" for b in batches) + " |", "|" + "---|" * (1 + len(batches))]
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
                  f"each batch size one after the other; (x) against batch 1; {same}"]
    return "\n".join(lines)


README_RESULTS = ("table1", "table1_256", "frontier", "throughput", "ablation_tg", "ablation_margin", "ablation_seeds",
                  "ablation_conquer", "ablation_authors")
README_MARKERS = ("<!-- bench:start -->", "<!-- bench:end -->")


def readme_section(folder) -> str:
    """The README's benchmark block: every shipped table, each with the command, time and machine that made it."""
    parts = []
    for name in README_RESULTS:
        if not (Path(folder) / f"{name}.json").exists():
            continue
        _, run = read_results(Path(folder) / f"{name}.json", THROUGHPUT_FIELDS if name == "throughput" else ROW_FIELDS)
        table = (Path(folder) / f"{name}.md").read_text().strip()
        image = next((f for f in (f"{name}.png", f"{name}.html") if (Path(folder) / f).exists()), None)
        if image:           # a figure drawn from the same rows (python -m visuals.export)
            table = (f"![{run['title']}](assets/bench/{image})\n\n" if image.endswith(".png") else
                     f"[{run['title']}: the figure](assets/bench/{image}) (HTML, opens in a browser)\n\n") + table
        weights = f"; {run['model']} at training step {run['model_step']:,}" if run.get("model_step") else ""
        resumed = (f"; {run['parts_resumed']} of its {run['parts']} parts decoded by earlier runs of the command, "
                   f"{run['decode_seconds'] / 60:.1f} min of decoding in all" if run.get("parts_resumed") else "")
        parts.append(f"{table}\n\n`{run['command']}` ({run['seconds'] / 60:.1f} min on {run['machine']}{weights}"
                     f"{resumed})")
    return "\n\n".join(parts)


def splice_readme(readme: str, section: str) -> str:
    start, end = README_MARKERS
    head, rest = readme.split(start, 1)
    return f"{head}{start}\n{section}\n{end}{rest.split(end, 1)[1]}"
