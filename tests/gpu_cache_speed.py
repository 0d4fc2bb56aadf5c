"""Does a KV cache pay on a GPU? (run by tests/gpu_check.sh; needs CUDA)

The embedded model is so small that a pass on a GPU costs its kernel launches, whatever it computes: a cache saves
nothing there. LLaDA-8B's pass is compute: this measures a LLaDA-shaped model through the LLaDA code path the
cache patches (tests/remote_standin.py), with LLaDA-8B's layer (4096 wide, 32 heads, MLP 12288) but 4 layers of
its 32 and random weights, in bfloat16. Vanilla decodes a fixed 256 passes (gen 256, blocks of 32 semi-AR) whatever
the weights, so its tokens/s without a cache and with each kind, interleaved in one process, are the ratio a cache
gives per pass; batch 1 and 8. Its vocabulary is the stand-in's 64 words, not LLaDA's 126,464, whose output layer a
cache also skips for the positions it does not compute: the real model's ratio is, if anything, larger.

    python tests/gpu_cache_speed.py OUT_DIR
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

import dico
from dico.batch import generate_batch
from standins import REMOTE_WORDS, remote_model_folder  # run as a script: tests/ is the first import path

SHAPE = dict(d_model=4096, n_heads=32, mlp_hidden_size=12288, n_layers=4, max_sequence_length=512)
GEN, BLOCK, PROMPT_WORDS, ROUNDS = 256, 32, 120, 2
CASES = {"semi-ar": ("none", "prefix", "dual"), "non-ar": ("none", "delayed")}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    words = [w for w in REMOTE_WORDS if w.startswith("w")]
    prompts = [" ".join(words[(i + j) % len(words)] for j in range(PROMPT_WORDS)) for i in range(8)]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        folder = remote_model_folder(Path(tmp) / "llada-wide", "llada", end_token_id=None, **SHAPE)
        predictor = dico.load_model(folder, trust_remote_code=True, device="cuda", attention=False)
        built = time.perf_counter() - start
    params = sum(p.numel() for p in predictor.model.parameters())
    rows = []
    for mode, kinds in CASES.items():
        for batch in (1, 8):
            run = dict(batch_size=batch, mode=mode, gen_length=GEN, block_length=BLOCK if mode == "semi-ar" else None)
            wall = {kind: 0.0 for kind in kinds}
            forwards = {}
            for kind in kinds:                                            # warm-up: kernels chosen, memory held
                generate_batch(predictor, prompts[:batch], "vanilla", **run, **cache_of(kind))
            for r in range(ROUNDS):
                for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    traces = generate_batch(predictor, prompts[:batch], "vanilla", **run, **cache_of(kind))
                    torch.cuda.synchronize()
                    wall[kind] += time.perf_counter() - start
                    forwards[kind] = sum(t.token_forwards for t in traces)
            for kind in kinds:
                tps = ROUNDS * batch * GEN / wall[kind]
                rows.append({"mode": mode, "batch": batch, "cache": kind, "tokens_per_s": round(tps, 1),
                             "speedup": round(wall[kinds[0]] / wall[kind], 2), "token_forwards": forwards[kind]})
                print(rows[-1], flush=True)
    head = (f"**KV cache on a GPU ({torch.cuda.get_device_name()}, bfloat16, torch {torch.__version__})**: a "
            f"LLaDA-shaped model of {params / 1e9:.2f}B parameters (LLaDA-8B's layer, 4 of its 32 layers, random "
            f"weights), Vanilla gen {GEN} (semi-AR in blocks of {BLOCK}), a prompt of {PROMPT_WORDS} words, "
            f"{ROUNDS} interleaved rounds; built and loaded in {built:.0f} s.")
    lines = [head, "", "| mode | batch | cache | tokens/s | speed-up | token forwards |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['mode']} | {r['batch']} | {r['cache']} | {r['tokens_per_s']:.0f} | {r['speedup']:.2f}x | "
              f"{r['token_forwards']} |" for r in rows]
    (out / "cache_speed_gpu.md").write_text("\n".join(lines) + "\n")
    (out / "cache_speed_gpu.json").write_text(json.dumps({"title": head, "params": params, "rows": rows}, indent=1))
    print("\n".join(lines))


def cache_of(kind: str) -> dict:
    return {} if kind == "none" else {"cache": kind}


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-check"))
