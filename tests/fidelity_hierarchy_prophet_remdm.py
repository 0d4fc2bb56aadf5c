"""How closely ``hierarchy``, ``prophet`` and ``remdm`` follow their published code, step for step (embedded model).

    PYTHONPATH=/tmp/published2026 python tests/fidelity_hierarchy_prophet_remdm.py --items 10
    # writes assets/bench/fidelity_hierarchy_prophet_remdm.{json,md} (after each method)

The published code is not part of this repository (two of its repositories have no licence): ``<folder>``
(/tmp/published2026 for the committed results) holds copies of the files, unmodified, taken with
``git show <commit>:<path>`` from the repositories named, and is put on PYTHONPATH:

    <folder>/dinfer/decoding/parallel_strategy.py  inclusionAI/dInfer  python/dinfer/decoding/parallel_strategy.py
    <folder>/dinfer/decoding/utils.py              inclusionAI/dInfer  python/dinfer/decoding/utils.py
        Apache-2.0, commit fce4e32804103baa5d55230dff0352da0cdd6ceb (HierarchyDecoder)
    <folder>/generate_earlyexit.py                 pixeli99/Prophet    generate_earlyexit.py
        no licence, commit 460afe41c7063a29a9893675aca07b985997bb83 (generate: Prophet's early commit)
    <folder>/saber_decoding.py                     zhaoyMa/Saber       decoding.py
        no licence, commit 2f061e2e07359e27479174e862f46db5f9791c6c (generate_with_remdm)

Each is run greedy, gen 96, non-AR and semi-AR (blocks of 32), on held-out items of the short families, with the
settings the project's defaults stand for (checked against ``dico.settings`` before anything runs):

1. ``hierarchy``: dInfer's ``HierarchyDecoder`` (threshold 0.9, low_threshold 0.3, as its benchmarks and evaluation
   run it), imported as ``tests/fidelity_credit.py`` imports the credit decoder (``stand_in_dinfer``) and driven by
   the same stand-in serving loop: each block gets a forward pass of the whole sequence and ``decode`` with the
   block's logits until the block has no mask (dInfer's loop may run passes after that which write nothing: not
   counted, docs/decoding.md §7.8). Run a second time with dInfer's early stop (``early_stop`` in the JSON): after a
   block holding end-of-text, the rest is filled with it and the run ends.
2. ``prophet``: ``generate(model, prompt, steps=96, gen_length=96, block_length=width, temperature=0,
   analyze_gap=True, answer_start_pos=<prompt length>, early_exit_thresholds={early 7.5, mid 5.0, late 2.5})``; its
   answer length is 5 in its code. The project's ``steps`` 0 is one token a step (96), ``answer_start`` 0 is the
   response's first position.
3. ``remdm``: ``generate_with_remdm(model, prompt, gen_length=96, init_unmask_ratio=0.875, unmask_k=1,
   loop_steps=32, temperature=0, cfg_scale=0, remasking='low_confidence', block_length=128)`` as Saber's ``eval.py``
   calls it (its tokenizer, which only decodes the text for nothing, stood in for). Its code has no blocks (the
   block length is never read), so non-AR only, as the project refuses semi-AR ReMDM.

Prophet and ReMDM take the whole model and are called as published through ``tests/fidelity_run.py``'s ``Adapter``
(``model(x).logits``) and ``Recorder`` (every write into the sequence, sorted by pass). Both take ``mask_id`` as an
argument and get the embedded model's (ReMDM gathers the probability of every position's current token, the mask
id included, so LLaDA's 126336 cannot stand for it on a smaller vocabulary); the Recorder, which looks for LLaDA's
mask id, then files their commits and re-masks as overwrites, which ``_sorted`` files back. Every pass's commits,
tokens and re-masks are compared with the steps of ``dico.generate(..., method)`` at its defaults, with the
project's softmax (the mask token left out) and with ``mask_in_softmax`` (kept, as the published softmaxes keep
it): steps identical / compared, runs identical (every step, the pass count, the response). For a differing run the
first differing pass is kept in the JSON with both sides' commits and the project's confidences there.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import torch

import dico
from dico.embedded import tasks
from dico.settings import SETTINGS
from fidelity_credit import run_blocks, stand_in_dinfer
from fidelity_run import Adapter, Recorder, _quiet, agreement

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "bench" / "fidelity_hierarchy_prophet_remdm"
GEN_LENGTH, BLOCK_LENGTH = 96, 32
MODES = {"non-ar": GEN_LENGTH, "semi-ar": BLOCK_LENGTH}
KEYS = ("committed", "tokens", "remasked")
# what each published call is given, and the project's defaults that stand for it
PUBLISHED = {
    "hierarchy": {"threshold": 0.9, "low_threshold": 0.3},
    "prophet": {"steps": GEN_LENGTH, "early_exit_thresholds": {"early": 7.5, "mid": 5.0, "late": 2.5},
                "answer_start_pos": "prompt length", "answer_length": 5},
    "remdm": {"init_unmask_ratio": 0.875, "unmask_k": 1, "loop_steps": 32},
}
PROJECT_DEFAULTS = {
    "hierarchy": {"threshold": 0.9, "low_threshold": 0.3},
    "prophet": {"steps": 0, "early": 7.5, "mid": 5.0, "late": 2.5, "answer_start": 0, "answer_length": 5},
    "remdm": {"init_unmask_ratio": 0.875, "unmask_k": 1, "loop_steps": 32},
}
METHOD_MODES = {"hierarchy": ("non-ar", "semi-ar"), "prophet": ("non-ar", "semi-ar"), "remdm": ("non-ar",)}
SOURCES = {"hierarchy": "dInfer's HierarchyDecoder", "prophet": "Prophet's generate_earlyexit.py",
           "remdm": "Saber's generate_with_remdm"}


def check_defaults() -> None:
    """The project's defaults are the ones the published calls stand for (else the comparison would be moot)."""
    for method, expected in PROJECT_DEFAULTS.items():
        settings = SETTINGS[method]()
        found = {k: getattr(settings, k) for k in expected}
        if found != expected:
            raise SystemExit(f"error: {method}: the project's defaults {found} are not the published {expected}")


