"""Which commits broke an answer (issue 26), ``python -m dico.bench breaks``: on items with several valid answers (pick
and team), each method's wrong answers read from their traces.

    python -m dico.bench breaks --items 200 --jobs 2 --json assets/bench/breaks.json --markdown assets/bench/breaks.md

An answer names its choices ("I pick bats and drums."; "The leader is Tara Bond."). A wrong one repeats a choice
("bats and bats"), names one that was not offered (pieces of two: "car" + "ts", "Tara" + "Dean") or is not an answer
sentence at all. The tokens that clash are those of the repeated or unoffered choice; the trace says at which step
each was committed. When two of them were committed by one step, each came from its own marginal without seeing
the other: the paper's failure of naive parallel decoding. When they were committed at different steps, the later
one saw the earlier and the model itself chose the mixture (what Vanilla's misses are). The table also counts the
right answers in which a step committed two or more choice tokens at once: the parallelism a method got away with.

With ``--cache KIND`` every lane is decoded again with that KV cache (issue 27), its row beside the lane's, and the
row counts the answers the cache broke (right without it, wrong with it) and mended. In the first semi-AR block a
prefix cache keeps only the prompt's keys and values: what it breaks there, the prompt's staleness broke.
"""
from __future__ import annotations

import functools
import re
import sys
import time

from dico.bench.benchmark import QUICK_ITEMS, _choices, _items, _modes, _report, wilson
from dico.bench.hardware import bench_model, load_bench_model, machine, training_step
from dico.bench.parts import in_processes
from dico.embedded import tasks
from dico.embedded.picks import _FRAMES, chosen
from dico.settings import DEFAULT_BLOCK_LENGTH, DEFAULT_GEN_LENGTH, SEMI_AR, SamplingSettings

CHOICE_FAMILIES = ("pick", "team")
LANES = [("Vanilla", "vanilla", {}), ("Top-2 per step", "topk", {"k": 2}), ("Top-4 per step", "topk", {"k": 4}),
         ("Fast-dLLM", "fast", {}), ("DiCo", "dico", {})]
DEFAULT_ITEMS = 40
KINDS = ("repeat", "mixed", "malformed")


