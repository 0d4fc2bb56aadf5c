"""One run request from the page or the API, parsed once at the boundary into frozen dataclasses.

``RunRequest`` holds the prompt, the model, the mode, the lengths, the shared options and the lanes
(``dico.lanes.Lane``: method, label, typed settings). ``page_request`` and ``api_request`` are the only places
that read raw values; everything after them (the check, the race, ZeroGPU's worker process) reads the typed
request and checks nothing again. Settings travel in as one dict per method (``{"dico": {...}, "fast": {...}}``):
the page's controls are generated from ``dico.settings.specs`` (``CONTROLS``) and folded back into that dict here,
checked by the same ``Spec.check`` the library uses, so a control, its range and its validation cannot disagree.
The lanes (per lane a method name or ``{"method", "label", "settings"}``) start from their method's dict.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from dico.block import BLOCK_KIND
from dico.constraints import encode_fixed, parse_constraints
from dico.embedded import scope
from dico.lanes import Lane, parse_lanes
from dico.loop import check_inputs, check_request
from dico.methods import admit
from dico.models import EMBEDDED_MODELS, EMBEDDED_NAME, MaskPredictor, train_log
from dico.settings import (
    DEFAULT_BLOCK_LENGTH,
    DEFAULT_GEN_LENGTH,
    METHODS,
    NON_AR,
    SEMI_AR,
    SETTINGS,
    given_in_form,
    method_id,
    own_specs,
    sampling_specs,
    settings_for,
)
from dico_ui.limits import LIMITS
from dico_ui.models import get_predictor
from dico_ui.numbers import whole
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


@dataclass(frozen=True)
class RunRequest:
    """A race to run, checked: nothing after the parse checks it again (frozen: it pickles to a worker)."""
    prompt: str
    lanes: tuple[Lane, ...]
    model: str = EMBEDDED_NAME
    mode: str = NON_AR
    gen_length: int = DEFAULT_GEN_LENGTH
    block_length: int | None = None         # semi-AR only
    capture_attention: bool = True
    constraints: tuple[tuple[int, str | int], ...] = ()     # words fixed before decoding, every lane starts from them
    measure_clash: bool = False             # after the decode, each lane's clash a step (extra passes, dico.observe);
                                            # parsed: on by default for the embedded models (``measures_by_default``)

    def attends(self, i: int) -> bool:
        """Whether lane ``i`` captures attention maps: the first DiCo lane, when the request asks for them."""
        return self.capture_attention and i == next((j for j, lane in enumerate(self.lanes)
                                                     if lane.method == "dico"), None)

    def options(self, lane: Lane) -> dict:
        """Keywords of ``dico.decode`` for one lane of this request."""
        return dict(mode=self.mode, gen_length=self.gen_length, block_length=self.block_length,
                    settings=lane.settings, capture_attention=self.capture_attention, label=lane.label,
                    constraints=dict(self.constraints) or None)


def switch(value, name: str) -> bool:
    """An on/off field: a boolean (or None: off), never a string an API caller meant as "false"."""
    if value is None or isinstance(value, bool):
        return bool(value)
    raise ValueError(f"{name}: must be true or false, got {value!r}")


def measures_by_default(model: str | None) -> bool:
    """Whether a run on ``model`` measures the clash unless told not to: the embedded models, where a pass is cheap
    (a large model measures on demand: a pass a token of a step costs as much as a step of its decode)."""
    return (model or EMBEDDED_NAME) in EMBEDDED_MODELS


def page_lane(i: int, name: str = "") -> str:
    """How the page names lane ``i`` (and a field of it): "Lane 6", "Lane 6: label"."""
    return f"Lane {i + 1}" + (f": {name}" if name else "")


def api_lane(i: int, name: str = "") -> str:
    """How ``/run`` names lane ``i``: "methods[5]", "methods[5].label"."""
    return f"methods[{i}]" + (f".{name}" if name else "")


def parse_request(prompt, methods=DEFAULT_METHODS, settings: dict[str, dict] | None = None, *, model=EMBEDDED_NAME,
                  mode=NON_AR, gen_length=DEFAULT_GEN_LENGTH, block_length=DEFAULT_BLOCK_LENGTH,
                  capture_attention=True, at=api_lane, constraints=None, measure_clash=None) -> RunRequest:
    """The one parse of a request: the lanes over their methods' ``settings``, numbers made whole, the lengths,
    and every lane admitted to the run (``dico.methods.admit``: what its rule cannot do, LLaDA's steps split over
    the blocks), in that order; ValueError naming the field (``at`` names a lane as the caller's user knows it).
    ``measure_clash`` None: as the model measures by default (``measures_by_default``)."""
    lanes = parse_lanes(methods, settings, where="methods" if at is api_lane else "Lanes", at=at)
    gen_length = whole(gen_length, "gen_length")
    if not 1 <= gen_length <= MAX_GEN_LENGTH:
        raise ValueError(f"gen_length: must be in 1..{MAX_GEN_LENGTH} here, got {gen_length}")
    block_length = whole(block_length, "block_length") if mode == SEMI_AR else None
    prompt = prompt if isinstance(prompt, str) else ""
    check_inputs(prompt, lanes[0].method, mode, gen_length, block_length)
    req = RunRequest(prompt, lanes, model or EMBEDDED_NAME, mode, gen_length, block_length,
                     switch(capture_attention, "capture_attention"), constraint_pairs(constraints),
                     measures_by_default(model) if measure_clash is None else switch(measure_clash, "measure_clash"))
    admit_lanes(req, at)
    return req


def admit_lanes(req: RunRequest, at: Callable[..., str] = api_lane) -> None:
    """Every lane admitted to the request's mode and lengths (``dico.methods.admit``), or ValueError naming it."""
    for i, lane in enumerate(req.lanes):
        try:
            admit(lane.method, req.mode, lane.settings, req.gen_length, req.block_length or req.gen_length,
                  req.attends(i))
        except ValueError as exc:
            raise ValueError(f"{at(i)} ({lane.label}): {exc}") from None


def fit_to_model(req: RunRequest, predictor: MaskPredictor) -> tuple[RunRequest, str]:
    """A request fitted to a block diffusion model (``dico.block``), with one line saying what changed ("" if none).

    Such a model decodes one way: semi-AR, one of its own blocks a window (its block is a property of its training,
    not a choice of decoding). The page's mode and block length are an ordinary model's settings, so rather than
    refuse a visitor's run for values they never chose for this model, the page and ``/run`` decode it the way it
    can, semi-AR in its blocks with gen_length rounded up to whole blocks, and say so. The library and the CLI still
    refuse those values with one line naming the field (``dico.block.check_block_request``): a caller there asks
    for them in code, and a benchmark must not measure something else than it asked for."""
    block = predictor.block if predictor.kind == BLOCK_KIND else None
    gen_length = -(-req.gen_length // block) * block if block else req.gen_length
    if not block or (req.mode, req.block_length, req.gen_length) == (SEMI_AR, block, gen_length):
        return req, ""
    asked = [f"{req.mode}" + (f", block_length {req.block_length}" if req.block_length else "")] + \
        ([f"gen_length {req.gen_length}"] if gen_length != req.gen_length else [])
    fitted = replace(req, mode=SEMI_AR, block_length=block, gen_length=gen_length)
    try:
        admit_lanes(fitted, page_lane)
    except ValueError as exc:
        raise ValueError(f"{exc} ({predictor.name} is a block diffusion model: it decodes semi-AR, in its own "
                         f"blocks of {block})") from None
    return fitted, (f"{predictor.name} is a block diffusion model, so this run decodes semi-AR in its own blocks of "
                    f"{block}" + (f", gen_length {gen_length}" if gen_length != req.gen_length else "")
                    + f" (asked: {'; '.join(asked)}).")


def constraint_pairs(value) -> tuple[tuple[int, str | int], ...]:
    """Word constraints as LLaDA's demo takes them ("0:The, 5:leader"), or the API's object ({"0": "The"}, a
    word or a token id each): (offset, word) pairs. Offsets, words and overlaps are checked on the model
    (``check``), naming ``constraints``."""
    if value in (None, "", {}):
        return ()
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"constraints: not valid JSON ({exc})") from None
    elif isinstance(value, str):
        value = parse_constraints(value)
    if not isinstance(value, dict):
        raise ValueError('constraints: must be text like "0:The, 5:leader" or an object like {"0": "The"}')
    return tuple((whole(int(k) if str(k).strip().lstrip("-").isdigit() else k, "constraints"), v)
                 for k, v in value.items())


def page_request(prompt, model, mode, gen_length, block_length, lanes, capture_attention, controls,
                 constraints="", measure_clash=None) -> RunRequest:
    """The Run button's request: the lane rows (``lane_controls.collect``) over the Settings panel's values."""
    lanes = [lanes] if isinstance(lanes, (str, dict)) else list(lanes or [])
    return parse_request(prompt, lanes, settings_from_controls(lanes, controls), model=model, mode=mode,
                         gen_length=gen_length, block_length=block_length, capture_attention=capture_attention,
                         constraints=constraints, at=page_lane, measure_clash=measure_clash)


def api_request(prompt, model, mode, gen_length, block_length, methods, settings, capture_attention,
                constraints="", measure_clash=None) -> RunRequest:
    """``/run``'s request: lanes as method names or objects, ``settings`` one JSON object per method."""
    methods = [methods] if isinstance(methods, (str, dict)) else list(methods or [])
    return parse_request(prompt, methods, settings_from_json(settings), model=model, mode=mode,
                         gen_length=gen_length, block_length=block_length, capture_attention=capture_attention,
                         constraints=constraints, measure_clash=measure_clash)


def settings_from_controls(methods: list, values) -> dict[str, dict]:
    """The values of the generated controls (``CONTROLS`` order) as one dict per chosen method (a lane's dict
    counts as its method), each value checked; the shared sampling options go to every chosen method. A
    control left at its default beside a preset switch counts as not given (``dico.settings.given_in_form``)."""
    methods = [method_id(m.get("method") if isinstance(m, dict) else m) for m in methods]
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
    return {method: given_in_form(SETTINGS[method], values) for method, values in out.items()}


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
    return {method_id(m): dict(v) for m, v in settings.items()}


def fixed_passes(lane: Lane, gen_length: int, block_length: int | None) -> int | None:
    """The forward passes a lane takes whatever the model predicts: Vanilla its steps (one token a step by
    default), Top-k one pass per k tokens of each window; None for the rules that adapt (they may finish sooner)."""
    width = block_length or gen_length
    if lane.method == "vanilla":
        return lane.settings.steps or gen_length
    if lane.method == "topk":
        return (gen_length // width) * -(-width // lane.settings.k)
    return None


def too_long(req: RunRequest, pass_s: float, limit_s: float = LIMITS.run_seconds) -> str:
    """A warning before the run when its fixed-pass lanes alone would take half the time limit or more at
    ``pass_s`` seconds a forward pass (what recent runs took here), "" otherwise."""
    fixed = [(lane, n) for lane in req.lanes if (n := fixed_passes(lane, req.gen_length, req.block_length))]
    need_s = sum(n for _, n in fixed) * pass_s
    if not fixed or need_s < limit_s / 2:
        return ""
    lane, n = max(fixed, key=lambda pair: pair[1])
    step = "one token a step" if n == req.gen_length else f"{req.gen_length / n:g} tokens a step"
    return (f"gen_length: {lane.label} takes {n} forward passes at gen_length {req.gen_length} ({step}); at about "
            f"{pass_s:.2f} s a pass here, this race needs about {need_s:.0f} s and a run stops at "
            f"{limit_s:.0f} s, so it may not finish. A shorter gen_length or fewer one-token lanes finish sooner.")


def check(req: RunRequest, pass_s: Callable[[int], float]) -> tuple[MaskPredictor, list[str], str]:
    """What needs the model, before any forward pass: the predictor, warnings for the user (unknown words, a race
    that may outlast the time limit at ``pass_s(positions)`` seconds a pass), and a note when the prompt lies
    outside the embedded model's tasks ("" otherwise). Errors are ValueErrors naming the field."""
    predictor = get_predictor(req.model)
    encode_fixed(predictor, dict(req.constraints), req.gen_length)          # words on the model: named errors
    ids = check_request(predictor, req.prompt, req.lanes[0].method, req.mode, req.gen_length, req.block_length)
    warnings = [w for w in (too_long(req, pass_s(len(ids) + req.gen_length)),) if w]
    name = predictor.name
    if name not in EMBEDDED_MODELS:
        return predictor, warnings, ""
    unknown = list(dict.fromkeys(predictor.unknown_words(req.prompt)))
    if unknown:
        shown = ", ".join(f"'{w}'" for w in unknown[:12])
        warnings.append(f"prompt: the model {name} does not know {shown}; it reads "
                        f"{'them' if len(unknown) > 1 else 'it'} as an unknown word. It still runs.")
    why = ([f"{len(unknown)} unknown word(s)"] if unknown else []) + \
        scope.outside(req.prompt, scope.trained_families(train_log(name)))
    outside = (f"This prompt lies outside what {name} was trained on ({'; '.join(why)}): expect a "
               "task-shaped guess, not an answer.") if why else ""
    return predictor, warnings, outside
