"""Benchmark: the paper's Table 1 and ablations, at small scale, on the embedded model.

    python -m dico.bench --jobs 2             # Table 1: every method x mode x family, gen 96/32 and 256/128
    python -m dico.bench --quick              # 4 items per family at gen 96 only, about a minute on 2 cores
    python -m dico.bench ablation tg          # DiCo with and without trajectory guidance (dico.settings.ABLATIONS)
    python -m dico.bench ablation margin      # Finalize with and without the logit margin
    python -m dico.bench ablation seeds       # N in {2, 4, 6, 8, 10}
    python -m dico.bench ablation conquer     # adaptive (factor) vs fixed-threshold Conquer
    python -m dico.bench ablation authors     # each authors' code Conquer choice and the Divide shortcut alone
    python -m dico.bench throughput           # tokens/s at batch 1, 8 and 32 on the same items, side by side
    python -m dico.bench speed                # selection time per step against the forward pass, gen_length 256
    python -m dico.bench cache                # tokens/s, token forwards and accuracy with and without each KV cache
    python -m dico.bench frontier             # accuracy against passes as each method's main knob turns (frontier.py)
    python -m dico.bench breaks               # pick and team: which commits broke each method's wrong answers
    python -m dico.bench readme               # rewrite README's benchmark block from assets/bench

Every speed-up is measured against Vanilla in the same run, on the same items and at the same batch size
(NFE, answer NFE and wall-clock tokens/s ratios), never against a number from another run. Items are
decoded in batches (``dico.batch``), which commit exactly what decoding each item alone commits; with
``--jobs N`` each (family, length, mode) part runs in one process, Vanilla included, so ratios stay within one.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dico.bench.hardware import bench_model, decoded_on, load_bench_model, machine, training_step
from dico.bench.tables import markdown, readme_section, splice_readme, throughput_markdown
from dico.embedded import tasks
from dico.lanes import default_label
from dico.settings import ABLATIONS, METHODS, MODES, SEMI_AR

# (gen_length, semi-AR block_length): ours, sized to the embedded model's 20-70-token answers (three blocks
# in semi-AR), and the paper's (section 5.1: 256 positions, semi-AR blocks of 128).
LENGTHS = ((96, 32), (256, 128))
# 200 items per family: a 95% interval of about +-5 points around 85% (40 gave +-11).
FULL_ITEMS = 200
QUICK_ITEMS = 4
BATCH_SIZE = 8
THROUGHPUT_BATCHES = (1, 8, 32)
Z95 = 1.959964

METHOD_ROWS = [(default_label(m), m, {}) for m in METHODS]     # every method at its paper settings ("Top-4 per step")
# Table 1 also decodes DiCo as the authors' release does (dico.settings.AUTHORS_CODE), beside the paper's DiCo.
AUTHORS_ROW = ("DiCo (authors' code)", "dico", {"authors_code": True})
TABLE = METHOD_ROWS + [AUTHORS_ROW]
# Each ablation's families and modes: word problems, and pick and team whose answers several tokens decide together
# (lists are right with every setting); seeds in both modes, since Divide's seeds break semi-AR teams (issue 26).
ABLATION_FAMILIES = ("word", "pick", "team")
ABLATION_SCOPE = {"tg": (ABLATION_FAMILIES, ("non-ar",)), "margin": (ABLATION_FAMILIES, MODES),
                  "seeds": (ABLATION_FAMILIES, MODES), "conquer": (ABLATION_FAMILIES, ("non-ar",)),
                  "authors": (ABLATION_FAMILIES, MODES)}


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion: stays inside [0, 1] and is honest at 0% and 100%."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


@dataclass
class Cell:
    """One table cell: a config decoding one family's items at one length and mode, as one batched run."""
    label: str
    method: str
    settings: dict
    mode: str
    task: str
    gen_length: int
    block_length: int | None
    correct: int = 0
    n: int = 0
    nfe: int = 0
    answer_nfe: int = 0
    forwards: int = 0
    wall: float = 0.0
    outcomes: list = field(default_factory=list)     # per item: right (0/1) and its text's digest


