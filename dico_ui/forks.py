"""The fork panel: step into a run on screen at any step, force a position to a token or take a token
back, and watch the fork decode live as a new lane beside the original.

    show_candidates(run_index, k, position, traces)   -> the model's top tokens there in step k's pass
    fork_ui(request, traces, run_index, k, position, "force", token, word, fork_with)   streams the race
    fork_api(request, trace_json, run, at, edits, lane)   the API's ``/fork``: a trace file, a step and edits

In the step view at step k, "force" forks before step k (``dico.fork(at=k, force={position: token})``: step k is
decoded again with that token written), "take back" forks after it (``at=k + 1, remask=[position]``: what step k
committed there goes back to the mask). A fork is a lane like any other: at most ``MAX_LANES`` on screen, and it
takes a run's path (``dico_ui.stream``: one place in the app's line of runs, Stop, the time limit, a fault keeping
its partial lane); a ``ForkJob`` is what a fork does its own way. Its label is the library's ("Top-4 per step, fork
at step 23: [mask] -> D"); ``dico_ui.about.fork_story`` says in words what the edit changed. The shipped example
fork is made by ``python -m dico_ui.examples --fork``; beside it the panel opens the shipped editing example (made by
``python -m dico_ui.examples --edit``): LLaDA 2.1 replacing a written token mid-decode, with the step view there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

import visuals
from dico.constraints import encode_fixed
from dico.forking import candidates, decode_fork
from dico.lanes import MAX_LANES, parse_lane
from dico.methods import admit
from dico.observe import CLASH_BUDGET, annotate_clash
from dico.trace import MAX_JSON_BYTES, Trace, read_traces
from dico_ui import render
from dico_ui.about import edit_story, fork_story, parent_of
from dico_ui.limits import LIMITS
from dico_ui.models import get_predictor, gpu
from dico_ui.numbers import whole
from dico_ui.outputs import figure, friendly, results
from dico_ui.race import Frame, LaneRun, end_state, interleave
from dico_ui.request import measures_by_default
from dico_ui.stream import End, Job, admitted, failure
from dico_ui.text import clean

FORK_EXAMPLE = Path(__file__).resolve().parent.parent / "assets" / "ui" / "fork_example.json"
EDIT_EXAMPLE = FORK_EXAMPLE.with_name("edit_example.json")
CANDIDATES = 5
ACTIONS = ("force", "take back")
OWN_METHOD = -1                 # "continue with": the forked run's own method and settings


@dataclass(frozen=True)
class ForkRequest:
    """A fork to decode, checked: the run forked, the step, the edits, the runs on screen beside it (shown as they
    finished), and optionally another lane's method and settings to continue with (frozen: it pickles)."""
    parent: Trace
    at: int
    force: dict
    remask: tuple
    shown: tuple                 # every run on screen, the parent among them
    method: str | None = None
    settings: object = None

    def options(self) -> dict:
        return dict(force=dict(self.force), remask=list(self.remask), method=self.method, settings=self.settings)


# ============================================================================ parsing, once, at the boundary

def check_room(shown, parent: Trace, at: int) -> None:
    """A fork is one more lane: at most ``MAX_LANES`` on screen; and a step of the run (0..its steps)."""
    if len(shown) >= MAX_LANES:
        raise ValueError(f"fork: {len(shown)} runs are on screen and at most {MAX_LANES} race side by side; run "
                         "fewer lanes to make room for a fork")
    if not 0 <= at <= len(parent.steps):
        raise ValueError(f"at: must be a step of the run, 0..{len(parent.steps)}, got {at}")
    if parent.gen_length > LIMITS.max_gen_length:
        raise ValueError(f"trace: decodes {parent.gen_length} positions, over the {LIMITS.max_gen_length} a run may "
                         "ask for here")


