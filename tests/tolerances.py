"""How far two float32 computations of the same logits may lie apart when they sum the same terms in another order.

A batch of rows against one row alone, padding, another thread count or another CPU's vector width changes the order
of float32 sums (the kernels tile the matrices by their shapes). Each result then moves by a few units in the last
place (ulps) of the largest terms it is summed from, not of itself: a logit near zero is a sum of large terms that
cancel, and moves as much as a large one. So the absolute tolerance scales with the largest magnitude in the compared
tensor; the relative one covers the noise plugin's per-call 1e-6 relative noise (../shared/tools/noise_plugin.py;
two calls differ by at most about 1e-5 of a value).

Measured: the embedded model's batched and single passes (tests/test_verify.py) agree exactly on an AMD EPYC and
differ by 2.27e-5 at logits up to 21 on an Intel Xeon, about 9 ulps of the largest logit. REORDER_ULPS leaves room
for deeper models (the stand-ins' attention and MLP sums) and other kernels, and stays far below what a real bug
moves (a wrong mask or position moves logits by 0.1 and more).
"""
from __future__ import annotations

import torch

EPS32 = torch.finfo(torch.float32).eps
REORDER_ULPS = 64
NOISE_RTOL = 1e-5


def reordered(expected: torch.Tensor) -> dict:
    """``assert_close`` tolerances for a float32 result computed in another order than ``expected``."""
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    return dict(rtol=NOISE_RTOL, atol=REORDER_ULPS * EPS32 * max(scale, 1.0))


def assert_reordered_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, **reordered(expected))
