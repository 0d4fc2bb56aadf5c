"""Every setting, declared once: a dataclass field whose metadata generates the CLI option, the app's
control, the validation and the settings table of the docs.

    DiCoSettings.from_dict({"tau1": 0.4})       # unknown names and out-of-range values raise ValueError
    for spec in specs(DiCoSettings): ...        # name, default, range, step, help, paper and code values

Adding a setting is one field here plus its use in the rule; nothing else names it. This module is
plain Python (no torch), so the app, the CLI and the figures can read it cheaply.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

# Shared defaults of a decode (the CLI, the app, the benchmark and the golden traces all read these).
MODES = ("non-ar", "semi-ar")
NON_AR, SEMI_AR = MODES
DEFAULT_GEN_LENGTH = 96
DEFAULT_BLOCK_LENGTH = 32
MAX_PROMPT_CHARS = 4000
CACHE_KINDS = ("none", "prefix", "dual", "delayed")
MAX_POST_EDIT_STEPS = 64    # the most passes an editing rule may linger on a full window (LLaDA 2.1 uses 16)


class _Unset:
    """The default of every setting field: "not given". ``Settings.__post_init__`` resolves it (``resolve``), so a
    value given explicitly, even one equal to the declared default, is told apart from one left out."""
    def __repr__(self):
        return "UNSET"


UNSET = _Unset()


def setting(default, help: str, *, range: tuple | None = None, step: float | None = None, choices: tuple = (),
            paper=None, code=None, open_low: bool = False, label: str | None = None):
    """A field with what every consumer needs: ``default`` is the value a setting left out takes (a preset switch
    may give it another, ``resolve``); ``range`` is inclusive (``open_low`` excludes its low end); ``paper`` /
    ``code`` record the paper's and the authors' code values where they differ from the default; ``label`` is the
    app's wording where the name alone would not say it."""
    meta = dict(default=default, help=help, range=range, step=step, choices=tuple(choices), paper=paper, code=code,
                open_low=open_low, label=label)
    return field(default=UNSET, metadata=meta)


@dataclass(frozen=True)
class Spec:
    """One setting as the CLI, the UI and the docs see it."""
    name: str
    type: type
    default: object
    help: str
    range: tuple | None
    step: float | None
    choices: tuple
    paper: object
    code: object
    open_low: bool
    label: str | None = None

    def check(self, value):
        """``value`` converted to the field's type, or ValueError naming the field and the allowed values."""
        if self.type is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{self.name}: must be true or false, got {value!r}")
            return value
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"{self.name}: must be one of {', '.join(map(str, self.choices))}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{self.name}: must be a number, got {value!r}")
        if self.type is int:
            if float(value) != int(value):
                raise ValueError(f"{self.name}: must be a whole number, got {value!r}")
            value = int(value)
        else:
            value = float(value)
        lo, hi = self.range
        if value < lo or value > hi or (self.open_low and value == lo):
            raise ValueError(f"{self.name}: must be in {self.interval()}, got {value!r}")
        return value

    def interval(self) -> str:
        lo, hi = self.range
        return f"{'(' if self.open_low else '['}{lo}, {hi}]"


def specs(cls) -> list[Spec]:
    """The settings of a settings class, in declaration order."""
    out = []
    for f in fields(cls):
        if "help" not in f.metadata:                # not a setting (``Settings._given``)
            continue
        kind = {"bool": bool, "int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else
                                                                        f.type.__name__]
        out.append(Spec(f.name, kind, **f.metadata))
    return out


def resolve(cls, given: dict) -> dict:
    """The preset rule, written once: every setting of ``cls`` from the values ``given`` explicitly. A setting not
    given takes its declared default, or, while a preset switch (``cls.presets``) is on, the preset's value; a
    value given explicitly always wins, even one equal to the default. Values are checked (ValueError naming the
    setting)."""
    checked = {spec.name: spec for spec in specs(cls)}
    given = {name: checked[name].check(value) for name, value in given.items()}
    values = {name: spec.default for name, spec in checked.items()}
    for switch, preset in cls.presets.items():
        if given.get(switch, values[switch]):
            values.update(preset)
    values.update(given)
    return values


def given_in_form(cls, values: dict) -> dict:
    """What a form that shows every setting gave (the page's controls): it cannot tell a value left alone from one
    typed, so while a preset switch is on, a value equal to its declared default counts as not given."""
    if not any(values.get(switch) for switch in cls.presets):
        return dict(values)
    defaults = {spec.name: spec.default for spec in specs(cls)}
    return {k: v for k, v in values.items() if k in cls.presets or v != defaults.get(k)}


