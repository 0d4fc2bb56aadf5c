"""The speed-accuracy frontier, ``python -m dico.bench frontier``: each method's main knob turned, per task
family and mode, and accuracy (95% interval) read against forward passes.

    python -m dico.bench frontier --jobs 2 --json assets/bench/frontier.json --markdown assets/bench/frontier.md
    python -m dico.bench frontier --items 10 --families pick,word
    python -m visuals.export assets/bench/frontier_gen96.json assets/bench/frontier.png    # the figure in the docs

Naive top-k (k tokens a step by confidence: the paper's Figure 1, Observation I) beside Fast-dLLM's threshold and
factor and DiCo's cluster bar (``dico.settings.DICO_KNOB``): the paper's Figure 1 and Fast-dLLM's
threshold sweep in one picture; and the published decoders' knobs (EB-Sampler's gamma, KLASS's confidence, WINO's
threshold, Saber's n), and the other published decoders' (LLaDA 2.1's and token-to-mask's threshold, dInfer's
hierarchy and credit thresholds, PC-Sampler's and ReMDM's tokens a pass, Prophet's gaps); and the floor
(``dico.observe.floor``: a greedy bound on the steps without committing tokens that clash), the point each line's
passes are read against (NFE / floor).
``--lines`` picks lines by method (``floor`` the floor's point):

    python -m dico.bench frontier --lines eb,klass,wino,saber --items 24 --families pick,team

One token a step is the reference: speed-ups are against it, on the same items in
the same run.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from dico.bench import options
from dico.bench.core import FLOOR, FLOOR_ROW, Cell, cell_row, decode_cell
from dico.bench.parts import Parts, in_processes, weights_id
from dico.bench.runner import Report, Session, Subcommand, add_measure
from dico.bench.tables import frontier_markdown
from dico.embedded import tasks
from dico.settings import DEFAULT_BLOCK_LENGTH, DEFAULT_GEN_LENGTH, DICO_KNOB, SEMI_AR, ReMDMSettings, decodes_in
from dico.trace import FLOOR_BOUND

TOPK = (1, 2, 4, 8, 16)
THRESHOLDS = (0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
FACTORS = (0.5, 1.0, 2.0, 4.0)
# the published decoders' knobs, each through its default (EB 0.1, KLASS 0.9, WINO 0.6, Saber 2)
EB_GAMMAS = (0.01, 0.1, 0.5, 1.0, 2.0)
KLASS_CONFIDENCES = (0.5, 0.7, 0.9, 0.95, 0.99)
WINO_THRESHOLDS = (0.3, 0.5, 0.6, 0.8, 0.9)
SABER_NS = (2, 4, 8, 16)              # from its default up
# the other published decoders, each through its default: LLaDA 2.1's and token-to-mask's mask-to-token threshold
# (0.7, its quality mode; the edit threshold stays at 0.5), dInfer's thresholds (0.9), PC-Sampler's tokens a pass (1),
# Prophet's three gaps scaled together (1: 7.5 / 5.0 / 2.5), ReMDM's tokens a pass (1; those that divide its
# initial share of the answer)
LLADA21_THRESHOLDS = (0.5, 0.7, 0.8, 0.9, 0.95)
DINFER_THRESHOLDS = (0.5, 0.7, 0.9, 0.95, 0.99)
PC_SAMPLER_TOKENS = (1, 2, 4, 8)
PROPHET_SCALES = (0.5, 1.0, 2.0, 4.0, 8.0)
REMDM_UNMASK_K = (1, 2, 4, 8)


def naive_topk(k: int, gen_length: int) -> tuple[str, dict]:
    """Naive top-k as a method and its settings: the library's ``topk`` (k most confident masked positions a step,
    what Vanilla with ``steps`` = gen_length / k commits in LLaDA's generate.py)."""
    return "topk", {"k": k}


@dataclass(frozen=True)
class Point:
    """One point of the frontier: the line it lies on (``sweep``), the knob and the value it turns, and the config
    that decodes it."""
    sweep: str
    knob: str
    value: object
    label: str
    method: str
    settings: dict


def _line(sweep_name: str, method: str, knob: str, values, label: str) -> list[Point]:
    return [Point(sweep_name, knob, v, label.format(v=v), method, {knob: v}) for v in values]


