"""Which commits broke an answer, ``python -m dico.bench breaks``: on items with several valid answers (pick
and team), each method's wrong answers read from their traces.

    python -m dico.bench breaks --items 200 --jobs 2 --json assets/bench/breaks.json --markdown assets/bench/breaks.md

An answer names its choices ("I pick bats and drums."; "The leader is Tara Bond."). A wrong one repeats a choice
("bats and bats"), names one that was not offered (pieces of two: "car" + "ts", "Tara" + "Dean") or is not an answer
sentence at all. The tokens that clash are those of the repeated or unoffered choice; the trace says at which step
each was committed. When two of them were committed by one step, each came from its own marginal without seeing
the other: the paper's failure of naive parallel decoding. When they were committed at different steps, the later
one saw the earlier and the model itself chose the mixture (what Vanilla's misses are). The table also counts the
right answers in which a step committed two or more choice tokens at once: the parallelism a method got away with.

With ``--cache KIND`` every lane is decoded again with that KV cache, its row beside the lane's, and the
row counts the answers the cache broke (right without it, wrong with it) and mended. In the first semi-AR block a
prefix cache keeps only the prompt's keys and values: what it breaks there, the prompt's staleness broke.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from dico.bench import options
from dico.bench.core import QUICK_ITEMS
from dico.bench.parts import Parts, in_processes, weights_id
from dico.bench.runner import Report, Session, Subcommand, add_measure
from dico.bench.tables import BREAK_KINDS, breaks_markdown
from dico.embedded import tasks
from dico.embedded.picks import ANSWER_FRAMES, chosen
from dico.settings import (
    DEFAULT_BLOCK_LENGTH,
    DEFAULT_GEN_LENGTH,
    METHOD_LABELS,
    SEMI_AR,
    SamplingSettings,
    decodes_in,
)

CHOICE_FAMILIES = ("pick", "team")
LANES = [("Vanilla", "vanilla", {}), ("Top-2 per step", "topk", {"k": 2}), ("Top-4 per step", "topk", {"k": 4}),
         ("Fast-dLLM", "fast", {}), ("DiCo", "dico", {}), ("EB-Sampler", "eb", {}), ("KLASS", "klass", {}),
         ("WINO", "wino", {}), ("Saber", "saber", {}),
         # the other published decoders; ReMDM decodes non-AR only, as its code runs
         *((METHOD_LABELS[m], m, {}) for m in ("llada21", "t2m", "hierarchy", "credit", "pc-sampler", "prophet",
                                               "remdm"))]
DEFAULT_ITEMS = 40
KINDS = BREAK_KINDS


def token_spans(tokenizer, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The decoded text of ``ids`` and each token's character span in it (decoding growing prefixes, so a word piece
    and its space marker land where the whole decode puts them)."""
    ends = [len(tokenizer.decode(ids[:i + 1], skip_special_tokens=True)) for i in range(len(ids))]
    return tokenizer.decode(ids, skip_special_tokens=True), list(zip([0] + ends[:-1], ends))


def choice_positions(family: str, text: str, spans) -> list[tuple[str, list[int]]] | None:
    """Each choice the answer names, with the response positions of its tokens; None when the text is not one
    answer sentence of the family."""
    stripped = text.strip()
    match = ANSWER_FRAMES[family].fullmatch(stripped)
    if not match or chosen(family, stripped) is None:
        return None
    at = len(text) - len(text.lstrip()) + match.start(1)
    slots = []
    for piece in re.split(r"(, | and )", match.group(1)):
        if piece not in (", ", " and "):
            slots.append((piece, [i for i, (a, b) in enumerate(spans)
                                  if a < at + len(piece) and b > at and text[max(a, at):b].strip()]))
        at += len(piece)
    return slots


def clash(item, slots) -> tuple[str, list[int]]:
    """What is wrong with an answer and the positions of the tokens that clash."""
    if slots is None:
        return "malformed", []
    names = [name for name, _ in slots]
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated is not None:
        return "repeat", [p for name, positions in slots if name == repeated for p in positions]
    unoffered = next(((name, positions) for name, positions in slots if name not in item.offered), None)
    if unoffered is not None:
        return "mixed", unoffered[1]
    return "malformed", [p for _, positions in slots for p in positions]        # a wrong count or sentence


def together(trace, positions: list[int], when=None):
    """The first step whose commits of two or more of ``positions`` stand in the final response (``when``: each
    position's standing commit step, ``trace.commit_step()`` by default; a commit later taken back does not count),
    or None."""
    when = trace.commit_step() if when is None else when
    wanted = set(positions)
    return next((step for step in trace.steps if sum(when[p] == step.index for p in wanted) >= 2), None)


def taken_back(trace, step, when=None) -> set[int]:
    """The positions ``step`` committed whose commit was taken back later (or by the step itself), or replaced by an
    edit (an editing rule's replacement takes the token back and writes another)."""
    when = trace.commit_step() if when is None else when
    return {p for p in step.committed if when[p] != step.index}


