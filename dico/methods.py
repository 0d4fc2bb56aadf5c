"""Which rule decodes each method: the one place that maps a method's name to its rule and settings.

    rule = make_rule("dico", "semi-ar", {"seeds": 4})     # settings as a settings object or a plain dict
"""
from __future__ import annotations

from dico.divide_conquer import DiCo
from dico.field_rules import EntropyBounded, KLAdaptive, Saber, WideInNarrowOut
from dico.rules import FastFactor, FastThreshold, Rule, TopK, Vanilla
from dico.settings import NON_AR, Settings, settings_for

RULES = {"vanilla": Vanilla, "topk": TopK, "fast": FastThreshold, "fast-factor": FastFactor, "dico": DiCo,
         "eb": EntropyBounded, "klass": KLAdaptive, "wino": WideInNarrowOut, "saber": Saber}


def make_rule(method: str, mode: str = NON_AR, settings: Settings | dict | None = None) -> Rule:
    """The rule for a method with its settings (a settings object or a plain dict, checked here)."""
    if not isinstance(settings, Settings):
        settings = settings_for(method, settings)
    elif settings.method != method:
        raise ValueError(f"settings: {type(settings).__name__} are not the settings of method {method!r}")
    if method == "dico":
        return DiCo(settings, mode)          # N seeds depends on the mode
    return RULES[method](settings)