class Settings:
    """Base of every method's settings: checked on construction, one rule for presets (``resolve``) whichever way
    they are built: directly (``DiCoSettings(authors_code=True, seeds=0)``), from a plain dict (``from_dict``, what
    the CLI, the app, the API and ``dico.generate`` use) or by ``dataclasses.replace`` (the values it changes count
    as given, the others stay given or not as they were).

    ``presets`` maps a switch (a bool setting) to the values it stands for: with the switch on, every setting
    not given explicitly takes the preset's value.
    """
    presets = {}        # switch name -> {setting: value}; see DiCoSettings

    def __post_init__(self):
        values = {spec.name: getattr(self, spec.name) for spec in specs(type(self))}
        if self._given is None:                     # built directly or from a dict: what was passed is given
            given = {k: v for k, v in values.items() if v is not UNSET}
        else:                                       # dataclasses.replace passed every value: the changed ones
            before = dict(self._given)              # are given now
            was = resolve(type(self), before)
            given = {**before, **{k: v for k, v in values.items() if v is not UNSET and v != was[k]}}
        for name, value in resolve(type(self), given).items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_given", tuple(sorted(given.items())))

    @classmethod
    def from_dict(cls, values: dict | None = None):
        values = dict(values or {})
        known = cls.names()
        unknown = [k for k in values if k not in known]
        if unknown:
            what = f"known: {', '.join(known)}" if known else "it takes no settings"
            raise ValueError(f"{unknown[0]}: not a setting of {cls.method!r} ({what})")
        return cls(**values)

    @classmethod
    def names(cls) -> list[str]:
        """The names of the settings, in declaration order."""
        return [spec.name for spec in specs(cls)]

    def given(self) -> dict:
        """The settings given explicitly (the rest came from defaults or a preset)."""
        return dict(self._given)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.names()}


# ----------------------------------------------------------------------------- the methods' settings

@dataclass(frozen=True)
class SamplingSettings(Settings):
    """What every method shares: how one step's logits become predictions and confidences (``dico.sampling``, the
    options of LLaDA's and Dream's own samplers; greedy and deterministic by default) and which positions a pass
    computes (``dico.cache``, the KV cache; none by default)."""
    temperature: float = setting(0.0, "sample each prediction at this temperature (Gumbel noise); 0 takes the argmax",
                                 range=(0.0, 5.0), step=0.05)
    top_p: float = setting(1.0, "sample only from the smallest set of tokens whose probability reaches top_p "
                           "(Dream; 1 keeps all)", range=(0.0, 1.0), step=0.01, open_low=True)
    top_k: int = setting(0, "sample only from the top_k most likely tokens (Dream; 0 keeps all)", range=(0, 1000000),
                         step=1)
    cfg_scale: float = setting(0.0, "classifier-free guidance (LLaDA): logits = u + (cfg_scale + 1)(c - u), u from "
                               "a second pass with the prompt masked; 0 is off", range=(0.0, 10.0), step=0.1)
    random_seed: int = setting(0, "random seed of the sampling (a run is reproducible for a seed)",
                               range=(0, 2 ** 31 - 1), step=1)
    mask_in_softmax: bool = setting(False, "keep the mask token's logit in the softmax of the confidence, as LLaDA's, "
                                    "Fast-dLLM's and the DiCo authors' code do (it is never predicted either way)",
                                    code=True)
    ban_eos: bool = setting(False, "never predict an end-of-text token (LLaDA's logits_eos_inf)")
    eos_last: bool = setting(False, "give end-of-text predictions confidence 0, so they are committed last (LLaDA's "
                             "confidence_eos_eot_inf)")
    cache: str = setting("none", "KV cache: none (every pass computes every position); prefix / dual (Fast-dLLM: "
                         "after a full pass at each block start, compute the block and what follows it / the block "
                         "only, against cached keys and values; non-AR: the prompt is cached); delayed (dKV-Cache: a "
                         "decoded token's keys and values are cached from the pass after its commit, masked positions "
                         "are computed every pass)", choices=CACHE_KINDS)
    cache_refresh: int = setting(0, "passes between full refreshes of the cache (1: every pass, exactly as no cache; "
                                 "0: only when a block starts)", range=(0, 100000), step=1)
    cache_prompt: bool = setting(True, "keep the prompt's keys and values between refreshes, as Fast-dLLM and "
                                 "dKV-Cache do; off: every pass computes the prompt too, so it reads the answer "
                                 "written so far (answers that copy choices from the prompt need that)")
    # The settings given explicitly, as (name, value) pairs, kept so that dataclasses.replace keeps the preset rule;
    # not a setting (no metadata), never compared, never written (``to_dict``).
    _given: tuple | None = field(default=None, compare=False, repr=False)


