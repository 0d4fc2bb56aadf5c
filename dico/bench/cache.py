"""The KV cache benchmark, ``python -m dico.bench cache``: each cache kind against no cache.

Every case decodes each item without and with its cache, interleaved item by item in one process at batch 1
(the order alternating), so the tokens/s ratio is measured on the same items under the same load.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from dico.bench import options
from dico.bench.core import LENGTHS, TABLE_CELLS, text_digest, wilson
from dico.bench.hardware import counted, decoded_on
from dico.bench.parts import Parts, in_processes, weights_id
from dico.bench.runner import Report, Session, Subcommand, add_measure
from dico.bench.tables import cache_tables
from dico.embedded import tasks
from dico.lanes import default_label
from dico.methods import RULES
from dico.settings import METHODS, SEMI_AR, decodes_in

# The cache benchmark. Speed: Fast-dLLM's setting (gen 256, blocks of 32, dual cache) and the delayed
# cache in non-AR; accuracy: each cache kind in the mode it serves, on Table 1's items and lengths. A case is
# (method, mode, gen_length, block_length, cache kinds, cache_refresh[, other cache settings]): its kinds share one
# decode without a cache. Other settings (``cache_prompt`` off) come as a trailing dict, only when given, so the
# saved parts of the cases without them keep their keys.
CACHE_SPEED = [(m, SEMI_AR, 256, 32, ("dual",), 0) for m in ("vanilla", "fast", "dico")] + \
    [(m, "non-ar", 256, None, ("delayed",), 0) for m in ("fast", "dico")]
CACHE_SERVES = {SEMI_AR: ("prefix", "dual"), "non-ar": ("delayed",)}
SPEED_ITEMS = 40
PIECE_CHUNK = 40     # items a saved chunk of a cache piece holds: a stopped run loses at most one chunk


def cache_cases(lengths=LENGTHS[:1], refreshes=(0,), modes=(SEMI_AR, "non-ar"), methods=METHODS,
                keep_prompt=(True,)) -> list[tuple]:
    """The accuracy part's cases: every method that can run with a cache (``Rule.cannot``) with the cache kinds of
    each mode it decodes in (``decodes_in``) and they serve, at each refresh interval (0: only at a block start or
    the first pass), with the prompt kept between refreshes and/or not."""
    return [(m, mode, gen, block if mode == SEMI_AR else None, kinds, refresh) + (() if keep else
                                                                                  ({"cache_prompt": False},))
            for gen, block in lengths for refresh in refreshes for keep in keep_prompt
            for mode, kinds in CACHE_SERVES.items() if mode in modes for m in methods
            if decodes_in(m, mode) and "cache" not in RULES[m].cannot]


def case_settings(case) -> dict:
    """The cache settings a case decodes its cached side with, less the kind."""
    return {"cache_refresh": case[5], **(case[6] if len(case) > 6 else {})}


def cache_bench(predictor, cases, families, n_items: int, progress: bool = True, parts=None) -> list[dict]:
    """Each case decodes every item without a cache and with each of its kinds, interleaved item by item in one
    process (the order rotating), one prompt at a time: tokens/s, token forwards, accuracy of each, and the share
    of texts a cache changed; one row per kind. With ``parts`` (``dico.bench.parts.Parts``) each finished case is
    saved and a case saved earlier is not rerun."""
    from tqdm import tqdm

    from dico.loop import generate

    items = _items_of(families, n_items)
    rows = []
    bar = tqdm(total=len(cases) * len(items), desc="cache", unit="item", disable=not progress, dynamic_ncols=True)
    for case in cases:
        method, mode, gen, block, kinds = case[:5]
        saved = parts.get(list(case)) if parts else None
        if saved is not None:
            rows += saved
            bar.update(len(items))
            continue
        case_start = time.perf_counter()
        configs = ("none", *kinds)
        sums = {c: dict(wall=0.0, nfe=0, forwards=0) for c in configs}
        right, texts = {c: [] for c in configs}, {c: [] for c in configs}
        for i, item in enumerate(items):
            turn = i % len(configs)
            for c in configs[turn:] + configs[:turn]:
                start = time.perf_counter()
                trace = generate(predictor, item.prompt, method, mode=mode, gen_length=gen, block_length=block,
                                 **({"cache": c, **case_settings(case)} if c != "none" else {}))
                total = sums[c]
                total["wall"] += time.perf_counter() - start
                total["nfe"] += trace.nfe
                total["forwards"] += trace.token_forwards
                right[c].append(int(tasks.check(item, trace.text)))
                texts[c].append(text_digest(trace.text))
            bar.update(1)
        case_rows = _case_rows(case, items, sums, right, texts)
        rows += case_rows
        if parts:
            parts.put(list(case), case_rows, time.perf_counter() - case_start)
    bar.close()
    return rows


def _items_of(families, n_items: int) -> list:
    """The held-out items of every family, families in order: the order of every case's per-item lists."""
    return [item for family in families for item in tasks.make_split(family, "test", n_items)]


