"""Benchmark: the paper's Table 1 and ablations, at small scale, on the embedded model.

    python -m dico.bench                      # Table 1: every method x mode x task family
    python -m dico.bench --quick              # a small subset, under a minute on 2 cores
    python -m dico.bench ablation tg          # DiCo with and without trajectory guidance
    python -m dico.bench ablation margin      # Finalize with and without the logit margin
    python -m dico.bench ablation seeds       # N in {2, 4, 6, 8, 10}
    python -m dico.bench ablation conquer     # adaptive (factor) vs fixed-threshold Conquer
    python -m dico.bench speed                # selection time per step against the forward pass, gen_length 256
    python -m dico.bench readme               # rewrite README's benchmark block from assets/bench

Every speed-up is measured against Vanilla in the same run, on the same items, one after the
other (NFE ratio and wall-clock tokens/s ratio), never against a number from another run.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dico import tasks

# The paper decodes 256 positions in blocks of 32 with LLaDA-8B; our answers are 20-70 tokens, so
# the same shape (answer well inside the window, 3 blocks in semi-AR) is 96 positions in blocks of 32.
GEN_LENGTH = 96
BLOCK_LENGTH = 32
# 40 items per family: one item is 2.5 points of accuracy (20 gave 5-point steps that hid the ordering).
FULL_ITEMS = 40
QUICK_ITEMS = 4

TABLE = [("Vanilla", "vanilla", {}), ("Fast-dLLM (0.95)", "fast", {"threshold": 0.95}),
         ("Fast-dLLM (factor)", "fast-factor", {"factor": 1.0}), ("DiCo", "dico", {})]
ABLATIONS = {
    "tg": [("DiCo", "dico", {}), ("DiCo w/o TG", "dico", {"guidance": False})],
    "margin": [("DiCo", "dico", {}), ("DiCo w/o logit margin", "dico", {"logit_margin": False})],
    "seeds": [(f"DiCo N={n}", "dico", {"seeds": n}) for n in (2, 4, 6, 8, 10)],
    "conquer": [("DiCo (factor Conquer)", "dico", {}),
                ("DiCo (threshold 0.9 Conquer)", "dico", {"conquer": "threshold", "conquer_threshold": 0.9})],
}
ABLATION_SCOPE = {"tg": (("word",), ("non-ar",)), "margin": (("word",), ("non-ar", "semi-ar")),
                  "seeds": (("word",), ("non-ar",)), "conquer": (("word",), ("non-ar",))}
ROW_FIELDS = ("method", "mode", "task", "n", "accuracy", "nfe_mean", "tokens_per_s", "speedup_nfe", "speedup_wall")


@dataclass
class Cell:
    label: str
    method: str
    settings: dict
    mode: str
    task: str
    correct: int = 0
    n: int = 0
    nfe: int = 0
    tokens: int = 0
    wall: float = 0.0


def run(predictor, configs, families, modes, n_items: int, gen_length: int, block_length: int, progress=True):
    """Decode every item with every config (Vanilla first, as the reference) and return the rows."""
    from tqdm import tqdm

    from dico.loop import generate

    configs = [("Vanilla", "vanilla", {})] + [c for c in configs if c[1] != "vanilla"]
    cells = {(label, mode, family): Cell(label, method, settings, mode, family)
             for family in families for mode in modes for label, method, settings in configs}
    items = {family: tasks.make_split(family, "test", n_items) for family in families}
    bar = tqdm(total=len(cells) * n_items, desc="bench", unit="run", disable=not progress, dynamic_ncols=True)
    for family in families:
        for item in items[family]:
            for mode in modes:
                for label, method, settings in configs:
                    trace = generate(predictor, item.prompt, method, mode=mode, gen_length=gen_length,
                                     block_length=block_length if mode == "semi-ar" else None, **settings)
                    cell = cells[(label, mode, family)]
                    cell.n += 1
                    cell.correct += tasks.check(item, trace.text)
                    cell.nfe += trace.nfe
                    cell.tokens += gen_length
                    cell.wall += trace.wall_s
                    bar.update(1)
                    bar.set_postfix_str(f"{family} {mode} {label}", refresh=False)
    bar.close()
    rows = []
    for (label, mode, family), cell in cells.items():
        ref = cells[("Vanilla", mode, family)]
        tps = cell.tokens / cell.wall if cell.wall else 0.0
        ref_tps = ref.tokens / ref.wall if ref.wall else 0.0
        rows.append({"method": label, "mode": mode, "task": family, "n": cell.n,
                     "accuracy": round(cell.correct / cell.n, 4), "nfe_mean": round(cell.nfe / cell.n, 2),
                     "tokens_per_s": round(tps, 1), "speedup_nfe": round(ref.nfe / cell.nfe, 2),
                     "speedup_wall": round(tps / ref_tps, 2) if ref_tps else 0.0,
                     "settings": cell.settings})
    return rows


def read_results(path) -> tuple[list[dict], dict]:
    """Rows and the run's own record (title, command, machine, seconds) of a ``--json`` file written by this
    module, checked field by field (the app shows them)."""
    data = json.loads(open(path, encoding="utf-8").read())
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: no benchmark rows")
    for i, row in enumerate(rows):
        missing = [k for k in ROW_FIELDS if k not in row]
        if missing:
            raise ValueError(f"{path}: rows[{i}] misses {', '.join(missing)}")
    return rows, {k: v for k, v in data.items() if k != "rows"}


def machine() -> str:
    """What the numbers were measured on: they are only comparable within one run on one machine."""
    import os

    import torch

    return (f"{platform.machine()} {platform.processor() or ''}".strip() +
            f", {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch {torch.__version__}")


def speed(predictor, n_items: int, gen_length: int = 256) -> list[dict]:
    """Median forward and selection time per step for every method: the rules' own cost next to the model's."""
    import statistics

    from dico.loop import generate

    rows = []
    items = tasks.make_split("word", "test", n_items)
    for label, method, settings in TABLE:
        steps = [s for item in items for s in generate(predictor, item.prompt, method, gen_length=gen_length,
                                                       **settings).steps]
        forward = statistics.median(s.forward_s for s in steps)
        select = statistics.median(s.select_s for s in steps)
        rows.append({"method": label, "gen_length": gen_length, "steps": len(steps),
                     "forward_ms": round(1000 * forward, 3), "select_ms": round(1000 * select, 3),
                     "select_share": round(select / forward, 4)})
    return rows


def markdown(rows, title: str) -> str:
    """Rows laid out like the paper's Table 1: a row per task and method, a column pair per mode."""
    modes = sorted({r["mode"] for r in rows}, key=["non-ar", "semi-ar"].index)
    head = "| Task | Method | " + " | ".join(f"{m} accuracy | {m} NFE | {m} tokens/s (speed-up)" for m in modes) + " |"
    lines = [f"**{title}**", "", head, "|" + "---|" * (2 + 3 * len(modes))]
    index = {(r["task"], r["method"], r["mode"]): r for r in rows}
    for task in dict.fromkeys(r["task"] for r in rows):
        for method in dict.fromkeys(r["method"] for r in rows):
            cells = []
            for mode in modes:
                r = index.get((task, method, mode))
                cells += (["-"] * 3 if r is None else
                          [f"{100 * r['accuracy']:.1f}%", f"{r['nfe_mean']:.1f} ({r['speedup_nfe']:.1f}x)",
                           f"{r['tokens_per_s']:.0f} ({r['speedup_wall']:.1f}x)"])
            lines.append(f"| {task} | {method} | " + " | ".join(cells) + " |")
    n = max(r["n"] for r in rows)
    lines += ["", f"n = {n} held-out items per task; NFE speed-up = Vanilla NFE / method NFE; tokens/s speed-up "
                  "against Vanilla in the same run."]
    return "\n".join(lines)


