"""The paper's observations on the embedded model, ``python -m dico.bench observe``: per family and mode,
on Vanilla's trajectories, Observation II (dependency among masked positions: near or far, much or little, by
stage), Observation III (runs of moderate confidence and how soon they commit), the floor (a greedy bound on the
steps the model needs without a clash, ``dico.observe.floor``) beside Vanilla's accuracy; and per method, how many wrong
and right answers had a step whose clash passed ``CLASH_MARK``.

    python -m dico.bench observe --items 40 --jobs 2 --json assets/bench/observe.json \\
        --markdown assets/bench/observe.md

Every number is a function of the traces (``dico.observe``): the measurements spend their own passes and never
change a decode. Means carry a normal 95% interval over the items.
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

from dico.bench import options
from dico.bench.core import QUICK_ITEMS, TABLE
from dico.bench.parts import in_processes
from dico.bench.runner import Report, Session, Subcommand, add_measure
from dico.bench.tables import observe_markdown
from dico.embedded import tasks
from dico.observe import CLASH_LIMIT, CLASH_MARK, WITHIN
from dico.settings import DEFAULT_BLOCK_LENGTH, DEFAULT_GEN_LENGTH, SEMI_AR

DEFAULT_ITEMS = 20


def mean_ci(values: list[float]) -> dict:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = statistics.fmean(values)
    half = 1.959964 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return {"mean": round(mean, 4), "low": round(mean - half, 4), "high": round(mean + half, 4), "n": len(values)}


# Where a family's answers need more than the default length (chain: worked answers, decoded at the paper's gen 256
# and semi-AR blocks of 128), its observations are made there.
LONG_LENGTHS = {family: (gen, 128) for family, gen in tasks.LONG_FAMILIES.items()}


def lengths_of(family: str) -> tuple[int, int]:
    """The gen length and semi-AR block a family's observations decode at."""
    return LONG_LENGTHS.get(family, (DEFAULT_GEN_LENGTH, DEFAULT_BLOCK_LENGTH))


def _decode(predictor, items, method, settings, mode, batch_size, capture=False):
    from dico.batch import decode_batch, drain
    gen, block = lengths_of(items[0].family)
    runs = decode_batch(predictor, [item.prompt for item in items], method, batch_size=batch_size, mode=mode,
                        gen_length=gen, block_length=block if mode == SEMI_AR else None,
                        settings=settings, capture_attention=capture)
    return drain(runs, lambda: None)


def attending(predictor):
    """The model with its attention maps (the benches load it without, ``hardware.load_bench_model``): the same
    weights with eager attention, whose last bits may differ from the benches' sdpa."""
    if predictor.supports_attention:
        return predictor
    from dico.models import load_model
    return load_model(predictor.name, device=str(predictor.device))


def stage_steps(trace) -> dict[str, int]:
    """The first step of each stage (early, middle, late) the run passed through."""
    from dico.observe import stage_of
    found: dict[str, int] = {}
    for k in range(len(trace.steps)):
        found.setdefault(stage_of(trace, k), k)
    return found


def observations(predictor, family: str, mode: str, n_items: int, batch_size: int) -> list[dict]:
    """One (family, mode) cell on Vanilla: Observation II through both lenses by stage (attention also layer by layer:
    one replayed pass a step, counted with the dependency's passes), Observation III, the floor."""
    from dico.observe import attention_locality, dependency, floor, layer_locality, locality, moderate_clusters
    items = tasks.make_split(family, "test", n_items)
    seeing = attending(predictor)
    traces = _decode(seeing, items, "vanilla", {}, mode, batch_size, capture=True)
    lens: dict[str, dict[str, list]] = {}
    passes = 0
    for trace in traces:
        answer = set(range(trace.answer_length))
        for stage, at in stage_steps(trace).items():
            found = dependency(predictor, trace, at)
            passes += found.passes
            for scope, among in (("answer", answer), ("all", None)):
                got = locality(found.positions, found.matrix, WITHIN, among)
                if got is not None:
                    for name in ("within", "even", "mean_distance", "total"):
                        lens.setdefault(f"dependency {scope} {stage}", {}).setdefault(name, []).append(
                            getattr(got, name))
        if trace.attention is not None:
            lenses = {f"attention answer {s}": got for s, got in attention_locality(trace, WITHIN, answer).items()}
            by_layer = layer_locality(seeing, trace, WITHIN, answer)
            passes += by_layer.passes
            lenses |= {f"attention layer {i} answer {stage}": got for stage, per_layer in by_layer.items()
                       for i, got in enumerate(per_layer)}
            for key, got in lenses.items():
                if got is not None:
                    for name in ("within", "even", "mean_distance", "total"):
                        lens.setdefault(key, {}).setdefault(name, []).append(getattr(got, name))
    clusters = [moderate_clusters(t) for t in traces]
    gen, block = lengths_of(family)
    floors = [floor(predictor, item.prompt, mode=mode, gen_length=gen, block_length=block) for item in items]
    right = sum(tasks.check(item, t.text) for item, t in zip(items, traces))
    floor_right = sum(tasks.check(item, f.text) for item, f in zip(items, floors))
    return [{"kind": "observe", "family": family, "mode": mode, "n": len(items), "within": WITHIN,
             "lenses": {key: {name: mean_ci(v) for name, v in values.items()} for key, values in lens.items()},
             "moderate_runs_per_step": mean_ci([c.per_step for c in clusters]),
             "moderate_run_length": mean_ci([c.mean_length for c in clusters if c.runs]),
             "moderate_committed_soon": mean_ci([c.soon_share for c in clusters if c.positions]),
             "overlooked_per_item": mean_ci([len(c.overlooked) for c in clusters]),
             "vanilla_right": right, "vanilla_nfe": gen, "gen_length": gen,
             "floor_right": floor_right, "floor_nfe": mean_ci([f.nfe for f in floors]),
             "floor_passes": sum(f.passes for f in floors), "dependency_passes": passes}]


