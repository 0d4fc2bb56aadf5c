"""``python -m dico.bench docs`` (or ``readme``): every benchmark table in the docs, written from the committed JSON.

A table in a page of docs/ (or in README.md) sits between two marker lines, and what lies between them is exactly
what ``tables.render`` gives for the JSON the first marker names, the table the measuring command printed:

    <!-- table: assets/bench/table1.json -->
    ...
    <!-- /table -->

The command rewrites every such block, every ``assets/bench/**/NAME.md`` beside a ``NAME.json`` that renders (a
combined table, ``python -m dico.bench combine``, made again from its sources first while they are there), and the
index of every result file between ``<!-- index -->`` and ``<!-- /index -->`` (docs/benchmarks.md): what each
measures, its model and weights' digest, and the command that remakes it.

Numbers quoted in prose are checked too: between ``<!-- numbers: assets/bench/A.json assets/bench/B.json -->`` and
``<!-- /numbers -->``, every number written with a decimal point or a per cent sign (each end of a range such as
``87.5-96.5%``) is one that the named files' tables print, to the precision quoted; a setting written in backticks
(`` `threshold=0.95` ``) is not a result and is not checked. Every link of a page into assets/bench must name a
file that exists.

``--check`` writes nothing: it lists what is stale, unfound or missing and exits 1 (0 when all is current).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from dico.bench.runner import fail
from dico.bench.tables import kind, render

ROOT = Path(__file__).resolve().parents[2]
TABLE = re.compile(r"^<!-- table: (?P<path>\S+) -->\n(?P<body>.*?)^<!-- /table -->$", re.M | re.S)
INDEX = re.compile(r"^<!-- index -->\n.*?^<!-- /index -->$", re.M | re.S)
NUMBERS = re.compile(r"^<!-- numbers: (?P<paths>[^>]+?) -->\n(?P<body>.*?)^<!-- /numbers -->$", re.M | re.S)
QUOTED = re.compile(r"(?<![\w.,/-])(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?(%?)(?![\w.]\w)")
NUMBER = re.compile(r"\d+(?:\.\d+)?")
CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"\]\(((?:\.\./)?assets/bench/[^)#\s]+)\)")
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


def table_files(root: Path = ROOT, combined: dict | None = None) -> list[tuple[Path, str]]:
    """Every ``NAME.md`` beside a ``NAME.json`` under assets/bench, with what the JSON renders (a combined file's
    JSON as ``combined`` remakes it)."""
    found = []
    for md in sorted((root / "assets" / "bench").rglob("*.md")):
        json_path = md.with_suffix(".json")
        if json_path in (combined or {}):
            found.append((md, render(json.loads(combined[json_path])) + "\n"))
        elif json_path.exists() and renders_here(json_path):
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
    """Every combined file (``python -m dico.bench combine``) whose sources are all there, made again from them; one
    whose sources were removed (superseded by it) is its own record, and its table lists each source's command."""
    from dico.bench.combine import recombined

    files = {}
    for path in sorted((root / "assets" / "bench").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(record, dict) and "sources" in record):
            continue
        if not all((root / source["path"]).is_file() for source in record["sources"]):
            continue
        try:
            files[path] = json.dumps(recombined(record, root), indent=1) + "\n"
        except ValueError as exc:
            raise ValueError(f"table: {path.relative_to(root)}: {exc}") from None
    return files


def result_files(root: Path = ROOT) -> list[Path]:
    """Every result file under assets/bench (a JSON record), in the folder's order."""
    return sorted((root / "assets" / "bench").rglob("*.json"))


