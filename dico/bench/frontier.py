"""The speed-accuracy frontier (issue 26), ``python -m dico.bench frontier``: each method's main knob turned, per task
family and mode, and accuracy (95% interval) read against forward passes.

    python -m dico.bench frontier --jobs 2 --json assets/bench/frontier.json --markdown assets/bench/frontier.md
    python -m dico.bench frontier --items 10 --families pick,word
    python -m visuals.export assets/bench/frontier.json assets/bench/frontier.png    # the figure, README's image

Naive top-k (k tokens a step by confidence: the paper's Figure 1, Observation I) beside Fast-dLLM's threshold and
factor and DiCo's cluster bar (``dico.settings.DICO_KNOB``): the paper's Figure 1 and Fast-dLLM's
threshold sweep in one picture. One token a step is the reference: speed-ups are against it, on the same items in
the same run.
"""
from __future__ import annotations

import functools
import sys
import time
from dataclasses import dataclass

from dico.bench.benchmark import FULL_ITEMS, QUICK_ITEMS, Cell, _families, _items, _modes, _report, _row, decode_cell
from dico.bench.hardware import bench_model, load_bench_model, machine, training_step
from dico.bench.parts import in_processes
from dico.bench.tables import frontier_markdown
from dico.embedded import tasks
from dico.settings import DEFAULT_BLOCK_LENGTH, DEFAULT_GEN_LENGTH, DICO_KNOB, SEMI_AR

TOPK = (1, 2, 4, 8, 16)
THRESHOLDS = (0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
FACTORS = (0.5, 1.0, 2.0, 4.0)


def naive_topk(k: int, gen_length: int) -> tuple[str, dict]:
    """Naive top-k as a method and its settings: the library's ``topk`` (k most confident masked positions a step,
    what Vanilla with ``steps`` = gen_length / k commits in LLaDA's generate.py)."""
    return "topk", {"k": k}


@dataclass(frozen=True)
class Point:
    """One point of the frontier: the line it lies on (``sweep``), the knob and the value it turns, and the config
    that decodes it."""
    sweep: str
    knob: str
    value: object
    label: str
    method: str
    settings: dict


def sweep(gen_length: int = DEFAULT_GEN_LENGTH) -> list[Point]:
    """Every point, each line in its knob's order; the first (one token a step) is the reference."""
    knob, values = DICO_KNOB
    return ([Point("Top-k per step", "k", k, f"Top-{k} per step", *naive_topk(k, gen_length)) for k in TOPK]
            + [Point("Fast-dLLM threshold", "threshold", t, f"Fast-dLLM {t:g}", "fast", {"threshold": t})
               for t in THRESHOLDS]
            + [Point("Fast-dLLM factor", "factor", f, f"Fast-dLLM factor {f:g}", "fast-factor", {"factor": f})
               for f in FACTORS]
            + [Point("DiCo", knob, v, f"DiCo {knob} {v:g}", "dico", {knob: v}) for v in values])


def frontier(predictor, families, modes, n_items: int, gen_length: int = DEFAULT_GEN_LENGTH, batch_size: int = 8,
             progress: bool = True) -> list[dict]:
    """Decode each family's first ``n_items`` held-out items at every point in every mode (each cell one batched
    run); one row per cell: Table 1's fields plus ``sweep``, ``knob`` and ``value``."""
    from tqdm import tqdm

    items = {family: tasks.make_split(family, "test", n_items) for family in families}
    points = sweep(gen_length)
    cells = [(point, Cell(point.label, point.method, point.settings, mode, family, gen_length,
                          DEFAULT_BLOCK_LENGTH if mode == SEMI_AR else None))
             for family in families for mode in modes for point in points]
    bar = tqdm(total=len(cells) * n_items, desc="frontier", unit="decode", disable=not progress, dynamic_ncols=True)
    for _, cell in cells:
        decode_cell(predictor, cell, items[cell.task], batch_size, bar)
    bar.close()
    ref = {(cell.task, cell.mode): cell for point, cell in cells if point == points[0]}
    return [{**_row(cell, ref[(cell.task, cell.mode)], batch_size), "sweep": point.sweep, "knob": point.knob,
             "value": point.value} for point, cell in cells]


def frontier_cell(predictor, family: str, mode: str, n_items: int, gen_length: int, batch_size: int) -> list[dict]:
    """One (family, mode) cell's rows, its reference (one token a step) among them: what ``--jobs`` gives each
    process."""
    return frontier(predictor, (family,), (mode,), n_items, gen_length, batch_size, progress=False)


def _gen(gen_length: int, modes) -> int:
    if gen_length < 1 or gen_length % max(TOPK):
        raise ValueError(f"gen: must be a positive multiple of {max(TOPK)}, so that top-k takes whole steps at every k "
                         f"in {', '.join(map(str, TOPK))}; got {gen_length}")
    if SEMI_AR in modes and gen_length % DEFAULT_BLOCK_LENGTH:
        raise ValueError(f"gen: semi-AR decodes in blocks of {DEFAULT_BLOCK_LENGTH}, so gen must be a multiple of "
                         f"{DEFAULT_BLOCK_LENGTH}; got {gen_length}")
    return gen_length


def frontier_main(args, argv) -> int:
    """``python -m dico.bench frontier``: every point on the chosen families and modes, one process."""
    n_items = args.items or (QUICK_ITEMS if args.quick else FULL_ITEMS)
    gen_length = DEFAULT_GEN_LENGTH if args.gen is None else args.gen
    try:
        _items(n_items)
        families, modes = _families(args.families), _modes(args.modes)
        _gen(gen_length, modes)
        if args.lengths:
            raise ValueError(f"lengths: the frontier takes --gen (semi-AR in blocks of {DEFAULT_BLOCK_LENGTH})")
        if args.jobs < 1 or args.batch_size < 1:
            raise ValueError(f"jobs, batch_size: must be >= 1 (each process decodes whole (family, mode) cells and "
                             f"batches their items), got {args.jobs}, {args.batch_size}")
        import torch

        torch.set_num_threads(1)    # on a shared, loaded CPU two threads spin against each other: 40x slower passes
        model = bench_model(args)
        predictor = load_bench_model(model)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    where, start = machine(args.jobs, model), time.time()
    title = f"Speed-accuracy frontier: gen {gen_length}" + (
        f", semi-AR in blocks of {DEFAULT_BLOCK_LENGTH}" if SEMI_AR in modes else "")
    print(f"{title}: model {predictor.name}, {n_items} held-out items per family, {len(sweep(gen_length))} points, "
          f"batch size {args.batch_size}, on {where}", flush=True)
    if args.jobs > 1:
        rows = in_processes(functools.partial(frontier_cell, n_items=n_items, gen_length=gen_length,
                                              batch_size=args.batch_size), model,
                            [(family, mode) for family in families for mode in modes], args.jobs,
                            progress=not args.no_progress, desc="frontier cells")
    else:
        rows = frontier(predictor, families, modes, n_items, gen_length, args.batch_size, progress=not args.no_progress)
    _report(args, argv, frontier_markdown(rows, title), start, {
        "title": title, "model": predictor.name, "model_step": training_step(args.model), "gen_length": gen_length,
        "block_length": DEFAULT_BLOCK_LENGTH, "batch_size": args.batch_size, "machine": where, "rows": rows})
    return 0