def continue_with(lane, parent: Trace) -> tuple[str | None, object]:
    """The method and settings a fork continues with: None (the forked run's own), a run on screen (a Trace), or
    the API's lane spec (a method name or {"method", "settings"}), checked as a lane of ``/run`` is, and admitted
    on the parent's mode and lengths (what the rule cannot do, refused before anything runs)."""
    if lane in (None, "", {}):
        return None, None
    if isinstance(lane, Trace):
        lane = {"method": lane.method, "settings": lane.recorded_settings()}
    if isinstance(lane, str) and lane.strip().startswith("{"):
        try:
            lane = json.loads(lane)
        except json.JSONDecodeError as exc:
            raise ValueError(f"lane: not valid JSON ({exc})") from None
    parsed, _ = parse_lane(lane, lambda i, name="": "lane" + (f".{name}" if name else ""), 0)
    try:
        admit(parsed.method, parent.mode, parsed.settings, parent.gen_length, parent.block_length or parent.gen_length)
    except ValueError as exc:
        raise ValueError(f"lane ({parsed.label}): {exc}") from None
    return parsed.method, parsed.settings


def fork_request(shown, parent: Trace, at, force=None, remask=None, lane=None) -> ForkRequest:
    """The one parse of a fork: the step, the edits' shape (positions and tokens are checked by the library on the
    model, naming ``force``/``remask``), the room on screen and the lane to continue with."""
    at = whole(at, "at")
    check_room(shown, parent, at)
    force = dict(force or {})
    remask = tuple(whole(p, "remask") for p in (remask or []))
    if not force and not remask:
        raise ValueError("edits: force a position to a token or take one back (a fork without an edit decodes "
                         "exactly as its parent did)")
    if parent.fork is not None:
        parent, force, remask = refork(shown, parent, at, force, remask)
    method, settings = continue_with(lane, parent)
    return ForkRequest(parent, at, force, remask, tuple(shown), method, settings)


def refork(shown, fork: Trace, at: int, force: dict, remask: tuple) -> tuple[Trace, dict, tuple]:
    """A fork of a fork lane, at its own step: its parent forked with both edits (a trace records one fork; a fork
    of a fork at a later step would lose the first edit from its record, so it is refused)."""
    parent = parent_of(fork, shown)
    if parent is None or at != fork.fork["at"]:
        raise ValueError(f"at: {fork.name} is itself a fork at step {fork.fork['at']}; fork it at that step (its "
                         "edit and yours together, with its parent on screen) or fork its parent")
    merged = {int(p): t for p, t in fork.fork.get("force", {}).items()}
    merged.update({int(p) if str(p).strip().isdigit() else p: v for p, v in force.items()})
    return parent, merged, tuple(sorted(set(fork.fork.get("remask", [])) | set(remask)))


def page_request(traces, run_index, k, position, action, token, word, fork_with=OWN_METHOD) -> ForkRequest:
    """The fork panel's request: at step ``k`` of run ``run_index``, "force" ``position`` to the chosen
    candidate ``token`` (or the typed ``word``) before step k, or "take back" what it holds after step k."""
    if not traces:
        raise ValueError("fork: there is no run on screen to fork; press Run first")
    parent = _run(traces, run_index)
    k, position = whole(k if k is not None else 0, "step"), whole(position, "position")
    if action not in ACTIONS:
        raise ValueError(f"action: must be one of {', '.join(ACTIONS)}, got {action!r}")
    with_ = _run(traces, fork_with) if fork_with not in (None, OWN_METHOD, "") else None
    if action == "take back":
        return fork_request(traces, parent, k + 1, remask=[position], lane=with_)
    value = word.strip() if isinstance(word, str) and word.strip() else token
    if value in (None, ""):
        raise ValueError("force: choose one of the candidates, or type a word to force at this position")
    return fork_request(traces, parent, k, force={position: whole(value, "force") if not isinstance(value, str)
                                                  else value}, lane=with_)


def _run(traces, index) -> Trace:
    i = whole(index if index is not None else 0, "run")
    if not 0 <= i < len(traces):
        raise ValueError(f"run: choose one of the {len(traces)} runs on screen (0..{len(traces) - 1}), got {i}")
    return traces[i]


