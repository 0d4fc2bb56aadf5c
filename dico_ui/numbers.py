"""Whole numbers from the page and the API, read one way everywhere (a run's lengths, a fork's step and positions).

The page's number boxes send floats (``3.0``), JSON sends numbers; text is not a number here, as in the library's
settings (``dico.settings.Spec.check``). Positions that arrive as JSON object keys (``{"7": "Gill"}``) are keys,
read where the keys are read.
"""
from __future__ import annotations


def whole(value, name: str) -> int:
    """``value`` as the whole number the library expects, or ValueError naming the field."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{name}: must be a whole number, got {value!r}")