SAMPLING_FIELDS = tuple(SamplingSettings.names())


def own_specs(cls) -> list[Spec]:
    """A method's own settings, without the sampling options every method shares (show those once)."""
    return [s for s in specs(cls) if s.name not in SAMPLING_FIELDS]


def sampling_specs() -> list[Spec]:
    """The sampling options every method shares (``SamplingSettings``)."""
    return specs(SamplingSettings)


@dataclass(frozen=True)
class VanillaSettings(SamplingSettings):
    """LLaDA's low-confidence remasking, one token a step; with ``steps`` and ``remasking``, LLaDA's and Dream's
    own samplers."""
    method = "vanilla"
    steps: int = setting(0, "forward passes for the whole answer, split evenly over the semi-AR blocks as LLaDA's "
                         "generate.py does; 0: one token a step (steps = gen_length)", range=(0, 100000), step=1)
    remasking: str = setting("low_confidence", "which masked positions a step commits: low_confidence (LLaDA), "
                             "random (LLaDA), maskgit_plus, topk_margin, entropy, origin (Dream's alg)",
                             choices=("low_confidence", "random", "maskgit_plus", "topk_margin", "entropy", "origin"))


@dataclass(frozen=True)
class TopKSettings(SamplingSettings):
    """Naive parallel decoding: the k most confident masked positions of the window each step (the commits of the
    paper's Observation I; LLaDA's low-confidence sampler with steps = gen_length / k)."""
    method = "topk"
    k: int = setting(4, "tokens committed each step: the k most confident masked positions of the window (fewer "
                     "at the end of a window); 1 is Vanilla", range=(1, 4096), step=1)


@dataclass(frozen=True)
class FastSettings(SamplingSettings):
    """Fast-dLLM's threshold rule."""
    method = "fast"
    threshold: float = setting(0.95, "commit every masked position whose confidence is above this",
                               range=(0.0, 1.0), step=0.01, open_low=True, code=0.9)


@dataclass(frozen=True)
class FastFactorSettings(SamplingSettings):
    """Fast-dLLM's factor rule."""
    method = "fast-factor"
    factor: float = setting(1.0, "f in (k + 1)(1 - c_k) < f: commit the top k positions", range=(0.0, 10.0),
                            step=0.1, open_low=True)


@dataclass(frozen=True)
class DiCoSettings(SamplingSettings):
    """Paper defaults (section 5.1); T_max, M and the 0.98 shortcut from the authors' code (docs/decoding.md §9)."""
    method = "dico"
    authors_code: bool = setting(False, "start from the DiCo authors' release (dico.settings.AUTHORS_CODE: every "
                                 "setting whose authors' code value is recorded); settings given explicitly win",
                                 label="as the authors' code decodes")
    alpha: float = setting(0.5, "trajectory guidance slope: w_min = min(1, beta + alpha * unmasked fraction)",
                           range=(0.0, 1.0), step=0.01, open_low=True)
    beta: float = setting(0.05, "trajectory guidance floor at the window end before anything is decoded",
                          range=(0.0, 1.0), step=0.01, open_low=True)
    tau1: float = setting(0.3, "Divide: a seed or cluster member needs guided confidence >= tau1",
                          range=(0.0, 1.0), step=0.01, open_low=True)
    tau2: float = setting(0.6, "cluster confidence that ends Divide; Conquer grows clusters above it, stops below",
                          range=(0.0, 1.0), step=0.01, open_low=True)
    tau3: float = setting(3.0, "Finalize: commit every masked position whose top1 - top2 logit margin exceeds this",
                          range=(0.0, 50.0), step=0.1, open_low=True)
    r_gate: float = setting(0.8, "after Conquer, go to Finalize once this fraction of the window is decoded",
                            range=(0.0, 1.0), step=0.01, open_low=True)
    seeds: int = setting(0, "N, the most seeds per Divide step; 0: the paper's 8 in non-AR, 4 in semi-AR",
                         range=(0, 64), step=1, paper="8 non-AR / 4 semi-AR", code=4)
    t_max: int = setting(10, "most Divide steps per round (T_max)", range=(1, 100), step=1)
    gap: int = setting(2, "M: failing positions in a row a growing cluster may step over", range=(0, 32), step=1)
    shortcut: float = setting(0.98, "Conquer and Finalize commit any position above this confidence at once",
                              range=(0.0, 1.0), step=0.01, open_low=True)
    divide_shortcut: bool = setting(False, "Divide commits every masked window position above the shortcut beside "
                                    "its seeds (beyond the paper; the authors' code does not)")
    guidance: bool = setting(True, "trajectory guidance (TG): favour positions near the start of what is masked",
                             code="off in DiCoConfig(), on in run_dico.sh")
    guidance_origin: str = setting("first-masked", "measure guidance from the first masked position (the code) "
                                   "or the window start (the paper)", choices=("first-masked", "window-start"),
                                   paper="window-start")
    logit_margin: bool = setting(True, "Finalize by logit margin > tau3 (off: top-1 confidence only)")
    conquer: str = setting("factor", "Conquer's rule: factor (adaptive per cluster) or a fixed threshold",
                           choices=("factor", "threshold"))
    conquer_threshold: float = setting(0.9, "Conquer's fixed threshold when the Conquer rule is 'threshold'",
                                       range=(0.0, 1.0), step=0.01, open_low=True)
    # Where the DiCo authors' code does otherwise (docs/decoding.md §6.6): reachable, off by default.
    grow_through_commits: bool = setting(False, "Conquer grows clusters through positions committed in the same "
                                         "step (walls only where confidence <= tau2 before the commit)", code=True)
    conquer_fallback: str = setting("clusters", "when no cluster position qualifies, Conquer commits the top-1 inside "
                                    "the clusters, or (window) the window's top-1 if its confidence >= tau2, else "
                                    "nothing and the next phase takes the step", choices=("clusters", "window"),
                                    code="window")
    merge_after_conquer: bool = setting(False, "Conquer bounds a cluster's left growth by the previous cluster as it "
                                        "was before the step, then merges touching clusters", code=True)
    short_right_growth: bool = setting(False, "Conquer's right-hand growth stops one position short of the next "
                                       "cluster and of the window end (the authors' off-by-one)", code=True)

    def seeds_for(self, mode: str) -> int:
        """N in effect: the setting, or the paper's default for the mode."""
        return self.seeds or (4 if mode == SEMI_AR else 8)