def read_parent(trace_json, run="") -> tuple[list[Trace], Trace]:
    """The API's trace: a trace or bundle file's text (or its object, or a path); ``run`` picks a run of a bundle
    by its label or index (default the first). Returns every run in it and the one forked."""
    if isinstance(trace_json, dict):
        trace_json = json.dumps(trace_json)
    elif isinstance(trace_json, str) and trace_json.strip() and not trace_json.lstrip().startswith(("{", "[")):
        path = Path(trace_json)
        if not path.is_file():
            raise ValueError("trace: must be a trace's JSON (a file saved by Download traces or the CLI)")
        if path.stat().st_size > MAX_JSON_BYTES:
            raise ValueError(f"trace: is {path.stat().st_size / 2**20:.1f} MiB, over the {MAX_JSON_BYTES // 2**20} "
                             "MiB limit")
        trace_json = path.read_text()
    if not trace_json:
        raise ValueError("trace: no trace was given")
    traces = read_traces(trace_json)
    if run in (None, ""):
        return traces, traces[0]
    named = [t for t in traces if t.name == run]
    if named:
        return traces, named[0]
    if isinstance(run, (int, float)) or str(run).strip().isdigit():
        return traces, _run(traces, int(run) if isinstance(run, str) else run)       # an index typed as text
    raise ValueError(f"run: no run labelled {run!r} in the trace; choose one of "
                     f"{', '.join(repr(t.name) for t in traces)}")


def parse_edits(edits) -> tuple[dict, list]:
    """The API's edits: ``{"force": {"7": "Gill" or token id}, "remask": [5]}`` (an object or its JSON text)."""
    if isinstance(edits, str):
        try:
            edits = json.loads(edits) if edits.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f'edits: not valid JSON ({exc}); expected {{"force": {{"7": "Gill"}}, "remask": '
                             "[5]}") from None
    if not isinstance(edits, dict) or set(edits) - {"force", "remask"}:
        raise ValueError('edits: must be an object with "force" ({position: word or token id}) and/or "remask" '
                         "([positions])")
    force, remask = edits.get("force") or {}, edits.get("remask") or []
    if not isinstance(force, dict):
        raise ValueError('force: must map positions to words or token ids, like {"7": "Gill"}')
    if not isinstance(remask, list):
        raise ValueError("remask: must list positions, like [5, 8]")
    return {int(p) if str(p).strip().isdigit() else p: v for p, v in force.items()}, remask


def api_request(trace_json, run, at, edits, lane=None) -> ForkRequest:
    traces, parent = read_parent(trace_json, run)
    force, remask = parse_edits(edits)
    return fork_request(traces, parent, at, force, remask, lane)


# ============================================================================ decoding

@gpu
def decode_fork_race(req: ForkRequest):
    """The fork beside the runs on screen, as frames of a race (``interleave``): the shown runs finished, the fork
    decoding (its first frame comes once the parent's first ``at`` steps are replayed on the model and the fork has
    taken its first step). The caller closes it to stop it (its trace is then finished as stopped)."""
    predictor = get_predictor(req.parent.model)
    lanes = [LaneRun(t.method, t.name, t, t.nfe - 1, end_state(t)) for t in req.shown]
    lanes.append(LaneRun(req.method or req.parent.method, f"the fork of {req.parent.name}", k=req.at - 1))
    for frame in interleave(lanes, {len(req.shown): decode_fork(predictor, req.parent, req.at, **req.options())}):
        forked = frame.lanes[-1]
        if frame.finished and not frame.stopped and forked.state in ("done", "limit") and \
                measures_by_default(req.parent.model):      # measured as a run on the embedded model is
            yield Frame(frame.lanes, frame.round, measuring=forked.label)
            annotate_clash(predictor, forked.trace, budget=CLASH_BUDGET)
        yield frame


def _predictor(parent: Trace):
    try:
        return get_predictor(parent.model)
    except ValueError as exc:
        raise ValueError(f"trace: was decoded by model {parent.model!r}, which cannot fork here ({exc})") from None