def _case_rows(case, items, sums: dict, right: dict, texts: dict) -> list[dict]:
    """A case's rows, one per cache kind, from each config's sums (wall seconds, NFE, token forwards; a ``None``
    wall: not timed side by side), whether it got each item right and its text's digest; ``by_family`` says
    where a cache changed an answer."""
    method, mode, gen, block, kinds = case[:5]
    plain, n = sums["none"], len(items)
    low, high = wilson(sum(right["none"]), n)
    tps = {c: n * gen / v["wall"] if v["wall"] else None for c, v in sums.items()}
    families = {}
    for i, item in enumerate(items):
        families.setdefault(item.family, []).append(i)
    return [{"method": method, "label": default_label(method), "mode": mode, "gen_length": gen,
             "block_length": block, "cache": kind, **case_settings(case), "n": n, "families": list(families),
             "accuracy_none": round(sum(right["none"]) / n, 4), "accuracy_none_low": round(low, 4),
             "accuracy_none_high": round(high, 4), "accuracy_cache": round(sum(right[kind]) / n, 4),
             "changed": round(sum(a != b for a, b in zip(texts["none"], texts[kind])) / n, 4),
             "nfe_none": round(plain["nfe"] / n, 2), "nfe_cache": round(sums[kind]["nfe"] / n, 2),
             "token_forwards_none": round(plain["forwards"] / n, 1),
             "token_forwards_cache": round(sums[kind]["forwards"] / n, 1),
             "tokens_per_s_none": tps["none"] and round(tps["none"], 1),
             "tokens_per_s_cache": tps[kind] and round(tps[kind], 1),
             "speedup_wall": round(tps[kind] / tps["none"], 2) if tps["none"] and tps[kind] else None,
             "by_family": {family: {"n": len(at), "right_none": sum(right["none"][i] for i in at),
                                    "right_cache": sum(right[kind][i] for i in at),
                                    "changed": sum(texts["none"][i] != texts[kind][i] for i in at)}
                           for family, at in families.items()}}
            for kind in kinds]


def cache_against(predictor, case, families, n_items: int, none: dict, batch_size: int, parts=None,
                  bar=None) -> list[dict]:
    """A case's rows with its decodes without a cache taken from ``none`` (Table 1's, ``table1_none``): only the
    cached side is decoded, in batches (a batched cached decode commits what each prompt alone would). Half the
    work of ``cache_bench`` at gen 256; tokens/s then has no baseline decoded beside it and is left out."""
    saved = parts.get(list(case)) if parts else None
    if saved is not None:
        return saved
    items = _items_of(families, n_items)
    sums = {"none": {"wall": None, "nfe": none["nfe"], "forwards": none["forwards"]}}
    right, texts = {"none": none["right"]}, {"none": none["texts"]}
    pieces = [(kind, family) for kind in case[4] for family in families]
    decoded = {piece: _piece(predictor, case, *piece, n_items, batch_size, parts, bar) for piece in pieces}
    for kind in case[4]:
        done = _joined([decoded[kind, family] for family in families])
        sums[kind] = {"wall": None, "nfe": done["nfe"], "forwards": done["forwards"]}
        right[kind], texts[kind] = done["right"], done["texts"]
    rows = _case_rows(case, items, sums, right, texts)
    if parts:
        parts.put(list(case), rows, sum(d["seconds"] for d in decoded.values()))    # each piece's decoding, once
        for kind, family in pieces:
            parts.drop([*case, kind, family])
    return rows


