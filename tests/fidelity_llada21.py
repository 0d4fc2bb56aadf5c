"""How closely ``llada21`` follows LLaDA 2.1's published joint-threshold algorithm, on the embedded model.

    PYTHONPATH=/tmp/published python tests/fidelity_llada21.py --items 5
    # writes assets/bench/fidelity_llada21.{json,md}

The published code is SGLang's ``python/sglang/srt/dllm/algorithm/joint_threshold.py`` (sgl-project/sglang,
Apache-2.0), copied unmodified from the repository into ``<folder>/sglang/srt/dllm/algorithm/`` and imported from
PYTHONPATH; it is not part of this repository. What it needs of SGLang around it (its base class, its config and
the forward batch) is stood in for here, and so is SGLang's serving loop: each block of the response, LLaDA's
layout (the prompt, then blocks of ``block_length`` from its end), runs at most ``max_steps(block)`` passes of the
whole sequence, each handed with the block's ids to ``JointThreshold.step``, which writes into them; the block ends
on the pass that marks it finished. Every pass's writes are recorded (commits, and replacements as [position, old,
new]) and compared with the steps of ``dico.generate(..., "llada21")`` at the same settings: steps identical /
compared, runs identical (every step, the pass count, the response).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

import torch

import dico
from dico.embedded import tasks

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "bench" / "fidelity_llada21"
GEN_LENGTH, BLOCK_LENGTH = 96, 32
MODES = {"non-ar": GEN_LENGTH, "semi-ar": BLOCK_LENGTH}
# quality mode (the LLaDA 2.1 card's values, the project's default) and speed mode (SGLang's defaults)
PRESETS = {"quality": {"threshold": 0.7, "edit_threshold": 0.5, "max_post_edit_steps": 16},
           "speed": {"threshold": 0.5, "edit_threshold": 0.0, "max_post_edit_steps": 16}}


def stand_in_sglang() -> None:
    """The modules joint_threshold.py imports, as far as it uses them: a base class keeping the config."""
    class DllmAlgorithm:
        def __init__(self, config):
            self.config = config
            self.block_size, self.mask_id = config.block_size, config.mask_id
    for name in ("sglang", "sglang.srt", "sglang.srt.dllm", "sglang.srt.dllm.algorithm",
                 "sglang.srt.model_executor"):
        module = sys.modules.setdefault(name, types.ModuleType(name))
        module.__path__ = [str(Path(p) / name.replace(".", "/")) for p in sys.path if p]
    base = types.ModuleType("sglang.srt.dllm.algorithm.base")
    base.DllmAlgorithm = DllmAlgorithm
    config = types.ModuleType("sglang.srt.dllm.config")
    config.DllmConfig = SimpleNamespace
    batch = types.ModuleType("sglang.srt.model_executor.forward_batch_info")
    batch.ForwardBatch = SimpleNamespace
    sys.modules.update({base.__name__: base, config.__name__: config, batch.__name__: batch})


def published(predictor, prompt_ids: list[int], width: int, settings: dict):
    """(steps, response) of SGLang's JointThreshold driven block by block over the whole sequence."""
    from sglang.srt.dllm.algorithm.joint_threshold import JointThreshold
    m = len(prompt_ids)
    algo = JointThreshold(SimpleNamespace(block_size=width, mask_id=predictor.mask_id,
                                          algorithm_config=dict(settings)))
    x = torch.tensor([prompt_ids + [predictor.mask_id] * GEN_LENGTH])
    steps = []
    for start in range(m, m + GEN_LENGTH, width):
        view = x[0, start:start + width]
        batch = SimpleNamespace(batch_size=1, input_ids=view)
        states = algo.init_step_state(batch)
        for _ in range(algo.max_steps(width)):
            with torch.no_grad():
                logits, _ = predictor.forward(x)
            before = x[0, m:].clone()
            algo.step(batch, logits[0, start:start + width].float(), states)
            after = x[0, m:]
            changed = torch.nonzero(before != after).flatten().tolist()
            steps.append({"committed": [p for p in changed if int(before[p]) == predictor.mask_id],
                          "tokens": [int(after[p]) for p in changed if int(before[p]) == predictor.mask_id],
                          "edited": [[p, int(before[p]), int(after[p])] for p in changed
                                     if int(before[p]) != predictor.mask_id]})
            if states[0]["finished"]:
                break
    return steps, x[0, m:].tolist()