@dataclass(frozen=True)
class EBSettings(SamplingSettings):
    """EB-Sampler (entropy-bounded unmasking; the DiCo release's ``entropy_bound`` path, docs/decoding.md §7.1)."""
    method = "eb"
    gamma: float = setting(0.1, "commit the most confident masked positions of the window, in order, while the sum of "
                           "their entropies minus the largest stays <= gamma (nats); at least one a step",
                           range=(0.0, 100.0), step=0.01)


@dataclass(frozen=True)
class KLASSSettings(SamplingSettings):
    """KLASS (KL-adaptive stability sampling; its authors' ``stable_confident_decode``, docs/decoding.md §7.2)."""
    method = "klass"
    gsm8k_script: bool = setting(False, "start from the KLASS authors' GSM8K script (confidence 0.6, KL 0.015); "
                                 "settings given explicitly win", label="as KLASS's GSM8K script")
    confidence: float = setting(0.9, "a masked position is ready when its confidence is above this ...",
                                range=(0.0, 1.0), step=0.01, code="0.6 in its GSM8K script")
    kl: float = setting(0.01, "... and its last `history` KL divergences from the previous pass are all below this",
                        range=(0.0, 10.0), step=0.001, open_low=True, code="0.015 in its GSM8K script")
    history: int = setting(2, "how many past passes' KL divergences must be below `kl`", range=(1, 16), step=1)
    steps: int = setting(0, "when nothing is ready: LLaDA's schedule over this many passes for the whole answer, "
                         "split evenly over the blocks; 0: one token a step (steps = gen_length)",
                         range=(0, 100000), step=1)
    reset_each_block: bool = setting(False, "decode as the DiCo release's port does: forget the KL history when a "
                                     "block starts and score confidences in float32 (the authors' code keeps the "
                                     "history and scores in float64)")


@dataclass(frozen=True)
class WINOSettings(SamplingSettings):
    """WINO (wide-in, narrow-out; its authors' ``decoding_wino``, docs/decoding.md §7.3): drafts wide, verifies
    with a mirrored block in the same pass and takes back what the verification does not confirm."""
    method = "wino"
    threshold: float = setting(0.6, "wide in: commit masked positions of the window whose confidence is above this",
                               range=(0.0, 1.0), step=0.01)
    keep: float = setting(0.9, "narrow out: take back a token committed in an earlier pass when the mirrored "
                          "position (which cannot see it) gives it a probability below this", range=(0.0, 1.0),
                          step=0.01)


@dataclass(frozen=True)
class SaberSettings(SamplingSettings):
    """Saber (its authors' ``generate_with_saber``, docs/decoding.md §7.4): commit above the running mean of the
    committed tokens' confidences, take back the tokens whose confidence fell most."""
    method = "saber"
    published_code: bool = setting(True, "start from Saber's published code: the mask token's logit kept in the "
                                   "softmax of the confidence (mask_in_softmax), so it decodes step for step as that "
                                   "code; settings given explicitly win", label="as Saber's published code")
    n: int = setting(2, "at least n commits a pass (the top n when fewer pass the mean); takes back "
                     "max(n // 2, ceil(commits / 8)) tokens a pass", range=(1, 64), step=1)


