"""The options the subcommands share: each adds the ones it reads to its own subparser, and reads them back through
these checks, whose ``ValueError`` names the option (the runner prints it as one ``error:`` line)."""
from __future__ import annotations

from dico.bench.core import BATCH_SIZE, FULL_ITEMS, LENGTHS, QUICK_ITEMS
from dico.embedded import tasks
from dico.settings import MODES, method_id


def choices(option: str, text: str | None, allowed, noun: str, default=(), none_ok: bool = False) -> tuple[str, ...]:
    """A comma-separated option's values (``default`` when it is not given), each one of ``allowed`` (a method's old
    id read as today's, ``dico.settings.method_id``); ``none_ok``: an empty value chooses none."""
    chosen = tuple(dict.fromkeys(method_id(v) for v in (text or "").split(",") if v)) or tuple(default)
    unknown = [v for v in chosen if v not in allowed]
    if unknown or not (chosen or none_ok):
        raise ValueError(f"{option}: unknown {noun} {(unknown or [text])[0]!r}; choose from {', '.join(allowed)}")
    return chosen


def families(text: str) -> tuple[str, ...]:
    return choices("families", text, tasks.FAMILIES, "family")


def modes(text: str) -> tuple[str, ...]:
    return choices("modes", text, MODES, "mode")


def items(n_items: int) -> int:
    if not 1 <= n_items <= tasks.TEST_SIZE:
        raise ValueError(f"items: must be in 1..{tasks.TEST_SIZE}, got {n_items}")
    return n_items


def item_count(args, default: int = FULL_ITEMS) -> int:
    """``--items``, else ``QUICK_ITEMS`` with ``--quick``, else ``default``; checked."""
    return items(args.items or (QUICK_ITEMS if args.quick else default))


def lengths(text: str) -> tuple[tuple[int, int], ...]:
    try:
        pairs = tuple(tuple(int(v) for v in part.split("/")) for part in text.split(",") if part)
    except ValueError:
        pairs = ()
    if not pairs or any(len(p) != 2 or p[0] < 1 or p[1] < 1 or p[0] % p[1] for p in pairs):
        raise ValueError(f"lengths: expected gen/block pairs like 96/32,256/128 (block dividing gen), got {text!r}")
    return pairs


def at_least_one(**values: int) -> None:
    """Each named count (``batch_size``, ``jobs``) is at least 1."""
    if any(v < 1 for v in values.values()):
        raise ValueError(f"{', '.join(values)}: must be >= 1, got {', '.join(map(str, values.values()))}")


def add_items(parser, default: int = FULL_ITEMS, quick: str | None = None) -> None:
    parser.add_argument("--quick", action="store_true",
                        help=quick or f"{QUICK_ITEMS} items per family instead of {default}")
    parser.add_argument("--items", type=int, default=None, help=f"items per task family (default {default})")


def add_lengths(parser, help_text: str | None = None) -> None:
    parser.add_argument("--lengths", default=None, help=help_text or "gen/block pairs decoded side by side "
                        f"(default {','.join(f'{g}/{b}' for g, b in LENGTHS)})")


def add_batching(parser, jobs: str = "processes decoding parts side by side, one torch thread each") -> None:
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="prompts per forward pass "
                        f"(default {BATCH_SIZE}); decodes are identical at every batch size")
    parser.add_argument("--jobs", type=int, default=1, help=f"{jobs} (default 1; 2 on a 2-core CPU)")


def fitting(families, lengths) -> None:
    """Refuse a family at a gen length its answers do not fit (tasks.LONG_FAMILIES), before anything decodes."""
    for family in families:
        need = tasks.LONG_FAMILIES.get(family, 0)
        short = [gen for gen, _ in lengths if gen < need]
        if short:
            raise ValueError(f"lengths: {family} answers need gen >= {need}, got {short[0]}; run {family} on its "
                             f"own with e.g. --families {family} --lengths {need}/32")


def add_scope(parser, families_default: str = ",".join(tasks.SHORT_FAMILIES)) -> None:
    parser.add_argument("--families", default=families_default, help="comma-separated task families "
                        f"(default {families_default})")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default both)")


def add_parts(parser, what: str) -> None:
    parser.add_argument("--parts", metavar="DIR", help=f"save each finished part ({what}) in DIR, a folder git "
                        "ignores such as runs/parts/NAME (resume parts are not committed); the same command run again "
                        "skips those saved")