def index_table(root: Path = ROOT) -> str:
    """The index of ``result_files``: each file (its Markdown, where it has one), what it measures (the record's
    title, else its Markdown's heading), the model with its training step and weights' digest, and the command that
    remakes it (a combined file's after its sources' commands, listed under its table)."""
    lines = ["| Result | What it measures | Model (training step, weights) | Command that remakes it |",
             "|---|---|---|---|"]
    for path in result_files(root):
        record = json.loads(path.read_text(encoding="utf-8"))
        record = record if isinstance(record, dict) else {}
        md = path.with_suffix(".md")
        shown = md if md.exists() else path
        heading = next((line for line in md.read_text(encoding="utf-8").splitlines() if line.strip()), "") \
            if md.exists() else ""
        what = str(record.get("title") or heading).strip("#* ").replace("**", "")
        model = record.get("model") or "-"
        if record.get("model_step"):
            model += f" ({record['model_step']:,}"
            model += f", `{record['weights']}`)" if record.get("weights") else ")"
        command = record.get("command") or "-"
        if command != "-":
            command = f"`{command}`" + (" (after its sources' commands)" if "sources" in record else "")
        link = f"[{shown.relative_to(root / 'assets' / 'bench')}](../{shown.relative_to(root)})"
        cells = [link, what, model, command]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def fill_index(text: str, root: Path = ROOT) -> str:
    """``text`` with its index block (if any) holding ``index_table``."""
    return INDEX.sub(lambda m: f"<!-- index -->\n{index_table(root)}\n<!-- /index -->", text)


def _printed(path: str, root: Path) -> list[float]:
    """Every number the table of a result file prints (another tool's file: its Markdown)."""
    file = root / path
    if file.suffix == ".json" and file.is_file() and renders_here(file):
        text = rendered(path, root)
    elif file.with_suffix(".md").is_file():
        text = file.with_suffix(".md").read_text(encoding="utf-8")
    else:
        raise ValueError(f"numbers: {path}: no such file")
    return [float(n) for n in NUMBER.findall(text)]


def unfound_numbers(text: str, root: Path = ROOT) -> list[str]:
    """Each number quoted between a ``numbers`` marker pair of ``text`` that none of the named files' tables prints
    (to the precision quoted), with the words before it."""
    missing = []
    for block in NUMBERS.finditer(text):
        paths = block["paths"].split()
        printed = [n for path in paths for n in _printed(path, root)]
        body = CODE.sub(lambda m: " " * len(m[0]), block["body"])    # a setting or command in code is not a result
        for quote in QUOTED.finditer(body):
            for number in filter(None, quote.group(1, 2)):
                if "." not in number and not quote[3]:
                    continue                # a count or a length ("200 items", "gen 96"), not a measured value
                places = len(number.split(".")[1]) if "." in number else 0
                if not any(round(n, places) == float(number) for n in printed):
                    before = " ".join(body[:quote.start()].split()[-4:])
                    missing.append(f"{number} (after \"{before}\") is in no table of {', '.join(paths)}")
    return missing


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The links of ``page`` into assets/bench that name no file."""
    return [link for link in LINK.findall(page.read_text(encoding="utf-8")) if not (page.parent / link).exists()]


def regenerated(root: Path = ROOT) -> dict[Path, str]:
    """Every file this command writes, with its content as the committed JSON gives it (a combined file's JSON
    first, from its sources)."""
    combined = combined_files(root)
    files = {**combined, **dict(table_files(root, combined))}
    for page in pages(root):
        files[page] = fill_index(fill_tables(page.read_text(encoding="utf-8"), root), root)
    return files


def unchecked(root: Path = ROOT) -> list[str]:
    """What ``--check`` reports besides stale files: quoted numbers no table prints, links to missing files."""
    lines = []
    for page in pages(root):
        name = page.relative_to(root)
        lines += [f"unfound: {name}: {line}" for line in unfound_numbers(page.read_text(encoding="utf-8"), root)]
        lines += [f"missing: {name}: {link}" for link in broken_links(page, root)]
    return lines


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
    """Rewrite (or, with ``--check``, list) every stale generated table; list quoted numbers no table prints and
    links to missing files (these need a hand: exit 1 while there are any)."""
    try:
        files = regenerated()
        problems = unchecked()
    except ValueError as exc:
        return fail(exc)
    changed = stale(files)
    if args.check:
        for line in [f"stale: {line}" for line in changed] + problems:
            print(line)
        return 1 if changed or problems else 0
    for path, text in files.items():
        if path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
    tables = sum(len(marked_tables(text)) for path, text in files.items() if path.suffix == ".md")
    print(f"{tables} marked tables in {len(pages())} pages; rewrote {len(changed)} files from the JSON in assets/bench"
          + "".join(f"\n  {line}" for line in changed + problems))
    return 1 if problems else 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("docs", aliases=["readme"], help="rewrite every table in docs/*.md and README.md "
                                   "(and assets/bench/*.md) from the committed JSON in assets/bench",
                                   description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; list the stale tables and exit 1")
    parser.set_defaults(run=run)