def run(predictor, configs, families, modes, n_items: int, lengths=LENGTHS, batch_size: int = BATCH_SIZE,
        progress: bool = True) -> list[dict]:
    """Decode every item with every config (Vanilla first, as the reference) and return one row per cell."""
    from tqdm import tqdm

    # Vanilla one token a step is every part's reference, decoded once; other Vanilla rows (LLaDA's steps) and
    # naive top-k rows are configs like any other
    configs = [TABLE[0]] + [c for c in configs if c[0] != TABLE[0][0]]
    labels = [c[0] for c in configs]
    if len(set(labels)) < len(labels):
        raise ValueError(f"configs: label {next(x for x in labels if labels.count(x) > 1)!r} names two configs")
    items = {family: tasks.make_split(family, "test", n_items) for family in families}
    cells = [Cell(label, method, settings, mode, family, gen, block if mode == SEMI_AR else None)
             for family in families for gen, block in lengths for mode in modes for label, method, settings in configs]
    bar = tqdm(total=len(cells) * n_items, desc="bench", unit="decode", disable=not progress, dynamic_ncols=True)
    for cell in cells:
        decode_cell(predictor, cell, items[cell.task], batch_size, bar)
    bar.close()
    ref = {(c.task, c.gen_length, c.mode): c for c in cells if c.label == TABLE[0][0]}
    return [_row(c, ref[(c.task, c.gen_length, c.mode)], batch_size) for c in cells]


def decode_cell(predictor, cell: Cell, items, batch_size: int, bar) -> None:
    """Decode ``items`` with the cell's config as one batched run and fill in its counts; ``bar`` (tqdm) ticks
    once per decoded item."""
    from dico.batch import decode_batch, drain

    bar.set_postfix_str(f"{cell.task} {cell.gen_length} {cell.mode} {cell.label}", refresh=True)
    start = time.perf_counter()
    runs = decode_batch(predictor, [item.prompt for item in items], cell.method, batch_size=batch_size,
                        mode=cell.mode, gen_length=cell.gen_length, block_length=cell.block_length,
                        settings=cell.settings)
    traces = drain(runs, lambda: bar.update(1))
    cell.wall = time.perf_counter() - start
    cell.n = len(traces)
    cell.outcomes = [(int(tasks.check(item, trace.text)), text_digest(trace.text))
                     for item, trace in zip(items, traces)]
    cell.correct = sum(right for right, _ in cell.outcomes)
    cell.nfe = sum(trace.nfe for trace in traces)
    cell.answer_nfe = sum(trace.answer_nfe for trace in traces)
    cell.forwards = sum(trace.token_forwards for trace in traces)


def text_digest(text: str) -> str:
    """A decoded text's fingerprint: enough to tell whether two decodes of one item wrote the same text."""
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _row(cell: Cell, ref: Cell, batch_size: int) -> dict:
    tps = cell.n * cell.gen_length / cell.wall if cell.wall else 0.0
    ref_tps = ref.n * ref.gen_length / ref.wall if ref.wall else 0.0
    low, high = wilson(cell.correct, cell.n)
    return {"method": cell.method, "label": cell.label, "mode": cell.mode, "task": cell.task,
            "gen_length": cell.gen_length, "block_length": cell.block_length, "batch_size": batch_size,
            "n": cell.n, "correct": cell.correct, "accuracy": round(cell.correct / cell.n, 4),
            "accuracy_low": round(low, 4), "accuracy_high": round(high, 4),
            "nfe_mean": round(cell.nfe / cell.n, 2), "answer_nfe_mean": round(cell.answer_nfe / cell.n, 2),
            "token_forwards_mean": round(cell.forwards / cell.n, 1),
            "tokens_per_s": round(tps, 1), "speedup_nfe": round(ref.nfe / cell.nfe, 2),
            "speedup_answer_nfe": round(ref.answer_nfe / cell.answer_nfe, 2) if cell.answer_nfe else 0.0,
            "speedup_wall": round(tps / ref_tps, 2) if ref_tps else 0.0, "settings": cell.settings,
            # kept in the saved parts (the cache bench compares its cached decodes with them), not in the report
            "outcomes": {"correct": "".join(str(c) for c, _ in cell.outcomes),
                         "text": [digest for _, digest in cell.outcomes]}}


