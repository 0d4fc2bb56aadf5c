"""The one way a measuring subcommand runs: its options checked (``plan``), torch's threads set, the model loaded,
the measurement timed (``measure``), the table printed and, if asked, the run's record written as JSON and the table
as Markdown. A bad option or model ends the run with one line, ``error: <option>: ...``, and exit status 2.

A subcommand module calls ``add_measure`` with its ``plan`` and ``measure``; ``docs`` and ``readme`` measure nothing
and register a plain ``run``.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dico.bench.hardware import bench_model, load_bench_model, machine, training_step
from dico.bench.parts import weights_id


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2, as every other bench error."""

    def error(self, message: str):
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


@dataclass(frozen=True)
class Report:
    """What a measurement gives: the table it prints (and writes with ``--markdown``) and the run's record (title,
    model, machine, rows ...), written with ``--json`` together with the command and its seconds."""
    table: str
    record: dict


@dataclass
class Session:
    """A measurement's surroundings: its options, the model's spec (``hardware.bench_model``), the model loaded
    (None where the subcommand decodes in worker processes only) and when the measurement began."""
    args: argparse.Namespace
    model: tuple
    predictor: Any
    start: float

    def where(self, jobs: int = 1) -> str:
        """The machine line every table carries."""
        return machine(jobs, self.model)

    def model_name(self) -> str:
        from dico.models import EMBEDDED_NAME

        return self.predictor.name if self.predictor is not None else (self.args.model or EMBEDDED_NAME)

    def about(self) -> dict:
        """The record's opening: which model and weights measured (the weights' digest, ``parts.weights_id``: the
        embedded models are retrained under one name)."""
        return {"model": self.model_name(), "model_step": training_step(self.args.model),
                "weights": weights_id(self.args.model)}

    @property
    def progress(self) -> bool:
        return not self.args.no_progress


@dataclass(frozen=True)
class Subcommand:
    """A measuring subcommand: ``plan(args)`` checks its options (``ValueError`` naming the option) and returns what
    ``measure(plan, session)`` needs; ``loads_model(plan)`` says whether this process decodes (the workers of a
    ``--jobs`` run load their own); ``threads``: torch threads for this process (None: torch's default)."""
    plan: Callable[[argparse.Namespace], Any]
    measure: Callable[[Any, Session], Report]
    loads_model: Callable[[Any], bool] = lambda plan: True
    threads: int | None = None

    def __call__(self, args: argparse.Namespace, argv: list[str]) -> int:
        try:
            plan = self.plan(args)
            if self.threads:
                import torch

                torch.set_num_threads(self.threads)  # on a shared, loaded CPU two threads spin against each other
            model = bench_model(args)
            predictor = load_bench_model(model) if self.loads_model(plan) else None
            session = Session(args, model, predictor, time.time())
            report = self.measure(plan, session)
        except ValueError as exc:
            return fail(exc)
        write_report(args, argv, report, session.start)
        return 0


def fail(exc: Exception) -> int:
    """A bad request: one line on stderr, exit status 2."""
    print(f"error: {exc}", file=sys.stderr)
    return 2


def add_measure(subparsers, name: str, help_text: str, command: Subcommand,
                description: str | None = None) -> argparse.ArgumentParser:
    """A measuring subcommand's parser, with the options every measurement takes (model, device, dtype, output,
    progress); the subcommand adds its own to the parser returned."""
    parser = subparsers.add_parser(name, help=help_text, description=description or help_text,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    model = parser.add_argument_group("model")
    model.add_argument("--model", default=None, help="hub id or folder (default: the embedded model)")
    model.add_argument("--device", default=None, help="where the model decodes: cpu, cuda, cuda:1 ... (default: a "
                       "GPU where there is one, else the CPU)")
    model.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: bfloat16 on a GPU, "
                       "float32 on the CPU)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", metavar="PATH", help="write the run's record and every row as JSON")
    out.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    out.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(run=command)
    return parser


def write_report(args, argv, report: Report, start: float) -> None:
    """Print the table and the run time; write the record (plus the command and seconds) and the table if asked."""
    seconds = round(time.time() - start)
    print(report.table)
    print(f"\n(ran in {seconds} s)")
    if args.json:
        command = "python -m dico.bench " + shlex.join(argv if argv is not None else sys.argv[1:])
        with open(args.json, "w") as fh:
            json.dump({**report.record, "command": command.strip(), "seconds": seconds}, fh, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(report.table + "\n")