def published_hierarchy(strategy, predictor, prompt_ids: list[int], width: int, eos_id: int | None = None):
    """(steps, response, quirks) of dInfer's HierarchyDecoder, block by block over the whole sequence; with
    ``eos_id``, dInfer's early stop too (its BlockRunner's default): after a block holding it, the rest of the
    response is filled with it and the run ends."""
    decoder = strategy.HierarchyDecoder(temperature=0.0, mask_id=predictor.mask_id, eos_id=-1,
                                        **PUBLISHED["hierarchy"])
    return *run_blocks(decoder, predictor, prompt_ids, width, ("remasked",), eos_id), 0


def _sorted(passes: list[dict], mask_id: int) -> tuple[list[dict], int]:
    """The Recorder's passes with writes from and to the model's mask id filed as commits and re-masks (it looks
    for LLaDA's); what is left (overwrites of a decoded token, writes that change nothing or lie outside the
    response) counted as quirks."""
    steps, quirks = [], 0
    for p in passes:
        step = {"committed": list(p["committed"]), "tokens": list(p["tokens"]), "remasked": list(p["remasked"])}
        for r, old, new in p["overwritten"]:
            if old == mask_id:
                step["committed"].append(r)
                step["tokens"].append(new)
            elif new == mask_id:
                step["remasked"].append(r)
            else:
                quirks += 1
        quirks += len(p["rewritten"]) + len(p["outside"])
        steps.append(step)
    return steps, quirks


def _forward(predictor):
    """The logits (l, v) of one sequence (1, l), as the project's loop gets them."""
    def forward(ids, allowed=None, positions=None):
        assert allowed is None and positions is None       # neither published function passes a mask or positions
        return predictor.forward(ids)[0][0]
    return forward