README_RESULTS = ("table1", "ablation_tg", "ablation_margin", "ablation_seeds", "ablation_conquer")
README_MARKERS = ("<!-- bench:start -->", "<!-- bench:end -->")


def readme_section(folder) -> str:
    """The README's benchmark block: every shipped table, each with the command, time and machine that made it."""
    parts = []
    for name in README_RESULTS:
        _, run = read_results(Path(folder) / f"{name}.json")
        table = (Path(folder) / f"{name}.md").read_text().strip()
        parts.append(f"{table}\n\n`{run['command']}` ({run['seconds'] / 60:.1f} min on {run['machine']})")
    return "\n\n".join(parts)


def splice_readme(readme: str, section: str) -> str:
    start, end = README_MARKERS
    head, rest = readme.split(start, 1)
    return f"{head}{start}\n{section}\n{end}{rest.split(end, 1)[1]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dico.bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("what", nargs="*", default=[], help="'ablation tg|margin|seeds|conquer', 'speed', 'readme', or nothing for Table 1")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ITEMS} items per task family")
    parser.add_argument("--items", type=int, default=None, help=f"items per task family (default {FULL_ITEMS})")
    parser.add_argument("--model", default=None, help="hub id or folder (default: the embedded model)")
    parser.add_argument("--gen-length", type=int, default=GEN_LENGTH)
    parser.add_argument("--block-length", type=int, default=BLOCK_LENGTH)
    parser.add_argument("--families", default=",".join(tasks.FAMILIES), help="comma-separated task families")
    parser.add_argument("--modes", default="non-ar,semi-ar", help="comma-separated modes")
    parser.add_argument("--json", metavar="PATH", help="write every row as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    if args.what == ["readme"]:
        root = Path(__file__).resolve().parent.parent
        readme = root / "README.md"
        readme.write_text(splice_readme(readme.read_text(), readme_section(root / "assets" / "bench")))
        print(f"wrote the benchmark block of {readme} from assets/bench")
        return 0
    if args.what == ["speed"]:
        from dico.models import load_model
        rows = speed(load_model(args.model, attention=False), args.items or (2 if args.quick else 10))
        print("| Method | steps | forward ms (median) | selection ms (median) | selection / forward |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['method']} | {r['steps']} | {r['forward_ms']:.2f} | {r['select_ms']:.3f} | "
                  f"{100 * r['select_share']:.1f}% |")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"title": "speed", "rows": rows}, fh, indent=1)
        return 0
    if args.what and not (len(args.what) == 2 and args.what[0] == "ablation" and args.what[1] in ABLATIONS):
        print(f"error: what: expected nothing or 'ablation {{{','.join(ABLATIONS)}}}', got {' '.join(args.what)!r}",
              file=sys.stderr)
        return 2
    n_items = args.items or (QUICK_ITEMS if args.quick else FULL_ITEMS)
    families = tuple(f for f in args.families.split(",") if f)
    modes = tuple(m for m in args.modes.split(",") if m)
    if args.what:
        name = args.what[1]
        configs, (families, modes) = ABLATIONS[name], ABLATION_SCOPE[name]
        title = f"Ablation: {name}"
    else:
        configs, title = TABLE, "Table 1 (small scale)"
    try:
        if not 1 <= n_items <= tasks.TEST_SIZE:
            raise ValueError(f"items: must be in 1..{tasks.TEST_SIZE}, got {n_items}")
        for family in families:
            if family not in tasks.FAMILIES:
                raise ValueError(f"families: unknown family {family!r}; choose from {', '.join(tasks.FAMILIES)}")
        from dico.models import load_model
        predictor = load_model(args.model, attention=False)
        where = machine()
        print(f"{title}: model {predictor.name}, gen_length {args.gen_length}, block_length {args.block_length} "
              f"(the paper's 256/32 scaled to answers of 20-70 tokens), {n_items} held-out items per task, "
              f"on {where}", flush=True)
        start = time.time()
        rows = run(predictor, configs, families, modes, n_items, args.gen_length, args.block_length,
                   progress=not args.no_progress)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.what:
        keep = {label for label, _, _ in configs}
        rows = [r for r in rows if r["method"] in keep]
    seconds = round(time.time() - start)
    table = markdown(rows, title)
    print(table)
    print(f"\n(ran in {seconds} s)")
    if args.json:
        command = "python -m dico.bench " + " ".join(argv if argv is not None else sys.argv[1:])
        with open(args.json, "w") as fh:
            json.dump({"title": title, "model": predictor.name, "gen_length": args.gen_length,
                       "block_length": args.block_length, "command": command.strip(), "machine": where,
                       "seconds": seconds, "rows": rows}, fh, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
