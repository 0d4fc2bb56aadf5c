"""One run request from the page or the API, checked by the library before any forward pass.

Settings travel as one dict per method (``{"dico": {...}, "fast": {...}}``): the page's controls are
generated from ``dico.settings.specs`` (``CONTROLS``) and folded back into that dict here, checked by the
same ``Spec.check`` the library uses, so a control, its range and its validation cannot disagree. The lanes
(``methods``: per lane a method name or ``{"method", "label", "settings"}``, ``dico.lanes``) start from their
method's dict, their own settings over it.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field

from dico.embedded import scope
from dico.lanes import Lane, parse_lanes
from dico.loop import check_inputs, check_request
from dico.methods import make_rule
from dico.rules import plan
from dico.models import EMBEDDED_NAME, MaskPredictor, train_log
from dico.settings import DEFAULT_BLOCK_LENGTH, DEFAULT_GEN_LENGTH, METHODS, NON_AR, SEMI_AR, SETTINGS, own_specs, \
    sampling_specs, settings_for, specs
from dico_ui.limits import LIMITS
from dico_ui.models import get_predictor
from dico_ui.render import label

MAX_GEN_LENGTH = LIMITS.max_gen_length      # the page's limit: a public CPU Space should answer in seconds
# The lesson on one page: naive top-k (4 tokens a step) breaks answers whose tokens depend on each other; Vanilla,
# Fast-dLLM and DiCo keep them whole, at different numbers of passes.
TOPK4 = {"method": "topk", "settings": {"k": 4}}
DEFAULT_METHODS = ("vanilla", TOPK4, "fast", "dico")
SHARED = "sampling"              # the group of the sampling options every method shares (shown once)
# Every generated settings control, in page order: (group, Spec); a group is SHARED or a method id.
CONTROLS = [(SHARED, spec) for spec in sampling_specs()] + \
    [(method, spec) for method in METHODS for spec in own_specs(SETTINGS[method])]


@dataclass
class RunRequest:
    prompt: str
    model: str = EMBEDDED_NAME
    mode: str = NON_AR
    gen_length: int = DEFAULT_GEN_LENGTH
    block_length: int | None = DEFAULT_BLOCK_LENGTH
    # per lane: a method or a lane's dict (a copy: the default lanes' dicts are shared constants)
    methods: list = field(default_factory=lambda: copy.deepcopy(list(DEFAULT_METHODS)))
    settings: dict[str, dict] = field(default_factory=dict)     # method -> its lanes' settings (plain values)
    capture_attention: bool = True

    def lanes(self) -> list[Lane]:
        """The race's lanes, checked (ValueError naming ``methods[i]`` and the field)."""
        return parse_lanes(self.methods, self.settings, where="methods")

    def options(self, lane: Lane) -> dict:
        """Keywords of ``dico.decode`` for one lane of this request."""
        return dict(mode=self.mode, gen_length=self.gen_length,
                    block_length=self.block_length if self.mode == SEMI_AR else None,
                    settings=lane.settings, capture_attention=self.capture_attention, label=lane.label)