@dataclass(frozen=True)
class EditingSettings(SamplingSettings):
    """What LLaDA 2.1's joint threshold and token-to-mask share: a threshold to fill masks, one to doubt written
    tokens, and a budget of passes over a full window (``speed_mode``: SGLang's defaults)."""
    speed_mode: bool = setting(False, "start from LLaDA 2.1's speed mode (threshold 0.5, edit_threshold 0.0: full "
                               "editing, SGLang's defaults); settings given explicitly win", label="speed mode")
    threshold: float = setting(0.7, "mask-to-token: commit every masked position of the window whose confidence is "
                               "above this (none: the most confident one)", range=(0.0, 1.0), step=0.01,
                               code="0.5 in SGLang's defaults (speed mode)")
    edit_threshold: float = setting(0.5, "token-to-token: replace a written token of the window when the model "
                                    "predicts another token there with a probability above this",
                                    range=(0.0, 1.0), step=0.01, code="0.0 in SGLang's defaults (speed mode)")
    max_post_edit_steps: int = setting(16, "passes that may still edit a window once it has no mask; a pass that "
                                       "would write nothing ends the window sooner",
                                       range=(0, MAX_POST_EDIT_STEPS), step=1)


@dataclass(frozen=True)
class LLaDA21Settings(EditingSettings):
    """LLaDA 2.1's joint threshold (SGLang's ``JointThreshold``, docs/decoding.md §7.6): fill masks above one
    threshold (mask-to-token) and replace written tokens of the window where the model now predicts another token
    above a second (token-to-token), then keep editing a full window for up to ``max_post_edit_steps`` passes.
    ``model_card``: as LLaDA 2.1's own generate instead (§11.6)."""
    method = "llada21"
    model_card: bool = setting(False, "start from LLaDA 2.1's own generate (its model card's modeling_llada2_moe.py): "
                               "threshold 0.95, edit_threshold 0.9, the mask token's logit kept in the softmax of "
                               "the confidence (mask_in_softmax), and a window ends with its last post-edit pass "
                               "instead of spending one more that writes nothing (SGLang's); settings given "
                               "explicitly win", label="as LLaDA 2.1's generate")


@dataclass(frozen=True)
class T2MSettings(EditingSettings):
    """Token-to-mask: LLaDA 2.1's signal with the doubted token taken back to the mask instead of replaced ("remask,
    don't replace", docs/decoding.md §7.7), so the next pass predicts it again with the position masked."""
    method = "t2m"


@dataclass(frozen=True)
class HierarchySettings(SamplingSettings):
    """dInfer's hierarchical decoder (``HierarchyDecoder``, docs/decoding.md §7.8): one token from every run of
    adjacent masks that is sure enough, so tokens committed together lie apart."""
    method = "hierarchy"
    threshold: float = setting(0.9, "commit every masked position of the window whose confidence is above this",
                               range=(0.0, 1.0), step=0.01)
    low_threshold: float = setting(0.3, "and the most confident position of every run of adjacent masked positions, "
                                   "when its confidence is above this (always at least the window's best)",
                                   range=(0.0, 1.0), step=0.01, code="0.4 as its class default; 0.3 in its runs")


@dataclass(frozen=True)
class CreditSettings(SamplingSettings):
    """dInfer's credit threshold decoder (``CreditThresholdParallelDecoder``, docs/decoding.md §7.11): a token the
    model keeps predicting at a masked position earns credit there, added to its logit, so a steady prediction
    crosses the threshold sooner than one that wavers."""
    method = "credit"
    threshold: float = setting(0.9, "commit every masked position of the window whose confidence, credit included, "
                               "is at least this (none: the most confident one, and any within 1e-5 of it)",
                               range=(0.0, 1.0), step=0.01)
    credit_alpha: float = setting(0.7, "how much credit counts: each token's logit gains credit_alpha x "
                                  "log(1 + its credit)", range=(0.0, 10.0), step=0.05)
    boost_gamma: float = setting(0.2, "each pass, a masked position's most likely token gains credit: its "
                                 "probability to this power", range=(0.0, 10.0), step=0.05)
    decay_beta: float = setting(0.8, "every credit of the window is multiplied by this each pass after its first",
                                range=(0.0, 1.0), step=0.05)


