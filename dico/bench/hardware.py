"""Where a bench decodes and on what: the model with its device and dtype (``--device``, ``--dtype``), the machine
line every table carries, and the weights' training step, so a table says which weights it measured."""
from __future__ import annotations

import platform


def training_step(model: str | None) -> int | None:
    """The training step of a locally trained model, so a table says which weights it measured: the embedded model
    is retrained between rounds under the same name."""
    from dico.models import train_log
    step = train_log(model).get("step")
    return step if isinstance(step, int) else None


def machine(jobs: int = 1, model=(None, None, None)) -> str:
    """What the numbers were measured on: they are only comparable within one run on one machine (``jobs``: the
    decoding processes of a ``--jobs`` run, each on one torch thread; ``model``: ``bench_model``'s spec, whose
    device decodes)."""
    import os

    import torch

    from dico.models import default_device_dtype

    device, dtype = default_device_dtype(model[1], model[2])
    cpu = f"{platform.machine()} {platform.processor() or ''}".strip() + f", {os.cpu_count()} cores"
    if device.type == "cuda":
        return (f"{torch.cuda.get_device_name(device)} in {str(dtype).removeprefix('torch.')} ({cpu}), torch "
                f"{torch.__version__}" + (f", {jobs} processes" if jobs > 1 else ""))
    return (cpu + f", {counted(torch.get_num_threads(), 'torch thread')}, torch {torch.__version__}" +
            ("" if dtype == torch.float32 else f", in {str(dtype).removeprefix('torch.')}") +
            (f", {jobs} processes of 1 torch thread" if jobs > 1 else ""))


def bench_model(args) -> tuple:
    """What a bench loads, in this process and in each worker: the model, its device and its dtype (``--device``,
    ``--dtype``; by default a GPU in bfloat16 where there is one, else the CPU in float32)."""
    return args.model, args.device, args.dtype


def load_bench_model(model: tuple):
    """``bench_model``'s model, without attention maps (no bench draws them)."""
    from dico.models import load_model

    name, device, dtype = model
    return load_model(name, attention=False, device=device, dtype=dtype)


def decoded_on(model: tuple) -> dict:
    """The device and dtype for a saved part's key: none on the CPU in float32, as every part saved before had, so
    a part decoded on a GPU is never taken for a CPU's (or the other way round)."""
    import torch

    from dico.models import default_device_dtype

    device, dtype = default_device_dtype(model[1], model[2])
    if (device.type, dtype) == ("cpu", torch.float32):
        return {}
    return {"device": device.type, "dtype": str(dtype).removeprefix("torch.")}


def counted(n: int, noun: str) -> str:
    """``n`` and its noun, in the plural unless it is 1."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