def project(predictor, prompt: str, mode: str, settings: dict, mask_in_softmax: bool):
    trace = dico.generate(predictor, prompt, "llada21", mode=mode, gen_length=GEN_LENGTH, block_length=BLOCK_LENGTH,
                          mask_in_softmax=mask_in_softmax, **settings)
    return [{"committed": s.committed, "tokens": s.tokens, "edited": s.edited} for s in trace.steps], trace.response


def agreement(a, b) -> dict:
    (sa, ra), (sb, rb) = a, b
    same = [x == y for x, y in zip(sa, sb)]
    first = next((i for i, ok in enumerate(same) if not ok), None if len(sa) == len(sb) else min(len(sa), len(sb)))
    return {"steps": sum(same), "of": max(len(sa), len(sb)), "run": first is None and ra == rb,
            "first_difference": first, "nfe": [len(sa), len(sb)], "response": ra == rb,
            "edits": [sum(len(s["edited"]) for s in sa), sum(len(s["edited"]) for s in sb)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5, help="held-out items per family")
    parser.add_argument("--model", default="dico-tiny", help="a model name or folder (dico.load_model)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    stand_in_sglang()
    torch.set_num_threads(1)
    predictor = dico.load_model(args.model)
    started, rows = time.time(), []
    families = [f for f in tasks.FAMILIES if f not in tasks.LONG_FAMILIES]
    for family in families:
        for item in tasks.make_split(family, "test")[:args.items]:
            ids = predictor.encode_prompt(item.prompt)
            for preset, settings in PRESETS.items():
                for mode, width in MODES.items():
                    pub = published(predictor, ids, width, settings)
                    row = {"family": family, "prompt": item.prompt[:60], "preset": preset, "mode": mode,
                           "project": agreement(pub, project(predictor, item.prompt, mode, settings, False)),
                           "project_mask_in_softmax": agreement(pub, project(predictor, item.prompt, mode, settings,
                                                                             True))}
                    rows.append(row)
                    print(family, preset, mode, *(f"{k}={row[k]['steps']}/{row[k]['of']}" for k in
                                                  ("project", "project_mask_in_softmax")), flush=True)
    table = []
    for preset in PRESETS:
        for mode in MODES:
            group = [r for r in rows if r["preset"] == preset and r["mode"] == mode]
            entry = {"preset": preset, "mode": mode, "n": len(group)}
            for key in ("project", "project_mask_in_softmax"):
                entry[key] = {k: sum(r[key][k] for r in group) for k in ("steps", "of", "run", "response")}
                entry[key]["published_edits"] = sum(r[key]["edits"][0] for r in group)
            table.append(entry)
    command = f"PYTHONPATH=<folder> python tests/fidelity_llada21.py --items {args.items} --model {args.model}"
    result = {"command": command, "model": predictor.name, "gen_length": GEN_LENGTH, "block_length": BLOCK_LENGTH,
              "items_per_family": args.items, "families": families, "seconds": round(time.time() - started, 1),
              "summary": table, "runs": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = ["# LLaDA 2.1 (`llada21`) against SGLang's published JointThreshold", "",
             f"Model {predictor.name}, greedy, gen {GEN_LENGTH} (semi-AR blocks of {BLOCK_LENGTH}), {args.items} "
             f"held-out items of each of {', '.join(families)}. Steps identical / steps compared (commits, tokens "
             "and replacements of every pass); runs identical (every step, the pass count, the response).", "",
             f"Command: `{command}`", "",
             "| preset | mode | runs | dico vs published | with `mask_in_softmax` | edits (published) |",
             "|---|---|---|---|---|---|"]
    for e in table:
        a, b = e["project"], e["project_mask_in_softmax"]
        lines.append(f"| {e['preset']} | {e['mode']} | {e['n']} | {a['steps']}/{a['of']} steps, {a['run']}/{e['n']} "
                     f"runs | {b['steps']}/{b['of']} steps, {b['run']}/{e['n']} runs | {a['published_edits']} |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
