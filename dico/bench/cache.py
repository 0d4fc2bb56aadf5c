"""The KV cache benchmark (issue 27), ``python -m dico.bench cache``: each cache kind against no cache.

Every case decodes each item without and with its cache, interleaved item by item in one process at batch 1
(the order alternating), so the tokens/s ratio is measured on the same items under the same load.
"""
from __future__ import annotations

import sys
import time

from dico.embedded import tasks
from dico.bench.benchmark import (FULL_ITEMS, LENGTHS, QUICK_ITEMS, _families, _items, _lengths, _modes, _report,
                                  machine, training_step, wilson)
from dico.lanes import default_label
from dico.settings import METHODS, SEMI_AR

# The cache benchmark (issue 27). Speed: Fast-dLLM's setting (gen 256, blocks of 32, dual cache) and the delayed
# cache in non-AR; accuracy: each cache kind in the mode it serves, on Table 1's items and lengths.
CACHE_SPEED = [(m, SEMI_AR, 256, 32, "dual", 0) for m in ("vanilla", "fast", "dico")] + \
    [(m, "non-ar", 256, None, "delayed", 0) for m in ("fast", "dico")]
CACHE_SERVES = ((SEMI_AR, "prefix"), (SEMI_AR, "dual"), ("non-ar", "delayed"))


def cache_cases(lengths=LENGTHS[:1], refreshes=(0,), modes=(SEMI_AR, "non-ar")) -> list[tuple]:
    """(method, mode, gen_length, block_length, cache, cache_refresh) of the accuracy part: every method, each kind in
    the mode it serves, at each refresh interval (0: only at a block start or the first pass)."""
    return [(m, mode, gen, block if mode == SEMI_AR else None, kind, refresh)
            for gen, block in lengths for refresh in refreshes for mode, kind in CACHE_SERVES if mode in modes
            for m in METHODS]


def cache_bench(predictor, cases, families, n_items: int, progress: bool = True, parts=None) -> list[dict]:
    """Each case decodes every item without and with its cache, interleaved item by item in one process (the order
    alternating), one prompt at a time: tokens/s, token forwards, accuracy of both, and the share of texts changed.
    With ``parts`` (``dico.bench.parts.Parts``) each finished case is saved and a case saved earlier is not rerun."""
    from tqdm import tqdm

    from dico.loop import generate

    items = [item for family in families for item in tasks.make_split(family, "test", n_items)]
    rows = []
    bar = tqdm(total=len(cases) * len(items), desc="cache", unit="item", disable=not progress, dynamic_ncols=True)
    for case in cases:
        method, mode, gen, block, kind, refresh = case
        saved = parts.get(list(case)) if parts else None
        if saved is not None:
            rows += saved
            bar.update(len(items))
            continue
        case_start = time.perf_counter()
        sums = {c: dict(wall=0.0, nfe=0, forwards=0, correct=0) for c in ("none", kind)}
        texts = {}
        for i, item in enumerate(items):
            for c in (("none", kind) if i % 2 == 0 else (kind, "none")):
                start = time.perf_counter()
                trace = generate(predictor, item.prompt, method, mode=mode, gen_length=gen, block_length=block,
                                 cache=c, cache_refresh=refresh)
                total = sums[c]
                total["wall"] += time.perf_counter() - start
                total["nfe"] += trace.nfe
                total["forwards"] += trace.token_forwards
                total["correct"] += tasks.check(item, trace.text)
                texts.setdefault(i, {})[c] = trace.text
            bar.update(1)
        n = len(items)
        plain, cached = sums["none"], sums[kind]
        low, high = wilson(plain["correct"], n)
        tps = {c: n * gen / v["wall"] if v["wall"] else 0.0 for c, v in sums.items()}
        rows.append({"method": method, "label": default_label(method), "mode": mode, "gen_length": gen,
                     "block_length": block, "cache": kind, "cache_refresh": refresh, "n": n, "families": list(families),
                     "accuracy_none": round(plain["correct"] / n, 4), "accuracy_none_low": round(low, 4),
                     "accuracy_none_high": round(high, 4), "accuracy_cache": round(cached["correct"] / n, 4),
                     "changed": round(sum(t["none"] != t[kind] for t in texts.values()) / n, 4),
                     "nfe_none": round(plain["nfe"] / n, 2), "nfe_cache": round(cached["nfe"] / n, 2),
                     "token_forwards_none": round(plain["forwards"] / n, 1),
                     "token_forwards_cache": round(cached["forwards"] / n, 1),
                     "tokens_per_s_none": round(tps["none"], 1), "tokens_per_s_cache": round(tps[kind], 1),
                     "speedup_wall": round(tps[kind] / tps["none"], 2) if tps["none"] else 0.0})
        if parts:
            parts.put(list(case), rows[-1:], time.perf_counter() - case_start)
    bar.close()
    return rows


