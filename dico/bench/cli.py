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
    python -m dico.bench blocks               # an SDAR-shaped stand-in with and without its block cache, gen 256, 1024
    python -m dico.bench frontier             # accuracy against passes as each method's main knob turns
    python -m dico.bench breaks               # pick and team: which commits broke each method's wrong answers
    python -m dico.bench takeback             # pick and team misses: does taking one clashing token back mend them
    python -m dico.bench observe              # the paper's observations and the clash of each method's steps
    python -m dico.bench combine A.json B.json  # Table 1's rows of several runs in one table
    python -m dico.bench docs                 # every table in docs/ (and README) from the JSON in assets/bench
    python -m dico.bench docs --check         # exit 1, naming them, if any of those tables is stale

With no subcommand it measures Table 1 (``table1``). ``python -m dico.bench SUBCOMMAND --help`` lists a
subcommand's options. Every speed-up is measured against a reference decoded in the same run, on the same items.
"""
from __future__ import annotations

import argparse
import sys

from dico.bench import (
    ablation,
    benchmark,
    blocks,
    breaks,
    cache,
    combine,
    docs,
    frontier,
    observe,
    speed,
    takeback,
    throughput,
)
from dico.bench.runner import Parser

SUBCOMMANDS = (benchmark, ablation, throughput, speed, cache, blocks, frontier, breaks, takeback, observe, combine,
               docs)
DEFAULT = "table1"


def parser() -> tuple[Parser, tuple[str, ...]]:
    """The command line, a subparser per subcommand, each with the options it reads; and the subcommands' names."""
    top = Parser(prog="python -m dico.bench", description=__doc__.split("\n\n")[0],
                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = top.add_subparsers(dest="what", metavar="SUBCOMMAND", title="subcommands")
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return top, tuple(subparsers.choices)


def with_subcommand(argv: list[str], names) -> list[str]:
    """``argv`` with its subcommand first, as the subparsers read it: the first word naming one wherever it stands
    (``python -m dico.bench --items 2 frontier`` is ``frontier --items 2``); with none, Table 1's."""
    at = next((i for i, word in enumerate(argv) if word in names), None)
    if at is None:
        return argv if {"-h", "--help"} & set(argv) else [DEFAULT, *argv]
    return [argv[at], *argv[:at], *argv[at + 1:]]


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    top, names = parser()
    args = top.parse_args(with_subcommand(given, names))
    return args.run(args, given)