def published_whole(method: str, predictor, prompt_ids: list[int], width: int):
    """(steps, response, quirks) of Prophet's generate or Saber's generate_with_remdm, run unmodified."""
    m = len(prompt_ids)
    rec = Recorder(m, GEN_LENGTH)
    model, prompt = Adapter(predictor, rec, _forward(predictor)), torch.tensor([prompt_ids])
    with torch.no_grad(), rec:
        if method == "prophet":
            from generate_earlyexit import generate
            cfg = PUBLISHED["prophet"]
            x, _ = _quiet(generate, model, prompt, steps=cfg["steps"], gen_length=GEN_LENGTH, block_length=width,
                          temperature=0., cfg_scale=0., remasking="low_confidence", mask_id=predictor.mask_id,
                          analyze_gap=True, answer_start_pos=m, early_exit_thresholds=cfg["early_exit_thresholds"])
        else:
            from saber_decoding import generate_with_remdm
            x, _ = generate_with_remdm(model, prompt, gen_length=GEN_LENGTH, temperature=0., cfg_scale=0.,
                                       remasking="low_confidence", mask_id=predictor.mask_id,
                                       tokenizer=SimpleNamespace(decode=lambda *args, **kwargs: ""),
                                       block_length=128, **PUBLISHED["remdm"])
    steps, quirks = _sorted(rec.passes, predictor.mask_id)
    return steps, x[0, m:m + GEN_LENGTH].tolist(), quirks


def project(predictor, prompt: str, method: str, mode: str, mask_in_softmax: bool):
    """(steps, response) of dico.generate at its defaults, and the trace (for the first difference's confidences)."""
    trace = dico.generate(predictor, prompt, method, mode=mode, gen_length=GEN_LENGTH, block_length=BLOCK_LENGTH,
                          mask_in_softmax=mask_in_softmax)
    steps = [{"committed": list(s.committed), "tokens": list(s.tokens), "remasked": list(s.remasked or [])}
             for s in trace.steps]
    return (steps, trace.response), trace


def first_difference(pub, ours, trace) -> dict | None:
    """Both sides' first differing pass, with the project's confidences at the positions either side commits."""
    i = ours["first_difference"]
    if i is None:
        return None if ours["response"] else {"step": None, "why": "same steps, another response"}
    a = pub[0][i] if i < len(pub[0]) else None
    b = trace.steps[i] if i < len(trace.steps) else None
    out = {"step": i, "published": a, "project": None}
    if b is not None:
        out["project"] = {k: list(getattr(b, k) or []) for k in KEYS}
        where = sorted(set(out["project"]["committed"]) | set(a["committed"] if a else []))
        out["project_confidence"] = {p: b.confidence[p] for p in where if p < len(b.confidence)}
        out["project_window"] = list(b.window)
    return out


def measure(strategy, predictor, method: str, items: int, log) -> list[dict]:
    rows = []
    families = [f for f in tasks.FAMILIES if f not in tasks.LONG_FAMILIES]
    for family in families:
        for index, item in enumerate(tasks.make_split(family, "test")[:items]):
            ids = predictor.encode_prompt(item.prompt)
            for mode in METHOD_MODES[method]:
                if method == "hierarchy":
                    *pub, quirks = published_hierarchy(strategy, predictor, ids, MODES[mode])
                else:
                    *pub, quirks = published_whole(method, predictor, ids, MODES[mode])
                row = {"method": method, "family": family, "item": index, "prompt": item.prompt[:60], "mode": mode,
                       "published_quirks": quirks}
                for key, in_softmax in (("project", False), ("project_mask_in_softmax", True)):
                    ours, trace = project(predictor, item.prompt, method, mode, in_softmax)
                    row[key] = agreement(pub, ours, KEYS)
                    row[key]["first"] = first_difference(pub, row[key], trace)
                    if method == "hierarchy" and not in_softmax:
                        *stopped, _ = published_hierarchy(strategy, predictor, ids, MODES[mode],
                                                          predictor.tokenizer.eos_token_id)
                        row["early_stop"] = agreement(stopped, ours, KEYS)
                rows.append(row)
                log(row)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    table = []
    for method in dict.fromkeys(r["method"] for r in rows):
        for mode in METHOD_MODES[method]:
            group = [r for r in rows if r["method"] == method and r["mode"] == mode]
            entry = {"method": method, "mode": mode, "n": len(group),
                     "published_passes": sum(r["project"]["nfe"][0] for r in group),
                     "published_quirks": sum(r["published_quirks"] for r in group)}
            for key in ("project", "project_mask_in_softmax", "early_stop"):
                if all(key in r for r in group):
                    entry[key] = {k: sum(r[key][k] for r in group) for k in ("steps", "of", "run", "response")}
                    entry[key]["published_passes"] = sum(r[key]["nfe"][0] for r in group)
                    entry[key]["project_passes"] = sum(r[key]["nfe"][1] for r in group)
            if method == "prophet":     # the pass of its early commit, by the phase of its threshold
                exits = [r["project"]["nfe"][0] / GEN_LENGTH for r in group if r["project"]["nfe"][0] < GEN_LENGTH]
                entry["early_commits"] = {"early": sum(e < 0.33 for e in exits),
                                          "mid": sum(0.33 <= e < 0.67 for e in exits),
                                          "late": sum(e >= 0.67 for e in exits)}
            table.append(entry)
    return table