def precheck(predictor, req: ForkRequest) -> None:
    """The edits against the run before anything decodes (the library checks them again on the replayed state):
    positions of the response, tokens of the model, no edit of a fixed position, no take-back of a masked one."""
    forced = encode_fixed(predictor, req.force, req.parent.gen_length, field="force")
    fixed = {int(p) for p in req.parent.constraints or {}} | {int(p) for p in (req.parent.fork or {}).get("force", {})}
    before = req.parent.tokens_before(req.at)
    for pos in req.remask:
        if not 0 <= pos < req.parent.gen_length:
            raise ValueError(f"remask: position {pos} lies outside the response (0..{req.parent.gen_length - 1})")
        if before[pos] is None:
            raise ValueError(f"remask: position {pos} is still masked before step {req.at}; take back a decoded "
                             "token")
    for pos in sorted(fixed & (set(forced) | set(req.remask))):
        field = "force" if pos in forced else "remask"
        raise ValueError(f"{field}: position {pos} is fixed by a constraint (or an earlier edit)")


class ForkJob(Job):
    """A fork (``dico_ui.stream`` streams it): the runs on screen stay, the fork decodes live as a new lane beside
    them, then every figure is drawn from them all with the step view on the fork where it parts."""

    def __init__(self, req: ForkRequest):
        predictor = _predictor(req.parent)
        precheck(predictor, req)
        super().__init__(predictor)
        self.req = req

    def start(self) -> dict:
        return {"status": f"Forking: replaying the first {self.req.at} steps of {clean(self.req.parent.name)} on the "
                          "model…"}

    def frames(self):
        return decode_fork_race(self.req)

    def live(self, frame: Frame) -> dict:
        fork = frame.lanes[-1]
        doing = "decoded; measuring its clash (extra passes, apart from its steps)…" if frame.measuring else "decoding"
        return {"status": f"Forked {clean(self.req.parent.name)} at step {self.req.at}: {clean(fork.label)}, step "
                          f"{fork.k + 1}, {doing}",
                "answers": render.lanes_html([(lane.trace, lane.k, lane.state) for lane in frame.lanes],
                                             self.token_text)}

    def own(self, frame: Frame) -> list[Trace]:
        return [lane.trace for lane in frame.lanes[len(self.req.shown):] if lane.trace is not None]

    def drawn(self, frame: Frame, end: End) -> dict:
        fork = frame.lanes[-1].trace
        traces = [*self.req.shown, fork]
        return shown_fork(traces, fork, fork_status(traces, fork, end))


def fork_status(traces: list[Trace], fork: Trace, end: End) -> str:
    """How a fork ended, what it decoded, and what its edit changed."""
    said = f"{clean(fork.name)} decoded {len(fork.steps) - fork.fork['at']} steps of its own in {end.seconds:.1f} s"
    if end.failed:
        head = f"**The fork failed**: {failure(end.failed)}. Its partial lane stays on screen; {said}"
    else:
        ended = (("Stopped at the time limit" if end.why == "time" else "Stopped") if fork.stopped else
                 "Stopped at the pass limit" if fork.limit_reached else "Done")
        head = f"{ended}: {said}"
    return f"{head}.  \n{fork_story(traces)}"


def shown_fork(traces: list[Trace], fork: Trace, status: str) -> dict:
    """Every result output for the runs and their fork, with the step view on the fork where it parts."""
    return shown_step(results(traces, status), traces, len(traces) - 1, fork.fork["at"])


def shown_step(out: dict, traces: list[Trace], j: int, k: int) -> dict:
    """Result outputs (``results``) with the step view on run ``j`` at step ``k`` (clamped to its steps)."""
    run = traces[j]
    k = min(k, max(len(run.steps) - 1, 0))
    out.update(step_run=gr.update(choices=[(f"{t.name}: {t.nfe} steps", i) for i, t in enumerate(traces)], value=j),
               step=gr.update(minimum=0, maximum=max(len(run.steps) - 1, 1), value=k, interactive=True),
               step_view=figure("step view", visuals.step_view_figure, run, k), step_text=render.step_html(run, k),
               dependency_note=render.dependency_plan(run, k)[1])
    return out


# ============================================================================ handlers