def _piece(predictor, case, kind: str, family: str, n_items: int, batch_size: int, parts, bar) -> dict:
    """One cache kind's decodes of one family's items (NFE and token forwards summed; per item, right or not and the
    text's digest), saved as a part of its own until the case's rows are: a gen-256 case runs for hours on one core,
    and a stopped run resumes from the pieces it finished. A piece is decoded ``PIECE_CHUNK`` items at a time, each
    chunk saved until the piece is (Vanilla's gen-256 piece is about an hour of one core)."""
    key = [*case, kind, family]
    saved = _taken_back(parts, key, bar, n_items)
    if saved is not None:
        return saved
    items = tasks.make_split(family, "test", n_items)
    chunks = [_chunk(predictor, case, kind, items, start, batch_size, parts, bar)
              for start in range(0, n_items, PIECE_CHUNK)]
    piece = _joined(chunks)
    seconds = sum(c["seconds"] for c in chunks)
    if parts:
        parts.put(key, [piece], seconds)
        for start in range(0, n_items, PIECE_CHUNK):
            parts.drop([*key, start])
    return {**piece, "seconds": seconds}


def _chunk(predictor, case, kind: str, items, start: int, batch_size: int, parts, bar) -> dict:
    """A piece's items from ``start`` on, ``PIECE_CHUNK`` of them: taken back from ``parts`` or decoded and saved."""
    from dico.batch import decode_batch, drain

    key, items = [*case, kind, items[start].family, start], items[start:start + PIECE_CHUNK]
    saved = _taken_back(parts, key, bar, len(items))
    if saved is not None:
        return saved
    method, mode, gen, block = case[:4]
    began = time.perf_counter()
    runs = decode_batch(predictor, [item.prompt for item in items], method, batch_size=batch_size, mode=mode,
                        gen_length=gen, block_length=block, cache=kind, **case_settings(case))
    traces = drain(runs, bar.update if bar else None)
    chunk = {"nfe": sum(t.nfe for t in traces), "forwards": sum(t.token_forwards for t in traces),
             "right": [int(tasks.check(item, t.text)) for item, t in zip(items, traces)],
             "texts": [text_digest(t.text) for t in traces]}
    seconds = time.perf_counter() - began
    if parts:
        parts.put(key, [chunk], seconds)
    return {**chunk, "seconds": seconds}


def _taken_back(parts, key, bar, n_items: int) -> dict | None:
    """A piece or chunk saved in ``parts`` under ``key``, with its seconds, the bar ticked for its ``n_items``;
    None if it is not there."""
    loaded = parts.load(key) if parts else None
    if loaded is None:
        return None
    if bar:
        bar.update(n_items)
    return {**loaded[0][0], "seconds": loaded[1]}


def _joined(decodes: list[dict]) -> dict:
    """Decodes of consecutive items as one: NFE and token forwards summed, per-item marks and digests in order."""
    return {"nfe": sum(d["nfe"] for d in decodes), "forwards": sum(d["forwards"] for d in decodes),
            "right": [r for d in decodes for r in d["right"]], "texts": [t for d in decodes for t in d["texts"]]}


def table1_none(saved, weights: str, n_items: int, families, case) -> dict | None:
    """The decodes without a cache of an accuracy case, from Table 1's saved chunks (``table1_parts``) of the same
    weights: NFE, token forwards, and per item (families in order) whether it was right and its text's digest.
    None if a family's first ``n_items`` items are not covered by saved chunks (Table 1 not run there, or on other
    weights)."""
    method, mode, gen, block = case[:4]
    per_family = []
    for family in families:
        want = [method, {}, mode, family, gen, block if mode == SEMI_AR else None]
        chunks = {tuple(key["part"]["items"]): counts for key, counts in saved
                  if key.get("weights") == weights and key["part"]["cell"][1:] == want}
        covered = _tiling(chunks, n_items)
        if covered is None:
            return None
        outcomes = [o for counts in covered for o in counts["outcomes"]]
        per_family.append({"nfe": sum(c["nfe"] for c in covered), "forwards": sum(c["forwards"] for c in covered),
                           "right": [int(right) for right, _ in outcomes], "texts": [text for _, text in outcomes]})
    return _joined(per_family)