def revised_clashes(predictor, item, trace) -> list[int]:
    """The steps that committed clashing tokens together of which a revising rule took one or more back: for each
    step with taken-back commits, the final response with those commits put back is read as an answer; the step
    counts when that answer is wrong and two or more of its clashing tokens are that step's commits."""
    when, found = trace.commit_step(), []
    for step in trace.steps:
        back = taken_back(trace, step, when)
        if not back:
            continue
        ids, had = list(trace.response), list(when)
        for p, t in zip(step.committed, step.tokens):
            if p in back:
                ids[p], had[p] = t, step.index
        answer = ids[:predictor.answer_length(ids)]
        text, spans = token_spans(predictor.tokenizer, answer)
        if tasks.check(item, predictor.decode(ids)):
            continue
        _, positions = clash(item, choice_positions(item.family, text, spans))
        if back.intersection(positions) and sum(had[p] == step.index for p in set(positions)) >= 2:
            found.append(step.index)
    return found


def read(predictor, item, trace) -> dict:
    """One decoded answer: right or what broke it, and whether its clashing tokens were committed by one step."""
    ids = trace.response[:trace.answer_length]
    text, spans = token_spans(predictor.tokenizer, ids)
    slots = choice_positions(item.family, text, spans)
    revised = {"revised": revised_clashes(predictor, item, trace)} if revises(trace) else {}
    if tasks.check(item, trace.text):
        chosen_positions = [p for _, positions in slots or [] for p in positions]
        return {"right": True, "together": together(trace, chosen_positions) is not None, **revised}
    kind, positions = clash(item, slots)
    step = together(trace, positions) if positions else None
    found = {"right": False, "kind": kind, "together": step is not None, "text": trace.text.strip(), **revised}
    if step is not None:
        both = sorted(set(positions).intersection(step.committed + [e[0] for e in step.edited]))   # an edit writes too
        found["step"] = {"index": step.index, "phase": step.phase,
                         "tokens": [trace.token_text(trace.response[p]) for p in both],
                         # an edited position carries no mask confidence: None
                         "confidence": [None if step.confidence[p] is None else round(step.confidence[p], 3)
                                        for p in both]}
    return found


def revises(trace) -> bool:
    """Whether the run took a committed token back or replaced one (revising and editing rules)."""
    return bool(trace.remasks() or trace.replaced())


def revision(found: list[dict], traces) -> dict:
    """A revising or editing lane's take-backs (none for a lane that never took a token back nor replaced one): the
    answers in which a step's clashing commits were taken back or replaced, how many of them ended right (repaired),
    the tokens taken back a run and, for an editing lane, the tokens replaced a run."""
    if not any(revises(trace) for trace in traces):
        return {}
    revised = [f for f in found if f.get("revised")]
    replaced = {"replaced_mean": round(sum(t.replaced() for t in traces) / len(traces), 2)} \
        if any(t.replaced() for t in traces) else {}
    return {"remasks_mean": round(sum(trace.remasks() for trace in traces) / len(traces), 2), **replaced,
            "clash_taken_back": len(revised), "repaired": sum(f["right"] for f in revised)}


def cached_lanes(lanes, cache: str | None) -> list[tuple[str, str, dict]]:
    """Each lane, followed by its twin decoding with the KV cache ``cache`` (none: the lanes as they are)."""
    if cache in (None, "none"):
        return list(lanes)
    return [twin for label, method, settings in lanes
            for twin in ((label, method, settings), (f"{label}, {cache} cache", method, {**settings, "cache": cache}))]


def _uncached(method: str, settings: dict) -> tuple:
    """What a lane decodes with, less its cache settings: a cached lane's twin without a cache has the same."""
    return method, tuple(sorted((k, v) for k, v in settings.items() if not k.startswith("cache")))


def breaks(predictor, families, modes, n_items: int, lanes=LANES, gen_length: int = DEFAULT_GEN_LENGTH,
           batch_size: int = 8, progress: bool = True) -> list[dict]:
    """A row per (family, mode, lane): right, wrong by kind, wrong with the clash committed in one step, right with
    two or more choice tokens committed in one step, and the first such break as an example. A lane with a cache
    whose twin without one (same method and other settings) came before it also counts the answers the cache broke
    and mended."""
    from tqdm import tqdm

    from dico.batch import decode_batch, drain

    rows = []
    bar = tqdm(total=len(families) * len(modes) * len(lanes) * n_items, desc="breaks", unit="decode",
               disable=not progress, dynamic_ncols=True)
    for family in families:
        items = tasks.make_split(family, "test", n_items)
        for mode in modes:
            plain = {}                  # each lane without a cache, by method and its other settings
            for label, method, settings in lanes:
                if not decodes_in(method, mode):
                    continue
                runs = decode_batch(predictor, [item.prompt for item in items], method, batch_size=batch_size,
                                    mode=mode, gen_length=gen_length,
                                    block_length=DEFAULT_BLOCK_LENGTH if mode == SEMI_AR else None, settings=settings)
                traces = drain(runs, lambda: bar.update(1))
                found = [read(predictor, item, trace) for item, trace in zip(items, traces)]
                wrong = [f for f in found if not f["right"]]
                example = next((f for f in wrong if f["together"]), None) or next(iter(wrong), None)
                extra = {}
                uncached = _uncached(method, settings)
                twin = plain.get(uncached)
                if settings.get("cache", "none") == "none":
                    plain[uncached] = found
                elif twin is not None:          # beside its twin without a cache: what the cache broke and mended
                    broke = [f for f, p in zip(found, twin) if p["right"] and not f["right"]]
                    example = next(iter(broke), example)
                    extra = {"cache": settings["cache"], "broken_by_cache": len(broke),
                             "broken": {kind: sum(f["kind"] == kind for f in broke) for kind in KINDS},
                             "broken_together": sum(f["together"] for f in broke),
                             "mended_by_cache": sum(f["right"] and not p["right"] for f, p in zip(found, twin))}
                rows.append({"family": family, "mode": mode, "label": label, "method": method, "settings": settings,
                             "n": len(found), "right": len(found) - len(wrong),
                             "nfe_mean": round(sum(t.nfe for t in traces) / len(traces), 2),
                             **{kind: sum(f["kind"] == kind for f in wrong) for kind in KINDS},
                             "wrong_together": sum(f["together"] for f in wrong),
                             "right_together": sum(f["together"] for f in found if f["right"]),
                             "example": example, **revision(found, traces), **extra})
    bar.close()
    return rows