@friendly("Cannot show candidates", page=True)
def show_candidates(run_index, k, position, traces) -> dict:
    """The model's top tokens at ``position`` in the pass of step ``k`` of the chosen run (replayed on the model),
    as choices for "force", and what the position holds before and after that step."""
    parent = _run(traces or [], run_index) if traces else None
    if parent is None:
        raise ValueError("fork: there is no run on screen; press Run first")
    k, position = whole(k if k is not None else 0, "step"), whole(position, "position")
    top = candidates(get_predictor(parent.model), parent, k, position, k=CANDIDATES)
    before, after = parent.tokens_before(k)[position], parent.tokens_before(min(k + 1, len(parent.steps)))[position]
    held = (f"holds ‘{clean(parent.token_text(before))}’ before step {k}" if before is not None else
            f"is masked before step {k}") + (f" and ‘{clean(parent.token_text(after))}’ after it" if after is not None
                                            else ", masked after it")
    choices = [(f"‘{text}’ {prob:.0%}", token) for token, text, prob in top]
    return {"fork_token": _radio(choices),
            "fork_note": f"Position {position} of {clean(parent.name)} {held}. The model's top {len(top)} there in "
                         f"step {k}'s pass: " + ", ".join(f"‘{clean(t)}’ {p:.1%}" for _, t, p in top) + ". **Force** "
                         f"decodes step {k} again with your token written there; **Take back** returns what it holds "
                         f"after step {k} to the mask and decodes on."}


def _radio(choices):
    return gr.update(choices=choices, value=choices[0][1] if choices else None)


@friendly("Cannot fork", page=True)
def fork_ui(request: gr.Request, traces, run_index, k, position, action, token, word, fork_with=OWN_METHOD):
    """The fork panel's Force / Take back: the fork decodes live as a new lane beside the runs on screen."""
    yield from admitted(request, lambda: ForkJob(page_request(traces, run_index, k, position, action, token, word,
                                                              fork_with)), True, "fork")


def force_ui(request: gr.Request, traces, run_index, k, position, token, word, fork_with=OWN_METHOD):
    """Force: the chosen candidate (or the typed word) written at the position before step k."""
    yield from fork_ui(request, traces, run_index, k, position, "force", token, word, fork_with)


def take_back_ui(request: gr.Request, traces, run_index, k, position, fork_with=OWN_METHOD):
    """Take back: what the position holds after step k returned to the mask."""
    yield from fork_ui(request, traces, run_index, k, position, "take back", None, "", fork_with)


def lanes_menu(traces) -> dict:
    """"Continue with": the forked run's own method, or any run's on screen."""
    runs_ = [(f"{t.name}'s method and settings", j) for j, t in enumerate(traces or [])]
    return {"fork_with": gr.update(choices=[("its own method", OWN_METHOD)] + runs_, value=OWN_METHOD)}


@friendly("Cannot fork")
def fork_api(request: gr.Request, trace_json, run, at, edits, lane=None):
    """API ``/fork``: ``trace_json`` a trace or bundle (its JSON text, as Download traces or ``python -m dico``
    save it), ``run`` the label or index of the run to fork in a bundle ("" the first), ``at`` the step,
    ``edits`` ``{"force": {position: word or token id}, "remask": [positions]}``, ``lane`` "" to continue with the
    run's own method, or another lane (``"fast"``, ``{"method": "fast", "settings": {"threshold": 0.7}}``).
    Returns the outputs of ``/run`` for every run of the file and the fork, the fork last::

        Client(url).predict(open("run.json").read(), "Top-4 per step", 23, {"force": {"7": " L"}}, "",
                            api_name="/fork")
    """
    yield from admitted(request, lambda: ForkJob(api_request(trace_json, run, at, edits, lane)), False, "fork")


