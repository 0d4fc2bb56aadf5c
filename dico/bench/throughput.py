"""Tokens/s by batch size, ``python -m dico.bench throughput``: every method at batch 1, 8 and 32 on the same items,
one batch size after the other, each against batch 1 (``dico.batch`` commits what each prompt alone commits)."""
from __future__ import annotations

import time
from dataclasses import dataclass

from dico.bench import options
from dico.bench.core import LENGTHS, METHOD_ROWS, QUICK_ITEMS
from dico.bench.runner import Report, Session, Subcommand, add_measure
from dico.bench.tables import throughput_markdown
from dico.embedded import tasks

THROUGHPUT_BATCHES = (1, 8, 32)
ITEMS = 16


def throughput(predictor, n_items: int, batches=THROUGHPUT_BATCHES, gen_length: int = LENGTHS[0][0],
               progress: bool = True) -> list[dict]:
    """Tokens/s of every method at each batch size on the same items, one after the other; the decodes of
    every batch size must agree on the CPU in float32 (they are the same decodes, only grouped differently). A GPU,
    or bfloat16, adds a batch's rows in another order than one row's, so a near decision may go the other way
    there: each row counts the texts that differ from the first batch size's."""
    from tqdm import tqdm

    prompts = [item.prompt for family in tasks.SHORT_FAMILIES for item in tasks.make_split(family, "test", n_items)]
    rows = []
    bar = tqdm(total=len(METHOD_ROWS) * len(batches), desc="throughput", unit="run", disable=not progress)
    for label, method, settings in METHOD_ROWS:
        rows += _by_batch(predictor, prompts, label, method, settings, batches, gen_length, bar)
    bar.close()
    return rows


def _by_batch(predictor, prompts, label: str, method: str, settings: dict, batches, gen_length: int,
              bar) -> list[dict]:
    """One method's rows, a row per batch size."""
    import torch

    from dico.batch import generate_batch

    texts, base, rows = None, None, []
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
                     "batch_size": batch_size, "n": len(prompts), "families": list(tasks.SHORT_FAMILIES),
                     "tokens_per_s": round(tps, 1), "speedup_batch": round(tps / base, 2),
                     "texts_changed": changed})
        bar.update(1)
    return rows


@dataclass(frozen=True)
class Plan:
    n_items: int
    lengths: tuple
    batch_size: int
    jobs: int


def plan(args) -> Plan:
    lengths = options.lengths(args.lengths) if args.lengths else LENGTHS
    options.at_least_one(batch_size=args.batch_size, jobs=args.jobs)
    return Plan(options.items(args.items or (QUICK_ITEMS if args.quick else ITEMS)), lengths, args.batch_size,
                args.jobs)


def measure(plan: Plan, session: Session) -> Report:
    where, about = session.where(plan.jobs), session.about()
    print(f"throughput: model {about['model']}, {len(tasks.SHORT_FAMILIES) * plan.n_items} prompts, batch sizes "
          f"{', '.join(map(str, THROUGHPUT_BATCHES))}, on {where}", flush=True)
    rows = throughput(session.predictor, plan.n_items, gen_length=plan.lengths[0][0], progress=session.progress)
    return Report(throughput_markdown(rows), {
        "title": "throughput", **about, "lengths": [list(p) for p in plan.lengths], "batch_size": plan.batch_size,
        "jobs": plan.jobs, "machine": where, "rows": rows})


def register(subparsers) -> None:
    parser = add_measure(subparsers, "throughput", "tokens/s at batch 1, 8 and 32 on the same items, side by side",
                         Subcommand(plan, measure), __doc__)
    options.add_items(parser, default=ITEMS)
    options.add_lengths(parser, "gen/block pairs: the first pair's gen is decoded (default 96/32,256/128)")
    options.add_batching(parser, jobs="recorded only: throughput decodes in this process")