def clashes(predictor, config: int, family: str, mode: str, n_items: int, batch_size: int) -> list[dict]:
    """One method on one family and mode: how many wrong and right answers had a step above ``CLASH_MARK``."""
    from dico.observe import clash
    label, method, settings = TABLE[config]
    items = tasks.make_split(family, "test", n_items)
    traces = _decode(predictor, items, method, settings, mode, batch_size)
    rows = {"right": [0, 0], "wrong": [0, 0]}
    passes, largest = 0, []
    for item, trace in zip(items, traces):
        measured = clash(predictor, trace, limit=CLASH_LIMIT)
        passes += measured.passes
        top = max((v for v in measured if v is not None), default=0.0)
        largest.append(top)
        kind = "right" if tasks.check(item, trace.text) else "wrong"
        rows[kind][0] += 1
        rows[kind][1] += top > CLASH_MARK
    return [{"kind": "clash", "label": label, "method": method, "family": family, "mode": mode, "n": len(items),
             "gen_length": lengths_of(family)[0],
             "right": rows["right"][0], "right_marked": rows["right"][1], "wrong": rows["wrong"][0],
             "wrong_marked": rows["wrong"][1], "largest_clash": mean_ci(largest), "passes": passes,
             "nfe": statistics.fmean(t.nfe for t in traces)}]


def cell(predictor, what: tuple, n_items: int, batch_size: int) -> list[dict]:
    if what[0] == "observe":
        return observations(predictor, what[1], what[2], n_items, batch_size)
    return clashes(predictor, what[1], what[2], what[3], n_items, batch_size)


@dataclass(frozen=True)
class Plan:
    cells: tuple
    n_items: int
    batch_size: int
    jobs: int

    @property
    def title(self) -> str:
        lengths = sorted({lengths_of(cell[-2]) for cell in self.cells})
        shown = ", ".join(f"gen {gen} (semi-AR blocks of {block})" for gen, block in lengths)
        return f"The paper's observations: {shown}, {self.n_items} held-out items a family, Vanilla's trajectories"


def plan(args) -> Plan:
    n_items = options.item_count(args, DEFAULT_ITEMS)
    families = options.families(args.families)
    modes = options.modes(args.modes)
    options.at_least_one(jobs=args.jobs, batch_size=args.batch_size)
    methods = options.choices("methods", args.methods, [m for _, m, s in TABLE if not s or m != "dico"], "method",
                              none_ok=True)
    configs = [i for i, (_, method, settings) in enumerate(TABLE) if method in methods]
    cells = [("observe", f, m) for f in families for m in modes] + \
        [("clash", i, f, m) for i in configs for f in families for m in modes]
    return Plan(tuple(cells), n_items, args.batch_size, args.jobs)


def measure(plan: Plan, session: Session) -> Report:
    where, about = session.where(plan.jobs), session.about()
    print(f"{plan.title}: model {about['model']}, on {where}", flush=True)
    work = functools.partial(cell, n_items=plan.n_items, batch_size=plan.batch_size)
    if plan.jobs > 1:
        rows = in_processes(work, session.model, [(c,) for c in plan.cells], plan.jobs, progress=session.progress,
                            desc="observe cells")
    else:
        rows = [row for c in plan.cells for row in work(session.predictor, c)]
    return Report(observe_markdown(rows, plan.title), {"title": plan.title, **about, "machine": where,
                                               "gen_length": max(lengths_of(c[-2])[0] for c in plan.cells),
                                               "rows": rows})


def register(subparsers) -> None:
    parser = add_measure(subparsers, "observe", "the paper's observations (clash, dependency, moderate clusters, the "
                         "floor) on Vanilla's trajectories, and the clash of each method against its answers",
                         Subcommand(plan, measure, threads=1), __doc__)
    options.add_items(parser, default=DEFAULT_ITEMS, quick=f"{QUICK_ITEMS} items per family instead of {DEFAULT_ITEMS}")
    options.add_batching(parser, jobs="processes measuring cells side by side, one torch thread each")
    options.add_scope(parser)
    parser.add_argument("--methods", default="vanilla,topk,fast,fast-factor,dico,eb,klass,wino,saber",
                        help="comma-separated methods whose clash is set against their answers ('' none)")