def cache_markdown(rows: list[dict], title: str) -> str:
    """The cache benchmark as a Markdown table: accuracy without -> with the cache (95% interval of the first)."""
    lines = [f"**{title}**", "", "| Method | mode | gen / block | cache | n | accuracy: none [95%] -> cache | text "
             "changed | NFE none -> cache | token forwards none -> cache | tokens/s none -> cache | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        refresh = f", refresh {r['cache_refresh']}" if r.get("cache_refresh") else ""
        lines.append(f"| {r['label']} | {r['mode']} | {r['gen_length']} / {r['block_length'] or '-'} | {r['cache']}"
                     f"{refresh} | "
                     f"{r['n']} | {100 * r['accuracy_none']:.1f}% [{100 * r['accuracy_none_low']:.0f}-"
                     f"{100 * r['accuracy_none_high']:.0f}] -> {100 * r['accuracy_cache']:.1f}% | "
                     f"{100 * r['changed']:.0f}% | {r['nfe_none']:.1f} -> {r['nfe_cache']:.1f} | "
                     f"{r['token_forwards_none']:.0f} -> {r['token_forwards_cache']:.0f} | "
                     f"{r['tokens_per_s_none']:.1f} -> {r['tokens_per_s_cache']:.1f} | {r['speedup_wall']:.2f}x |")
    return "\n".join(lines)


def cache_main(args, argv) -> int:
    """``python -m dico.bench cache``: the speed cases on word problems, then the accuracy cases on every family."""
    import torch

    from dico.models import load_model

    torch.set_num_threads(1)
    n_items = args.items or (QUICK_ITEMS if args.quick else FULL_ITEMS)
    try:
        lengths = _lengths(args.lengths) if args.lengths else (LENGTHS[:1] if args.quick else LENGTHS)
        _items(n_items)
        families = _families(args.families)
        refreshes = tuple(r.strip() for r in args.refresh.split(",") if r.strip())
        if not refreshes or not all(r.isdigit() for r in refreshes):
            raise ValueError(f"refresh: comma-separated passes between refreshes, each 0 or more, got {args.refresh!r}")
        refreshes = tuple(map(int, refreshes))
        modes = _modes(args.modes)
        predictor = load_model(args.model, attention=False)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    where, start = machine() + ", batch 1", time.time()
    print(f"cache: model {predictor.name}, {n_items} items per family, on {where}", flush=True)
    speed_parts = accuracy_parts = None
    if args.parts:
        from dico.bench.parts import Parts, weights_id
        key = {"bench": "cache", "weights": weights_id(args.model), "items": n_items}
        speed_parts = Parts(args.parts, {**key, "part_of": "speed", "families": ["word"]})
        accuracy_parts = Parts(args.parts, {**key, "part_of": "accuracy", "families": list(families)})
    speed = [case for case in CACHE_SPEED if case[1] in modes]
    speed_rows = cache_bench(predictor, speed, ("word",), n_items, not args.no_progress, speed_parts)
    accuracy_rows = cache_bench(predictor, cache_cases(lengths, refreshes, modes), families, n_items,
                                not args.no_progress, accuracy_parts)
    table = (cache_markdown(speed_rows, f"KV cache speed (word problems, {n_items} items)") + "\n\n"
             + cache_markdown(accuracy_rows, f"KV cache accuracy (Table 1's items, {n_items} per family)"))
    _report(args, argv, table, start, {"title": "cache", "model": predictor.name,
                                        "model_step": training_step(args.model), "machine": where,
                                        "speed": speed_rows, "accuracy": accuracy_rows})
    return 0
