"""How closely ``pc-sampler`` follows PC-Sampler as the DiCo authors' harness d2Cache runs it, on the embedded model.

    PYTHONPATH=/tmp/published_pc OMP_NUM_THREADS=1 python tests/fidelity_pc_sampler.py --items 10
    # writes assets/bench/fidelity_pc_sampler.{json,md}

The published code is d2Cache (Kamichanw/d2Cache, Apache-2.0, commit 72feb60bb288a5a4d14b4bab9afbbaa1fc1b509a),
copied unmodified (``git show HEAD:<path>``) into ``<folder>/`` with its package layout and imported from PYTHONPATH;
it is not part of this repository:

    src/generation/vanilla.py             vanilla_generate (the decode loop), generate_step, confidence_unmasking
    src/generation/utils.py               prepare_logits_for_generation, sample_tokens (the PC-Sampler score)
    src/frame.py                          Frame, FrameDelta, DecodeRecord (its state stack)
    src/third_party/__init__.py           get_token_freq (the token-frequency table loader)
    src/utils/common.py                   Registry, apply_fn, tensor_insert, tensor_delete, certainty_density
    src/cache/base.py                     dCache (imported by vanilla.py; no cache is used)
    src/models/dream/generation_utils.py  top_p_logits, top_k_logits (imported by utils.py; unused: top_p/top_k null)

``vanilla_generate`` is called as ``configs/generation/pc_sampler.yaml`` runs it (its vanilla defaults plus
``debias: true``, ``clip_alpha: 10``: one token a pass, greedy, ``alg="maskgit_plus"``, no threshold, factor, sigma,
top-p or top-k, no early stop, no cache), with the prompt's all-ones attention mask as its evaluator passes it and the
embedded model's mask id (``MASK_TOKEN_ID`` set in the environment as its ``pre_initialize`` does). Stood in: the
package ``__init__`` files of ``src``, ``src.generation``, ``src.utils``, ``src.cache`` and ``src.models`` (they import
hydra, omegaconf, loguru, accelerate, the LLaDA and Dream model code and the other strategies), by empty packages
re-exporting what the copied modules import; ``is_adapted_from_ar`` (``src/utils/models.py``, which needs a
transformers ``PreTrainedModel`` with a LLaDA or Dream ``model_type``) by its LLaDA answer, ``False`` (no logit shift,
the embedded model is bidirectional); ``src.models.LLaDAModelLM`` by the model wrapper's class, so that
``prepare_logits_for_generation`` loads the table itself with ``get_token_freq("llada", vocab_size)``: the project's
``assets/<model>/token_frequency.json`` (d2Cache's own table form) is copied to ``<folder>/src/third_party/
llada_corpus.json``, where that loader reads it (checked equal to ``predictor.token_frequency``). The model is
``fidelity_run.Adapter`` (logits of ``predictor.forward(ids)``), with a ``dtype``.

Two published runs per item and mode, both on the CPU: float32 (the model's logits and every score in float32),
and bfloat16 (the float32 logits rounded to bfloat16 and the wrapper's ``dtype`` bfloat16, so ``sample_tokens``
computes the softmax, the table and the score in bfloat16 as its GPU runs with a bfloat16 model do; the model's own
pass stays float32). Every pass's writes are recorded by diffing the sequence the loop hands the model at successive
passes (and the final frame), and compared with the steps of ``dico.generate(..., "pc-sampler")``, with the project's
default softmax and with ``mask_in_softmax``: steps identical / compared, runs identical (every step, the pass
count, the response). At the first differing pass of each differing run the cause is looked up on the published
code's state there (docs/decoding.md §7.12).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import types
from collections import Counter
from pathlib import Path

import torch

import dico
from dico.embedded import tasks
from fidelity_llada21 import agreement
from fidelity_run import KEYS, LLADA_MASK, Adapter, Recorder

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "bench" / "fidelity_pc_sampler"
COMMIT = "72feb60bb288a5a4d14b4bab9afbbaa1fc1b509a"
GEN_LENGTH, BLOCK_LENGTH = 96, 32
MODES = {"non-ar": GEN_LENGTH, "semi-ar": BLOCK_LENGTH}
# configs/generation/vanilla.yaml + pc_sampler.yaml, as its harness passes them to vanilla_generate
CONFIG = {"alg": "maskgit_plus", "num_transfer_tokens": 1, "temperature": 0.0, "top_p": None, "top_k": None,
          "sigma": None, "threshold": None, "factor": None, "stop_until_eos": False, "output_probs": False,
          "debias": True, "clip_alpha": 10}
PUBLISHED = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PROJECT = {"project": False, "project_mask_in_softmax": True}


def stand_in_d2cache(folder: Path, table: Path):
    """d2Cache's vanilla decoder as published, imported without its package ``__init__`` files; the model's table
    where its loader reads it. Returns (vanilla module, utils module)."""
    for name in ("src", "src.generation", "src.utils", "src.cache", "src.models", "src.models.dream"):
        module = sys.modules.setdefault(name, types.ModuleType(name))
        module.__path__ = [str(folder / name.replace(".", "/"))]
    from src.utils import common
    utils = sys.modules["src.utils"]
    for name in ("Registry", "apply_fn", "tensor_insert", "tensor_delete", "certainty_density"):
        setattr(utils, name, getattr(common, name))
    utils.is_adapted_from_ar = lambda model: False           # its answer for LLaDA (src/utils/models.py)
    from src.cache import base
    sys.modules["src.cache"].dCache = base.dCache
    models = sys.modules["src.models"]
    models.LLaDAModelLM, models.DreamModel = D2Model, type("DreamModel", (), {})
    corpus = folder / "src" / "third_party" / "llada_corpus.json"
    if not corpus.exists() or corpus.read_bytes() != table.read_bytes():
        shutil.copyfile(table, corpus)
    from src.generation import utils as gen_utils
    from src.generation import vanilla
    return vanilla, gen_utils


class D2Model(Adapter):
    """``fidelity_run.Adapter`` with the ``dtype`` d2Cache reads off its model; its logits in that dtype."""

    def __init__(self, predictor, recorder, memo, dtype):
        super().__init__(predictor, recorder, memo)
        self.dtype = dtype

    def forward(self, x, attention_mask=None, position_ids=None, **kwargs):
        out = super().forward(x, attention_mask, position_ids, **kwargs)
        out.logits = out.logits.to(self.dtype)
        return out


class Memo:
    """One item's passes by their input: ``predictor.forward(ids)`` logits (l, v), float32."""

    def __init__(self, predictor):
        self.predictor, self.seen = predictor, {}

    def __call__(self, ids, allowed=None, positions=None):
        assert allowed is None and positions is None
        key = ids.numpy().tobytes()
        if key not in self.seen:
            with torch.no_grad():
                self.seen[key] = self.predictor.forward(ids)[0][0].float()
        return self.seen[key]


