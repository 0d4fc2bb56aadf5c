"""An emulated accelerator, so tests without a GPU see the device bugs a GPU would show.

Inside ``accelerator()``, ``cuda:0`` exists: a tensor moved there (``.to("cuda")``, a factory with
``device="cuda"``, a module's ``.to("cuda")``) becomes an ``OnAccelerator`` tensor. Its operations stay on
the accelerator; like CUDA it refuses to mix with a CPU tensor of one or more dimensions and refuses
``.numpy()``, and ``.cpu()`` / ``.to("cpu")`` bring a copy back. Everything still computes on the CPU, so a
decode on the emulated accelerator must give exactly the text of the same decode on the CPU.

    with accelerator():
        predictor = dico.load_model(device="cuda")
        trace = dico.generate(predictor, "...", "dico")
"""
from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

import dico.sampling

DEVICE = torch.device("cuda", 0)


def _names_accelerator(d) -> bool:
    return (isinstance(d, str) and d.startswith("cuda")) or (isinstance(d, torch.device) and d.type == "cuda")


def _names_cpu(d) -> bool:
    return (isinstance(d, str) and d.startswith("cpu")) or (isinstance(d, torch.device) and d.type == "cpu")


def _on_cpu(x):
    """Where the emulation really computes: the accelerator's name replaced by the CPU's."""
    return torch.device("cpu") if _names_accelerator(x) else x


def _wrap(x):
    return x.as_subclass(OnAccelerator) if isinstance(x, torch.Tensor) and not isinstance(x, OnAccelerator) else x


def _unwrap(x):
    return x.as_subclass(torch.Tensor).clone() if isinstance(x, torch.Tensor) else x


def _targets(args, kwargs, test) -> bool:
    return test(kwargs.get("device")) or any(test(a) for a in args)


# What CUDA does across devices: copy into a tensor, compare tensor types.
_MAY_MIX = (torch.Tensor.copy_, torch._has_compatible_shallow_copy_type)
# Reading values to the host: (function name, number of elements) of each is kept in TRANSFERS.
_READS = (torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__float__, torch.Tensor.__int__,
          torch.Tensor.__bool__, torch.Tensor.__index__)
TRANSFERS: list[tuple[str, int]] = []


class OnAccelerator(torch.Tensor):
    """A tensor on the emulated accelerator."""

    @property
    def device(self) -> torch.device:
        return DEVICE

    @property
    def is_cuda(self) -> bool:
        return True

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.numpy, torch.Tensor.__array__):
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                            "to host memory first.")
        to_cpu = func is torch.Tensor.cpu or (func is torch.Tensor.to and _targets(args[1:], kwargs, _names_cpu))
        if to_cpu or func in _READS:
            TRANSFERS.append((func.__name__, args[0].numel()))
        if not to_cpu and func not in _MAY_MIX:
            flat, _ = tree_flatten((args, kwargs))
            if any(isinstance(t, torch.Tensor) and not isinstance(t, OnAccelerator) and t.dim() > 0 for t in flat):
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"cuda:0 and cpu! ({getattr(func, '__name__', func)})")
        args, kwargs = tree_map(_on_cpu, (args, kwargs))
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        return tree_map(_unwrap if to_cpu else _wrap, out)


class _Accelerator(TorchFunctionMode):
    """Makes ``device="cuda"`` and ``.to("cuda")`` land on the emulated accelerator."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        moving = func is torch.Tensor.to and _targets(args[1:], kwargs, _names_accelerator)
        if not (moving or _names_accelerator(kwargs.get("device"))):
            return func(*args, **kwargs)
        args, kwargs = tree_map(_on_cpu, (args, kwargs))
        out = func(*args, **kwargs)
        if moving and not isinstance(args[0], OnAccelerator):
            out = out.clone()                      # a real move copies
        return tree_map(_wrap, out)


@contextlib.contextmanager
def accelerator():
    """``cuda:0`` emulated for the duration; a random generator on it is the CPU's."""
    original = dico.sampling.generator_for
    dico.sampling.generator_for = lambda device: torch.Generator()
    overwrite = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)    # parameters become OnAccelerator tensors
    try:
        with _Accelerator():
            yield DEVICE
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(overwrite)
        dico.sampling.generator_for = original