@dataclass(frozen=True)
class PCSamplerSettings(SamplingSettings):
    """PC-Sampler as d2Cache runs it (``configs/generation/pc_sampler.yaml``, docs/decoding.md §7.12): the
    confidence calibrated by how common the predicted token is in the model's training text, so frequent, trivial
    tokens (end-of-text, "the") stop winning the early passes; the top tokens a pass by that score."""
    method = "pc-sampler"
    num_transfer_tokens: int = setting(1, "tokens committed a pass (the highest calibrated scores of the window)",
                                       range=(1, 4096), step=1)
    clip_alpha: float = setting(10.0, "the calibrated score, -confidence x log(frequency of the predicted token), is "
                                "capped at this", range=(0.0, 1000.0), step=0.5)
    lambd: float = setting(0.0, "PC-Sampler's own position weight: the capped score times exp(-lambd x i), i the "
                           "position's offset in the window (0: none, as d2Cache runs it)", range=(0.0, 100.0),
                           step=0.05, code="0.25 in PC-Sampler's own scripts; d2Cache has no position weight")


@dataclass(frozen=True)
class ProphetSettings(SamplingSettings):
    """Prophet's early commit (``generate_earlyexit.py``, docs/decoding.md §7.9): LLaDA's low-confidence sampler
    until the answer's top-2 logit gap is wide enough for the progress made, then every mask at once."""
    method = "prophet"
    steps: int = setting(0, "LLaDA's schedule: forward passes for the whole answer, split evenly over the blocks; "
                         "0: one token a step (steps = gen_length)", range=(0, 100000), step=1)
    early: float = setting(7.5, "commit everything left when the answer's mean top-2 logit gap reaches this in the "
                           "first third of the steps ...", range=(0.0, 1000.0), step=0.5)
    mid: float = setting(5.0, "... this in the second third ...", range=(0.0, 1000.0), step=0.5)
    late: float = setting(2.5, "... and this in the last third", range=(0.0, 1000.0), step=0.5)
    answer_start: int = setting(0, "the response offset where the watched answer starts (its authors force "
                                "\"The answer is\" near the end of a GSM8K response and watch after it; the "
                                "embedded model's answers start at 0)", range=(0, 4095), step=1)
    answer_length: int = setting(5, "how many positions from answer_start the gap is averaged over (5 in its code)",
                                 range=(1, 4096), step=1)


@dataclass(frozen=True)
class ReMDMSettings(SamplingSettings):
    """ReMDM as Saber's repository runs it on LLaDA (``generate_with_remdm``, docs/decoding.md §7.10): top-k
    commits to a share of the answer, then loops that take the least likely tokens back and commit again, then
    top-k to the end. Non-AR only (its code ignores the block length)."""
    method = "remdm"
    init_unmask_ratio: float = setting(0.875, "the share of the answer committed (unmask_k a pass) before the "
                                       "re-masking loops; gen_length x this must be a whole multiple of unmask_k",
                                       range=(0.0, 1.0), step=0.005)
    unmask_k: int = setting(1, "tokens committed a pass, and taken back a loop", range=(1, 4096), step=1)
    loop_steps: int = setting(32, "re-masking loops, two passes each: take back the unmask_k written tokens the "
                              "model now finds least likely, then commit the unmask_k most confident masks",
                              range=(0, 100000), step=1)


@dataclass(frozen=True)
class SDARSettings(SamplingSettings):
    """SDAR's ``block_diffusion_generate`` (JetAstra/SDAR ``generate.py``, docs/decoding.md §11.4): every masked
    position of the block drawn from the model's distribution at temperature 1 with a seeded generator (the shared
    ``random_seed``), then a share of the block committed a pass by its remasking strategy. Its draw replaces the
    shared temperature, top_p and top_k."""
    method = "sdar"
    remasking: str = setting("low_confidence_dynamic", "which drawn tokens a pass commits: low_confidence_dynamic "
                             "(every one whose probability is above threshold when they are at least the pass's "
                             "share, else the share with the highest probabilities), low_confidence_static (that "
                             "share only) or sequential (the share left to right from the first mask)",
                             choices=("low_confidence_dynamic", "low_confidence_static", "sequential"))
    threshold: float = setting(0.85, "low_confidence_dynamic: commit every drawn token whose probability is above "
                               "this", range=(0.0, 1.0), step=0.01)
    steps: int = setting(4, "denoising passes a block: the block's positions split evenly over them (the first "
                         "passes take one more when they do not divide)", range=(1, 4096), step=1,
                         code="4 in generate.py's command line; 8 as block_diffusion_generate's default")
    llada20: bool = setting(False, "LLaDA 2.0's own generate (its model card's modeling_llada2_moe.py), the same "
                            "procedure with greedy tokens: the argmax and its probability instead of a draw, "
                            "threshold 0.95, 32 steps a block, the mask token's logit kept in the softmax "
                            "(mask_in_softmax); remasking stays low_confidence_dynamic; settings given explicitly win",
                            label="as LLaDA 2.0's generate")