def markdown(table: list[dict], command: str, items: int, families: list[str], rows: list[dict]) -> str:
    lines = ["# Prophet, ReMDM and dInfer's hierarchy decoder against their published code", "",
             f"Model dico-tiny, greedy, gen {GEN_LENGTH} (semi-AR blocks of {BLOCK_LENGTH}; ReMDM non-AR only: its "
             f"code has no blocks), {items} held-out items of each of {', '.join(families)}, the project's defaults "
             "and the published settings they stand for (`settings` in the JSON). Steps identical / steps compared "
             "(commits, tokens and re-masks of every pass); runs identical (every step, the pass count, the "
             "response); the same final response.", "", f"Command: `{command}`", "",
             "| method | mode | runs | dico vs published | same response | with `mask_in_softmax` | "
             "passes (published / dico) |", "|---|---|---|---|---|---|---|"]
    for e in table:
        a, b = e["project"], e["project_mask_in_softmax"]
        lines.append(f"| {e['method']} ({SOURCES[e['method']]}) | {e['mode']} | {e['n']} | {a['steps']}/{a['of']} "
                     f"steps, {a['run']}/{e['n']} runs | {a['response']}/{e['n']} | {b['steps']}/{b['of']} steps, "
                     f"{b['run']}/{e['n']} runs | {e['published_passes']} / {a['project_passes']} |")
    stops = [e for e in table if "early_stop" in e]
    if stops:
        lines += ["", "dInfer's serving loop also stops early (`BlockRunner`'s `early_stop`, on by default and in its "
                  "benchmarks): after a block that holds end-of-text it fills the rest of the response with it and "
                  "ends. The table's hierarchy runs leave that out, as `tests/fidelity_credit.py` does, to compare "
                  "the decoder; with it, against dico:"
                  + "".join(f" {e['mode']}: {c['steps']}/{c['of']} steps, {c['run']}/{e['n']} runs identical, "
                            f"{c['response']}/{e['n']} the same response, {c['published_passes']} / "
                            f"{c['project_passes']} passes;" for e in stops for c in [e["early_stop"]])[:-1] + "."]
    exits = [e for e in table if "early_commits" in e]
    if exits:
        lines += ["", "Prophet's early commit (every mask at once, the run ends) came before the last pass in "
                  + ", ".join(f"{sum(e['early_commits'].values())} of the {e['n']} {e['mode']} runs (phase early / "
                              f"mid / late: {' / '.join(str(v) for v in e['early_commits'].values())})" for e in exits)
                  + "."]
    quirks = sum(e["published_quirks"] for e in table)
    lines += ["", f"Writes of the published code outside its commits and re-masks (overwriting a decoded token, "
              f"writing a token already there, touching the prompt): {quirks} in all these runs."]
    differing = [f"{r['method']} {r['mode']} {r['family']} item {r['item']} (`{key}`, first at pass "
                 f"{r[key]['first_difference']})" for r in rows
                 for key in ("project", "project_mask_in_softmax") if not r[key]["run"]]
    lines += ["", f"Runs that differ: {'; '.join(differing) if differing else 'none'}.", "",
              "Conventions of the published code left out of the comparison, or that make no difference here:", ""]
    lines += [f"- {n}" for n in CONVENTIONS]
    return "\n".join(lines) + "\n"