def _tiling(chunks: dict, n_items: int) -> list | None:
    """Saved chunks (keyed by their item span) that cover items 0 to ``n_items`` one after another, or None."""
    covered, at = [], 0
    while at < n_items:
        span = max((span for span in chunks if span[0] == at and span[1] <= n_items), default=None,
                   key=lambda span: span[1])
        if span is None:
            return None
        covered.append(chunks[span])
        at = span[1]
    return covered


def table1_parts(folder) -> list[tuple[dict, dict]]:
    """Every Table 1 chunk saved in ``folder`` (Table 1's ``--parts``): its key and counts."""
    import json
    from pathlib import Path

    found = []
    for path in sorted(Path(folder).glob("part-*.json")):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if saved.get("key", {}).get("bench") == TABLE_CELLS:
            found.append((saved["key"], saved["rows"]))
    return found


def cache_case(predictor, case, families, n_items: int, parts, none=None, batch_size: int = 1,
               progress: bool = False) -> list[dict]:
    """One case's rows: decoded without a cache beside its kinds, or, given ``none`` (``table1_none``), its cached
    side only. What ``--jobs`` gives each process: a case's decodes stay in one process, so its tokens/s ratio is
    measured under one load."""
    if none is None:
        return cache_bench(predictor, [case], families, n_items, progress, parts)
    from tqdm import tqdm

    with tqdm(total=len(case[4]) * n_items * len(families), desc=f"cache {case[0]} {case[1]}", unit="item",
              disable=not progress, dynamic_ncols=True) as bar:
        return cache_against(predictor, case, families, n_items, none, batch_size, parts, bar)


def add_cache_options(parser) -> None:
    """The options only ``python -m dico.bench cache`` reads."""
    group = parser.add_argument_group("cache only")
    group.add_argument("--methods", default=None, help="comma-separated methods (default: every one)")
    group.add_argument("--refresh", default="0", help="the accuracy part's cache_refresh values, comma-separated "
                       "(default 0: refresh only at a block start or the first pass)")
    group.add_argument("--cache-prompt", default="on", help="keep the prompt's keys and values between refreshes in "
                       "the accuracy part: on (default), off (computed every pass) or on,off")
    group.add_argument("--none-from", metavar="DIR", help="the accuracy part's decodes without a cache are Table 1's, "
                       "saved by its --parts DIR (same weights and items); only the cached side is decoded, batched")
    group.add_argument("--speed-items", type=int, default=None, help=f"word problems in the speed part (default "
                       f"{SPEED_ITEMS}, at most --items)")


def _refreshes(text: str) -> tuple[int, ...]:
    refreshes = tuple(r.strip() for r in text.split(",") if r.strip())
    if not refreshes or not all(r.isdigit() for r in refreshes):
        raise ValueError(f"refresh: comma-separated passes between refreshes, each 0 or more, got {text!r}")
    return tuple(map(int, refreshes))


