"""A block diffusion model with and without its block cache, ``python -m dico.bench blocks``: an SDAR-shaped stand-in
(``dico/bench/sdar_standin.py``, random weights) decodes the same prompt with ``sdar`` at each gen length, once
with no cache and once with ``cache prefix`` (the finished blocks' keys and values kept, exact: ``dico.block``),
the two interleaved in one process; each row gives its passes, seconds a pass, tokens/s, the positions it put
through the model and its speed-up against no cache.

    python -m dico.bench blocks --shape full --gen 256,1024 --device cuda      # SDAR-4B's shape, on a GPU
    python -m dico.bench blocks --shape small --gen 256,1024                   # a CPU's size

``--shape full`` is SDAR-4B's shape (JetLM/SDAR-4B-Chat, a Qwen3-4B decoder: hidden 2560, 36 layers, 32 heads over 8
key/value heads of 128, MLP 9728, vocabulary 151,936, blocks of 4; as issue 67 gives it, not read from the hub here,
and with its embeddings untied, 0.39B parameters more to hold and nothing more to compute); ``small`` keeps its
4:1 grouping of heads and its block at a width a CPU decodes 1024 tokens with in minutes; ``tiny`` is the tests'.
The weights are random, so only the time means anything: the rule is SDAR's with ``low_confidence_static`` and 4
steps a block of 4, one token a pass whatever the weights, so a decode makes about gen passes with either cache and
the two are timed on the same work. The model is built in memory on the device (nothing is written to disk); its
mask token's output row is zero, so the draw seldom writes it back (a pass that does commits nothing and is counted).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from dico.bench.runner import Report, Session, Subcommand, add_measure
from dico.bench.tables import blocks_markdown

BLOCK = 4
# SDAR-4B-Chat's config.json (JetLM/SDAR-4B-Chat): Qwen3-4B's decoder with SDAR's block_size.
SHAPES = {
    "full": dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                 intermediate_size=9728, vocab_size=151936, rope_theta=1_000_000.0),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                  intermediate_size=960, vocab_size=4096, rope_theta=1_000_000.0),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                 intermediate_size=48, vocab_size=64, rope_theta=10000.0),
}
SPECIAL = ["<unk>", "<|MASK|>"]
SETTINGS = {"remasking": "low_confidence_static", "steps": BLOCK}     # one token a pass, whatever the weights
CACHES = ("none", "prefix")
WARM_GEN = 16
SEED = 0


@dataclass(frozen=True)
class Plan:
    shape: str
    gens: tuple[int, ...]
    prompt_tokens: int
    rounds: int


def gen_lengths(text: str) -> tuple[int, ...]:
    try:
        gens = tuple(int(v) for v in text.split(",") if v)
    except ValueError:
        gens = ()
    if not gens or any(g < BLOCK or g % BLOCK for g in gens):
        raise ValueError(f"gen: expected comma-separated lengths, each a multiple of the block ({BLOCK}), got {text!r}")
    return gens


def plan(args) -> Plan:
    if args.model:
        raise ValueError("model: the blocks bench builds its own SDAR-shaped stand-in; choose its size with --shape")
    if args.prompt_tokens < 1 or args.prompt_tokens % BLOCK:
        raise ValueError(f"prompt-tokens: must be a positive multiple of the block ({BLOCK}), got {args.prompt_tokens}")
    if args.rounds < 1:
        raise ValueError(f"rounds: must be >= 1, got {args.rounds}")
    return Plan(args.shape, gen_lengths(args.gen), args.prompt_tokens, args.rounds)


def recipe_id(shape: str, seed: int, device, dtype) -> str:
    """The random weights' digest, as a record's ``weights``: that of what makes them (the shape, the seed, the device
    kind, the dtype and torch's version), not of the tensors, which a full shape would take seconds to hash."""
    import hashlib
    import json

    import torch

    made = {**SHAPES[shape], "block_size": BLOCK, "seed": seed, "device": torch.device(device).type,
            "dtype": str(dtype), "torch": torch.__version__}
    return "sha256:" + hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()[:20]


def standin(shape: str, length: int, device, dtype, seed: int = SEED):
    """The stand-in of ``shape`` as a mask predictor on ``device`` in ``dtype``, built there (a word-level tokenizer
    over its whole vocabulary: ``<unk>``, the mask ``<|MASK|>``, then ``w0``, ``w1`` ...); ``length``: its positions."""
    import dataclasses
    import importlib

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from dico.block import SDAR, release_imports
    from dico.models import from_module

    with release_imports():                     # the stand-in imports flash_attn and LossKwargs as SDAR's file does
        code = importlib.import_module("dico.bench.sdar_standin")
    config = code.SDARStandinConfig(**SHAPES[shape], block_size=BLOCK, max_position_embeddings=length)
    torch.manual_seed(seed)
    with torch.device(device):
        model = code.SDARStandinForCausalLM(config).to(dtype)
    vocab = {w: i for i, w in enumerate(SPECIAL + [f"w{i}" for i in range(config.vocab_size - len(SPECIAL))])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", mask_token="<|MASK|>")
    mask_id = vocab["<|MASK|>"]
    with torch.no_grad():
        model.lm_head.weight[mask_id] = 0.0
    predictor = from_module(model, tokenizer, kind="block", mask_id=mask_id, max_length=length,
                            name=f"sdar-standin-{shape}", device=device, block=BLOCK, release=SDAR)
    return dataclasses.replace(predictor, dtype=dtype)


def timed(predictor, prompt: str, gen: int, cache: str):
    """One decode and its wall seconds (the device synchronised before and after)."""
    import torch

    from dico.loop import generate

    sync = torch.cuda.synchronize if predictor.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    trace = generate(predictor, prompt, "sdar", mode="semi-ar", gen_length=gen, block_length=BLOCK, cache=cache,
                     settings=SETTINGS)
    sync()
    return trace, time.perf_counter() - start


def measure_gen(predictor, prompt: str, gen: int, rounds: int, progress: bool) -> list[dict]:
    """The rows of one gen length: no cache and the prefix cache, interleaved (each round starts with the other)."""
    seconds, traces = dict.fromkeys(CACHES, 0.0), {}
    for r in range(rounds):
        for cache in CACHES[r % 2:] + CACHES[:r % 2]:
            traces[cache], wall = timed(predictor, prompt, gen, cache)
            seconds[cache] += wall
            if progress:
                print(f"gen {gen}, cache {cache}, round {r + 1}: {wall:.2f} s, {traces[cache].nfe} passes", flush=True)
    rows = []
    for cache in CACHES:
        trace, wall = traces[cache], seconds[cache] / rounds
        rows.append({"gen_length": gen, "cache": cache, "passes": trace.nfe, "seconds": round(wall, 3),
                     "ms_per_pass": round(1000 * wall / trace.nfe, 2), "tokens_per_s": round(gen / wall, 1),
                     "positions": trace.token_forwards, "speedup_cache": round(seconds["none"] / seconds[cache], 2),
                     "same_response": trace.response == traces["none"].response})
    return rows


def measure(plan: Plan, session: Session) -> Report:
    from dico.models import default_device_dtype

    device, dtype = default_device_dtype(session.args.device, session.args.dtype)
    if device.type == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"device: {device} asked for, but this machine has no CUDA device")
    start = time.perf_counter()
    predictor = standin(plan.shape, plan.prompt_tokens + max(*plan.gens, WARM_GEN), device, dtype)
    built = time.perf_counter() - start
    params = sum(p.numel() for p in predictor.model.parameters())
    prompt = " ".join(f"w{i % (predictor.model.config.vocab_size - len(SPECIAL))}" for i in range(plan.prompt_tokens))
    for cache in CACHES:                                            # warm-up: kernels chosen, memory held
        timed(predictor, prompt, WARM_GEN, cache)
    rows = [row for gen in plan.gens for row in measure_gen(predictor, prompt, gen, plan.rounds, session.progress)]
    where = session.where()
    on = f"the CPU ({where})" if device.type == "cpu" else where        # a GPU's line starts with its name
    title = (f"Block cache on an SDAR-shaped stand-in ({plan.shape} shape, {_count(params)} parameters, random "
             f"weights) on {on}: sdar (low_confidence_static, 4 steps a block of {BLOCK}), a prompt of "
             f"{plan.prompt_tokens} tokens, {plan.rounds} interleaved round{'s' if plan.rounds > 1 else ''}; built in "
             f"{built:.0f} s")
    return Report(blocks_markdown(rows, title), {
        "title": title, "model": f"sdar-standin-{plan.shape}", "weights": recipe_id(plan.shape, SEED, device, dtype),
        "shape": {**SHAPES[plan.shape], "block_size": BLOCK},
        "params": params, "device": device.type, "dtype": str(dtype).removeprefix("torch."), "machine": where,
        "prompt_tokens": plan.prompt_tokens, "rounds": plan.rounds, "settings": {"method": "sdar", **SETTINGS},
        "rows": rows})


def _count(params: int) -> str:
    return f"{params / 1e9:.2f}B" if params >= 1e9 else f"{params / 1e6:.2f}M"


def register(subparsers) -> None:
    parser = add_measure(subparsers, "blocks", "an SDAR-shaped stand-in timed with and without its block cache",
                         Subcommand(plan, measure, loads_model=lambda plan: False, threads=1), __doc__)
    parser.add_argument("--shape", choices=tuple(SHAPES), default="small",
                        help="full: SDAR-4B's shape (a GPU's); small: a CPU's (default); tiny: the tests'")
    parser.add_argument("--gen", default="256,1024", help="comma-separated gen lengths (default 256,1024)")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prompt length in tokens (default 128)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds a gen length (default 1)")
