"""How closely EB-Sampler, KLASS, WINO and Saber follow their published code, on the embedded model.

    PYTHONPATH=/tmp/published:/tmp/published/dicorel python tests/fidelity_run.py --published /tmp/published --items 10
    # writes assets/bench/fidelity.{json,md}; the published modules are imported from PYTHONPATH, as published

Three agreements per method and mode, greedy, gen 96 (non-AR; semi-AR with blocks of 32), on held-out items of every
family (``dico.embedded.tasks``), each as steps identical and runs identical (every step, the pass count and the final
response) of N:

1. the published code, run unmodified, against ``tests/reference_decoders.py`` with the published conventions;
2. the reference with the project's conventions against ``dico.generate(..., method)``;
3. the published code against ``dico.generate`` (end to end). Where the published code and the project-conventions
   reference differ, the reference is run again with the published conventions but one (``Conventions``) switched to
   the project's: each switch after which the run differs from the published code's is a cause recorded.

The published code is not part of this repository (several of its repositories have no licence). ``--published DIR``
names a folder holding copies of the files, unmodified, taken from the repositories with ``git show HEAD:<path>``:

    DIR/llada_klass.py      shkim0116/KLASS        src/model/llada_klass.py      (stable_confident_decode, alg="klass")
    DIR/wino_decoding.py    Feng-Hong/WINO-DLLM    LLaDA/decoding.py             (decoding_wino)
    DIR/saber_decoding.py   zhaoyMa/Saber          decoding.py                   (generate_with_saber)
    DIR/dicorel/dllm/...    JustTheice/DiCo        dllm/ (the package)           (DLLMBaseline entropy_bound; KLASS)

They are called as published: what they need of a model is given by ``Adapter`` (``.device``, ``.config``,
``model(x, attention_mask=..., position_ids=...).logits``, LLaDA's mask id 126336, which they hard-code, mapped to the
embedded model's on the way in; WINO's 4-D mask and position ids honoured by ``reference_decoders.bert_forward``).
``Recorder`` watches every write into the sequence tensor they pass to the model and sorts the changes by pass.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.overrides import TorchFunctionMode

import dico
import reference_decoders as ref  # beside this script: Python puts the script's folder on its path
from dico.embedded import tasks

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

LLADA_MASK = 126336
GEN_LENGTH, BLOCK_LENGTH = 96, 32
MODES = {"non-ar": GEN_LENGTH, "semi-ar": BLOCK_LENGTH}
REFERENCES = {"eb": ref.eb_sampler, "klass": ref.klass, "wino": ref.wino, "saber": ref.saber,
              "klass-port": lambda *args, **kw: ref.klass(*args, port=True, **kw)}
# dico's method and settings for each: the DiCo release's KLASS port is KLASS forgetting its history at each block
PROJECT = {"eb": ("eb", {}), "klass": ("klass", {}), "wino": ("wino", {}), "saber": ("saber", {}),
           "klass-port": ("klass", {"reset_each_block": True})}
# The project's conventions for each: KLASS and WINO score in float64 as their code does, Saber takes exactly equal
# confidences as its code's torch.topk does (docs/decoding.md §7)
PROJECT_CONVENTIONS = {"klass": ref.Conventions(precision=True), "wino": ref.Conventions(precision=True),
                       "saber": ref.Conventions(torch_order=True)}
KEYS = ("committed", "tokens", "remasked", "overwritten", "rewritten", "outside")
SWITCHES = {"mask token": ref.Conventions(mask_token=True), "precision": ref.Conventions(precision=True),
            "tie order": ref.Conventions(torch_order=True)}
OUT = ROOT / "assets" / "bench" / "fidelity"


class Memo:
    """One item's forward passes by their input (the published code and the reference with its conventions ask for
    the same passes as long as they agree): the measurement costs about half the passes."""

    def __init__(self, predictor):
        self.model, self.seen = predictor.model, {}

    def __call__(self, ids, allowed=None, positions=None):
        key = (ids.numpy().tobytes(), None if allowed is None else allowed.numpy().tobytes(),
               None if positions is None else positions.numpy().tobytes())
        if key not in self.seen:
            self.seen[key] = ref.bert_forward(self.model, ids, allowed, positions)
        return self.seen[key]


class Adapter(torch.nn.Module):
    """The model as the published code calls it; each call starts a recorded pass."""

    def __init__(self, predictor, recorder: Recorder, forward: Memo):
        super().__init__()
        self.inner, self.mask_id, self.recorder, self.memo = predictor.model, predictor.mask_id, recorder, forward
        self.config = predictor.model.config
        self.device = torch.device("cpu")

    def forward(self, x, attention_mask=None, position_ids=None, **kwargs):
        self.recorder.new_pass(x)
        ids = torch.where(x == LLADA_MASK, torch.full_like(x, self.mask_id), x)
        if position_ids is not None or (attention_mask is not None and attention_mask.dim() == 4):
            logits = self.memo(ids, attention_mask[0, 0].bool(), position_ids.reshape(-1))
        else:           # the DiCo release passes a 2-D mask of ones: the same pass as none
            assert attention_mask is None or bool(attention_mask.all())
            logits = self.memo(ids)
        return SimpleNamespace(logits=logits[None].clone())


class Recorder(TorchFunctionMode):
    """Every in-place write into the sequence tensor (the one handed to the model), sorted by pass as
    ``reference_decoders.record`` sorts the reference's."""

    def __init__(self, m: int, n: int):
        super().__init__()
        self.m, self.n, self.x, self.passes = m, n, None, []

    def new_pass(self, x) -> None:
        self.x = x if self.x is None else self.x
        self.passes.append({k: [] for k in KEYS})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__setitem__ and self.x is not None and args[0] is self.x:
            before = self.x.clone()
            out = func(*args, **(kwargs or {}))
            written = torch.zeros_like(self.x, dtype=torch.bool)
            written[args[1]] = True
            self._note(before, written)
            return out
        return func(*args, **(kwargs or {}))

    def _note(self, before, written) -> None:
        step = self.passes[-1]
        for pos in torch.nonzero(written[0]).flatten().tolist():
            old, new, r = int(before[0, pos]), int(self.x[0, pos]), pos - self.m
            if not 0 <= r < self.n:
                if old != new:
                    step["outside"].append([pos, old, new])
            elif old == new:
                step["rewritten"].append(r)
            elif old == LLADA_MASK:
                step["committed"].append(r)
                step["tokens"].append(new)
            elif new == LLADA_MASK:
                step["remasked"].append(r)
            else:
                step["overwritten"].append([r, old, new])