@dataclass(frozen=True)
class FastV2Settings(SamplingSettings):
    """Fast-dLLM v2's own decoding (its model card's ``generate`` and NVlabs/Fast-dLLM ``v2/``, docs/decoding.md
    §11.5), on a Fast-dLLM v2 model only: a block's first token from the pass that stored the block before it, then
    the block a sub-block at a time, each pass committing the sub-block's masked positions above ``threshold`` and
    always its most confident one, with its sub-block cache inside the block. Defaults: its chat script's
    (``v2/run_chatbot.py``: threshold 0.9, sub-blocks of 8), with the sub-block cache on, which that script leaves off
    (its generate's ``use_block_cache`` default)."""
    method = "fast-v2"
    published_code: bool = setting(True, "start from Fast-dLLM v2's generate: the finished blocks' keys and values "
                                   "kept (cache prefix, on a block diffusion model) and the mask token's logit kept "
                                   "in the softmax of the confidence (mask_in_softmax); settings given explicitly win",
                                   label="as Fast-dLLM v2's generate")
    threshold: float = setting(0.9, "commit every masked position of the sub-block whose confidence is above this; "
                               "the most confident one is committed in any case", range=(0.0, 1.0), step=0.01)
    sub_block: int = setting(8, "positions in a sub-block (its small_block_size): a block is decoded one sub-block "
                             "at a time, left to right; must divide the model's block", range=(1, 4096), step=1)
    block_cache: bool = setting(True, "its sub-block cache (use_block_cache): a pass over the whole block keeps the "
                                "block's keys and values, and while a sub-block's first position is written each pass "
                                "computes that sub-block only, overwriting its own entries and reading the rest as "
                                "kept (approximate, as its generate); off: every pass computes the whole block "
                                "(exact)", label="sub-block cache", code=False)


def _authors_code() -> dict:
    """The DiCo settings with which the project decodes as the authors' release does (docs/decoding.md §6.6, "Where
    the authors' code does otherwise"): every ``code=`` value recorded in DiCoSettings, so the preset cannot drift from
    the declarations. TG's code value is prose, decided here: on, as the release's run_dico.sh (which produced
    the paper's numbers) runs it, though its DiCoConfig() leaves it off. Guidance measured from the first masked
    position is the code's form and already the default; N = 4 is the code's default and run_dico.sh's, in both
    modes."""
    decided = {"guidance": True}
    preset = {s.name: s.code for s in specs(DiCoSettings) if s.code is not None and s.name not in decided}
    return {**preset, **decided}


AUTHORS_CODE = _authors_code()
DiCoSettings.presets = {"authors_code": AUTHORS_CODE}
DiCoSettings.from_dict(AUTHORS_CODE)        # every recorded code value is a value the setting accepts

KLASSSettings.presets = {"gsm8k_script": {"confidence": 0.6, "kl": 0.015}}
EditingSettings.presets = {"speed_mode": {"threshold": 0.5, "edit_threshold": 0.0}}
LLaDA21Settings.presets = {**EditingSettings.presets,                  # docs/decoding.md §11.6
                           "model_card": {"threshold": 0.95, "edit_threshold": 0.9, "mask_in_softmax": True}}
SDARSettings.presets = {"llada20": {"threshold": 0.95, "steps": 32, "mask_in_softmax": True}}    # §11.6
SaberSettings.presets = {"published_code": {"mask_in_softmax": True}}     # on by default (docs/decoding.md §7.4)
FastV2Settings.presets = {"published_code": {"mask_in_softmax": True, "cache": "prefix"}}  # docs/decoding.md §11.5

SETTINGS = {cls.method: cls for cls in (VanillaSettings, TopKSettings, FastSettings, FastFactorSettings, DiCoSettings,
                                        EBSettings, KLASSSettings, WINOSettings, SaberSettings, LLaDA21Settings,
                                        T2MSettings, HierarchySettings, CreditSettings, PCSamplerSettings,
                                        ProphetSettings, ReMDMSettings, SDARSettings, FastV2Settings)}
METHODS = tuple(SETTINGS)
METHOD_LABELS = {"vanilla": "Vanilla", "topk": "Top-k per step", "fast": "Fast-dLLM",
                 "fast-factor": "Fast-dLLM (factor)",
                 "dico": "DiCo", "eb": "EB-Sampler", "klass": "KLASS", "wino": "WINO", "saber": "Saber",
                 "llada21": "LLaDA 2.1", "t2m": "Token-to-mask", "hierarchy": "dInfer hierarchy",
                 "credit": "dInfer credit", "pc-sampler": "PC-Sampler",
                 "prophet": "Prophet", "remdm": "ReMDM", "sdar": "SDAR",
                 "fast-v2": "Fast-dLLM v2"}
