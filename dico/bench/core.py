"""What every bench shares: the configs of Table 1, a cell (one config decoding one family's items at one length
and mode, as one batched run), decoding it, its row, and the Wilson interval every accuracy carries.

Plain Python at import time (torch and the loop are imported where a cell is decoded), so the tables can use the
interval without a model.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field

from dico.embedded import tasks
from dico.lanes import default_label
from dico.settings import METHODS
from dico.trace import FLOOR_BOUND

# (gen_length, semi-AR block_length): ours, sized to the embedded model's 20-70-token answers (three blocks
# in semi-AR), and the paper's (section 5.1: 256 positions, semi-AR blocks of 128).
LENGTHS = ((96, 32), (256, 128))
# 200 items per family: a 95% interval of about +-5 points around 85% (40 gave +-11).
FULL_ITEMS = 200
QUICK_ITEMS = 4
BATCH_SIZE = 8
Z95 = 1.959964

METHOD_ROWS = [(default_label(m), m, {}) for m in METHODS]     # every method at its paper settings ("Top-4 per step")
# Table 1 also decodes DiCo as the authors' release does (dico.settings.AUTHORS_CODE), beside the paper's DiCo.
AUTHORS_ROW = ("DiCo (authors' code)", "dico", {"authors_code": True})
TABLE = METHOD_ROWS + [AUTHORS_ROW]
REFERENCE = TABLE[0]            # Vanilla, one token a step: every Table 1 part's reference
# Not a decoder but the bound every decoder's passes are read against (``dico.observe.floor``): each
# step commits the most confident masked positions while the step's clash stays within 0.1 nats.
FLOOR = "floor"
FLOOR_ROW = (f"Floor (each step's clash within {FLOOR_BOUND:g} nats)", FLOOR, {})


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion: stays inside [0, 1] and is honest at 0% and 100%."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


# AUP (accuracy under parallelism; d3LLM, Qian et al. 2026, AUP_leaderboard/aup_utils.py): its defaults.
AUP_ALPHA, AUP_DROP = 3.0, 5.0


def aup(points: list[tuple[float, float]], y_max: float, penalty: float = AUP_ALPHA, drop: float = AUP_DROP) -> float:
    """d3LLM's accuracy under parallelism of (parallelism, accuracy %) points: sorted by parallelism rho (tokens a
    forward pass), the points whose accuracy is at least y_1 - ``drop`` (y_1: the accuracy of the least parallel
    point) kept, then AUP = rho_1 y_1 + sum_i (rho_i - rho_(i-1)) (y_i W(y_i) + y_(i-1) W(y_(i-1))) / 2 with
    W(y) = min(exp(-``penalty`` (1 - y / y_max)), 1) (d3LLM's default penalty, 3), ``y_max`` the best accuracy of
    every method compared. Its code refuses a curve that falls more than ``drop`` points; here such a point is left
    out (as its filter would)."""
    def weight(y):
        return min(math.exp(-penalty * (1 - y / y_max)), 1.0) if y_max > 0 else 0.0
    ordered = sorted(points)
    kept = [(rho, y) for rho, y in ordered if y >= ordered[0][1] - drop]
    total = kept[0][0] * kept[0][1]
    for (r0, y0), (r1, y1) in zip(kept, kept[1:]):
        total += 0.5 * (r1 - r0) * (y1 * weight(y1) + y0 * weight(y0))
    return total


def aup_of_rows(rows: list[dict]) -> dict[int, float]:
    """Each Table 1 row's AUP (by its index in ``rows``): its curve is Vanilla's point in the same cell (task, mode,
    gen_length: rho 1) and its own (rho = gen_length / NFE), accuracy in percent, y_max the cell's best accuracy.
    Rows of a cell without a Vanilla row get none."""
    out = {}
    for members in _cells(rows).values():
        members = [i for i in members if rows[i]["method"] != FLOOR]      # a bound, not a decoder
        vanilla = next((rows[i] for i in members if rows[i]["method"] == "vanilla" and not rows[i].get("settings")),
                       None)
        if vanilla is None or not vanilla.get("gen_length"):
            continue
        best = max(100 * rows[i]["accuracy"] for i in members)
        for i in members:
            r = rows[i]
            rho = r["gen_length"] / r["nfe_mean"]
            out[i] = aup([(vanilla["gen_length"] / vanilla["nfe_mean"], 100 * vanilla["accuracy"]),
                          (rho, 100 * r["accuracy"])], best)
    return out


def floor_ratios(rows: list[dict]) -> dict[int, float]:
    """Each row's passes over the floor's (``FLOOR_ROW``) in its cell (task, mode, gen_length), by its index in
    ``rows``; rows of a cell without a floor row get none."""
    out = {}
    for members in _cells(rows).values():
        floor = next((rows[i] for i in members if rows[i]["method"] == FLOOR), None)
        if floor is not None and floor["nfe_mean"]:
            out |= {i: rows[i]["nfe_mean"] / floor["nfe_mean"] for i in members}
    return out


def _cells(rows: list[dict]) -> dict[tuple, list[int]]:
    """Row indices by cell: task, mode and gen_length."""
    cells: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        cells.setdefault((r["task"], r["mode"], r.get("gen_length")), []).append(i)
    return cells


@dataclass
class Cell:
    """One table cell: a config decoding one family's items at one length and mode, as one batched run."""
    label: str
    method: str
    settings: dict
    mode: str
    task: str
    gen_length: int
    block_length: int | None
    correct: int = 0
    n: int = 0
    nfe: int = 0
    answer_nfe: int = 0
    forwards: int = 0
    passes: int = 0                                  # the floor's: its measuring conditionals included
    wall: float = 0.0
    outcomes: list = field(default_factory=list)     # per item: right (0/1) and its text's digest


def decode_cell(predictor, cell: Cell, items, batch_size: int, bar) -> None:
    """Decode ``items`` with the cell's config as one batched run and fill in its counts; ``bar`` (tqdm) ticks
    once per decoded item."""
    from dico.batch import decode_batch, drain

    bar.set_postfix_str(f"{cell.task} {cell.gen_length} {cell.mode} {cell.label}", refresh=True)
    start = time.perf_counter()
    if cell.method == FLOOR:
        traces = floors(predictor, cell, items, lambda: bar.update(1))
        cell.passes = sum(floor.passes for floor in traces)
    else:
        runs = decode_batch(predictor, [item.prompt for item in items], cell.method, batch_size=batch_size,
                            mode=cell.mode, gen_length=cell.gen_length, block_length=cell.block_length,
                            settings=cell.settings)
        traces = drain(runs, lambda: bar.update(1))
    cell.wall = time.perf_counter() - start
    cell.n = len(traces)
    cell.outcomes = [(int(tasks.check(item, trace.text)), text_digest(trace.text))
                     for item, trace in zip(items, traces)]
    cell.correct = sum(right for right, _ in cell.outcomes)
    cell.nfe = sum(trace.nfe for trace in traces)
    cell.answer_nfe = sum(trace.answer_nfe for trace in traces)
    cell.forwards = sum(trace.token_forwards for trace in traces)


# With ``--parts``, a cell is decoded and saved this many items at a time, every config's chunk before the next chunk:
# a gen-256 cell of 100 items is an hour of one CPU core, and a run stopped at any point keeps whole chunks, the
# same items for every config.
CHUNK_ITEMS = 25
TABLE_CELLS = "table cells"      # the saved chunks' bench name (the cache bench reads Table 1's decodes from them)
_COUNTS = ("correct", "n", "nfe", "answer_nfe", "forwards", "passes", "wall")


def cell_counts(cell: Cell) -> dict:
    """What a decoded cell (or a chunk of one) counted, as saved in a part."""
    return {**{name: getattr(cell, name) for name in _COUNTS}, "outcomes": [list(o) for o in cell.outcomes]}


def add_counts(cell: Cell, counts: dict) -> None:
    """Add a chunk's counts (``cell_counts``) to ``cell``: the chunks of one cell sum to the whole cell."""
    for name in _COUNTS:
        setattr(cell, name, getattr(cell, name) + counts[name])
    cell.outcomes = cell.outcomes + [tuple(o) for o in counts["outcomes"]]


def floors(predictor, cell: Cell, items, tick) -> list:
    """The floor of each item (``dico.observe.floor``, one item at a time: its conditionals are sequential), with
    the fields of a trace a cell counts."""
    from dico.observe import floor

    found = []
    for item in items:
        found.append(floor(predictor, item.prompt, mode=cell.mode, gen_length=cell.gen_length,
                           block_length=cell.block_length or cell.gen_length, **cell.settings))
        tick()
    return found


def text_digest(text: str) -> str:
    """A decoded text's fingerprint: enough to tell whether two decodes of one item wrote the same text."""
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def cell_row(cell: Cell, ref: Cell, batch_size: int) -> dict:
    """A decoded cell's row: accuracy with its interval, passes, tokens/s and the speed-ups against ``ref`` (the
    reference decoded on the same items in the same run), and its per-item outcomes."""
    tps = cell.n * cell.gen_length / cell.wall if cell.wall else 0.0
    ref_tps = ref.n * ref.gen_length / ref.wall if ref.wall else 0.0
    low, high = wilson(cell.correct, cell.n)
    return {"method": cell.method, "label": cell.label, "mode": cell.mode, "task": cell.task,
            "gen_length": cell.gen_length, "block_length": cell.block_length, "batch_size": batch_size,
            "n": cell.n, "correct": cell.correct, "accuracy": round(cell.correct / cell.n, 4),
            "accuracy_low": round(low, 4), "accuracy_high": round(high, 4),
            "nfe_mean": round(cell.nfe / cell.n, 2), "answer_nfe_mean": round(cell.answer_nfe / cell.n, 2),
            "token_forwards_mean": round(cell.forwards / cell.n, 1),
            "tokens_per_s": round(tps, 1), "speedup_nfe": round(ref.nfe / cell.nfe, 2),
            "speedup_answer_nfe": round(ref.answer_nfe / cell.answer_nfe, 2) if cell.answer_nfe else 0.0,
            "speedup_wall": round(tps / ref_tps, 2) if ref_tps else 0.0, "settings": cell.settings,
            **({"passes_mean": round(cell.passes / cell.n, 2)} if cell.method == FLOOR else {}),
            # kept in the saved parts (the cache bench compares its cached decodes with them), not in the report
            "outcomes": {"correct": "".join(str(c) for c, _ in cell.outcomes),
                         "text": [digest for _, digest in cell.outcomes]}}


def without_outcomes(rows: list[dict]) -> list[dict]:
    """Rows as a report writes them: the per-item outcomes stay in the saved parts."""
    return [{k: v for k, v in row.items() if k != "outcomes"} for row in rows]
