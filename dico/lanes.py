"""Lanes: what a race decodes side by side. A lane is a method, its settings and a label; two lanes may share a
method (Vanilla beside "Top-4 per step", Fast-dLLM 0.95 beside 0.7).

    lanes = parse_lanes(["vanilla", {"method": "topk", "settings": {"k": 4}},
                         {"method": "fast", "label": "eager Fast-dLLM", "settings": {"threshold": 0.7}}])
    [lane.label for lane in lanes]          # ['Vanilla', 'Top-4 per step', 'eager Fast-dLLM']
    dico.generate(predictor, prompt, lane.method, settings=lane.settings, label=lane.label)

Every lane is checked before anything runs: too many lanes, an unknown method, a setting of another method, a
value out of range or two lanes with one label is a ValueError naming the lane and the field. A lane's default
label is its method's (``METHOD_LABELS``) with the settings that tell it apart; the trace of its run records it.
Plain Python (no torch): the app, the CLI and the figures read it cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dico.settings import METHOD_LABELS, METHODS, SETTINGS, Settings, settings_for, specs

MAX_LANES = 6
MAX_LABEL_CHARS = 60
# The setting that names a lane of a method, and how: "Top-4 per step", "Fast-dLLM 0.7", "Vanilla, 24 steps".
KNOBS = {"vanilla": ("steps", "Vanilla, {} steps"), "topk": ("k", "Top-{} per step"),
         "fast": ("threshold", "Fast-dLLM {}"), "fast-factor": ("factor", "Fast-dLLM (factor {})")}
ALWAYS_SHOWN = {"topk"}         # "Top-k per step" says nothing without its k


@dataclass(frozen=True)
class Lane:
    """One lane of a race: a method, the settings it was given (plain values, checked) and its label."""
    method: str
    label: str
    settings: dict = field(default_factory=dict)

    def checked(self) -> Settings:
        return settings_for(self.method, self.settings)


def _text(value) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) \
        else str(value)


def default_label(method: str, settings: Settings | dict | None = None, show_defaults: bool = False) -> str:
    """A method's label with the settings that tell this lane apart: its knob in the label's own words, the rest
    in brackets. A dict holds the settings given (``show_defaults`` also shows those equal to their default); a
    settings object shows what differs from the defaults. Tolerant of old or foreign values (a trace file's)."""
    given = settings.to_dict() if isinstance(settings, Settings) else dict(settings or {})
    cls = SETTINGS.get(method)
    defaults = {spec.name: spec.default for spec in specs(cls)} if cls else {}
    shown = {k: v for k, v in given.items() if k in defaults and
             (v != defaults[k] or (show_defaults and not isinstance(settings, Settings)))}
    knob, words = KNOBS.get(method, (None, None))
    if knob is not None and (knob in shown or method in ALWAYS_SHOWN):
        text = words.format(_text(shown.pop(knob, given.get(knob, defaults.get(knob)))))
    else:
        text = METHOD_LABELS.get(method, method)
    for switch, preset in (cls.presets.items() if cls else ()):      # a preset's switch names what it fills
        if shown.get(switch):
            shown = {k: v for k, v in shown.items() if k not in preset or v != preset[k]}
    cache = shown.pop("cache", None)                                  # a cache reads as one: "dual cache"
    computed = shown.pop("cache_prompt", True) is False               # ... and its prompt as "prompt computed"
    rest = ", ".join(([f"{cache} cache"] if cache else []) + (["prompt computed"] if computed else [])
                     + [f"{k}={_text(v)}" for k, v in shown.items()])
    return f"{text} ({rest})" if rest else text


def distinct_settings(method: str, recorded: dict) -> dict:
    """A trace's recorded settings that differ from the method's defaults: what tells an old run apart."""
    cls = SETTINGS.get(method)
    defaults = {spec.name: spec.default for spec in specs(cls)} if cls else {}
    return {k: v for k, v in recorded.items() if k in defaults and v != defaults[k]
            and not (k == "seeds" and method == "dico")}          # DiCo records the N in effect; 0 was given


def parse_lane(spec, where: str = "lane", shared: dict | None = None) -> tuple[Lane, dict | None]:
    """A lane from a method name or ``{"method": ..., "label": ..., "settings": {...}}``, checked; ``shared``
    settings (every lane's, e.g. the page's sampling options) lie under the lane's own. Also the lane's own
    settings when its label is the default one (None when a label was given)."""
    if isinstance(spec, Lane):
        spec = {"method": spec.method, "label": spec.label, "settings": spec.settings}
    if isinstance(spec, str):
        spec = {"method": spec}
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: must be a method name or an object like "
                         f'{{"method": "topk", "label": "Top-4 per step", "settings": {{"k": 4}}}}, got {spec!r}')
    unknown = [k for k in spec if k not in ("method", "label", "settings")]
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: not a field of a lane (method, label, settings)")
    method = spec.get("method")
    if method not in METHODS:
        raise ValueError(f"{where}.method: unknown method {method!r}; choose from {', '.join(METHODS)}")
    own = spec.get("settings") or {}
    if not isinstance(own, dict):
        raise ValueError(f"{where}.settings: must be an object of settings, like {{\"k\": 4}}, got {own!r}")
    values = {**(shared or {}), **own}
    try:
        settings_for(method, values)
    except ValueError as exc:
        raise ValueError(f"{where} ({METHOD_LABELS[method]}): {exc}") from None
    label = spec.get("label")
    if label is not None and (not isinstance(label, str) or not label.strip()):
        raise ValueError(f"{where}.label: must be a non-empty text, got {label!r}")
    if label is not None and len(label.strip()) > MAX_LABEL_CHARS:
        raise ValueError(f"{where}.label: is {len(label.strip())} characters, over {MAX_LABEL_CHARS}")
    if label is not None:
        return Lane(method, label.strip(), values), None
    return Lane(method, default_label(method, own), values), own


def parse_lanes(specs_, base: dict[str, dict] | None = None, where: str = "lanes") -> list[Lane]:
    """Every lane of a race, checked before anything runs (ValueError naming ``where``, the lane and the field).
    ``base`` maps a method to the settings each of its lanes starts from (the app's controls, the API's settings
    object); a lane's own settings lie over them, and only its own name it."""
    specs_ = [specs_] if isinstance(specs_, (str, dict, Lane)) else list(specs_ or [])
    if not specs_:
        raise ValueError(f"{where}: choose at least one method to run")
    if len(specs_) > MAX_LANES:
        raise ValueError(f"{where}: {len(specs_)} lanes, at most {MAX_LANES} race side by side")
    base = base or {}
    parsed = [parse_lane(spec, f"{where}[{i}]", base.get(_method_of(spec)) or {}) for i, spec in enumerate(specs_)]
    lanes = [lane for lane, _ in parsed]
    # two lanes of a method labelled alike by default: name every setting they were given, defaults too
    for i, (lane, own) in enumerate(parsed):
        if own is not None and sum(other.label == lane.label for other in lanes) > 1:
            lanes[i] = Lane(lane.method, default_label(lane.method, own, show_defaults=True), lane.settings)
    labels = [lane.label for lane in lanes]
    for i, name in enumerate(labels):
        if name in labels[:i]:
            raise ValueError(f"{where}[{i}].label: {name!r} is also the label of {where}[{labels.index(name)}]; give "
                             "the lanes different labels or settings")
    return lanes


def _method_of(spec) -> str | None:
    method = spec if isinstance(spec, str) else spec.method if isinstance(spec, Lane) else \
        spec.get("method") if isinstance(spec, dict) else None
    return method if isinstance(method, str) else None