# Method ids are spelled with hyphens, as modes are; an id's old spelling still names it wherever a user or a file
# does (a trace, the page's and the API's lanes, the command lines, a bench's result rows), through ``method_id``.
METHOD_ALIASES = {"pc_sampler": "pc-sampler"}


def method_id(name):
    """A method's id as spelled today: an old spelling (``METHOD_ALIASES``) mapped, anything else as given."""
    return METHOD_ALIASES.get(name, name) if isinstance(name, str) else name


# The decoders that may take committed tokens back (a step's ``remasked``); a run of them ends at the pass limit.
REVISING = ("wino", "saber", "t2m", "remdm")
# The decoders whose published code decodes the whole response at once (a semi-AR request is refused).
NON_AR_ONLY = ("remdm",)


def decodes_in(method: str, mode: str) -> bool:
    """Whether a method decodes in a mode (its published code's), so that a bench's matrix leaves out the rest."""
    return not (mode == SEMI_AR and method in NON_AR_ONLY)


# The decoders that may replace written tokens with others (a step's ``edited``, docs/decoding.md §3.2).
EDITING = ("llada21",)
# A run stops after PASS_LIMIT x gen_length passes, whatever its rule does (trace.limit_reached), plus the passes
# an editing rule may linger on each full window (``Rule.lingering``).
PASS_LIMIT = 4

# The paper's ablations (section 5.3) as variants of DiCo's settings: label -> changed settings.
ABLATIONS = {
    "tg": {"DiCo": {}, "DiCo w/o TG": {"guidance": False}},
    "margin": {"DiCo": {}, "DiCo w/o logit margin": {"logit_margin": False}},
    "seeds": {f"DiCo N={n}": {"seeds": n} for n in (2, 4, 6, 8, 10)},
    "conquer": {"DiCo (factor Conquer)": {},
                "DiCo (threshold 0.9 Conquer)": {"conquer": "threshold", "conquer_threshold": 0.9}},
    # where the authors' code departs from the paper, one departure at a time: each of the release's Conquer choices
    # on alone, the Divide shortcut (beyond the paper) alone, and the whole preset with and without it
    "authors": {"DiCo": {},
                **{f"DiCo + {name}" + ("" if value is True else f"={value}"): {name: value}
                   for name, value in AUTHORS_CODE.items()
                   if name in ("grow_through_commits", "conquer_fallback", "merge_after_conquer",
                               "short_right_growth")},
                "DiCo + divide_shortcut": {"divide_shortcut": True},
                "DiCo (authors' code)": {"authors_code": True},
                "DiCo (authors' code) + divide_shortcut": {"authors_code": True, "divide_shortcut": True}},
}

# DiCo's main knob on the frontier (python -m dico.bench frontier): tau2, the cluster confidence that ends Divide and
# stops Conquer; low commits more per pass, high waits for surer clusters. On the embedded model it moved passes most
# (word, 10 items, gen 96 semi-AR: 14.8 at 0.3, 21.7 at 0.6, 28.2 at 0.9), seeds, tau3 and the shortcut by 1.5 at most.
DICO_KNOB = ("tau2", (0.3, 0.45, 0.6, 0.75, 0.9))


def settings_for(method: str, values: dict | None = None) -> Settings:
    """The checked settings of ``method`` from a plain dict (the app's and the CLI's one hand-over)."""
    method = method_id(method)
    if method not in SETTINGS:
        raise ValueError(f"method: unknown method {method!r}; choose from {', '.join(METHODS)}")
    return SETTINGS[method].from_dict(values)


def settings_table(what) -> str:
    """A Markdown table of settings (README, the app's About text): ``what`` is a method name, a settings class
    or a list of ``Spec``s."""
    items = specs(SETTINGS[what]) if isinstance(what, str) else specs(what) if isinstance(what, type) else what
    rows = ["| setting | default | allowed | paper / authors' code | what it does |", "|---|---|---|---|---|"]
    for s in items:
        allowed = " / ".join(s.choices) if s.choices else ("on / off" if s.type is bool else s.interval())
        origin = "; ".join(f"{k}: {v}" for k, v in (("paper", s.paper), ("code", s.code)) if v is not None) or "same"
        rows.append(f"| `{s.name}` | {s.default} | {allowed} | {origin} | {s.help} |")
    return "\n".join(rows)
