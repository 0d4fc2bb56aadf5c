"""``python -m dico.bench docs`` (or ``readme``): every benchmark table in the docs, written from the committed JSON.

A table in a page of docs/ (or in README.md) sits between two marker lines, and what lies between them is exactly
what ``tables.render`` gives for the JSON the first marker names, the table the measuring command printed:

    <!-- table: assets/bench/table1.json -->
    ...
    <!-- /table -->

The command rewrites every such block, every ``assets/bench/**/NAME.md`` beside a ``NAME.json`` that renders (a
combined Table 1, ``python -m dico.bench combine``, made again from its sources first).
``--check`` writes nothing: it lists what is stale and exits 1 (0 when all is current).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from dico.bench.runner import fail
from dico.bench.tables import ROW_FIELDS, THROUGHPUT_FIELDS, kind, read_results, render

ROOT = Path(__file__).resolve().parents[2]
TABLE = re.compile(r"^<!-- table: (?P<path>\S+) -->\n(?P<body>.*?)^<!-- /table -->$", re.M | re.S)
README_RESULTS = ("table1", "table1_256", "frontier", "throughput", "ablation_tg", "ablation_margin", "ablation_seeds",
                  "ablation_conquer", "ablation_authors")


def rendered(path: str, root: Path = ROOT) -> str:
    """The table of the JSON at ``path`` (relative to ``root``); ValueError naming the file when it cannot be."""
    file = root / path
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except OSError:
        raise ValueError(f"table: {path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"table: {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    try:
        return render(record)
    except ValueError as exc:
        raise ValueError(f"table: {path}: {exc}") from None


def fill_tables(text: str, root: Path = ROOT) -> str:
    """``text`` with every marked table block holding what its JSON renders."""
    return TABLE.sub(lambda m: f"<!-- table: {m['path']} -->\n{rendered(m['path'], root)}\n<!-- /table -->", text)


def marked_tables(text: str) -> list[str]:
    """The JSON paths the table markers of ``text`` name, in order."""
    return [m["path"] for m in TABLE.finditer(text)]


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose tables are generated: every docs/*.md and README.md."""
    return sorted((root / "docs").glob("*.md")) + [p for p in (root / "README.md",) if p.exists()]


def readme_section(folder) -> str:
    """README's older benchmark block: every shipped table, each with the command, time and machine that made it."""
    parts = []
    for name in README_RESULTS:
        path = Path(folder) / f"{name}.json"
        if not path.exists():
            continue
        _, run = read_results(path, THROUGHPUT_FIELDS if name == "throughput" else ROW_FIELDS)
        table = path.with_suffix(".md").read_text(encoding="utf-8").strip()      # what its command wrote
        image = next((f for f in (f"{name}.png", f"{name}.html") if (Path(folder) / f).exists()), None)
        if image:           # a figure drawn from the same rows (python -m visuals.export)
            table = (f"![{run['title']}](assets/bench/{image})\n\n" if image.endswith(".png") else
                     f"[{run['title']}: the figure](assets/bench/{image}) (HTML, opens in a browser)\n\n") + table
        parts.append(f"{table}\n\n`{run['command']}` ({run['seconds'] / 60:.1f} min on {run['machine']}"
                     f"{_provenance(run)})")
    return "\n\n".join(parts)


def _provenance(run: dict) -> str:
    weights = f"; {run['model']} at training step {run['model_step']:,}" if run.get("model_step") else ""
    resumed = (f"; {run['parts_resumed']} of its {run['parts']} parts decoded by earlier runs of the command, "
               f"{run['decode_seconds'] / 60:.1f} min of decoding in all" if run.get("parts_resumed") else "")
    return weights + resumed


def table_files(root: Path = ROOT, combined: dict | None = None) -> list[tuple[Path, str]]:
    """Every ``NAME.md`` beside a ``NAME.json`` under assets/bench, with what the JSON renders (a combined file's
    JSON as ``combined`` remakes it)."""
    found = []
    for md in sorted((root / "assets" / "bench").rglob("*.md")):
        json_path = md.with_suffix(".json")
        if json_path in (combined or {}):
            found.append((md, render(json.loads(combined[json_path])) + "\n"))
        elif json_path.exists() and "parts" not in md.relative_to(root / "assets" / "bench").parts \
                and renders_here(json_path):
            found.append((md, rendered(str(json_path.relative_to(root)), root) + "\n"))
    return found


def renders_here(path: Path) -> bool:
    """Whether a result file's Markdown is this command's to write: every file a renderer knows, and every file a
    ``python -m dico.bench`` command wrote (one no renderer knows is then an error); another tool's file (the
    fidelity run's, ``tests/fidelity_run.py``) keeps the Markdown that tool wrote."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        kind(record)
        return True
    except ValueError:
        command = record.get("command", "") if isinstance(record, dict) else ""
        return not command or command.startswith("python -m dico.bench")


def combined_files(root: Path = ROOT) -> dict[Path, str]:
    """Every combined Table 1 file (``python -m dico.bench combine``) made again from its sources."""
    from dico.bench.combine import recombined

    files = {}
    for path in sorted((root / "assets" / "bench").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(record, dict) and "sources" in record:
            try:
                files[path] = json.dumps(recombined(record, root), indent=1) + "\n"
            except ValueError as exc:
                raise ValueError(f"table: {path.relative_to(root)}: {exc}") from None
    return files


def regenerated(root: Path = ROOT) -> dict[Path, str]:
    """Every file this command writes, with its content as the committed JSON gives it (a combined file's JSON
    first, from its sources)."""
    combined = combined_files(root)
    files = {**combined, **dict(table_files(root, combined))}
    for page in pages(root):
        files[page] = fill_tables(page.read_text(encoding="utf-8"), root)
    return files


def stale(files: dict[Path, str], root: Path = ROOT) -> list[str]:
    """The files of ``regenerated`` that differ from what is written, each with the marked tables in it that do."""
    lines = []
    for path, text in files.items():
        old = path.read_text(encoding="utf-8")
        if old == text:
            continue
        tables = [m["path"] for m, n in zip(TABLE.finditer(old), TABLE.finditer(text)) if m["body"] != n["body"]]
        lines.append(f"{path.relative_to(root)}" + (f": {', '.join(tables)}" if tables else ""))
    return lines


def run(args, argv=None) -> int:
    """Rewrite (or, with ``--check``, list) every stale generated table."""
    try:
        files = regenerated()
    except ValueError as exc:
        return fail(exc)
    changed = stale(files)
    if args.check:
        for line in changed:
            print(f"stale: {line}")
        return 1 if changed else 0
    for path, text in files.items():
        if path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    tables = sum(len(marked_tables(text)) for path, text in files.items() if path.suffix == ".md")
    print(f"{tables} marked tables in {len(pages())} pages; rewrote {len(changed)} files from the JSON in assets/bench"
          + "".join(f"\n  {line}" for line in changed))
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("docs", aliases=["readme"], help="rewrite every table in docs/*.md and README.md "
                                   "(and assets/bench/*.md) from the committed JSON in assets/bench",
                                   description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; list the stale tables and exit 1")
    parser.set_defaults(run=run)
