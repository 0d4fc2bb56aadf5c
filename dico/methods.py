"""Which rule decodes each method: the one place that maps a method's name to its rule and settings, and the one
place that admits a rule to a run (its settings, the run's lengths, what the rule cannot do).

    rule = make_rule("dico", "semi-ar", {"seeds": 4})     # settings as a settings object or a plain dict
    rule = admit("wino", "non-ar", {"cache": "dual"}, 96, 96)  # ValueError: cache: WINO cannot run with a KV cache ...
"""
from __future__ import annotations

from dico.fast_dllm_v2 import FastV2Rule
from dico.rules import Rule
from dico.rules.divide_conquer import DiCo
from dico.rules.editing import JointThreshold
from dico.rules.schedule import PCSampler, Prophet, TopK, Vanilla
from dico.rules.takeback import ReMDM, Saber, TokenToMask, WideInNarrowOut
from dico.rules.threshold import Credit, EntropyBounded, FastFactor, FastThreshold, Hierarchy, KLAdaptive
from dico.sdar import SDARRule
from dico.settings import METHOD_LABELS, NON_AR, Settings, decodes_in, method_id, settings_for

RULES = {"vanilla": Vanilla, "topk": TopK, "fast": FastThreshold, "fast-factor": FastFactor, "dico": DiCo,
         "eb": EntropyBounded, "klass": KLAdaptive, "wino": WideInNarrowOut, "saber": Saber,
         "llada21": JointThreshold, "t2m": TokenToMask, "hierarchy": Hierarchy, "credit": Credit,
         "pc-sampler": PCSampler, "prophet": Prophet, "remdm": ReMDM, "sdar": SDARRule,
         "fast-v2": FastV2Rule}


def make_rule(method: str, mode: str = NON_AR, settings: Settings | dict | None = None) -> Rule:
    """The rule for a method with its settings (a settings object or a plain dict, checked here)."""
    method = method_id(method)
    if not isinstance(settings, Settings):
        settings = settings_for(method, settings)
    elif settings.method != method:
        raise ValueError(f"settings: {type(settings).__name__} are not the settings of method {method!r}")
    if method == "dico":
        return DiCo(settings, mode)          # N seeds depends on the mode
    return RULES[method](settings)


# What a run asks of a rule that a rule may declare it cannot do (``Rule.cannot``): how to tell it is asked for,
# and what to do instead.
ASKED = {"cache": (lambda settings, attention: settings.cache != "none", "set cache to none"),
         "cfg_scale": (lambda settings, attention: bool(settings.cfg_scale), "set cfg_scale to 0"),
         "capture_attention": (lambda settings, attention: attention, "turn attention capture off")}


def admit(method: str, mode: str = NON_AR, settings: Settings | dict | None = None, gen_length: int | None = None,
          width: int | None = None, capture_attention: bool = False) -> Rule:
    """The rule for a run, or ValueError naming the field, before anything runs: the mode (``decodes_in``), its
    settings (``make_rule``), what the rule cannot do (``Rule.cannot``) and, given the lengths, its plan of them
    (LLaDA's steps over the blocks). The loop, a fork's switch of rule and every request parse (page, API, CLI,
    fork) call this one function."""
    method = method_id(method)
    if not decodes_in(method, mode):
        raise ValueError(f"mode: {METHOD_LABELS[method]} decodes the whole response at once (its published code "
                         "ignores the block length); use mode non-ar")
    rule = make_rule(method, mode, settings)
    for name, why in rule.cannot.items():
        asked, instead = ASKED[name]
        if asked(rule.settings, capture_attention):
            raise ValueError(f"{name}: {METHOD_LABELS[method]} cannot run with it ({why}); {instead}")
    if gen_length is not None:
        rule.plan(gen_length, width or gen_length)
    return rule