CONVENTIONS = [
    "*mask token*: the published argmax, softmax and (Prophet) top-2 gap include the mask token's logit; the "
    "project leaves it out of the prediction and the margin, and out of the softmax unless `mask_in_softmax`. The "
    "embedded model ranks the mask token far down (below the 300th token, under 1e-6 of the softmax, in a spot "
    "check of response positions), so neither moves a decision here: both columns agree.",
    "*passes that write nothing*: dInfer's loop unrolls up to max(min(masks // 8, 4), 1) passes before it checks "
    "that a block is done; the ones after the block is full write nothing and are not counted (docs/decoding.md "
    "§7.8). The other two published loops never run such a pass at these settings.",
    "*block layout*: dInfer's benchmarks iterate with `BlockIteratorFactory(start_block_align=True)`, whose first "
    "block starts at the prompt length rounded down to a multiple of the block length (overlapping the prompt); "
    "the stand-in loop, like the project, uses LLaDA's layout (blocks from the prompt's end, the iterator's "
    "default). Not measured: the project has no aligned layout.",
    "*Prophet's answer place*: its authors force \"The answer is\" into a GSM8K response and watch the 5 positions "
    "after it; here the watched positions start at the response's first (`answer_start_pos` = the prompt length, "
    "the project's `answer_start` 0).",
    "*ReMDM's blocks*: `generate_with_remdm` takes a block length and never reads it (Saber's eval.py passes 128), "
    "so it is run non-AR only; the project refuses semi-AR ReMDM.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10, help="held-out items per family")
    parser.add_argument("--methods", nargs="+", choices=list(METHOD_MODES), default=list(METHOD_MODES))
    parser.add_argument("--out", type=Path, default=OUT, help="writes OUT.json and OUT.md (after each method)")
    args = parser.parse_args()
    check_defaults()
    strategy = stand_in_dinfer() if "hierarchy" in args.methods else None
    torch.set_num_threads(1)
    predictor = dico.load_model("dico-tiny")
    started, rows = time.time(), []
    families = [f for f in tasks.FAMILIES if f not in tasks.LONG_FAMILIES]
    folder = os.environ.get("PYTHONPATH") or "<folder>"
    command = f"PYTHONPATH={folder} python tests/fidelity_hierarchy_prophet_remdm.py --items {args.items}"
    if args.methods != list(METHOD_MODES):
        command += f" --methods {' '.join(args.methods)}"

    def log(r):
        print(r["method"], r["family"], r["item"], r["mode"],
              *(f"{k}={r[k]['steps']}/{r[k]['of']}{'' if r[k]['run'] else ' (differs)'}"
                for k in ("project", "project_mask_in_softmax")), flush=True)
    for method in args.methods:
        rows += measure(strategy, predictor, method, args.items, log)
        table = summary(rows)
        result = {"command": command, "model": predictor.name, "gen_length": GEN_LENGTH,
                  "block_length": BLOCK_LENGTH, "items_per_family": args.items, "families": families,
                  "methods_done": list(dict.fromkeys(r["method"] for r in rows)),
                  "complete": method == args.methods[-1], "settings": {"published": PUBLISHED,
                                                                       "project": PROJECT_DEFAULTS},
                  "seconds": round(time.time() - started, 1), "summary": table, "runs": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
        args.out.with_suffix(".md").write_text(markdown(table, command, args.items, families, rows))
    print(markdown(summary(rows), command, args.items, families, rows))


if __name__ == "__main__":
    main()
