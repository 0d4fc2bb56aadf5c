"""How closely ``credit`` follows dInfer's published credit decoder, on the embedded model.

    PYTHONPATH=<folder> python tests/fidelity_credit.py --items 10
    # writes assets/bench/fidelity_credit.{json,md}

The published code is dInfer's ``python/dinfer/decoding/parallel_strategy.py`` and the ``utils.py`` beside it
(inclusionAI/dInfer, Apache-2.0), copied unmodified into ``<folder>/dinfer/decoding/`` and imported from PYTHONPATH;
it is not part of this repository. Its package's ``__init__`` files (which import its serving engine) are stood in
for by empty modules, and ``torch.compile`` (which decorates its threshold function) by the function itself, so it
runs eagerly on the CPU as the project does. Its serving loop is stood in for too: each block of the response
(LLaDA's layout: the prompt, then blocks of ``block_length``) gets a forward pass of the whole sequence and
``CreditThresholdParallelDecoder.decode`` with the block's logits until the block has no mask (dInfer's own loop
may run a pass or more after that, which write nothing: not counted, docs/decoding.md §7.8). Every pass's commits
are compared with the steps of ``dico.generate(..., "credit")``: steps identical / compared, runs identical (every
step, the pass count, the response), with the project's default softmax and with ``mask_in_softmax`` (its code's
softmax keeps the mask token's logit).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

import torch

import dico
from dico.embedded import tasks
from fidelity_llada21 import agreement

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "bench" / "fidelity_credit"
GEN_LENGTH, BLOCK_LENGTH = 96, 32
MODES = {"non-ar": GEN_LENGTH, "semi-ar": BLOCK_LENGTH}
DEFAULTS = {"threshold": 0.9, "credit_alpha": 0.7, "boost_gamma": 0.2, "decay_beta": 0.8}   # its class defaults


def stand_in_dinfer():
    """dInfer's decoding module as published, imported without its engine's package imports and eagerly."""
    for name in ("dinfer", "dinfer.decoding"):
        module = sys.modules.setdefault(name, types.ModuleType(name))
        module.__path__ = [str(Path(p) / name.replace(".", "/")) for p in sys.path if p]
    compile_ = torch.compile
    torch.compile = lambda *args, **kwargs: (lambda f: f)
    try:
        from dinfer.decoding import parallel_strategy
    finally:
        torch.compile = compile_
    return parallel_strategy


def published(strategy, predictor, prompt_ids: list[int], width: int):
    """(steps, response) of dInfer's CreditThresholdParallelDecoder, block by block over the whole sequence."""
    decoder = strategy.CreditThresholdParallelDecoder(temperature=0.0, mask_id=predictor.mask_id, eos_id=-1,
                                                      **DEFAULTS)
    return run_blocks(decoder, predictor, prompt_ids, width, ("edited",))


def run_blocks(decoder, predictor, prompt_ids: list[int], width: int, empty=(), eos_id: int | None = None):
    """(steps, response) of a dInfer decoder driven as its serving loop drives it: each block (LLaDA's layout: the
    prompt, then blocks of ``width``) starts with ``block_init`` and gets a forward pass of the whole sequence and
    ``decode`` with the block's logits until it has no mask (passes after that, which write nothing, are not run).
    Each step records its commits and tokens, and an empty list under each key of ``empty`` (what the project's
    steps compared also hold). With ``eos_id``, dInfer's early stop: after a block holding it, the rest of the
    response is filled with it and the run ends."""
    m = len(prompt_ids)
    x = torch.tensor([prompt_ids + [predictor.mask_id] * GEN_LENGTH])
    steps = []
    for block, start in enumerate(range(m, m + GEN_LENGTH, width)):
        decoder.block_init(x[:, start:start + width], block)
        while bool((x[0, start:start + width] == predictor.mask_id).any()):
            with torch.no_grad():
                logits, _ = predictor.forward(x)
            before = x[0, m:].clone()
            decoder.decode(logits[:, start:start + width], start, start + width, x)
            changed = torch.nonzero(before != x[0, m:]).flatten().tolist()
            steps.append({"committed": changed, "tokens": [int(x[0, m + p]) for p in changed],
                          **{key: [] for key in empty}})
        if eos_id is not None and bool((x[0, start:start + width] == eos_id).any()):
            x[0, start + width:] = eos_id
            break
    return steps, x[0, m:].tolist()


def project(predictor, prompt: str, mode: str, mask_in_softmax: bool):
    trace = dico.generate(predictor, prompt, "credit", mode=mode, gen_length=GEN_LENGTH, block_length=BLOCK_LENGTH,
                          mask_in_softmax=mask_in_softmax)
    return [{"committed": s.committed, "tokens": s.tokens, "edited": s.edited} for s in trace.steps], trace.response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10, help="held-out items per family")
    parser.add_argument("--model", default="dico-tiny", help="a model name or folder (dico.load_model)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    strategy = stand_in_dinfer()
    torch.set_num_threads(1)
    predictor = dico.load_model(args.model)
    started, rows = time.time(), []
    families = [f for f in tasks.FAMILIES if f not in tasks.LONG_FAMILIES]
    kinds = {"project": False, "project_mask_in_softmax": True}
    for family in families:
        for item in tasks.make_split(family, "test")[:args.items]:
            ids = predictor.encode_prompt(item.prompt)
            for mode, width in MODES.items():
                pub = published(strategy, predictor, ids, width)
                row = {"family": family, "prompt": item.prompt[:60], "mode": mode,
                       **{k: agreement(pub, project(predictor, item.prompt, mode, v)) for k, v in kinds.items()}}
                rows.append(row)
                print(family, mode, *(f"{k}={row[k]['steps']}/{row[k]['of']}" for k in kinds), flush=True)
    table = []
    for mode in MODES:
        group = [r for r in rows if r["mode"] == mode]
        entry = {"mode": mode, "n": len(group)}
        for key in kinds:
            entry[key] = {k: sum(r[key][k] for r in group) for k in ("steps", "of", "run", "response")}
            entry[key]["published_passes"] = sum(r[key]["nfe"][0] for r in group)
        table.append(entry)
    command = f"PYTHONPATH=<folder> python tests/fidelity_credit.py --items {args.items} --model {args.model}"
    result = {"command": command, "model": predictor.name, "gen_length": GEN_LENGTH, "block_length": BLOCK_LENGTH,
              "items_per_family": args.items, "families": families, "settings": DEFAULTS,
              "seconds": round(time.time() - started, 1), "summary": table, "runs": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = ["# dInfer's credit decoder (`credit`) against its published CreditThresholdParallelDecoder", "",
             f"Model {predictor.name}, greedy, gen {GEN_LENGTH} (semi-AR blocks of {BLOCK_LENGTH}), {args.items} "
             f"held-out items of each of {', '.join(families)}, its defaults ({DEFAULTS}). Steps identical / steps "
             "compared (commits and tokens of every pass); runs identical (every step, the pass count, the "
             "response).", "", f"Command: `{command}`", "",
             "| mode | runs | dico vs published | with `mask_in_softmax` | passes (published) |",
             "|---|---|---|---|---|"]
    for e in table:
        a, b = e["project"], e["project_mask_in_softmax"]
        lines.append(f"| {e['mode']} | {e['n']} | {a['steps']}/{a['of']} steps, {a['run']}/{e['n']} runs | "
                     f"{b['steps']}/{b['of']} steps, {b['run']}/{e['n']} runs | {a['published_passes']} |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
