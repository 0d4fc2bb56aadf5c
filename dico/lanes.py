"""Lanes: what a race decodes side by side. A lane is a method, a label and its typed settings; two lanes may share
a method (Vanilla beside "Top-4 per step", Fast-dLLM 0.95 beside 0.7).

    lanes = parse_lanes(["vanilla", {"method": "topk", "settings": {"k": 4}},
                         {"method": "fast", "label": "eager Fast-dLLM", "settings": {"threshold": 0.7}}])
    [lane.label for lane in lanes]          # ['Vanilla', 'Top-4 per step', 'eager Fast-dLLM']
    dico.generate(predictor, prompt, lane.method, settings=lane.settings, label=lane.label)

Every lane is checked once, here, before anything runs: too many lanes, an unknown method, a setting of another
method, a value out of range or two lanes with one label is a ValueError naming the lane and the field. After that
a ``Lane`` holds checked ``Settings`` and nothing checks them again. A lane's default label is its method's
(``METHOD_LABELS``) with the settings that tell it apart; the trace of its run records it. The preset rule
(settings given explicitly win over a preset switch) is ``dico.settings.resolve``'s. Plain Python (no torch):
the app, the CLI and the figures read it cheaply.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dico.settings import METHOD_LABELS, METHODS, SETTINGS, Settings, method_id, settings_for, specs

MAX_LANES = 6
MAX_LABEL_CHARS = 60
# The setting that names a lane of a method, and how: "Top-4 per step", "Fast-dLLM 0.7", "Vanilla, 24 steps".
KNOBS = {"vanilla": ("steps", "Vanilla, {} steps"), "topk": ("k", "Top-{} per step"),
         "fast": ("threshold", "Fast-dLLM {}"), "fast-factor": ("factor", "Fast-dLLM (factor {})")}
ALWAYS_SHOWN = {"topk"}         # "Top-k per step" says nothing without its k
FIELDS = ("method", "label", "settings")


@dataclass(frozen=True)
class Lane:
    """One lane of a race, checked: a method, its label and its settings (typed; frozen, so it pickles and
    crosses to ZeroGPU's worker process as it is)."""
    method: str
    label: str
    settings: Settings


def _defaults(method: str) -> dict:
    cls = SETTINGS.get(method)
    return {spec.name: spec.default for spec in specs(cls)} if cls else {}


def _beyond_presets(method: str, shown: dict) -> dict:
    """What a label must say besides a switch that is on: the values its preset did not fill."""
    cls = SETTINGS.get(method)
    for switch, preset in (cls.presets.items() if cls else ()):
        if shown.get(switch):
            shown = {k: v for k, v in shown.items() if k not in preset or v != preset[k]}
    return shown


def _text(value) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) \
        else str(value)


def default_label(method: str, settings: Settings | dict | None = None, show_defaults: bool = False) -> str:
    """A method's label with the settings that tell this lane apart: its knob in the label's own words, the rest
    in brackets. A dict holds the settings given (``show_defaults`` also shows those equal to their default); a
    settings object shows what differs from the defaults. Tolerant of old or foreign values (a trace file's)."""
    given = settings.to_dict() if isinstance(settings, Settings) else dict(settings or {})
    defaults = _defaults(method)
    shown = {k: v for k, v in given.items() if k in defaults and
             (v != defaults[k] or (show_defaults and not isinstance(settings, Settings)))}
    knob, words = KNOBS.get(method, (None, None))
    if knob is not None and (knob in shown or method in ALWAYS_SHOWN):
        text = words.format(_text(shown.pop(knob, given.get(knob, defaults.get(knob)))))
    else:
        text = METHOD_LABELS.get(method, method)
    shown = _beyond_presets(method, shown)                            # a preset's switch names what it fills
    cache = shown.pop("cache", None)                                  # a cache reads as one: "dual cache"
    computed = shown.pop("cache_prompt", True) is False               # ... and its prompt as "prompt computed"
    rest = ", ".join(([f"{cache} cache"] if cache else []) + (["prompt computed"] if computed else [])
                     + [f"{k}={_text(v)}" for k, v in shown.items()])
    return f"{text} ({rest})" if rest else text


def distinct_settings(method: str, recorded: dict) -> dict:
    """A trace's recorded settings that differ from the method's defaults: what tells an old run apart."""
    defaults = _defaults(method)
    return {k: v for k, v in recorded.items() if k in defaults and v != defaults[k]
            and not (k == "seeds" and method == "dico")}          # DiCo records the N in effect; 0 was given


