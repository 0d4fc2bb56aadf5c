"""Table 1, ``python -m dico.bench`` (or ``python -m dico.bench table1``): every method x mode x family, at small
scale on the embedded model, gen 96/32 and the paper's 256/128. ``run`` decodes a table's cells; the ablations
(``dico.bench.ablation``) decode their configs the same way.

Every speed-up is measured against Vanilla in the same run, on the same items and at the same batch size
(NFE, answer NFE and wall-clock tokens/s ratios), never against a number from another run. Items are
decoded in batches (``dico.batch``), which commit exactly what decoding each item alone commits; with
``--jobs N`` each (family, length, mode) part runs in one process, Vanilla included, so ratios stay within one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import partial

from dico.bench import options
from dico.bench.core import (
    BATCH_SIZE,
    CHUNK_ITEMS,
    FLOOR,
    FLOOR_ROW,
    LENGTHS,
    QUICK_ITEMS,
    REFERENCE,
    TABLE,
    TABLE_CELLS,
    Cell,
    add_counts,
    cell_counts,
    cell_row,
    decode_cell,
    without_outcomes,
)
from dico.bench.hardware import decoded_on
from dico.bench.parts import Parts, run_parts, weights_id
from dico.bench.runner import Report, Session, Subcommand, add_measure
from dico.bench.tables import markdown
from dico.embedded import tasks
from dico.settings import METHODS, SEMI_AR, decodes_in

TITLE = "Table 1 (small scale)"


def run(predictor, configs, families, modes, n_items: int, lengths=LENGTHS, batch_size: int = BATCH_SIZE,
        progress: bool = True, store: Parts | None = None) -> list[dict]:
    """Decode every item with every config (Vanilla first, as the reference) and return one row per cell.

    With ``store`` (``--parts``) the items are decoded ``CHUNK_ITEMS`` at a time, each config's chunk saved as it
    finishes and skipped when saved before: a rerun goes on where a stopped one ended, and a run with more items
    reuses the first ones (a split's first items are the same at every size). Without it every cell is one batched
    run, so its tokens/s is measured side by side with Vanilla's."""
    from tqdm import tqdm

    # Vanilla one token a step is every part's reference, decoded once; other Vanilla rows (LLaDA's steps) and
    # naive top-k rows are configs like any other
    configs = [REFERENCE] + [c for c in configs if c[0] != REFERENCE[0]]
    labels = [c[0] for c in configs]
    if len(set(labels)) < len(labels):
        raise ValueError(f"configs: label {next(x for x in labels if labels.count(x) > 1)!r} names two configs")
    items = {family: tasks.make_split(family, "test", n_items) for family in families}
    cells = [Cell(label, method, settings, mode, family, gen, block if mode == SEMI_AR else None)
             for family in families for gen, block in lengths for mode in modes for label, method, settings in configs
             if decodes_in(method, mode)]
    bar = tqdm(total=len(cells) * n_items, desc="bench", unit="decode", disable=not progress, dynamic_ncols=True)
    step = CHUNK_ITEMS if store else n_items
    for start in range(0, n_items, step):
        for cell in cells:
            add_counts(cell, _chunk(predictor, cell, items[cell.task], (start, min(start + step, n_items)),
                                    batch_size, bar, store))
    bar.close()
    ref = {(c.task, c.gen_length, c.mode): c for c in cells if c.label == REFERENCE[0]}
    return [cell_row(c, ref[(c.task, c.gen_length, c.mode)], batch_size) for c in cells]


def _chunk(predictor, cell: Cell, items, span: tuple[int, int], batch_size: int, bar, store: Parts | None) -> dict:
    """The counts of ``cell``'s config on ``items[start:stop]``: from ``store`` when saved there, else decoded (and
    saved)."""
    part = {"cell": [cell.label, cell.method, cell.settings, cell.mode, cell.task, cell.gen_length,
                     cell.block_length], "items": list(span)}
    saved = store.get(part) if store else None
    if saved is not None:
        bar.update(span[1] - span[0])
        return saved
    piece = replace(cell)
    decode_cell(predictor, piece, items[span[0]:span[1]], batch_size, bar)
    counts = cell_counts(piece)
    if store:
        store.put(part, counts, piece.wall)
    return counts


@dataclass(frozen=True)
class TablePlan:
    """A table's checked options: its configs (label, method, settings), where they decode, and the labels its
    rows keep (None: every one; an ablation leaves out the Vanilla reference)."""
    title: str
    configs: list
    families: tuple
    modes: tuple
    n_items: int
    lengths: tuple
    batch_size: int
    jobs: int
    parts: str | None
    keep: tuple | None = None

    @property
    def parallel(self) -> bool:
        return self.jobs > 1            # the worker processes load their own model


def table_plan(args, title: str, configs, families, modes, default_lengths, keep=None) -> TablePlan:
    """The checked options of Table 1 or an ablation."""
    lengths = options.lengths(args.lengths) if args.lengths else default_lengths
    n_items = options.item_count(args)
    options.at_least_one(batch_size=args.batch_size, jobs=args.jobs)
    options.fitting(families, lengths)
    return TablePlan(title, configs, families, modes, n_items, lengths, args.batch_size, args.jobs, args.parts, keep)


def measure_table(plan: TablePlan, session: Session) -> Report:
    """Decode a table's parts (resuming from ``--parts``), in ``--jobs`` processes or this one."""
    where, title = session.where(plan.jobs), plan.title
    print(f"{title}: model {session.model_name()}, gen/block {', '.join(f'{g}/{b}' for g, b in plan.lengths)}, "
          f"{plan.n_items} held-out items per task, batch size {plan.batch_size}, on {where}", flush=True)
    # the saved chunks' key: what every chunk's counts depend on beyond its own config and items
    store = Parts(plan.parts, {"bench": TABLE_CELLS, "weights": weights_id(session.args.model),
                               **decoded_on(session.model), "batch_size": plan.batch_size}) if plan.parts else None
    before = {json.dumps(part, sort_keys=True) for part, _ in store.saved()} if store else set()
    rows, how = run_parts(partial(run, store=store), session.model, plan.configs, plan.families, plan.modes,
                          plan.n_items, plan.lengths, plan.batch_size, plan.jobs, None, session.predictor,
                          progress=session.progress)
    if store:           # what the chunks took when they were decoded, this run or an earlier one
        mine = [(part, took) for part, took in store.saved() if _in_plan(part, plan)]
        how = {"parts": how["parts"], "chunks": len(mine), "decode_seconds": round(sum(t for _, t in mine)),
               "chunks_resumed": sum(json.dumps(part, sort_keys=True) in before for part, _ in mine)}
    if plan.keep is not None:
        rows = [r for r in rows if r["label"] in plan.keep]
    return Report(markdown(rows, title), {
        "title": title, **session.about(), "lengths": [list(p) for p in plan.lengths], "batch_size": plan.batch_size,
        "jobs": plan.jobs, "machine": where, **how, "rows": without_outcomes(rows)})


def _in_plan(part: dict, plan: TablePlan) -> bool:
    """Whether a saved chunk is one of ``plan``'s cells' (Vanilla's included) within its items."""
    label, _, _, mode, task, gen, block = part["cell"]
    labels = {REFERENCE[0], *(c[0] for c in plan.configs)}
    return (label in labels and task in plan.families and mode in plan.modes and part["items"][1] <= plan.n_items
            and any(gen == g and block == (b if mode == SEMI_AR else None) for g, b in plan.lengths))


def table_configs(text: str | None) -> list:
    """Table 1's configs for ``--methods`` (comma-separated method names; "dico" keeps both DiCo rows; "floor" the
    floor's row, ``dico.observe.floor``): every config and the floor when it is not given. Vanilla, the reference,
    is decoded in every part whichever are chosen."""
    rows = TABLE + [FLOOR_ROW]
    if not text:
        return rows
    chosen = options.choices("methods", text, (*METHODS, FLOOR), "method")
    return [c for c in rows if c[1] in chosen]


def plan(args) -> TablePlan:
    lengths = options.lengths(args.lengths) if args.lengths else (LENGTHS[:1] if args.quick else LENGTHS)
    scope = options.families(args.families), options.modes(args.modes)
    configs = table_configs(args.methods)
    chosen = f" {', '.join(dict.fromkeys(c[0] for c in configs))};" if args.methods else ""
    title = f"{TITLE}:{chosen} gen / block " + ", ".join(f"{g} / {b}" for g, b in lengths)
    return table_plan(args, title, configs, *scope, lengths)


def add_table_options(parser, parts: str = "a family, length and mode") -> None:
    """The options Table 1 and the ablations share."""
    options.add_items(parser, quick=f"{QUICK_ITEMS} items per family, gen 96/32 only")
    options.add_lengths(parser)
    options.add_batching(parser, jobs="processes decoding (family, length, mode) parts side by side, one torch "
                         "thread each")
    options.add_parts(parser, parts)


def register(subparsers) -> None:
    parser = add_measure(subparsers, "table1", "Table 1 (the default): every method, mode and family",
                         Subcommand(plan, measure_table, loads_model=lambda p: not p.parallel), __doc__)
    add_table_options(parser)
    options.add_scope(parser)
    parser.add_argument("--methods", default=None, help="comma-separated methods whose rows to decode (default all: "
                        f"{', '.join(METHODS)}, and {FLOOR}; dico keeps both DiCo rows; {FLOOR}: a greedy bound on "
                        "the steps without a clash, the passes every row is read against); Vanilla, the reference, "
                        "is always decoded")
