"""The app's models: the embedded one (always works), the known hub models (need a GPU), one shared cache.

A hub model that cannot be loaded raises ``ModelError`` with a message that says the embedded model keeps
working; the cache never holds a half-loaded model.
"""
from __future__ import annotations

import logging
import os
import threading
import time

try:   # ZeroGPU wants `spaces` imported before torch; off ZeroGPU its decorator changes nothing
    import spaces
    gpu = spaces.GPU(duration=120)
except Exception:  # noqa: BLE001 - any failure means "not on ZeroGPU"
    def gpu(fn):
        return fn

from dico.models import EMBEDDED_MODELS, EMBEDDED_NAME, MaskPredictor, ModelError, load_model

log = logging.getLogger("dico_ui")

# The hub models offered in the model menu; they need a GPU with about 20 GB of memory (LLaDA2.1-mini, a 16B mixture
# of experts, about 33 GB). LLaDA 1.5 sits beside LLaDA 2.1 so that the two generations race on one prompt. SDAR,
# LLaDA 2.x and Fast-dLLM v2 are block diffusion models: causal from block to block and bidirectional inside one,
# they decode a block at a time (4 tokens for SDAR, 32 for LLaDA 2.x and Fast-dLLM v2) and keep the finished blocks'
# keys and values exactly, as an autoregressive model keeps its past (docs/decoding.md §11).
HUB_MODELS = {"GSAI-ML/LLaDA-8B-Instruct": "LLaDA-8B-Instruct", "GSAI-ML/LLaDA-1.5": "LLaDA-1.5",
              "Dream-org/Dream-v0-Instruct-7B": "Dream-7B-Instruct",
              "JetLM/SDAR-4B-Chat": "SDAR-4B-Chat, block diffusion: semi-AR, blocks of 4",
              "inclusionAI/LLaDA2.1-mini": "LLaDA2.1-mini, block diffusion (16B MoE): semi-AR, blocks of 32",
              "Efficient-Large-Model/Fast_dLLM_v2_7B": "Fast-dLLM v2 7B, block diffusion: semi-AR, blocks of 32"}
WARM_UP_PROMPT = "Tom has 5 apples. He buys 3 more apples. How many apples does Tom have now?"
WARM_UP_LENGTH = 8

_SERVER_PID = os.getpid()

_models: dict[str, MaskPredictor] = {}
_lock = threading.Lock()
_warm: set[str] = set()


def one_thread_in_a_forked_worker() -> None:
    """Called first in every @gpu function: ZeroGPU runs them in a child forked from the server, and a child forked
    after the server's OpenMP pool ran (the warm-up, any CPU decode) hangs in its first parallel region, as libgomp
    is not fork-safe; one torch thread never enters one. Nothing changes in the server's own process."""
    if os.getpid() != _SERVER_PID:
        import torch
        torch.set_num_threads(1)


def zero_gpu() -> bool:
    """On Hugging Face ZeroGPU, CUDA appears only inside @spaces.GPU functions."""
    return bool(os.environ.get("SPACES_ZERO_GPU"))


def gpu_available() -> bool:
    import torch
    return torch.cuda.is_available() or zero_gpu()


# What each embedded model is for, in the model menu, and what the page says beside one trained for one regime.
EMBEDDED_ROLES = {EMBEDDED_NAME: "embedded, runs anywhere", "dico-tiny-long": "embedded, long worked answers, gen 256"}
MODEL_NOTES = {"dico-tiny-long": "Trained for long worked answers (several changes to a count, each step written "
                                 "out): give it gen_length 256. On short prompts dico-tiny answers more often "
                                 "(assets/dico-tiny-long/README.md)."}


def model_choices() -> list[tuple[str, str]]:
    gpu = gpu_available()
    return [(f"{name} ({EMBEDDED_ROLES[name]})", name) for name in EMBEDDED_MODELS] + \
        [(f"{name} ({'GPU' if gpu else 'needs a GPU'})", hub_id) for hub_id, name in HUB_MODELS.items()]


def get_predictor(name: str | None = None) -> MaskPredictor:
    """The shared, loaded-once predictor for ``name`` (None: the embedded model, or $DICO_EMBEDDED_MODEL)."""
    key = name or EMBEDDED_NAME
    if key not in EMBEDDED_MODELS and key not in HUB_MODELS:
        raise ModelError(f"model: {key!r} is not offered here; choose one of {', '.join(EMBEDDED_MODELS)} or "
                         f"{', '.join(HUB_MODELS)}")
    if key in HUB_MODELS and not gpu_available():
        raise ModelError(f"model: {HUB_MODELS[key]} cannot be loaded here: it needs a GPU with about 20 GB of "
                         f"memory and this machine has none. The embedded model {EMBEDDED_NAME} keeps working.")
    with _lock:       # one load per model, even when the first requests arrive together
        if key not in _models:
            source = (os.environ.get("DICO_EMBEDDED_MODEL") or None) if key == EMBEDDED_NAME else key
            started = time.perf_counter()
            try:
                _models[key] = load_model(source or key,
                                          device="cuda" if zero_gpu() and key not in EMBEDDED_MODELS else None)
            except ModelError as exc:
                if key in EMBEDDED_MODELS:
                    raise
                raise ModelError(f"{exc}. The embedded model {EMBEDDED_NAME} keeps working.") from None
            log.info("loaded model %s in %.1f s", key, time.perf_counter() - started)
        return _models[key]


def describe(predictor: MaskPredictor) -> str:
    """Where a model runs: device and dtype."""
    dtype = getattr(predictor, "dtype", None)
    if dtype is None:
        dtype = next(iter(predictor.model.parameters())).dtype
    return f"{predictor.name} on {predictor.device} ({str(dtype).replace('torch.', '')})"


def warm_up(name: str | None = None) -> None:
    """One short decode, so the first run's timing is not the cold start's (lazy inits, first kernels)."""
    from dico.loop import generate
    key = name or EMBEDDED_NAME
    if key in _warm:
        return
    predictor = get_predictor(key)
    if predictor.block:             # a block diffusion model decodes its own blocks, semi-AR (dico.block)
        block = predictor.block
        generate(predictor, WARM_UP_PROMPT, "vanilla", mode="semi-ar", block_length=block,
                 gen_length=-(-WARM_UP_LENGTH // block) * block)
    else:
        generate(predictor, WARM_UP_PROMPT, "vanilla", gen_length=WARM_UP_LENGTH)
    mark_warm(key)


def mark_warm(name: str | None = None) -> None:
    _warm.add(name or EMBEDDED_NAME)


def is_warm(name: str | None = None) -> bool:
    return (name or EMBEDDED_NAME) in _warm