class PassRecorder(Recorder):
    """``fidelity_run.Recorder`` for a loop that rebuilds the sequence each pass (d2Cache's Frame): a pass's writes
    are the changes between the sequence it is handed and the next pass's (or the final frame's)."""

    def __init__(self, m: int, n: int, mask_id: int):
        super().__init__(m, n)
        self.mask_id, self.inputs = mask_id, []

    def new_pass(self, x) -> None:
        self._diff(x)
        self.inputs.append(x.clone())
        self.passes.append({k: [] for k in KEYS})

    def finish(self, final) -> None:
        self._diff(final)

    def _diff(self, after) -> None:
        if self.inputs:
            before = self.inputs[-1]
            self.x = torch.where(after == self.mask_id, LLADA_MASK, after)   # Recorder reads masks as LLaDA's id
            self._note(torch.where(before == self.mask_id, LLADA_MASK, before), before != after)


def published(vanilla, predictor, prompt_ids: list[int], width: int, dtype, memo: Memo):
    """(steps, response, inputs) of d2Cache's vanilla_generate with pc_sampler.yaml's settings."""
    m = len(prompt_ids)
    rec = PassRecorder(m, GEN_LENGTH, predictor.mask_id)
    model, prompt = D2Model(predictor, rec, memo, dtype), torch.tensor([prompt_ids])
    record = vanilla.vanilla_generate(model, prompt, attention_mask=torch.ones_like(prompt), gen_length=GEN_LENGTH,
                                      block_length=width, mask_token_id=predictor.mask_id,
                                      pad_token_id=predictor.tokenizer.pad_token_id,
                                      eos_token_id=predictor.tokenizer.eos_token_id, **CONFIG)
    final = record[-1]
    rec.finish(torch.cat([final.prompts, final.generated_tokens], dim=-1))
    assert len(record.deltas) == len(rec.passes)
    steps = [{"committed": p["committed"], "tokens": p["tokens"],
              "edited": p["overwritten"] + [[r, -1, predictor.mask_id] for r in p["remasked"]] + p["outside"]}
             for p in rec.passes]
    return steps, final.generated_tokens[0].tolist(), rec.inputs


