"""The page's lanes: up to ``MAX_LANES`` rows, each a method, the setting that names its lane (k, threshold,
factor, steps; blank: the Settings panel's value) and a label (blank: the default one, ``dico.lanes``); Add,
Remove and presets. ``build`` declares the rows inside the page's ``gr.Blocks``; the handlers are plain
functions of component values returning their outputs by name (``Slots.named``), and ``collect`` turns the rows
into the lanes ``/run`` takes. The menu lists every method of ``dico.settings.METHODS``.
"""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from dico.lanes import KNOBS, MAX_LANES
from dico.settings import METHOD_LABELS, METHODS, SETTINGS, specs
from dico_ui.request import DEFAULT_METHODS, TOPK4

PRESETS = {
    "Vanilla, Top-4 per step, Fast-dLLM, DiCo": list(DEFAULT_METHODS),
    "Vanilla, Fast-dLLM, DiCo": ["vanilla", "fast", "dico"],
    "Vanilla vs Top-4 per step": ["vanilla", TOPK4],
    "Top-k per step, k = 1, 2, 4, 8": [{"method": "topk", "settings": {"k": k}} for k in (1, 2, 4, 8)],
    "Fast-dLLM 0.95 vs 0.7": [{"method": "fast", "label": "Fast-dLLM 0.95", "settings": {"threshold": 0.95}},
                              {"method": "fast", "settings": {"threshold": 0.7}}],
}
PER_SLOT = 3            # method, knob, label: the values of one row, in ``inputs`` order
ADD, FULL = "+ Add a lane", f"{MAX_LANES} lanes at most"
FULL_NOTE = (f"{MAX_LANES} lanes is the most that race side by side: remove one (✕) to add another, or change a "
             "lane's method.")
LAST_NOTE = "A race needs at least one lane: change this lane's method instead of removing it."


@dataclass
class Slots:
    """The lane rows' components, ``MAX_LANES`` of each; rows past ``count`` are hidden."""
    count: gr.State
    rows: list
    methods: list
    knobs: list
    labels: list
    removes: list
    add: gr.Button
    preset: gr.Dropdown
    note: gr.Markdown

    @property
    def inputs(self) -> list:
        """The count, then each row's method, knob and label."""
        return [self.count] + [c for i in range(MAX_LANES) for c in (self.methods[i], self.knobs[i], self.labels[i])]

    @property
    def named(self) -> dict:
        """Every output of the lane handlers by the name they return it under."""
        rows = {f"{kind}-{i}": c for kind, cs in (("method", self.methods), ("knob", self.knobs),
                                                 ("label", self.labels), ("row", self.rows)) for i, c in enumerate(cs)}
        return {"count": self.count, **rows, "add": self.add, "lane_note": self.note}


def knob_spec(method: str):
    """The setting a lane of ``method`` is named by (None for DiCo: its lanes differ in the Settings panel)."""
    name = KNOBS.get(method, (None,))[0]
    return next((s for s in specs(SETTINGS[method]) if s.name == name), None) if method in SETTINGS else None


def knob_update(method: str, value=None) -> dict:
    spec = knob_spec(method)
    if spec is None:
        return gr.update(value=None, visible=False)
    return gr.update(value=value, visible=True, label=spec.name, step=spec.step, placeholder="as in Settings")