def throughput(predictor, n_items: int, batches=THROUGHPUT_BATCHES, gen_length: int = LENGTHS[0][0],
               progress: bool = True) -> list[dict]:
    """Tokens/s of every method at each batch size on the same items, one after the other; the decodes of
    every batch size must agree on the CPU in float32 (they are the same decodes, only grouped differently). A GPU,
    or bfloat16, adds a batch's rows in another order than one row's, so a near decision may go the other way
    there: each row counts the texts that differ from the first batch size's."""
    import torch
    from tqdm import tqdm

    from dico.batch import generate_batch

    prompts = [item.prompt for family in tasks.FAMILIES for item in tasks.make_split(family, "test", n_items)]
    rows = []
    bar = tqdm(total=len(METHOD_ROWS) * len(batches), desc="throughput", unit="run", disable=not progress)
    for label, method, settings in METHOD_ROWS:
        texts, base = None, None
        for batch_size in batches:
            start = time.perf_counter()
            traces = generate_batch(predictor, prompts, method, batch_size=batch_size, gen_length=gen_length,
                                    settings=settings)
            tps = len(prompts) * gen_length / (time.perf_counter() - start)
            if texts is None:
                texts, base = [t.text for t in traces], tps
            changed = sum(t.text != text for t, text in zip(traces, texts))
            if changed and predictor.dtype == torch.float32 and predictor.device.type == "cpu":
                raise RuntimeError(f"{label}: batch size {batch_size} decoded other texts than batch size {batches[0]}")
            rows.append({"method": method, "label": label, "mode": "non-ar", "gen_length": gen_length,
                         "batch_size": batch_size, "n": len(prompts), "families": list(tasks.FAMILIES),
                         "tokens_per_s": round(tps, 1), "speedup_batch": round(tps / base, 2),
                         "texts_changed": changed})
            bar.update(1)
    bar.close()
    return rows


def speed(predictor, n_items: int, gen_length: int = 256) -> list[dict]:
    """Median forward and selection time per step for every method: the rules' own cost next to the model's."""
    import statistics

    from dico.loop import generate

    rows = []
    items = tasks.make_split("word", "test", n_items)
    for label, method, settings in METHOD_ROWS:
        steps = [s for item in items for s in generate(predictor, item.prompt, method, gen_length=gen_length,
                                                       settings=settings).steps]
        forward = statistics.median(s.forward_s for s in steps)
        select = statistics.median(s.select_s for s in steps)
        rows.append({"method": method, "label": label, "gen_length": gen_length, "steps": len(steps),
                     "forward_ms": round(1000 * forward, 3), "select_ms": round(1000 * select, 3),
                     "select_share": round(select / forward, 4)})
    return rows


def _choices(option: str, text: str | None, allowed, noun: str, default=()) -> tuple[str, ...]:
    """A comma-separated option's values (``default`` when it is not given), each one of ``allowed``."""
    chosen = tuple(dict.fromkeys(v for v in (text or "").split(",") if v)) or tuple(default)
    unknown = [v for v in chosen if v not in allowed]
    if unknown or not chosen:
        raise ValueError(f"{option}: unknown {noun} {(unknown or [text])[0]!r}; choose from {', '.join(allowed)}")
    return chosen


def _families(text: str) -> tuple[str, ...]:
    return _choices("families", text, tasks.FAMILIES, "family")


def _modes(text: str) -> tuple[str, ...]:
    return _choices("modes", text, MODES, "mode")


def _items(n_items: int) -> int:
    if not 1 <= n_items <= tasks.TEST_SIZE:
        raise ValueError(f"items: must be in 1..{tasks.TEST_SIZE}, got {n_items}")
    return n_items