@friendly("Cannot open the example fork", page=True)
def open_example() -> dict:
    """The shipped fork (``FORK_EXAMPLE``) replayed without a model: the lesson's race and its fork, the step view
    on the fork where it parts, and the prompt box filled with the lesson's prompt."""
    traces = _shipped(FORK_EXAMPLE, "the example fork", "python -m dico_ui.examples --fork")
    fork = traces[-1]
    status = (f"The example fork, replayed from traces shipped with the app: {render.run_caption(fork)}.  \n"
              + fork_story(traces))
    return {**shown_fork(traces, fork, status), "prompt": fork.prompt}


def _shipped(path: Path, what: str, made_by: str) -> list[Trace]:
    try:
        return read_traces(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"file: {what} is not shipped with this copy ({exc.strerror}); {made_by} makes it") from None


@friendly("Cannot open the editing example", page=True)
def open_edit_example() -> dict:
    """The shipped editing example (``EDIT_EXAMPLE``) replayed without a model: LLaDA 2.1 beside the same rule
    without edits (and Vanilla, Token-to-mask), every figure of the editing run, the step view on it at its first
    replacement, the prompt box filled and the status saying what was replaced and what it changed."""
    made_by = "python -m dico_ui.examples --edit"
    traces = _shipped(EDIT_EXAMPLE, "the editing example", made_by)
    j = next((i for i, t in enumerate(traces) if t.replaced()), None)
    if j is None:
        raise ValueError(f"file: no run of the editing example replaced a token; {made_by} makes it again")
    run = traces[j]
    k = next(i for i, s in enumerate(run.steps) if s.edited)
    status = (f"The editing example, replayed from traces shipped with the app: {render.run_caption(run)}.  \n"
              + edit_story(traces) + f" The step view opens on {clean(run.name)}'s step {k}: the replaced token struck "
              "through, the new one in blue.")
    return {**shown_step(results(traces, status, main=run), traces, j, k), "prompt": run.prompt}


# ============================================================================ the panel

FORK_HELP = ("**Fork this run**: pick a position at the step on the slider. **Candidates** shows the model's top "
             "tokens there in that step's pass; **Force** decodes the step again with one of them (or a word you "
             "type) written there, **Take back** returns what the step left there to the mask. The fork races as a "
             "new lane beside the original (at most 6 lanes; Stop ends it).")


def fork_panel() -> dict:
    """The fork panel under the step view (declared inside ``layout.step_view``)."""
    c = {}
    with gr.Group(elem_id="fork-panel"):
        gr.Markdown(FORK_HELP, elem_id="fork-help")
        with gr.Row(equal_height=True):
            c["fork_position"] = gr.Number(0, label="position", precision=0, minimum=0, elem_id="fork-position",
                                           min_width=100, info="response position, from 0")
            c["fork_with"] = gr.Dropdown([("its own method", OWN_METHOD)], value=OWN_METHOD, label="continue with",
                                         elem_id="fork-with", min_width=160)
            c["fork_show"] = gr.Button("Candidates", elem_id="fork-candidates", size="sm", min_width=100)
        c["fork_token"] = gr.Radio([], label="force to", elem_id="fork-token")
        c["fork_word"] = gr.Textbox(label="or type a word to force", elem_id="fork-word", max_lines=1)
        with gr.Row():
            c["fork_force"] = gr.Button("Force", variant="primary", elem_id="fork-force", size="sm", min_width=80)
            c["fork_take_back"] = gr.Button("Take back", elem_id="fork-take-back", size="sm", min_width=80)
        c["fork_note"] = gr.Markdown(elem_id="fork-note")
        with gr.Row():
            c["fork_example"] = gr.Button("Open the example fork: the lesson's Top-4 clash, one token forced",
                                          elem_id="fork-example", size="sm")
            c["edit_example"] = gr.Button("Open the editing example: LLaDA 2.1 replaces a token mid-decode",
                                          elem_id="edit-example", size="sm")
    return c


def api_inputs() -> dict:
    """``/fork``'s inputs: a trace's JSON text, the run's label or index, the step, the edits, the lane."""
    return {"api_fork_in": [gr.Textbox(visible=False), gr.Textbox("", visible=False), gr.Number(visible=False),
                            gr.JSON(visible=False), gr.JSON(visible=False)],
            "api_fork": gr.Button(visible=False)}