def whole(value, name: str):
    """A number typed into the page (a float) as the whole number the library expects; a clear message if not."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{name}: must be a whole number, got {value!r}")


def settings_from_controls(methods: list, values) -> dict[str, dict]:
    """The values of the generated controls (``CONTROLS`` order) as one checked dict per chosen method (a lane's
    dict counts as its method); the shared sampling options go to every chosen method."""
    methods = [m.get("method") if isinstance(m, dict) else m for m in methods]
    methods = [m for m in dict.fromkeys(methods) if isinstance(m, str) and m in SETTINGS]
    values = list(values)
    if len(values) != len(CONTROLS):
        raise ValueError(f"settings: expected {len(CONTROLS)} values, got {len(values)}")
    out: dict[str, dict] = {m: {} for m in methods}
    for (group, spec), value in zip(CONTROLS, values):
        if group != SHARED and group not in methods:
            continue
        try:
            checked = spec.check(value)
        except ValueError as exc:
            raise ValueError(f"{group_label(group)} setting {exc}") from None
        for method in (methods if group == SHARED else [group]):
            out[method][spec.name] = checked
    return {method: given(method, values) for method, values in out.items()}


def given(method: str, values: dict) -> dict:
    """With a preset switch on (``Settings.presets``), a control left at its default counts as not given, so the
    preset fills it and the controls the user changed win, as options given beside it do on the command line."""
    cls = SETTINGS[method]
    if not any(values.get(switch) for switch in cls.presets):
        return values
    defaults = {spec.name: spec.default for spec in specs(cls)}
    return {k: v for k, v in values.items() if k in cls.presets or v != defaults[k]}


def group_label(group: str) -> str:
    return "Sampling and KV cache (every method)" if group == SHARED else label(group)


def settings_from_json(settings) -> dict[str, dict]:
    """The API's settings: one JSON object (or dict) ``{"fast": {"threshold": 0.9}, ...}``; missing ones keep
    their defaults."""
    if settings in (None, ""):
        return {}
    if isinstance(settings, str):
        try:
            settings = json.loads(settings)
        except json.JSONDecodeError as exc:
            raise ValueError(f"settings: not valid JSON ({exc}); expected an object like "
                             '{"fast": {"threshold": 0.9}}') from None
    if not isinstance(settings, dict) or not all(isinstance(v, dict) for v in settings.values()):
        raise ValueError('settings: must be an object of objects, one per method, like {"fast": {"threshold": 0.9}}')
    for method, values in settings.items():
        settings_for(method, values)                  # unknown methods and settings, ranges: named errors
    return {m: dict(v) for m, v in settings.items()}


def build_request(prompt, model, mode, gen_length, block_length, methods, settings, capture_attention) -> RunRequest:
    """A request from raw page or API values: numbers made whole, the lanes checked, in the order given."""
    methods = [methods] if isinstance(methods, (str, dict)) else list(methods or [])
    parse_lanes(methods, settings, where="methods")
    gen_length = whole(gen_length, "gen_length")
    if not 1 <= gen_length <= MAX_GEN_LENGTH:
        raise ValueError(f"gen_length: must be in 1..{MAX_GEN_LENGTH} here, got {gen_length}")
    block_length = whole(block_length, "block_length") if mode == SEMI_AR else None
    return RunRequest(prompt=prompt if isinstance(prompt, str) else "", model=model or EMBEDDED_NAME, mode=mode,
                      gen_length=gen_length, block_length=block_length,
                      methods=methods, settings=settings,
                      capture_attention=bool(capture_attention))


def check(req: RunRequest) -> tuple[MaskPredictor, list[str], str]:
    """Everything checked before any forward pass: the predictor, warnings for the user, and a note when the
    prompt lies outside the embedded model's tasks ("" otherwise). Errors are ValueErrors naming the field."""
    lanes = req.lanes()                     # every lane and its settings checked
    method = lanes[0].method
    check_inputs(req.prompt, method, req.mode, req.gen_length, req.block_length)   # before loading a model
    for i, lane in enumerate(lanes):        # and against the lengths (LLaDA's steps split over the blocks)
        try:
            plan(make_rule(lane.method, req.mode, lane.settings), req.gen_length, req.block_length or req.gen_length)
        except ValueError as exc:
            raise ValueError(f"methods[{i}] ({lane.label}): {exc}") from None
    predictor = get_predictor(req.model)
    check_request(predictor, req.prompt, method, req.mode, req.gen_length, req.block_length)
    warnings, outside = [], ""
    if predictor.name == EMBEDDED_NAME:
        unknown = list(dict.fromkeys(predictor.unknown_words(req.prompt)))
        if unknown:
            shown = ", ".join(f"'{w}'" for w in unknown[:12])
            warnings.append(f"prompt: the model {EMBEDDED_NAME} does not know {shown}; it reads "
                            f"{'them' if len(unknown) > 1 else 'it'} as an unknown word. It still runs.")
        why = ([f"{len(unknown)} unknown word(s)"] if unknown else []) + scope.outside(req.prompt, scope.trained_families(train_log(EMBEDDED_NAME)))
        if why:
            outside = (f"This prompt lies outside what {EMBEDDED_NAME} was trained on ({'; '.join(why)}): "
                       "expect a task-shaped guess, not an answer.")
    return predictor, warnings, outside