Naming = Callable[..., str]         # (lane index, field name or "") -> how the caller's user names it


def _naming(where: str) -> Naming:
    return lambda i, name="": f"{where}[{i}]" + (f".{name}" if name else "")


def _as_dict(spec, at: Naming, i: int) -> dict:
    if isinstance(spec, str):
        return {"method": spec}
    if not isinstance(spec, dict):
        raise ValueError(f"{at(i)}: must be a method name or an object like "
                         f'{{"method": "topk", "label": "Top-4 per step", "settings": {{"k": 4}}}}, got {spec!r}')
    unknown = [k for k in spec if k not in FIELDS]
    if unknown:
        raise ValueError(f"{at(i, unknown[0])}: not a field of a lane (method, label, settings)")
    return spec


def _label(spec: dict, at: Naming, i: int) -> str | None:
    label = spec.get("label")
    if label is None:
        return None
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"{at(i, 'label')}: must be a non-empty text, got {label!r}")
    if len(label.strip()) > MAX_LABEL_CHARS:
        raise ValueError(f"{at(i, 'label')}: is {len(label.strip())} characters, over {MAX_LABEL_CHARS}")
    return label.strip()


def parse_lane(spec, at: Naming, i: int, shared: dict | None = None) -> tuple[Lane, dict | None]:
    """Lane ``i`` from a method name or ``{"method": ..., "label": ..., "settings": {...}}``, checked; ``shared``
    settings (every lane's of its method, e.g. the page's controls) lie under the lane's own. Also the lane's own
    settings when its label is the default one (None when a label was given)."""
    spec = _as_dict(spec, at, i)
    method = method_id(spec.get("method"))
    if method not in METHODS:
        raise ValueError(f"{at(i, 'method')}: unknown method {method!r}; choose from {', '.join(METHODS)}")
    own = spec.get("settings") or {}
    if not isinstance(own, dict):
        raise ValueError(f"{at(i, 'settings')}: must be an object of settings, like {{\"k\": 4}}, got {own!r}")
    try:
        settings = settings_for(method, {**(shared or {}), **own})
    except ValueError as exc:
        raise ValueError(f"{at(i)} ({METHOD_LABELS[method]}): {exc}") from None
    label = _label(spec, at, i)
    if label is not None:
        return Lane(method, label, settings), None
    return Lane(method, default_label(method, own), settings), own


def parse_lanes(specs_, base: dict[str, dict] | None = None, where: str = "lanes",
                at: Naming | None = None) -> tuple[Lane, ...]:
    """Every lane of a race, checked before anything runs (ValueError naming ``where``, the lane and the field;
    ``at(i, field)`` names lane ``i`` as the caller's user knows it, "methods[1].label" by default). ``base`` maps
    a method to the settings each of its lanes starts from (the app's controls, the API's settings object); a
    lane's own settings lie over them, and only its own name it."""
    at = at or _naming(where)
    specs_ = [specs_] if isinstance(specs_, (str, dict)) else list(specs_ or [])
    if not specs_:
        raise ValueError(f"{where}: choose at least one method to run")
    if len(specs_) > MAX_LANES:
        raise ValueError(f"{where}: {len(specs_)} lanes, at most {MAX_LANES} race side by side")
    base = {method_id(method): values for method, values in (base or {}).items()}
    parsed = [parse_lane(spec, at, i, base.get(_method_of(spec)) or {}) for i, spec in enumerate(specs_)]
    lanes = [lane for lane, _ in parsed]
    # two lanes of a method labelled alike by default: name every setting they were given, defaults too
    for i, (lane, own) in enumerate(parsed):
        if own is not None and sum(other.label == lane.label for other in lanes) > 1:
            lanes[i] = Lane(lane.method, default_label(lane.method, own, show_defaults=True), lane.settings)
    labels = [lane.label for lane in lanes]
    for i, name in enumerate(labels):
        if name in labels[:i]:
            raise ValueError(f"{at(i, 'label')}: {name!r} is also the label of {at(labels.index(name))}; give "
                             "the lanes different labels or settings")
    return tuple(lanes)


def _method_of(spec) -> str | None:
    method = spec if isinstance(spec, str) else spec.get("method") if isinstance(spec, dict) else None
    return method_id(method) if isinstance(method, str) else None