def lines(gen_length: int = DEFAULT_GEN_LENGTH) -> dict[str, list[Point]]:
    """Each line's points in its knob's order, by the method that decodes it."""
    knob, values = DICO_KNOB
    return {"topk": [Point("Top-k per step", "k", k, f"Top-{k} per step", *naive_topk(k, gen_length)) for k in TOPK],
            "fast": _line("Fast-dLLM threshold", "fast", "threshold", THRESHOLDS, "Fast-dLLM {v:g}"),
            "fast-factor": _line("Fast-dLLM factor", "fast-factor", "factor", FACTORS, "Fast-dLLM factor {v:g}"),
            "dico": _line("DiCo", "dico", knob, values, "DiCo " + knob + " {v:g}"),
            "eb": _line("EB-Sampler gamma", "eb", "gamma", EB_GAMMAS, "EB-Sampler gamma {v:g}"),
            "klass": _line("KLASS confidence", "klass", "confidence", KLASS_CONFIDENCES, "KLASS confidence {v:g}"),
            "wino": _line("WINO threshold", "wino", "threshold", WINO_THRESHOLDS, "WINO threshold {v:g}"),
            "saber": _line("Saber n", "saber", "n", SABER_NS, "Saber n {v:g}"),
            "llada21": _line("LLaDA 2.1 threshold", "llada21", "threshold", LLADA21_THRESHOLDS, "LLaDA 2.1 {v:g}"),
            "t2m": _line("Token-to-mask threshold", "t2m", "threshold", LLADA21_THRESHOLDS, "Token-to-mask {v:g}"),
            "hierarchy": _line("dInfer hierarchy threshold", "hierarchy", "threshold", DINFER_THRESHOLDS,
                               "dInfer hierarchy {v:g}"),
            "credit": _line("dInfer credit threshold", "credit", "threshold", DINFER_THRESHOLDS, "dInfer credit {v:g}"),
            "pc-sampler": _line("PC-Sampler tokens a pass", "pc-sampler", "num_transfer_tokens", PC_SAMPLER_TOKENS,
                                "PC-Sampler {v:g} a pass"),
            "prophet": [Point("Prophet gaps", "gap scale", scale, f"Prophet gaps x{scale:g}", "prophet",
                              {"early": 7.5 * scale, "mid": 5.0 * scale, "late": 2.5 * scale})
                        for scale in PROPHET_SCALES],
            "remdm": _line("ReMDM tokens a pass", "remdm", "unmask_k", remdm_unmask_k(gen_length),
                           "ReMDM {v:g} a pass"),
            # not a decoder's knob: a greedy bound on the steps without a clash, the point every line is read against
            FLOOR: [Point("Floor", "bound", FLOOR_BOUND, FLOOR_ROW[0], FLOOR, {})]}


def remdm_unmask_k(gen_length: int) -> tuple[int, ...]:
    """ReMDM's tokens a pass that divide the share of the answer it commits before re-masking (its settings refuse
    the others)."""
    first = gen_length * ReMDMSettings().init_unmask_ratio
    return tuple(k for k in REMDM_UNMASK_K if first == int(first) and int(first) % k == 0)


LINES = tuple(lines())


def sweep(gen_length: int = DEFAULT_GEN_LENGTH, chosen=LINES) -> list[Point]:
    """The points of the ``chosen`` lines, each line in its knob's order; the first is always one token a step, the
    reference (naive top-k's first point)."""
    every = lines(gen_length)
    points = [point for name in LINES if name in chosen for point in every[name]]
    reference = every["topk"][0]
    return points if points[:1] == [reference] else [reference] + points


def frontier(predictor, families, modes, n_items: int, gen_length: int = DEFAULT_GEN_LENGTH, batch_size: int = 8,
             progress: bool = True, chosen=LINES) -> list[dict]:
    """Decode each family's first ``n_items`` held-out items at every point in every mode (each cell one batched
    run); one row per cell: Table 1's fields plus ``sweep``, ``knob`` and ``value``."""
    from tqdm import tqdm

    items = {family: tasks.make_split(family, "test", n_items) for family in families}
    points = sweep(gen_length, chosen)
    cells = [(point, Cell(point.label, point.method, point.settings, mode, family, gen_length,
                          DEFAULT_BLOCK_LENGTH if mode == SEMI_AR else None))
             for family in families for mode in modes for point in points
             if decodes_in(point.method, mode)]
    bar = tqdm(total=len(cells) * n_items, desc="frontier", unit="decode", disable=not progress, dynamic_ncols=True)
    for _, cell in cells:
        decode_cell(predictor, cell, items[cell.task], batch_size, bar)
    bar.close()
    ref = {(cell.task, cell.mode): cell for point, cell in cells if point == points[0]}
    return [{**cell_row(cell, ref[(cell.task, cell.mode)], batch_size), "sweep": point.sweep, "knob": point.knob,
             "value": point.value} for point, cell in cells]


