"""The ablations, ``python -m dico.bench ablation NAME``: DiCo with each of a setting's values (``dico.settings.
ABLATIONS``), decoded as Table 1 is (``dico.bench.benchmark``), at gen 96/32 by default.

    python -m dico.bench ablation tg          # DiCo with and without trajectory guidance
    python -m dico.bench ablation margin      # Finalize with and without the logit margin
    python -m dico.bench ablation seeds       # N in {2, 4, 6, 8, 10}
    python -m dico.bench ablation conquer     # adaptive (factor) vs fixed-threshold Conquer
    python -m dico.bench ablation authors     # each authors' code Conquer choice and the Divide shortcut alone
"""
from __future__ import annotations

from dico.bench.benchmark import add_table_options, measure_table, table_plan
from dico.bench.core import LENGTHS
from dico.bench.runner import Subcommand, add_measure
from dico.settings import ABLATIONS, MODES

# Each ablation's families and modes: word problems, and pick and team whose answers several tokens decide together
# (lists are right with every setting); seeds in both modes, since Divide's seeds break semi-AR teams.
ABLATION_FAMILIES = ("word", "pick", "team")
ABLATION_SCOPE = {"tg": (ABLATION_FAMILIES, ("non-ar",)), "margin": (ABLATION_FAMILIES, MODES),
                  "seeds": (ABLATION_FAMILIES, MODES), "conquer": (ABLATION_FAMILIES, ("non-ar",)),
                  "authors": (ABLATION_FAMILIES, MODES)}
WHAT = {"tg": "DiCo with and without trajectory guidance", "margin": "Finalize with and without the logit margin",
        "seeds": "DiCo's number of seeds N", "conquer": "adaptive (factor) against fixed-threshold Conquer",
        "authors": "each of the authors' code choices and the Divide shortcut alone"}


def plan(args):
    configs = [(label, "dico", settings) for label, settings in ABLATIONS[args.name].items()]
    return table_plan(args, f"Ablation: {WHAT[args.name]}", configs, *ABLATION_SCOPE[args.name], LENGTHS[:1],
                      keep=tuple(ABLATIONS[args.name]))


def register(subparsers) -> None:
    parser = add_measure(subparsers, "ablation", "DiCo with each value of one setting, beside Vanilla",
                         Subcommand(plan, measure_table, loads_model=lambda p: not p.parallel), __doc__)
    parser.add_argument("name", choices=tuple(ABLATIONS), help="the ablation")
    add_table_options(parser)