@dataclass(frozen=True)
class Plan:
    families: tuple
    modes: tuple
    n_items: int
    lanes: list
    cache: str
    batch_size: int
    jobs: int
    parts: str | None = None

    @property
    def title(self) -> str:
        return f"Which commits broke an answer: gen {DEFAULT_GEN_LENGTH}, {self.n_items} held-out items per family" + (
            f", each lane beside itself with the {self.cache} cache" if self.cache != "none" else "")


def plan(args) -> Plan:
    n_items = options.item_count(args, DEFAULT_ITEMS)
    families = tuple(f for f in args.families.split(",") if f)
    if not families or any(f not in CHOICE_FAMILIES for f in families):
        raise ValueError(f"families: breaks reads answers with several valid forms, {', '.join(CHOICE_FAMILIES)}; "
                         f"got {args.families!r}")
    modes = options.modes(args.modes)
    offered = tuple(dict.fromkeys(method for _, method, _ in LANES))
    methods = options.choices("methods", args.methods, offered, "method", default=offered)
    SamplingSettings.from_dict({"cache": args.cache})      # the setting's own check names a bad kind
    lanes = cached_lanes([lane for lane in LANES if lane[1] in methods], args.cache)
    options.at_least_one(jobs=args.jobs)
    return Plan(families, modes, n_items, lanes, args.cache, args.batch_size, args.jobs, args.parts)


def measure(plan: Plan, session: Session) -> Report:
    """Every lane on the choice families, in this process or a (family, mode) cell per process."""
    where, about = session.where(plan.jobs), session.about()
    print(f"{plan.title}: model {about['model']}, on {where}", flush=True)
    if plan.jobs > 1 or plan.parts:
        parts = Parts(plan.parts, {"bench": "breaks", "weights": weights_id(session.args.model), "items": plan.n_items,
                                   "batch_size": plan.batch_size, "lanes": plan.lanes}) if plan.parts else None
        rows = in_processes(functools.partial(breaks_cell, n_items=plan.n_items, batch_size=plan.batch_size,
                                              lanes=plan.lanes), session.model,
                            [(family, mode) for family in plan.families for mode in plan.modes], plan.jobs,
                            progress=session.progress, desc="breaks cells", parts=parts,
                            predictor=session.predictor)
    else:
        rows = breaks(session.predictor, plan.families, plan.modes, plan.n_items, plan.lanes,
                      batch_size=plan.batch_size, progress=session.progress)
    return Report(breaks_markdown(rows, plan.title), {"title": plan.title, **about, "machine": where, "rows": rows})


def register(subparsers) -> None:
    parser = add_measure(subparsers, "breaks", "pick and team: which commits broke each method's wrong answers",
                         Subcommand(plan, measure, threads=1), __doc__)
    options.add_items(parser, default=DEFAULT_ITEMS, quick=f"{QUICK_ITEMS} items per family instead of {DEFAULT_ITEMS}")
    options.add_batching(parser, jobs="processes decoding (family, mode) cells side by side, one torch thread each")
    options.add_parts(parser, "a family and mode")
    options.add_scope(parser, families_default=",".join(CHOICE_FAMILIES))
    parser.add_argument("--methods", default=None, help="comma-separated methods (default: every one)")
    parser.add_argument("--cache", default="none", help="decode every lane again with this KV cache kind, each "
                        "beside its lane, counting the answers the cache broke (default none)")


def breaks_cell(predictor, family: str, mode: str, n_items: int, batch_size: int, lanes=LANES) -> list[dict]:
    """One (family, mode) cell's rows: what ``--jobs`` gives each process."""
    return breaks(predictor, (family,), (mode,), n_items, lanes, batch_size=batch_size, progress=False)