def project(predictor, prompt: str, mode: str, mask_in_softmax: bool):
    trace = dico.generate(predictor, prompt, "pc-sampler", mode=mode, gen_length=GEN_LENGTH,
                          block_length=BLOCK_LENGTH, mask_in_softmax=mask_in_softmax)
    return [{"committed": s.committed, "tokens": s.tokens, "edited": s.edited} for s in trace.steps], trace.response


def scores(logits, table, mask_id, dtype, mask_in_softmax: bool):
    """(score, prediction) per position: d2Cache's formula in ``dtype``, the mask token in the softmax or not
    (the prediction is the argmax of the same softmax)."""
    x = logits.to(dtype)
    if not mask_in_softmax:
        x = x.clone()
        x[:, mask_id] = -math.inf
    conf, pred = torch.softmax(x, dim=-1).max(dim=-1)
    return torch.clamp_max(-conf * torch.log(table.to(dtype)[pred] + 1e-10), max=10.0), pred


def ties(inputs, width, memo, table, predictor, dtype) -> list[int]:
    """[passes whose highest score (the published one, in ``dtype``) is shared by two or more candidates, of them
    those at the cap]: where its ``torch.topk`` picks among equals."""
    m = inputs[0].shape[1] - GEN_LENGTH
    tied = capped = 0
    for x in inputs:
        masked = x[0, m:] == predictor.mask_id
        start = (int(torch.nonzero(masked)[0]) // width) * width
        cand = masked.clone()
        cand[:start], cand[start + width:] = False, False
        score = scores(memo(x)[m:], table, predictor.mask_id, dtype, True)[0][cand]
        top = score.max()
        if int((score == top).sum()) > 1:
            tied, capped = tied + 1, capped + int(float(top) == 10.0)
    return [tied, capped]


def cause(pub, lead, inputs, width, memo, table, predictor, dtype) -> str:
    """Why the published run and the project's first differ, read off the published state at that pass."""
    m = inputs[0].shape[1] - GEN_LENGTH
    sa, sb = pub[0], lead[0]
    i = next((k for k, (a, b) in enumerate(zip(sa, sb)) if a != b), None)
    if i is None:
        return "pass count" if len(sa) != len(sb) else "response"
    x = inputs[i][0]
    logits = memo(inputs[i])[m:]
    masked = x[m:] == predictor.mask_id
    start = (int(torch.nonzero(masked)[0]) // width) * width
    window = torch.zeros_like(masked)
    window[start:start + width] = True
    cand = masked & window
    s_pub, p_pub = scores(logits, table, predictor.mask_id, dtype, True)
    s32, _ = scores(logits, table, predictor.mask_id, torch.float32, False)
    s32m, _ = scores(logits, table, predictor.mask_id, torch.float32, True)
    a = sa[i]["committed"] or []
    b = sb[i]["committed"] or []
    if not a:
        picked = int(torch.where(cand, s_pub, -math.inf).argmax())
        if int(p_pub[picked]) == predictor.mask_id:
            return "mask token predicted: published commits the mask id (position stays masked)"
        return "published pass wrote nothing"
    pa, pb = a[0], b[0] if b else None
    if pb is None:
        return "project pass wrote nothing"
    if pa == pb:
        return "same position, other token"
    if s_pub[pa] == s_pub[pb]:
        low = "lower" if pa < pb else "higher"
        if dtype != torch.float32 and s32[pa] != s32[pb]:
            return (f"bfloat16 merges a near tie: equal in bfloat16 ({float(s_pub[pa]):g}), its topk took the {low} "
                    "position; in float32 the other scores higher")
        return f"exact tie ({float(s_pub[pa]):g}): its topk took the {low} position, the project the lower"
    if s32m[pa] > s32m[pb] and s32[pa] <= s32[pb]:
        return "mask token in the softmax changes the ranking"
    if dtype != torch.float32 and s32[pa] < s32[pb]:
        return "bfloat16 rounding reorders the scores"
    return f"other (published score {float(s_pub[pa]):g} at {pa}, project's {float(s_pub[pb]):g} at {pb})"


def measure(vanilla, predictor, table, families: list[str], items: int) -> list[dict]:
    """One row per item and mode: each published run (float32, bfloat16) against each project run."""
    rows = []
    for family in families:
        for index, item in enumerate(tasks.make_split(family, "test")[:items]):
            ids = predictor.encode_prompt(item.prompt)
            for mode, width in MODES.items():
                memo = Memo(predictor)
                leads = {k: project(predictor, item.prompt, mode, v) for k, v in PROJECT.items()}
                row, responses = {"family": family, "item": index, "prompt": item.prompt[:60], "mode": mode}, []
                for name, dtype in PUBLISHED.items():
                    with torch.no_grad():
                        pub = published(vanilla, predictor, ids, width, dtype, memo)
                    row[name] = {k: agreement(pub[:2], lead) for k, lead in leads.items()}
                    for k, lead in leads.items():
                        if not row[name][k]["run"]:
                            row[name][k]["cause"] = cause(pub, lead, pub[2], width, memo, table, predictor, dtype)
                    row[name]["tied_passes"] = ties(pub[2], width, memo, table, predictor, dtype)
                    responses.append(pub[1])
                row["published_float32_vs_bfloat16_response"] = responses[0] == responses[1]
                rows.append(row)
                print(family, index, mode, *(f"{n}/{k}={row[n][k]['steps']}/{row[n][k]['of']}"
                                             for n in PUBLISHED for k in PROJECT), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10, help="held-out items per family")
    parser.add_argument("--model", default="dico-tiny", help="a model name or folder (dico.load_model)")
    parser.add_argument("--published", type=Path, default=Path("/tmp/published_pc"),
                        help="the folder holding the copies (also on PYTHONPATH)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    predictor = dico.load_model(args.model)
    os.environ["MASK_TOKEN_ID"] = str(predictor.mask_id)       # as its pre_initialize sets it; Frame reads it
    table_file = ROOT / "assets" / args.model / "token_frequency.json"
    vanilla, gen_utils = stand_in_d2cache(args.published, table_file)
    table = gen_utils.get_token_freq("llada", predictor.model.config.vocab_size)
    table_equal = bool(torch.equal(table, predictor.token_frequency))
    started = time.time()
    families = [f for f in tasks.FAMILIES if f not in tasks.LONG_FAMILIES]
    rows = measure(vanilla, predictor, table, families, args.items)
    table_rows = []
    for mode in MODES:
        group = [r for r in rows if r["mode"] == mode]
        entry = {"mode": mode, "n": len(group),
                 "published_float32_vs_bfloat16_same_response": sum(r["published_float32_vs_bfloat16_response"]
                                                                    for r in group)}
        for name in PUBLISHED:
            for key in PROJECT:
                e = {k: sum(r[name][key][k] for r in group) for k in ("steps", "of", "run", "response")}
                e["published_passes"] = sum(r[name][key]["nfe"][0] for r in group)
                e["causes"] = dict(Counter(r[name][key]["cause"] for r in group if "cause" in r[name][key]))
                entry[f"{name}/{key}"] = e
            entry[f"{name}/tied_passes"] = [sum(r[name]["tied_passes"][j] for r in group) for j in (0, 1)]
        table_rows.append(entry)
    command = (f"PYTHONPATH={args.published} OMP_NUM_THREADS=1 python tests/fidelity_pc_sampler.py --items "
               f"{args.items} --model {args.model}")
    result = {"command": command, "model": predictor.name, "published": f"Kamichanw/d2Cache@{COMMIT}",
              "gen_length": GEN_LENGTH, "block_length": BLOCK_LENGTH, "items_per_family": args.items,
              "families": families, "settings": CONFIG, "table_equal_to_project": table_equal,
              "device": "cpu", "seconds": round(time.time() - started, 1), "summary": table_rows, "runs": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = ["# PC-Sampler (`pc-sampler`) against d2Cache's published vanilla decoder with `pc_sampler.yaml`", "",
             f"Model {predictor.name}, greedy, gen {GEN_LENGTH} (semi-AR blocks of {BLOCK_LENGTH}), {args.items} "
             f"held-out items of each of {', '.join(families)}; d2Cache (Kamichanw/d2Cache@{COMMIT[:12]}) "
             "`vanilla_generate` run unmodified on the CPU, with `debias: true`, `clip_alpha: 10`, one token a "
             "pass; its token table read by its own loader from the project's `token_frequency.json` (equal to "
             f"`predictor.token_frequency`: {table_equal}). Published float32: logits and scores in float32; "
             "published bfloat16: the logits rounded to bfloat16 and `sample_tokens` in bfloat16, as its GPU runs "
             "score. Steps identical / compared (commits and tokens of every pass); runs identical (every step, the "
             "pass count, the response); same response.", "", f"Command: `{command}`", "",
             "| mode | published | runs | dico vs published | same response | with `mask_in_softmax` "
             "| same response | published passes |", "|---|---|---|---|---|---|---|---|"]
    for e in table_rows:
        for name in PUBLISHED:
            a, b = e[f"{name}/project"], e[f"{name}/project_mask_in_softmax"]
            lines.append(f"| {e['mode']} | {name} | {e['n']} | {a['steps']}/{a['of']} steps, {a['run']}/{e['n']} "
                         f"runs | {a['response']}/{e['n']} | {b['steps']}/{b['of']} steps, {b['run']}/{e['n']} runs "
                         f"| {b['response']}/{e['n']} | {a['published_passes']} |")
    lines += ["", "Published float32 and bfloat16 runs with the same response: " + ", ".join(
        f"{e['mode']} {e['published_float32_vs_bfloat16_same_response']}/{e['n']}" for e in table_rows) + ".",
        "Published passes whose highest score is shared by two or more candidates (its `torch.topk` picks among "
        "equals; of them, at the cap 10): " + ", ".join(
            f"{e['mode']} {name} {e[f'{name}/tied_passes'][0]} ({e[f'{name}/tied_passes'][1]} capped)"
            for e in table_rows for name in PUBLISHED) + ".", "",
        "Causes of the differing runs (at the first differing pass, read off the published state there):", ""]
    for e in table_rows:
        for name in PUBLISHED:
            for key in PROJECT:
                for text, count in sorted(e[f"{name}/{key}"]["causes"].items(), key=lambda kv: -kv[1]):
                    lines.append(f"- {e['mode']}, published {name} vs {key}: {count} x {text}")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
