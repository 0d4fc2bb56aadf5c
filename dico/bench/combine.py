"""Table 1 (or the frontier, or the breaks table) from several runs, ``python -m dico.bench combine``: the rows of
Table 1 result files side by side in one table, the first file's rows first, later files adding only the rows (label,
mode, task, length) not already there; frontier files the same way (a line decoded in another run, such as the floor's
point); breaks files by (lane, mode, family, cache), each family and mode's rows together (a lane decoded again by a
newer run: name the newer file first).

    python -m dico.bench combine assets/bench/table1.json assets/bench/table1_floor.json \\
        --json assets/bench/table1_gen96.json --markdown assets/bench/table1_gen96.md
    python -m dico.bench combine assets/bench/frontier.json assets/bench/frontier_floor.json \\
        --json assets/bench/frontier_gen96.json --markdown assets/bench/frontier_gen96.md

Decodes are deterministic, so a row is what it would be in one run of every method; the runs must share the model's
weights (training step and digest), the lengths and the batch size. Each row keeps its own run's speed-ups (against
Vanilla decoded in that run) and its run's n and command are said under the table. ``python -m dico.bench docs``
combines the sources again while they are in the folder, so the combined file follows them; once they are removed
(the combined file is the published table), it stands on its own rows.
"""
from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from dico.bench.runner import fail
from dico.bench.tables import kind, render

SAME = ("model", "model_step", "weights", "lengths", "gen_length", "block_length", "batch_size")
KEYS = {"table": lambda r: (r["label"], r["mode"], r["task"], r.get("gen_length")),        # a row's identity by kind
        "frontier": lambda r: (r["label"], r["mode"], r["task"], r.get("gen_length")),
        "breaks": lambda r: (r["label"], r["mode"], r["family"], r.get("cache"))}


def combine(records: list[tuple[str, dict]], title: str | None = None, note: str = "") -> dict:
    """The combined record of ``records`` ((path, record) pairs); ValueError naming the file and field that differ."""
    if not records:
        raise ValueError("sources: name at least one Table 1, frontier or breaks result file")
    first = records[0][1]
    rows, seen, sources, first_kind = [], set(), [], _kind(*records[0])
    for path, record in records:
        if _kind(path, record) != first_kind:
            raise ValueError(f"sources: {path} is {_a(_kind(path, record))} file and {records[0][0]} is not: files of "
                             "one kind only")
        for field in SAME:
            if record.get(field) != first.get(field):
                raise ValueError(f"sources: {path}'s {field} is {record.get(field)!r}, not {first.get(field)!r} as in "
                                 f"{records[0][0]}: rows of different runs of one model and shape only")
        table = record["rows"]
        new = [r for r in table if KEYS[first_kind](r) not in seen]
        seen.update(KEYS[first_kind](r) for r in new)
        rows += new
        sources.append({"path": path, "rows": len(new), "n": max(r["n"] for r in table),
                        "command": record.get("command", "")})
    if first_kind == "breaks":          # each family and mode's lanes together, as one breaks run orders them
        cells = list(dict.fromkeys((r["family"], r["mode"]) for r in rows))
        rows.sort(key=lambda r: cells.index((r["family"], r["mode"])))
    return {"title": title or first.get("title", ""), **{k: first[k] for k in SAME if k in first},
            "sources": sources, "note": note, "rows": rows}


def _kind(path: str, record: dict) -> str:
    try:
        found = kind(record)
    except ValueError:
        found = None
    if found not in KEYS:
        raise ValueError(f"sources: {path} holds no Table 1, frontier or breaks rows")
    return found


def _a(name: str) -> str:
    return {"table": "a Table 1", "frontier": "a frontier", "breaks": "a breaks"}[name]


def read_sources(paths, root: Path) -> list[tuple[str, dict]]:
    records = []
    for path in paths:
        try:
            records.append((path, json.loads((root / path).read_text(encoding="utf-8"))))
        except OSError:
            raise ValueError(f"sources: {path}: no such file") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"sources: {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return records


def recombined(record: dict, root: Path) -> dict:
    """A combined record made again from its sources as they are now (its command kept)."""
    again = combine(read_sources([s["path"] for s in record["sources"]], root), record.get("title"),
                    record.get("note", ""))
    return {**again, "command": record.get("command", "")}


def run(args, argv=None) -> int:
    root = Path.cwd()
    try:
        record = combine(read_sources(args.sources, root), args.title, args.note or "")
    except ValueError as exc:
        return fail(exc)
    record["command"] = "python -m dico.bench " + shlex.join(argv if argv is not None else ["combine", *args.sources])
    table = render(record)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(table + "\n", encoding="utf-8")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("combine", help="Table 1's (or the frontier's, or the breaks table's) rows from "
                                   "several result files in one table",
                                   description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", help="Table 1 (or frontier, or breaks) result files (JSON), relative "
                        "to the working directory")
    parser.add_argument("--title", default=None, help="the table's title (default: the first file's)")
    parser.add_argument("--note", default=None, help="a sentence under the table")
    parser.add_argument("--json", metavar="PATH", help="write the combined record")
    parser.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    parser.set_defaults(run=run)