def build(lanes=DEFAULT_METHODS) -> Slots:
    """The lane rows, the Add button and the presets, declared where the page calls it."""
    choices = [(METHOD_LABELS.get(m, m), m) for m in METHODS]          # every method the library has
    rows, methods, knobs, labels, removes = [], [], [], [], []
    specs_ = [_spec(s) for s in lanes]
    with gr.Group(elem_id="lanes"):
        for i in range(MAX_LANES):
            method, settings, label = specs_[i] if i < len(specs_) else ("vanilla", {}, "")
            spec = knob_spec(method)
            with gr.Row(visible=i < len(specs_), elem_id=f"lane-{i}", elem_classes="lane-row",
                        equal_height=True) as row:
                methods.append(gr.Dropdown(choices, value=method, label=f"Lane {i + 1}", elem_id=f"lane-{i}-method",
                                           scale=3, min_width=130))
                knobs.append(gr.Number(settings.get(spec.name) if spec else None, elem_id=f"lane-{i}-knob",
                                       label=spec.name if spec else "setting", visible=spec is not None, scale=2,
                                       min_width=90, placeholder="as in Settings"))
                labels.append(gr.Textbox(label, label="label", placeholder="default label",
                                         elem_id=f"lane-{i}-label", scale=3, min_width=110, max_lines=1))
                removes.append(gr.Button("✕", elem_id=f"lane-{i}-remove", size="sm", scale=0, min_width=36))
            rows.append(row)
    with gr.Row(elem_id="lane-tools"):
        full = len(specs_) >= MAX_LANES
        add = gr.Button(FULL if full else ADD, elem_id="add-lane", size="sm", min_width=110, interactive=not full)
        preset = gr.Dropdown(list(PRESETS), value=None, label="Preset lanes", elem_id="lane-preset", min_width=180)
    note = gr.Markdown(FULL_NOTE if full else "", elem_id="lane-note")
    return Slots(gr.State(len(specs_)), rows, methods, knobs, labels, removes, add, preset, note)


def _spec(lane) -> tuple[str, dict, str]:
    lane = {"method": lane} if isinstance(lane, str) else lane
    return lane["method"], dict(lane.get("settings") or {}), lane.get("label", "")


def _rows(values) -> tuple[int, list[tuple]]:
    count, flat = int(values[0]), list(values[1:])
    return count, [tuple(flat[i * PER_SLOT:(i + 1) * PER_SLOT]) for i in range(MAX_LANES)]


def _show(count: int, rows: list[tuple], note: str = "") -> dict:
    """Every output of ``Slots.named`` for ``count`` rows holding ``rows`` (method, knob, label); a full race
    says why Add is off, in its button and the note under it."""
    out: dict = {"count": count}
    for i, (method, knob, label) in enumerate(rows):
        out |= {f"method-{i}": method, f"knob-{i}": knob_update(method, knob), f"label-{i}": label,
                f"row-{i}": gr.update(visible=i < count)}
    full = count >= MAX_LANES
    return out | {"add": gr.update(interactive=not full, value=FULL if full else ADD),
                  "lane_note": note or (FULL_NOTE if full else "")}


def apply_preset(name, *values):
    """A preset's lanes in the rows (its knobs and labels too); the rest hidden."""
    if name not in PRESETS:
        return {}
    lanes = [_spec(lane) for lane in PRESETS[name]]
    rows = [(m, knob_spec(m) and s.get(knob_spec(m).name), label) for m, s, label in lanes]
    rows += [("vanilla", None, "")] * (MAX_LANES - len(rows))
    return _show(len(lanes), rows)


def add_lane(*values):
    """One more row (at most ``MAX_LANES``), on a method no row runs yet, else naive top-k."""
    count, rows = _rows(values)
    if count >= MAX_LANES:
        return _show(count, rows)
    used = {m for m, _, _ in rows[:count]}
    method = next((m for m in METHODS if m not in used), "topk")
    rows[count] = (method, None, "")
    return _show(count + 1, rows)


def remove_lane(i: int, *values):
    """Row ``i`` out, the rows below it move up; the last row stays."""
    count, rows = _rows(values)
    if count <= 1:
        return _show(count, rows, LAST_NOTE)
    rows = rows[:i] + rows[i + 1:] + [("vanilla", None, "")]
    return _show(count - 1, rows)


def choose_method(method):
    """A row's method changed: its knob becomes that method's (blank)."""
    return knob_update(method)


def collect(*values) -> list:
    """The visible rows as ``/run``'s lanes: a method, its knob when given, its label when typed."""
    count, rows = _rows(values)
    lanes = []
    for method, knob, label in rows[:count]:
        lane: dict = {"method": method}
        spec = knob_spec(method)
        if spec is not None and knob not in (None, ""):
            lane["settings"] = {spec.name: knob}
        if isinstance(label, str) and label.strip():
            lane["label"] = label.strip()
        lanes.append(lane)
    return lanes