def token_spans(tokenizer, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The decoded text of ``ids`` and each token's character span in it (decoding growing prefixes, so a word piece
    and its space marker land where the whole decode puts them)."""
    ends = [len(tokenizer.decode(ids[:i + 1], skip_special_tokens=True)) for i in range(len(ids))]
    return tokenizer.decode(ids, skip_special_tokens=True), list(zip([0] + ends[:-1], ends))


def choice_positions(family: str, text: str, spans) -> list[tuple[str, list[int]]] | None:
    """Each choice the answer names, with the response positions of its tokens; None when the text is not one
    answer sentence of the family."""
    stripped = text.strip()
    match = _FRAMES[family].fullmatch(stripped)
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


def together(trace, positions: list[int]):
    """The first step that committed two or more of ``positions``, or None."""
    wanted = set(positions)
    return next((step for step in trace.steps if len(wanted.intersection(step.committed)) >= 2), None)


def read(predictor, item, trace) -> dict:
    """One decoded answer: right or what broke it, and whether its clashing tokens were committed by one step."""
    ids = trace.response[:trace.answer_length]
    text, spans = token_spans(predictor.tokenizer, ids)
    slots = choice_positions(item.family, text, spans)
    if tasks.check(item, trace.text):
        chosen_positions = [p for _, positions in slots or [] for p in positions]
        return {"right": True, "together": together(trace, chosen_positions) is not None}
    kind, positions = clash(item, slots)
    step = together(trace, positions) if positions else None
    found = {"right": False, "kind": kind, "together": step is not None, "text": trace.text.strip()}
    if step is not None:
        both = sorted(set(positions).intersection(step.committed))
        found["step"] = {"index": step.index, "phase": step.phase,
                         "tokens": [trace.token_text(trace.response[p]) for p in both],
                         "confidence": [round(step.confidence[p], 3) for p in both]}
    return found


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
                             "example": example, **extra})
    bar.close()
    return rows


def breaks_markdown(rows: list[dict], title: str) -> str:
    cached = any("broken_by_cache" in r for r in rows)
    lines = [f"**{title}**", "", "| family | mode | lane | right [95%] | passes | wrong: repeat / mixed / malformed | "
             "wrong, clashing tokens committed by one step | right, 2+ choice tokens committed by one step | "
             + ("the cache broke: repeat / mixed / malformed (by one step) | mended | " if cached else "")
             + "a break |", "|---|---|---|---|---|---|---|---|" + ("---|---|" if cached else "") + "---|"]
    for r in rows:
        example, wrong = r["example"], r["n"] - r["right"]
        said = "—"
        if example is not None:
            said = f"“{example['text']}”"
            if example.get("step"):
                s = example["step"]
                said += (f": step {s['index']} ({s['phase']}) committed " + " + ".join(
                    f"`{t.strip()}` ({c:.2f})" for t, c in zip(s["tokens"], s["confidence"])))
        by_cache = ""
        if cached:
            by_cache = "— | — | "
            if "broken_by_cache" in r:
                by_cache = (f"{r['broken_by_cache']}: {' / '.join(str(r['broken'][k]) for k in KINDS)} "
                            f"({r['broken_together']}) | {r['mended_by_cache']} | ")
        low, high = wilson(r["right"], r["n"])
        lines.append(f"| {r['family']} | {r['mode']} | {r['label']} | {r['right']}/{r['n']} [{100 * low:.0f}-"
                     f"{100 * high:.0f}%] | {r['nfe_mean']:.1f} | {r['repeat']} / "
                     f"{r['mixed']} / {r['malformed']} | {r['wrong_together']} of {wrong} | {r['right_together']} of "
                     f"{r['right']} | {by_cache}{said} |")
    return "\n".join(lines)


def breaks_main(args, argv) -> int:
    """``python -m dico.bench breaks``: every lane on the choice families, both modes, one process."""
    n_items = args.items or (QUICK_ITEMS if args.quick else DEFAULT_ITEMS)
    every = ",".join(tasks.FAMILIES)            # the option's default: here, the families with choices
    families = CHOICE_FAMILIES if args.families == every else tuple(f for f in args.families.split(",") if f)
    try:
        _items(n_items)
        wrong = [f for f in families if f not in CHOICE_FAMILIES]
        if wrong or not families:
            raise ValueError(f"families: breaks reads answers with several valid forms, {', '.join(CHOICE_FAMILIES)}; "
                             f"got {args.families!r}")
        modes = _modes(args.modes)
        offered = tuple(dict.fromkeys(method for _, method, _ in LANES))
        methods = _choices("methods", args.methods, offered, "method", default=offered)
        lanes = [lane for lane in LANES if lane[1] in methods]
        SamplingSettings.from_dict({"cache": args.cache})      # the setting's own check names a bad kind
        lanes = cached_lanes(lanes, args.cache)
        import torch

        torch.set_num_threads(1)
        if args.jobs < 1:
            raise ValueError(f"jobs: must be >= 1, got {args.jobs}")
        model = bench_model(args)
        predictor = load_bench_model(model)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    where, start = machine(args.jobs, model), time.time()
    title = f"Which commits broke an answer: gen {DEFAULT_GEN_LENGTH}, {n_items} held-out items per family" + (
        f", each lane beside itself with the {args.cache} cache" if args.cache != "none" else "")
    print(f"{title}: model {predictor.name}, on {where}", flush=True)
    if args.jobs > 1:
        rows = in_processes(functools.partial(breaks_cell, n_items=n_items, batch_size=args.batch_size, lanes=lanes),
                            model,
                            [(family, mode) for family in families for mode in modes], args.jobs,
                            progress=not args.no_progress, desc="breaks cells")
    else:
        rows = breaks(predictor, families, modes, n_items, lanes, batch_size=args.batch_size,
                      progress=not args.no_progress)
    _report(args, argv, breaks_markdown(rows, title), start, {
        "title": title, "model": predictor.name, "model_step": training_step(args.model), "machine": where,
        "rows": rows})
    return 0


def breaks_cell(predictor, family: str, mode: str, n_items: int, batch_size: int, lanes=LANES) -> list[dict]:
    """One (family, mode) cell's rows: what ``--jobs`` gives each process."""
    return breaks(predictor, (family,), (mode,), n_items, lanes, batch_size=batch_size, progress=False)