def _lengths(text: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = tuple(tuple(int(v) for v in part.split("/")) for part in text.split(",") if part)
    except ValueError:
        pairs = ()
    if not pairs or any(len(p) != 2 or p[0] < 1 or p[1] < 1 or p[0] % p[1] for p in pairs):
        raise ValueError(f"lengths: expected gen/block pairs like 96/32,256/128 (block dividing gen), got {text!r}")
    return pairs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dico.bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("what", nargs="*", default=[],
                        help=f"'ablation {'|'.join(ABLATIONS)}', 'throughput', 'speed', 'cache', 'frontier', 'breaks', "
                        "'readme', or nothing for Table 1")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ITEMS} items per family, gen 96/32 only")
    parser.add_argument("--items", type=int, default=None, help=f"items per task family (default {FULL_ITEMS})")
    parser.add_argument("--model", default=None, help="hub id or folder (default: the embedded model)")
    parser.add_argument("--lengths", default=None, help="gen/block pairs decoded side by side "
                        f"(default {','.join(f'{g}/{b}' for g, b in LENGTHS)}; ablations: the first)")
    parser.add_argument("--gen", type=int, default=None, help="frontier only: answer length (default 96; semi-AR "
                        "in blocks of 32)")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="prompts per forward pass "
                        f"(default {BATCH_SIZE}); decodes are identical at every batch size")
    parser.add_argument("--jobs", type=int, default=1, help="processes decoding (family, length, mode) parts side by "
                        "side, one torch thread each (default 1; 2 on a 2-core CPU)")
    parser.add_argument("--families", default=",".join(tasks.FAMILIES), help="comma-separated task families")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    parser.add_argument("--json", metavar="PATH", help="write every row as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    parser.add_argument("--methods", default=None, help="cache and breaks: comma-separated methods (default: every "
                        "one)")
    parser.add_argument("--cache", default="none", help="breaks only: decode every lane again with this KV cache "
                        "kind, each beside its lane, counting the answers the cache broke (default none)")
    parser.add_argument("--parts", metavar="DIR", help="Table 1, ablations and cache: save each finished part (a "
                        "family, length and mode; a cache case) in DIR; the same command run again skips those saved")
    parser.add_argument("--device", default=None, help="where the model decodes: cpu, cuda, cuda:1 ... (default: a "
                        "GPU where there is one, else the CPU)")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: bfloat16 on a GPU, "
                        "float32 on the CPU)")
    parser.add_argument("--no-progress", action="store_true")
    from dico.bench.cache import cache_options
    cache_options(parser)
    args = parser.parse_args(argv)

    if args.what == ["readme"]:
        root = Path(__file__).resolve().parents[2]
        readme = root / "README.md"
        readme.write_text(splice_readme(readme.read_text(), readme_section(root / "assets" / "bench")))
        print(f"wrote the benchmark block of {readme} from assets/bench")
        return 0
    if args.what == ["speed"]:
        try:
            predictor = load_bench_model(bench_model(args))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        rows = speed(predictor, args.items or (2 if args.quick else 10))
        print("| Method | steps | forward ms (median) | selection ms (median) | selection / forward |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['label']} | {r['steps']} | {r['forward_ms']:.2f} | {r['select_ms']:.3f} | "
                  f"{100 * r['select_share']:.1f}% |")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"title": "speed", "rows": rows}, fh, indent=1)
        return 0
    if args.what == ["cache"]:
        from dico.bench.cache import cache_main
        return cache_main(args, argv)
    if args.what == ["frontier"]:
        from dico.bench.frontier import frontier_main
        return frontier_main(args, argv)
    if args.what == ["breaks"]:
        from dico.bench.breaks import breaks_main
        return breaks_main(args, argv)
    known = args.what in ([], ["throughput"]) or (len(args.what) == 2 and args.what[0] == "ablation"
                                                  and args.what[1] in ABLATIONS)
    if not known or args.gen is not None:
        print(f"error: what: expected nothing, 'throughput', 'speed', 'cache', 'frontier', 'breaks', 'readme' or "
              f"'ablation {{{','.join(ABLATIONS)}}}', got {' '.join(args.what)!r}" if not known else
              "error: gen: only the frontier takes --gen (Table 1 and the ablations take --lengths)", file=sys.stderr)
        return 2
    n_items = args.items or (QUICK_ITEMS if args.quick else FULL_ITEMS)
    if args.what[:1] == ["ablation"]:
        name = args.what[1]
        configs, (families, modes) = [(label, "dico", s) for label, s in ABLATIONS[name].items()], ABLATION_SCOPE[name]
        title, default_lengths = f"Ablation: {name}", LENGTHS[:1]
    else:
        configs, title, families, modes = TABLE, "Table 1 (small scale)", None, None
        default_lengths = LENGTHS[:1] if args.quick else LENGTHS
    try:
        lengths = _lengths(args.lengths) if args.lengths else default_lengths
        _items(n_items)
        if args.batch_size < 1 or args.jobs < 1:
            raise ValueError(f"batch_size, jobs: must be >= 1, got {args.batch_size}, {args.jobs}")
        families, modes = families or _families(args.families), modes or _modes(args.modes)
        from dico.models import EMBEDDED_NAME
        model = bench_model(args)
        parallel = args.jobs > 1 and args.what != ["throughput"]     # the worker processes load their own model
        predictor = None if parallel else load_bench_model(model)
        model_name = predictor.name if predictor else (args.model or EMBEDDED_NAME)
        where = machine(args.jobs, model)
        start = time.time()
        if not args.what:
            title += ": gen / block " + ", ".join(f"{g} / {b}" for g, b in lengths)
        if args.what == ["throughput"]:
            n_items = args.items or (4 if args.quick else 16)
            print(f"throughput: model {model_name}, {len(tasks.FAMILIES) * n_items} prompts, batch sizes "
                  f"{', '.join(map(str, THROUGHPUT_BATCHES))}, on {where}", flush=True)
            rows = throughput(predictor, n_items, gen_length=lengths[0][0], progress=not args.no_progress)
            table, title, how = throughput_markdown(rows), "throughput", {}
        else:
            print(f"{title}: model {model_name}, gen/block {', '.join(f'{g}/{b}' for g, b in lengths)}, "
                  f"{n_items} held-out items per task, batch size {args.batch_size}, on {where}", flush=True)
            parts = None
            if args.parts:
                from dico.bench.parts import Parts, weights_id
                parts = Parts(args.parts, {"bench": title.split(":")[0], "weights": weights_id(args.model),
                                           **decoded_on(model), "items": n_items, "batch_size": args.batch_size,
                                           "configs": [list(c) for c in configs]})
            from dico.bench.parts import run_parts
            rows, how = run_parts(model, configs, families, modes, n_items, lengths, args.batch_size,
                                  args.jobs if parallel else 1, parts, predictor, progress=not args.no_progress)
            if args.what:
                rows = [r for r in rows if r["label"] in ABLATIONS[args.what[1]]]
            table = markdown(rows, title)
            rows = [{k: v for k, v in row.items() if k != "outcomes"} for row in rows]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _report(args, argv, table, start, {"title": title, "model": model_name, "model_step": training_step(args.model),
                                        "lengths": [list(p) for p in lengths], "batch_size": args.batch_size,
                                        "jobs": args.jobs, "machine": where, **how, "rows": rows})
    return 0


def _report(args, argv, table: str, start: float, record: dict) -> None:
    """Print the table and the run time; write ``record`` (plus the command and seconds) and the table if asked."""
    seconds = round(time.time() - start)
    print(table)
    print(f"\n(ran in {seconds} s)")
    if args.json:
        command = "python -m dico.bench " + " ".join(argv if argv is not None else sys.argv[1:])
        with open(args.json, "w") as fh:
            json.dump({**record, "command": command.strip(), "seconds": seconds}, fh, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