def frontier_cell(predictor, family: str, mode: str, n_items: int, gen_length: int, batch_size: int,
                  chosen=LINES) -> list[dict]:
    """One (family, mode) cell's rows, its reference (one token a step) among them: what ``--jobs`` gives each
    process."""
    return frontier(predictor, (family,), (mode,), n_items, gen_length, batch_size, progress=False, chosen=chosen)


def _gen(gen_length: int, modes) -> int:
    if gen_length < 1 or gen_length % max(TOPK):
        raise ValueError(f"gen: must be a positive multiple of {max(TOPK)}, so that top-k takes whole steps at every k "
                         f"in {', '.join(map(str, TOPK))}; got {gen_length}")
    if SEMI_AR in modes and gen_length % DEFAULT_BLOCK_LENGTH:
        raise ValueError(f"gen: semi-AR decodes in blocks of {DEFAULT_BLOCK_LENGTH}, so gen must be a multiple of "
                         f"{DEFAULT_BLOCK_LENGTH}; got {gen_length}")
    return gen_length


@dataclass(frozen=True)
class Plan:
    families: tuple
    modes: tuple
    n_items: int
    gen_length: int
    batch_size: int
    jobs: int
    lines: tuple = LINES
    parts: str | None = None

    @property
    def title(self) -> str:
        return f"Speed-accuracy frontier: gen {self.gen_length}" + (
            f", semi-AR in blocks of {DEFAULT_BLOCK_LENGTH}" if SEMI_AR in self.modes else "")


def plan(args) -> Plan:
    n_items = options.item_count(args)
    families, modes = options.families(args.families), options.modes(args.modes)
    gen_length = _gen(DEFAULT_GEN_LENGTH if args.gen is None else args.gen, modes)
    options.at_least_one(jobs=args.jobs, batch_size=args.batch_size)
    chosen = options.choices("lines", args.lines, LINES, "line", default=LINES)
    return Plan(families, modes, n_items, gen_length, args.batch_size, args.jobs, chosen, args.parts)


def measure(plan: Plan, session: Session) -> Report:
    """Every point on the chosen families and modes, in this process or a (family, mode) cell per process."""
    where, about = session.where(plan.jobs), session.about()
    print(f"{plan.title}: model {about['model']}, {plan.n_items} held-out items per family, "
          f"{len(sweep(plan.gen_length, plan.lines))} points, batch size {plan.batch_size}, on {where}", flush=True)
    if plan.jobs > 1 or plan.parts:
        parts = Parts(plan.parts, {"bench": "frontier", "weights": weights_id(session.args.model),
                                   "items": plan.n_items, "gen_length": plan.gen_length,
                                   "batch_size": plan.batch_size, "lines": plan.lines}) if plan.parts else None
        rows = in_processes(functools.partial(frontier_cell, n_items=plan.n_items, gen_length=plan.gen_length,
                                              batch_size=plan.batch_size, chosen=plan.lines), session.model,
                            [(family, mode) for family in plan.families for mode in plan.modes], plan.jobs,
                            progress=session.progress, desc="frontier cells", parts=parts,
                            predictor=session.predictor)
    else:
        rows = frontier(session.predictor, plan.families, plan.modes, plan.n_items, plan.gen_length, plan.batch_size,
                        progress=session.progress, chosen=plan.lines)
    return Report(frontier_markdown(rows, plan.title), {
        "title": plan.title, **about, "gen_length": plan.gen_length, "block_length": DEFAULT_BLOCK_LENGTH,
        "batch_size": plan.batch_size, "machine": where, "rows": rows})


def register(subparsers) -> None:
    parser = add_measure(subparsers, "frontier", "accuracy against passes as each method's main knob turns",
                         Subcommand(plan, measure, threads=1), __doc__)
    options.add_items(parser)
    parser.add_argument("--gen", type=int, default=None, help=f"answer length (default {DEFAULT_GEN_LENGTH}; "
                        f"semi-AR in blocks of {DEFAULT_BLOCK_LENGTH})")
    options.add_batching(parser, jobs="processes decoding (family, mode) cells side by side, one torch thread each")
    options.add_parts(parser, "a family and mode")
    options.add_scope(parser)
    parser.add_argument("--lines", default=None, help=f"comma-separated lines, by method (default all: "
                        f"{', '.join(LINES)}); one token a step, the reference, is always decoded")