def _keep_prompt(text: str) -> tuple[bool, ...]:
    keep = tuple(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    if not keep or any(v not in ("on", "off") for v in keep):
        raise ValueError(f"cache-prompt: on, off or on,off (keep the prompt's keys and values between refreshes), "
                         f"got {text!r}")
    return tuple(v == "on" for v in keep)


@dataclass(frozen=True)
class Plan:
    """The cases to decode: the speed cases on word problems, the accuracy cases on every family."""
    speed: list
    accuracy: list
    families: tuple
    n_items: int
    speed_items: int
    lengths_given: str | None
    none_from: str | None
    parts: str | None
    batch_size: int
    jobs: int


def plan(args) -> Plan:
    lengths = options.lengths(args.lengths) if args.lengths else (LENGTHS[:1] if args.quick else LENGTHS)
    n_items = options.item_count(args)
    families = options.families(args.families)
    refreshes, keep_prompt = _refreshes(args.refresh), _keep_prompt(args.cache_prompt)
    modes = options.modes(args.modes)
    methods = options.choices("methods", args.methods, METHODS, "method", default=METHODS)
    if args.speed_items is not None and args.speed_items < 1:
        raise ValueError(f"speed-items: at least 1 word problem, got {args.speed_items}")
    return Plan([case for case in CACHE_SPEED if case[1] in modes and case[0] in methods],
                cache_cases(lengths, refreshes, modes, methods, keep_prompt), families, n_items,
                min(args.speed_items or SPEED_ITEMS, n_items), args.lengths, args.none_from, args.parts,
                args.batch_size, args.jobs)


def _stores(plan: Plan, session: Session, weights: str | None) -> dict:
    """Where each part's finished cases are saved (None: nowhere), by part: speed, accuracy, against Table 1."""
    key = {"bench": "cache", "weights": weights, **decoded_on(session.model)}
    accuracy = {**key, "items": plan.n_items, "families": list(plan.families)}
    return {"speed": _parts(plan.parts, {**key, "items": plan.speed_items, "part_of": "speed", "families": ["word"]}),
            "accuracy": _parts(plan.parts, {**accuracy, "part_of": "accuracy"}),    # cases decoding both sides
            "against": _parts(plan.parts, {**accuracy, "part_of": "accuracy against Table 1",
                                           "batch_size": plan.batch_size})}


def _nones(plan: Plan, weights: str | None) -> list:
    """Each accuracy case's decodes without a cache from Table 1's parts (``--none-from``), None where it decodes
    both sides."""
    if not plan.none_from:
        return [None] * len(plan.accuracy)
    saved = table1_parts(plan.none_from)
    nones = [table1_none(saved, weights, plan.n_items, plan.families, case) for case in plan.accuracy]
    taken = sum(none is not None for none in nones)
    if not taken:
        raise ValueError(f"none-from: {plan.none_from} holds no Table 1 part of these weights with {plan.n_items} "
                         f"items a family at {plan.lengths_given or 'these lengths'} (Table 1 saves them with: "
                         f"python -m dico.bench --items {plan.n_items} --parts {plan.none_from})")
    print(f"none-from: {taken} of {len(plan.accuracy)} accuracy cases take their decodes without a cache from Table "
          f"1's parts in {plan.none_from}; the rest decode both sides", flush=True)
    return nones


def measure(plan: Plan, session: Session) -> Report:
    """The speed cases, then the accuracy cases: each case's decodes in one process, cases side by side with
    ``--jobs``."""
    where, about = session.where(plan.jobs) + ", batch 1", session.about()
    print(f"cache: model {about['model']}, {counted(plan.speed_items, 'word problem')} for speed, {plan.n_items} "
          f"items per family for accuracy, on {where}", flush=True)
    weights = weights_id(session.args.model) if plan.parts or plan.none_from else None   # hashes the weights: once
    stores, nones = _stores(plan, session, weights), _nones(plan, weights)
    cells = [(case, ("word",), plan.speed_items, stores["speed"]) for case in plan.speed] + \
        [(case, plan.families, plan.n_items, stores["against" if none else "accuracy"], none, plan.batch_size)
         for case, none in zip(plan.accuracy, nones)]
    if plan.jobs > 1:       # every case in one pool: each case's decodes stay interleaved in its process
        rows = in_processes(cache_case, session.model, cells, plan.jobs, session.progress, "cache cases")
    else:
        rows = [row for cell in cells for row in cache_case(session.predictor, *cell, progress=session.progress)]
    record = {"title": "cache", **about, "machine": where, "speed": rows[:len(plan.speed)],   # a speed case: one kind
              "accuracy": rows[len(plan.speed):]}
    return Report(cache_tables(record), record)


def register(subparsers) -> None:
    parser = add_measure(subparsers, "cache", "tokens/s, token forwards and accuracy with and without each KV cache",
                         Subcommand(plan, measure, threads=1), __doc__)
    options.add_items(parser)
    options.add_lengths(parser)
    options.add_batching(parser, jobs="processes decoding cases side by side, one torch thread each")
    options.add_scope(parser)
    options.add_parts(parser, "a cache case, its pieces and chunks")
    add_cache_options(parser)


def _parts(folder, key):
    """Where finished cases are saved (None: nowhere)."""
    return Parts(folder, key) if folder else None
