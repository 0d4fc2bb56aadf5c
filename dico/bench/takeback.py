"""Taking one clashing token back, ``python -m dico.bench takeback``: on the pick and team items a lane
answers wrong with clashing tokens committed by one step, does taking back ONE of them right after that step give
a right answer?

    python -m dico.bench takeback --items 200 --jobs 2 --json assets/bench/takeback.json \\
        --markdown assets/bench/takeback.md

A wrong pick or team answer repeats a choice or mixes two (``dico.bench.breaks``); when one step k committed two or
more of its clashing tokens, each from its own marginal, the run is forked after that step (``dico.fork(predictor,
trace, at=k + 1, remask=[p])``: step k's commits stand, then position p goes back to the mask) once for each of
those positions p, and the fork decodes on with the same method and settings. A miss counts as mended by "any" take-
back when one of its forks answers right, by "first" when the fork taking back the first clashing position (in
response order) does. Lanes: Top-4 per step in non-AR on pick and team (the paper's Observation I), DiCo in semi-AR
on team (its misses there).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from dico.bench import options
from dico.bench.breaks import CHOICE_FAMILIES, choice_positions, clash, together, token_spans
from dico.bench.core import QUICK_ITEMS, wilson
from dico.bench.parts import in_processes
from dico.bench.runner import Report, Session, Subcommand, add_measure
from dico.bench.tables import takeback_markdown
from dico.embedded import tasks
from dico.settings import DEFAULT_BLOCK_LENGTH, DEFAULT_GEN_LENGTH, NON_AR, SEMI_AR

# (label, method, settings, mode, families it is measured on)
CASES = (("Top-4 per step", "topk", {"k": 4}, NON_AR, ("pick", "team")),
         ("DiCo", "dico", {}, SEMI_AR, ("team",)))
DEFAULT_ITEMS = 40


def clash_step(predictor, item, trace):
    """A wrong answer's clash: (its kind, the step that committed two or more of its clashing tokens, those
    positions in response order); the step is None when no one step did."""
    ids = trace.response[:trace.answer_length]
    text, spans = token_spans(predictor.tokenizer, ids)
    kind, positions = clash(item, choice_positions(item.family, text, spans))
    step = together(trace, positions) if positions else None
    if step is None:
        return kind, None, []
    when = trace.commit_step()
    return kind, step.index, sorted(p for p in set(positions) if when[p] == step.index)


def take_back(predictor, item, trace) -> dict:
    """One miss: its clash, and for each clashing position committed by the clash step, whether the fork that takes
    it back right after that step answers right (with the fork's text)."""
    from dico.forking import fork

    kind, k, positions = clash_step(predictor, item, trace)
    found = {"kind": kind, "step": k, "positions": positions, "right": [], "texts": []}
    for p in positions:
        try:
            child = fork(predictor, trace, at=k + 1, remask=[p])
        except ValueError as exc:            # a batched run that does not replay alone: said, not counted as right
            found["right"].append(False)
            found["texts"].append(f"error: {exc}")
            continue
        found["right"].append(bool(tasks.check(item, child.text)))
        found["texts"].append(child.text.strip())
    return found


def takeback(predictor, case, family: str, n_items: int, batch_size: int = 8) -> list[dict]:
    """One lane on one family: decode the items, fork every miss whose clash one step committed; one row."""
    from dico.batch import decode_batch, drain

    label, method, settings, mode, _ = case
    items = tasks.make_split(family, "test", n_items)
    runs = decode_batch(predictor, [item.prompt for item in items], method, batch_size=batch_size, mode=mode,
                        gen_length=DEFAULT_GEN_LENGTH,
                        block_length=DEFAULT_BLOCK_LENGTH if mode == SEMI_AR else None, settings=settings)
    traces = drain(runs, lambda: None)
    misses = [take_back(predictor, item, trace) for item, trace in zip(items, traces)
              if not tasks.check(item, trace.text)]
    return [takeback_row(label, method, settings, mode, family, len(items), misses)]


def takeback_row(label, method, settings, mode, family, n: int, misses: list[dict]) -> dict:
    """A lane's row: its misses, those with a one-step clash, and how many of those one take-back mended."""
    forked = [m for m in misses if m["positions"]]
    any_right = sum(any(m["right"]) for m in forked)
    first_right = sum(m["right"][0] for m in forked)
    forks = sum(len(m["right"]) for m in forked)
    return {"label": label, "method": method, "settings": settings, "mode": mode, "family": family, "n": n,
            "wrong": len(misses), "clash_one_step": len(forked), "forks": forks,
            "forks_right": sum(sum(m["right"]) for m in forked),
            "any_right": any_right, "any_low": round(wilson(any_right, len(forked))[0], 4),
            "any_high": round(wilson(any_right, len(forked))[1], 4),
            "first_right": first_right, "first_low": round(wilson(first_right, len(forked))[0], 4),
            "first_high": round(wilson(first_right, len(forked))[1], 4), "misses": misses}


def takeback_cell(predictor, case_index: int, family: str, n_items: int, batch_size: int) -> list[dict]:
    """One (lane, family) cell's row: what ``--jobs`` gives each process."""
    return takeback(predictor, CASES[case_index], family, n_items, batch_size)


@dataclass(frozen=True)
class Plan:
    cells: tuple
    n_items: int
    batch_size: int
    jobs: int

    @property
    def title(self) -> str:
        return (f"Taking one clashing token back: gen {DEFAULT_GEN_LENGTH}, {self.n_items} held-out items per family, "
                "each miss forked after the step that committed its clash")


def plan(args) -> Plan:
    n_items = options.item_count(args, DEFAULT_ITEMS)
    families = options.choices("families", args.families, CHOICE_FAMILIES, "family", default=CHOICE_FAMILIES)
    options.at_least_one(jobs=args.jobs, batch_size=args.batch_size)
    cells = tuple((i, family) for i, case in enumerate(CASES) for family in case[4] if family in families)
    return Plan(cells, n_items, args.batch_size, args.jobs)


def measure(plan: Plan, session: Session) -> Report:
    where, about = session.where(plan.jobs), session.about()
    print(f"{plan.title}: model {about['model']}, on {where}", flush=True)
    if plan.jobs > 1:
        rows = in_processes(functools.partial(takeback_cell, n_items=plan.n_items, batch_size=plan.batch_size),
                            session.model, list(plan.cells), plan.jobs, progress=session.progress,
                            desc="takeback cells")
    else:
        rows = [row for i, family in plan.cells
                for row in takeback_cell(session.predictor, i, family, plan.n_items, plan.batch_size)]
    return Report(takeback_markdown(rows, plan.title), {"title": plan.title, **about, "machine": where,
                                                         "gen_length": DEFAULT_GEN_LENGTH, "rows": rows})


def register(subparsers) -> None:
    parser = add_measure(subparsers, "takeback", "pick and team misses: does taking one clashing token back mend "
                         "them", Subcommand(plan, measure, threads=1), __doc__)
    options.add_items(parser, default=DEFAULT_ITEMS, quick=f"{QUICK_ITEMS} items per family instead of {DEFAULT_ITEMS}")
    options.add_batching(parser, jobs="processes decoding (lane, family) cells side by side, one torch thread each")
    parser.add_argument("--families", default=",".join(CHOICE_FAMILIES), help="comma-separated families (default "
                        "pick,team; DiCo's semi-AR lane is measured on team only)")
