"""Selection time per step, ``python -m dico.bench speed``: each rule's own cost next to the forward pass, the
median over every step of a few word problems at gen 256."""
from __future__ import annotations

from dataclasses import dataclass

from dico.bench import options
from dico.bench.core import METHOD_ROWS
from dico.bench.hardware import counted
from dico.bench.runner import Report, Session, Subcommand, add_measure
from dico.bench.tables import speed_markdown
from dico.embedded import tasks

ITEMS, QUICK = 10, 2
GEN_LENGTH = 256


def speed(predictor, n_items: int, gen_length: int = GEN_LENGTH) -> list[dict]:
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


@dataclass(frozen=True)
class Plan:
    n_items: int


def plan(args) -> Plan:
    return Plan(options.items(args.items or (QUICK if args.quick else ITEMS)))


def measure(plan: Plan, session: Session) -> Report:
    rows = speed(session.predictor, plan.n_items)
    title = (f"Selection time per step against the forward pass: gen {GEN_LENGTH}, "
             f"{counted(plan.n_items, 'word problem')}")
    return Report(speed_markdown(rows, title), {"title": title, **session.about(), "machine": session.where(),
                                                "rows": rows})


def register(subparsers) -> None:
    parser = add_measure(subparsers, "speed", "selection time per step against the forward pass, gen 256",
                         Subcommand(plan, measure), __doc__)
    options.add_items(parser, default=ITEMS, quick=f"{QUICK} word problems instead of {ITEMS}")