def _quiet(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def published(method: str, predictor, prompt_ids: list[int], block_length: int, memo: Memo):
    """(steps, response) of the published code of ``method``, run unmodified with its default settings."""
    m = len(prompt_ids)
    rec = Recorder(m, GEN_LENGTH)
    model, prompt = Adapter(predictor, rec, memo), torch.tensor([prompt_ids])
    with torch.no_grad(), rec:
        if method == "klass":
            from llada_klass import stable_confident_decode
            x, _ = stable_confident_decode(model, None, prompt, GEN_LENGTH, GEN_LENGTH, block_length, temperature=0.,
                                           conf_threshold=0.9, kl_threshold=0.01, kl_history_length=2, alg="klass")
        elif method == "wino":
            from wino_decoding import decoding_wino
            x, _ = decoding_wino(model, prompt, gen_length=GEN_LENGTH, block_length=block_length, temperature=0.,
                                 threshold=0.6, threshold_back=0.9)
        elif method == "saber":
            from saber_decoding import generate_with_saber
            x, _ = generate_with_saber(model, prompt, n=2, gen_length=GEN_LENGTH, block_length=block_length,
                                       temperature=0.)
        else:       # eb: the DiCo release's DLLMBaseline, entropy_bound, gamma 0.1; klass-port: its KLASS, run script
            from dllm.DLLMBaseline import BaselineConfig, DLLMBaseline
            from dllm.KLASS import KLASS, KLASSConfig
            from dllm.tactics.cache_backend.none import NoCacheBackend
            from dllm.tactics.length_strategy.vanilla import VanillaLengthStrategy
            if method == "eb":
                sampler = _quiet(DLLMBaseline, model, None, BaselineConfig(decoding_method="entropy_bound",
                                                                           entropy_bound_gamma=0.1))
            else:
                sampler = _quiet(KLASS, model, None, KLASSConfig(decoding_method="fixed", confidence_threshold=0.9,
                                                                 kl_threshold=0.01, kl_history_length=2))
            sampler.set_length_strategy(_quiet(VanillaLengthStrategy))
            sampler.set_cache_backend(_quiet(NoCacheBackend))
            x = _quiet(sampler.generate, prompt, gen_length=GEN_LENGTH, max_steps=GEN_LENGTH,
                       block_length=block_length).out
    response = [predictor.mask_id if t == LLADA_MASK else t for t in x[0, m:m + GEN_LENGTH].tolist()]
    return rec.passes, response


def reference(method: str, predictor, prompt_ids: list[int], block_length: int, conv, memo: Memo):
    return REFERENCES[method](memo, prompt_ids, predictor.mask_id, GEN_LENGTH, block_length, published=conv)


def project(method: str, predictor, prompt: str, mode: str):
    name, settings = PROJECT[method]
    trace = dico.generate(predictor, prompt, name, mode=mode, gen_length=GEN_LENGTH, block_length=BLOCK_LENGTH,
                          **settings)
    steps = [{"committed": s.committed, "tokens": s.tokens, "remasked": list(getattr(s, "remasked", []) or [])}
             for s in trace.steps]
    return steps, trace.response


def agreement(a, b, keys=("committed", "tokens", "remasked")) -> dict:
    """Steps identical (in order, over the longer run) and whether the whole run is."""
    (sa, ra), (sb, rb) = a, b
    same = [all(x[k] == y[k] for k in keys) for x, y in zip(sa, sb)]
    first = next((i for i, ok in enumerate(same) if not ok), None if len(sa) == len(sb) else min(len(sa), len(sb)))
    return {"steps": sum(same), "of": max(len(sa), len(sb)), "run": first is None and ra == rb,
            "first_difference": first, "nfe": [len(sa), len(sb)], "response": ra == rb}


def measure(predictor, methods: list[str], items: int, causes_items: int, log, done=lambda rows: None,
            first: int = 0) -> list[dict]:
    """Every comparison on held-out items ``first`` .. ``first + items - 1`` of each family (item by item, every
    family each time, ``done`` called after each); the causes of differences looked for on the first
    ``causes_items`` of them."""
    rows = []
    splits = {family: tasks.make_split(family, "test") for family in tasks.FAMILIES}
    for index in range(first, first + items):
        for family, split in splits.items():
            item = split[index]
            ids = predictor.encode_prompt(item.prompt)
            for method in methods:
                for mode, width in MODES.items():
                    memo = Memo(predictor)
                    pub = published(method, predictor, ids, width, memo)
                    mine = reference(method, predictor, ids, width, ref.PUBLISHED, memo)
                    ours = reference(method, predictor, ids, width, PROJECT_CONVENTIONS.get(method, ref.PROJECT),
                                     memo)
                    try:
                        lead = project(method, predictor, item.prompt, mode)
                    except Exception as error:     # a method not (yet) in dico: recorded, not hidden
                        lead = None
                        lead_error = f"{type(error).__name__}: {error}"
                    row = {"family": family, "item": index, "method": method, "mode": mode,
                           "published_vs_reference": agreement(pub, mine, KEYS),
                           "reference_vs_project": agreement(ours, lead) if lead else {"error": lead_error},
                           "published_vs_project": agreement(pub, lead) if lead else {"error": lead_error},
                           "published_vs_project_reference": agreement(pub, ours),
                           "published_quirks": sum(len(s[k]) for s in pub[0] for k in KEYS[3:])}
                    if not row["published_vs_project_reference"]["run"] and index < first + causes_items:
                        row["causes"] = [name for name, conv in SWITCHES.items()
                                         if not agreement(pub, reference(method, predictor, ids, width,
                                                                         _flip(conv), memo))["run"]]
                    rows.append(row)
                    log(row)
        done(rows)
    return rows


def _flip(switch: ref.Conventions) -> ref.Conventions:
    """The published conventions with one switched to the project's: if the run then differs, that one matters."""
    return ref.Conventions(mask_token=not switch.mask_token, precision=not switch.precision,
                           torch_order=not switch.torch_order)


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        for mode in MODES:
            group = [r for r in rows if r["method"] == method and r["mode"] == mode]
            entry = {"method": method, "mode": mode, "n": len(group)}
            for key in ("published_vs_reference", "reference_vs_project", "published_vs_project"):
                ok = [r[key] for r in group if "error" not in r[key]]
                entry[key] = {"steps": sum(a["steps"] for a in ok), "of": sum(a["of"] for a in ok),
                              "runs": sum(a["run"] for a in ok), "n": len(ok),
                              "responses": sum(a["response"] for a in ok),
                              "equal_nfe": sum(a["nfe"][0] == a["nfe"][1] for a in ok)}
            causes = {}
            for r in group:
                for c in r.get("causes", []):
                    causes[c] = causes.get(c, 0) + 1
            entry["differing_runs_by_cause"] = causes
            entry["published_quirks"] = sum(r["published_quirks"] for r in group)
            out.append(entry)
    return out


def markdown(table: list[dict], command: str, items: int) -> str:
    lines = ["# Fidelity to the published code", "",
             f"Embedded model, greedy, gen {GEN_LENGTH} (semi-AR blocks of {BLOCK_LENGTH}), {items} held-out items of "
             f"each of the {len(tasks.FAMILIES)} families. Steps identical / steps compared; runs identical "
             "(every step, the pass count, the response) / runs.", "", f"Command: `{command}`", "",
             "| method | mode | published code vs reference | reference vs dico | published code vs dico | "
             "differing runs: conventions that alone cause it |", "|---|---|---|---|---|---|"]

    def cell(a):
        return f"{a['steps']}/{a['of']} steps, {a['runs']}/{a['n']} runs" if a["n"] else "not run"
    for e in table:
        causes = ", ".join(f"{k} {v}" for k, v in e["differing_runs_by_cause"].items()) or "-"
        lines.append(f"| {e['method']} | {e['mode']} | {cell(e['published_vs_reference'])} | "
                     f"{cell(e['reference_vs_project'])} | {cell(e['published_vs_project'])} | {causes} |")
    quirks = sum(e["published_quirks"] for e in table)
    ends = [e["published_vs_project"] for e in table if e["published_vs_project"]["n"]]
    lines += ["", f"Published code vs dico, whole runs: the same final response in {sum(a['responses'] for a in ends)} "
              f"of {sum(a['n'] for a in ends)} runs, the same number of passes in "
              f"{sum(a['equal_nfe'] for a in ends)}."]
    lines += ["", "The last column counts, among the runs where the published code and dico differ (looked for on the "
              "first items only: `causes_items_per_family` in the JSON), those that differ again when the reference, "
              "otherwise on the published conventions, takes one of the project's:", "",
              "- *mask token*: the published code's argmax and softmax include the mask token; the project never "
              "predicts it and leaves it out of the softmax (`mask_in_softmax` puts it back in the softmax).",
              "- *precision*: KLASS and WINO rank float64 probabilities; the project's confidences are float32, in "
              "which near-certain positions (end-of-text runs) tie at 1.0 and the tie goes to the lower position, "
              "where float64 still tells them apart.",
              "- *tie order*: which of exactly equal confidences a top-k takes: torch's `topk`/`argsort` order in the "
              "published code (unspecified, device-dependent), the lower position in the project (but Saber: "
              "torch's, on the published code's layout).",
              "",
              f"Writes of the published code outside its candidates (a top-k asking for more positions than are "
              f"left, overwriting a decoded token or touching the prompt): {quirks} in all these runs."]
    return "\n".join(lines) + "\n"


def _check_importable(folder: Path) -> None:
    """The published modules come from PYTHONPATH (this script never edits the import path): say so if they don't."""
    import importlib.util
    for name in ("llada_klass", "wino_decoding", "saber_decoding", "dllm"):
        if importlib.util.find_spec(name) is None:
            raise SystemExit(f"error: published: cannot import {name!r}; run with "
                             f"PYTHONPATH={folder}:{folder / 'dicorel'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--published", required=True, type=Path, help="folder of the published files (see above)")
    parser.add_argument("--items", type=int, default=10, help="held-out items per family")
    parser.add_argument("--first", type=int, default=0, help="the first held-out item (to add items to a run)")
    parser.add_argument("--methods", nargs="+", choices=list(REFERENCES), default=list(REFERENCES))
    parser.add_argument("--causes-items", type=int, default=3, help="look for the causes of differences on the first "
                        "this many items of each family (three more reference runs each)")
    parser.add_argument("--out", type=Path, default=OUT, help="writes OUT.json and OUT.md (after every item)")
    args = parser.parse_args()
    _check_importable(args.published)
    torch.set_num_threads(1)
    predictor = dico.load_model()
    started = time.time()
    command = ("PYTHONPATH=<folder>:<folder>/dicorel python tests/fidelity_run.py --published <folder> "
               f"--items {args.items} --first {args.first} "
               f"--causes-items {args.causes_items} --methods {' '.join(args.methods)}")

    def write(rows):
        done = len(rows) // (len(tasks.FAMILIES) * len(args.methods) * len(MODES))
        table = summary(rows)
        result = {"command": command, "model": predictor.name, "gen_length": GEN_LENGTH,
                  "block_length": BLOCK_LENGTH, "items_per_family": done, "complete": done == args.items,
                  "causes_items_per_family": min(done, args.causes_items),
                  "seconds": round(time.time() - started, 1), "summary": table, "runs": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
        args.out.with_suffix(".md").write_text(markdown(table, command, done))

    def log(r):
        print(r["family"], r["item"], r["method"], r["mode"],
              *(f"{k}={r[k].get('steps')}/{r[k].get('of')}" for k in ("published_vs_reference",
                                                                      "reference_vs_project",
                                                                      "published_vs_project")),
              r.get("causes", ""), flush=True)
    rows = measure(predictor, args.methods, args.items, args.causes_items, log, write, args.first)
    print(markdown(summary(rows), command, args.items))


if __name__ == "__main__":
    main()
