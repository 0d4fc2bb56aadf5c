"""DiCo Explorer: watch a diffusion LLM fill in its answer with Vanilla, Fast-dLLM and DiCo decoding.

    python app.py            # http://127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT override)

This file is wiring only: handlers are plain functions (unit-tested without a server in
tests/test_app.py), the layout is one ``with gr.Blocks()`` block. Decoding lives in ``dico``
(``dico.app_handlers`` for the request checks, streaming and trace files), figures in ``visuals``.
"""
import os

# No outbound traffic: set before gradio (and huggingface_hub) are imported.
for _key in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ.setdefault(_key, "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

try:   # ZeroGPU wants `spaces` imported before torch; off ZeroGPU its decorator changes nothing
    import spaces
    gpu = spaces.GPU(duration=120)
except Exception:  # noqa: BLE001 - any failure means "not on ZeroGPU"
    def gpu(fn):
        return fn

import functools
import html
import inspect
import json
import logging
import re
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path

import gradio as gr
import pandas as pd
from starlette.middleware import Middleware

import visuals
from dico.app_handlers import (BUNDLE_SCHEMA, GPU_MODELS, MAX_GEN_LENGTH, MAX_UPLOAD_BYTES, METHOD_LABELS, RunRequest,
                               bundle_json, decode_stream, dico_settings, get_predictor, gpu_available, prepare,
                               preview_segments, read_traces, step_segments)
from dico.bench import read_results
from dico.models import EMBEDDED_NAME
from dico.trace import Trace

# gradio 5.50 is pinned (see requirements.txt); its notices about gradio 6 APIs are noise here.
warnings.filterwarnings("ignore", message=r".*Gradio 6\.0", category=DeprecationWarning)
log = logging.getLogger("dico.app")
ROOT = Path(__file__).resolve().parent
EXAMPLES = json.loads((ROOT / "assets" / "examples.json").read_text())["examples"]
DOWNLOADS = Path(tempfile.gettempdir()) / "dico-explorer"

MODEL_CHOICES = [(f"{EMBEDDED_NAME} (embedded, runs on CPU)", EMBEDDED_NAME)] + \
                [(f"{label} (needs a GPU)", hub_id) for hub_id, label in GPU_MODELS.items()]
METHOD_CHOICES = [(METHOD_LABELS[m], m) for m in ("vanilla", "fast", "fast-factor", "dico")]
DEFAULT_METHODS = ["vanilla", "fast", "dico"]
# The outputs every full render fills, in order (run, replay): tests read results by these names.
RESULTS = ("status", "answers", "trajectory", "phases", "clusters", "side_by_side", "masked", "table", "attention",
           "step_run", "step", "step_view", "step_text", "download", "traces")
TABLE_COLUMNS = {"method": "method", "mode": "mode", "nfe": "NFE (forward passes)", "tokens_per_s": "tokens/s",
                 "wall_s": "wall time (s)", "speedup_nfe": "speed-up (NFE)", "speedup_wall": "speed-up (wall time)"}


# ============================================================================ error handling

def _message(exc: BaseException) -> str:
    """A library error's own message (it names the field); gr.Error renders HTML, so no tags may get through."""
    return str(exc).replace("<", "&lt;")


def _as_gr_error(exc: Exception, title: str) -> gr.Error:
    if isinstance(exc, gr.Error):
        return exc
    if isinstance(exc, ValueError):          # the library's user errors: ModelError, TraceError, checks
        return gr.Error(_message(exc), title=title, print_exception=False)
    log.exception("%s: unexpected error", title)
    return gr.Error(f"Something went wrong on the server ({type(exc).__name__}); it has been logged. "
                    "The page still works: change the input and try again.", title=title, print_exception=False)


def friendly(title: str):
    """Every handler: user errors become gr.Error with the library's message, anything else is logged."""
    def wrap(fn):
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen(*args, **kwargs):
                try:
                    yield from fn(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - nothing may reach the user as a traceback
                    raise _as_gr_error(exc, title) from None
            return gen

        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001
                raise _as_gr_error(exc, title) from None
        return call
    return wrap


def _warn(message: str) -> None:
    gr.Warning(message.replace("<", "&lt;"))


def _figure(name: str, fn, *args):
    """A figure from visuals, or an empty plot and a warning if this trace cannot be drawn."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a figure must never take the page down
        log.exception("figure %s failed", name)
        _warn(f"The {name} figure could not be drawn for this trace.")
        return None


# ============================================================================ rendering helpers (HTML, tables)

def _segments_html(segments) -> str:
    """Response pieces as HTML; a space where text meets a run of masks, so words and masks stay apart."""
    parts, previous = [], None
    for text, kind in segments:
        if previous is not None and (previous == "mask") != (kind == "mask") and not text[:1].isspace():
            parts.append(" ")
        if kind == "text":
            parts.append(html.escape(text))
        else:       # leading space outside the highlight
            word = text.lstrip()
            parts.append(html.escape(text[:len(text) - len(word)]) + f'<span class="{kind}">{html.escape(word)}</span>')
        previous = kind
    return "".join(parts) or '<span class="mask">(empty)</span>'


def example_label(example: dict) -> str:
    """Short enough that gradio does not cut it again: the task family and the prompt's start."""
    kind = {"word": "Word", "list": "List", "free": "Free"}.get(example.get("family"), "Example")
    prompt = example["prompt"]
    return f"{kind} · {prompt[:30].rstrip()}…" if len(prompt) > 32 else f"{kind} · {prompt}"


def _card(method: str, head: str, body_html: str) -> str:
    color = visuals.METHOD_COLORS.get(method, "#999999")
    return (f'<div class="answer-card" style="border-left-color:{color}"><div class="answer-head">'
            f'<b>{html.escape(METHOD_LABELS.get(method, method))}</b> · {html.escape(head)}</div>'
            f'<div class="answer-text">{body_html}</div></div>')


def _final_card(trace: Trace) -> str:
    head = f"{trace.nfe} steps, {trace.wall_s:.2f} s" + (" (stopped early)" if trace.stopped else "")
    if trace.mode == "semi-ar":
        head += f", semi-AR blocks of {trace.block_length}"
    body = html.escape(trace.text) if trace.text else '<span class="mask">(empty answer)</span>'
    return _card(trace.method, head, body)


def answers_html(traces: list[Trace], progress=(), predictor=None) -> str:
    """One card per run: the final text of finished runs, the masked preview of running ones."""
    if not progress:
        cards = [_final_card(t) for t in traces]
    else:
        done = {t.method: t for t in traces}
        cards = []
        for p in progress:
            if p.method in done:
                cards.append(_final_card(done[p.method]))
            elif p.state == "waiting":
                cards.append(_card(p.method, "waiting", '<span class="mask">waiting for its turn</span>'))
            else:
                body = _segments_html(preview_segments(predictor, p.tokens)) if predictor is not None else ""
                cards.append(_card(p.method, f"step {p.step}, {p.decoded}/{p.total} decoded", body))
    return '<div class="answers">' + "".join(cards) + "</div>" if cards else ""


def run_label(trace: Trace) -> str:
    label = METHOD_LABELS.get(trace.method, trace.method)
    if trace.mode == "semi-ar":
        label += f" (semi-AR, block {trace.block_length})"
    return f"{label}: {trace.nfe} steps"


def summary_markdown(traces: list[Trace]) -> str:
    if not traces:
        return "No runs yet."
    rows = visuals.comparison_table(traces)
    lines = ["**Forward passes**: " + "; ".join(f"{r['method']} {r['nfe']} steps" for r in rows) + "."]
    base = next((t for t in traces if t.method == "vanilla"), None)
    best = next((t for t in traces if t.method == "dico"), None)
    if base and best and best.nfe:
        lines.append(f"DiCo needed {base.nfe / best.nfe:.1f}× fewer forward passes than Vanilla.")
    if any(t.stopped for t in traces):
        lines.append("The run was stopped early: the figures show the steps taken so far.")
    return " ".join(lines)


def table_frame(traces: list[Trace]) -> pd.DataFrame:
    rows = visuals.comparison_table(traces)
    return pd.DataFrame([{TABLE_COLUMNS.get(k, k): v for k, v in row.items()} for row in rows],
                        columns=list(TABLE_COLUMNS.values()))


def main_index(traces: list[Trace]) -> int:
    """The run the single-run figures show: DiCo if it ran, else the first."""
    return next((i for i, t in enumerate(traces) if t.method == "dico"), 0)


def step_html(trace: Trace, k: int) -> str:
    if not trace.steps:
        return '<div class="step-head">This run has no steps.</div>'
    k = max(0, min(int(k), len(trace.steps) - 1))
    step = trace.steps[k]
    color = visuals.PHASE_COLORS.get(step.phase, "#999999")
    seeds = ", ".join(map(str, step.seeds)) or "none"
    clusters = ", ".join(f"[{a}, {b}]" for a, b in step.clusters) or "none"
    masked = round((1 - step.unmasked_fraction) * trace.gen_length)
    head = (f'<div class="step-head"><b>Step {k}</b> of {len(trace.steps) - 1} · '
            f'<span class="dot" style="color:{color}">●</span> phase <b>{html.escape(step.phase)}</b> · '
            f'{len(step.committed)} committed (highlighted) · {masked} still masked · seeds: {seeds} · '
            f'clusters: {clusters}</div>')
    return head + f'<div class="answer-text step-text">{_segments_html(step_segments(trace, k))}</div>'


def step_figure(trace: Trace, k: int):
    return _figure("step view", visuals.step_view_figure, trace, k) if trace.steps else None


def write_bundle(traces: list[Trace]) -> str:
    """The run's traces as one JSON file to download; files older than an hour are removed."""
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    for old in DOWNLOADS.glob("dico-traces-*.json"):
        if time.time() - old.stat().st_mtime > 3600:
            old.unlink(missing_ok=True)
    path = DOWNLOADS / f"dico-traces-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.json"
    path.write_text(bundle_json(traces))
    return str(path)


def render(traces: list[Trace], status: str) -> tuple:
    """Every result output (RESULTS order) for a list of traces: after a run and after an upload."""
    i = main_index(traces)
    main = traces[i]
    with_attention = next((t for t in traces if t.attention is not None), main)
    choices = [(run_label(t), j) for j, t in enumerate(traces)]
    last = max(len(main.steps) - 1, 0)
    return (
        status,
        answers_html(traces),
        _figure("trajectory", visuals.trajectory_figure, main),
        _figure("phase", visuals.phase_figure, main),
        _figure("cluster", visuals.cluster_figure, main),
        _figure("side-by-side trajectories", visuals.trajectories_side_by_side, traces),
        _figure("masked fraction", visuals.comparison_figure, traces),
        table_frame(traces),
        _figure("attention", visuals.attention_figure, with_attention),
        gr.update(choices=choices, value=i),
        gr.update(minimum=0, maximum=max(last, 1), value=0, interactive=bool(last)),
        step_figure(main, 0),
        step_html(main, 0),
        write_bundle(traces),
        traces,
    )


# ============================================================================ handlers

@gpu
def decode(req: RunRequest, control: dict):
    """The only function that runs the model: on ZeroGPU it gets the GPU (its arguments are plain data)."""
    predictor = get_predictor(req.model)
    yield from decode_stream(predictor, req, should_stop=lambda: bool(control.get("stop")))


def build_request(prompt, model, mode, gen_length, block_length, methods, alpha, beta, tau1, tau2, tau3, r_gate,
                  seeds, t_max, gap, shortcut, guidance, logit_margin, conquer, conquer_threshold, threshold,
                  capture_attention) -> RunRequest:
    settings = {"fast": {"threshold": threshold},
                "dico": dico_settings(alpha, beta, tau1, tau2, tau3, r_gate, seeds, t_max, gap, shortcut, guidance,
                                      logit_margin, conquer, conquer_threshold)}
    return RunRequest(prompt=prompt, model=model or EMBEDDED_NAME, mode=mode, gen_length=gen_length,
                      block_length=block_length, methods=list(methods or []), settings=settings,
                      capture_attention=bool(capture_attention))


@friendly("Cannot run")
def run(prompt, model, mode, gen_length, block_length, methods, alpha, beta, tau1, tau2, tau3, r_gate, seeds, t_max,
        gap, shortcut, guidance, logit_margin, conquer, conquer_threshold, threshold, capture_attention, control):
    """Decode with every chosen method, streaming status and answers, then every figure."""
    req = build_request(prompt, model, mode, gen_length, block_length, methods, alpha, beta, tau1, tau2, tau3,
                        r_gate, seeds, t_max, gap, shortcut, guidance, logit_margin, conquer, conquer_threshold,
                        threshold, capture_attention)
    predictor, warnings = prepare(req)
    for warning in warnings:
        _warn(warning)
    control = control if isinstance(control, dict) else {}
    control["stop"] = False
    started = time.perf_counter()
    skip = tuple(gr.skip() for _ in RESULTS[2:])
    for snap in decode(req, control):
        if not snap.finished:
            yield ("  \n".join(snap.status_lines()), answers_html(snap.traces, snap.progress, predictor)) + skip
            continue
        verb = "Stopped" if snap.stopped else "Done"
        status = f"{verb} in {time.perf_counter() - started:.1f} s.  \n" + "  \n".join(snap.status_lines()) + \
            "  \n" + summary_markdown(snap.traces)
        yield render(snap.traces, status)


def stop(control):
    """Ask the running decode of this session to stop after its current step."""
    if isinstance(control, dict):
        control["stop"] = True


@friendly("Cannot replay this file")
def replay(path):
    """Draw every figure from an uploaded trace file (a bundle or one trace) without running a model."""
    if not path:
        raise gr.Error("No file was uploaded.", title="Cannot replay this file", print_exception=False)
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_UPLOAD_BYTES:
        raise ValueError(f"file: is {size / 2**20:.1f} MiB, over the {MAX_UPLOAD_BYTES // 2**20} MiB limit")
    traces = read_traces(path.read_bytes())
    return render(traces, f"Replayed {len(traces)} trace(s) from **{html.escape(path.name)}** "
                          f"(prompt: “{html.escape(traces[0].prompt[:120])}”).  \n"
                  + summary_markdown(traces))


def _trace_at(traces, run_index):
    if not traces:
        return None
    i = int(run_index or 0)
    return traces[i] if 0 <= i < len(traces) else traces[0]


@friendly("Cannot show this step")
def show_step(run_index, k, traces):
    trace = _trace_at(traces, run_index)
    if trace is None or not trace.steps:
        return None, step_html(trace, 0) if trace else ""
    k = max(0, min(int(k or 0), len(trace.steps) - 1))
    return step_figure(trace, k), step_html(trace, k)


@friendly("Cannot show this run")
def choose_run(run_index, traces):
    trace = _trace_at(traces, run_index)
    if trace is None:
        return gr.skip(), None, ""
    last = max(len(trace.steps) - 1, 0)
    view, text = show_step(run_index, 0, traces)
    return gr.update(maximum=max(last, 1), value=0, interactive=bool(last)), view, text


PLAY, PAUSE = "▶ Play", "⏸ Pause"


def toggle_play(playing, k, run_index, traces):
    """Start or stop stepping through the run; starting at the last step rewinds to step 0."""
    trace = _trace_at(traces, run_index)
    if playing or trace is None or len(trace.steps) < 2:
        return gr.Timer(active=False), gr.update(value=PLAY), False, gr.skip()
    at_end = int(k or 0) >= len(trace.steps) - 1
    return gr.Timer(active=True), gr.update(value=PAUSE), True, (0 if at_end else gr.skip())


def tick(k, run_index, traces):
    """One frame of Play: next step, and stop at the last one."""
    trace = _trace_at(traces, run_index)
    if trace is None or int(k or 0) >= len(trace.steps) - 1:
        return gr.skip(), gr.Timer(active=False), gr.update(value=PLAY), False
    return int(k or 0) + 1, gr.skip(), gr.skip(), gr.skip()


def choose_model(model):
    """Big models without a GPU: say so and keep the embedded model (nothing else changes)."""
    if model in GPU_MODELS and not gpu_available():
        _warn(f"{GPU_MODELS[model]} needs a GPU with about 20 GB of memory, and this machine has none. "
              f"Keeping the embedded model {EMBEDDED_NAME}.")
        return EMBEDDED_NAME
    return gr.skip()


BENCH_TABLE = ROOT / "assets" / "bench" / "table1.json"


def benchmark_view(path: Path = BENCH_TABLE) -> tuple:
    """The shipped benchmark (``python -m dico.bench``) as a figure and its table; a notice if it is missing."""
    try:
        rows, run = read_results(path)
    except (OSError, ValueError) as exc:
        log.warning("no benchmark to show: %s", exc)
        return visuals.accuracy_nfe_figure([]), "No benchmark results are shipped with this copy."
    from dico.bench import markdown
    measured = (f" It ran in {run['seconds'] / 60:.1f} minutes on {run['machine']}."
                if "seconds" in run and "machine" in run else "")
    command = run.get("command", "python -m dico.bench")
    return visuals.accuracy_nfe_figure(rows), (
        markdown(rows, str(run.get("title", "benchmark"))) + f"\n\nRegenerate with `{command}`.{measured} "
        "The embedded model is small: its accuracy is its own, not the paper's; see the README for what these "
        "numbers show.")


def model_note() -> str:
    if gpu_available():
        return "A GPU is available: LLaDA and Dream load on first use (several minutes, about 16 GB download)."
    return ("**No GPU here**: LLaDA-8B-Instruct and Dream-7B-Instruct need one (about 20 GB of memory); "
            f"the embedded **{EMBEDDED_NAME}** model runs on CPU in seconds.")


def show_block_length(mode):
    return gr.update(visible=mode == "semi-ar")


# ============================================================================ page

INTRO = f"""
# DiCo Explorer
A diffusion language model writes its answer by filling in a fully masked response over several steps, one
forward pass each. *How many* positions to commit per step decides the speed: **Vanilla** commits one token a
step, **Fast-dLLM** commits every token it is confident about, and **DiCo** first *divides* the response into
clusters around confident seed tokens, *conquers* the clusters in parallel, then *finalizes* the few tokens
left. Type a prompt (or pick an example), press **Run**, and see which positions each method decoded when. The
embedded model, **{EMBEDDED_NAME}**, is a small word-level model trained here on grade-school word problems and
list operations.
"""


def _phase(name: str) -> str:
    return f'<span class="dot" style="color:{visuals.PHASE_COLORS[name]}">●</span> **{name.capitalize()}**'


PHASE_NOTE = f"""
{_phase("divide")}: pick a few confident *seed* tokens spread over the response and grow *clusters* of
likely-easy positions around them (boxes in the figures); only the seeds are committed.

{_phase("conquer")}: decode inside every cluster in parallel, as many tokens as the model is sure about.

{_phase("finalize")}: once most of the response is decoded, commit the last tokens whose top choice clearly
wins (logit margin) or is near certain.
"""

ABOUT = f"""
## The three phases of DiCo, in plain words
A diffusion LLM sees the whole response at once, masked, and predicts every masked position at each step. The
question a decoder answers at each step is *which* of those predictions to trust and commit. Committing one a
step (Vanilla) is safe but needs as many steps as there are tokens; committing many at once is fast but can
break an answer whose tokens depend on each other.

{PHASE_NOTE}
Divide and Conquer alternate until most of the response is decoded (the *R_gate* fraction), then Finalize
finishes it. *Trajectory guidance* makes Divide prefer positions near the start of what is still masked, so
the answer grows roughly left to right, as a reasoning chain should.

## How to read the figures
- **Trajectory**: one row per step (top to bottom), one column per response position. Colour is the model's
  confidence at still-masked positions; red dots mark where a token was committed; stars are seeds and black
  boxes are clusters.
- **Phases**: the phase of each step and how many tokens it committed: Conquer steps commit many at once.
- **Comparison**: the same prompt under each method; the masked-fraction plot drops faster for methods that
  need fewer forward passes (NFE). Speed-ups are relative to Vanilla.
- **Attention**: where still-masked positions look early, midway and late in a DiCo run (the embedded model
  returns attention maps; LLaDA's code does not).
- **Step by step**: the response after any step, with the tokens that step committed highlighted.

**Modes.** *non-AR* treats the whole response as one window; *semi-AR* decodes blocks of `block_length`
positions left to right, finishing one block before opening the next.

**Traces.** Every run can be downloaded as one JSON file (`{BUNDLE_SCHEMA}`: the step trace of each method)
and uploaded again to replay all figures without a model.

## Reference
Xiangzhong Luo, Yilin An, Zhicheng Yu, Weichen Liu, Xu Yang. *Divide and Conquer: Accelerating Diffusion-Based
Large Language Models via Adaptive Parallel Decoding* (DiCo). Southeast University and Nanyang Technological
University. Fast-dLLM (Wu et al.) and LLaDA's low-confidence remasking are the baselines it compares with.
This explorer is an independent re-implementation for teaching; numbers from the small embedded model are not
the paper's.
"""

CSS = """
.answers { display: flex; flex-direction: column; gap: 8px; }
.answer-card { border-left: 5px solid #999; padding: 6px 12px; border-radius: 6px;
               background: var(--background-fill-secondary); }
.answer-head { font-size: 0.85em; color: var(--body-text-color-subdued); margin-bottom: 2px; }
.answer-text { font-size: 1.02em; line-height: 1.55; white-space: pre-wrap; word-break: break-word; }
.answer-text .mask { color: #b0b0b0; }
.answer-text .new { background: #D55E00; color: #fff; border-radius: 3px; padding: 0 2px; }
.step-head { font-size: 0.9em; margin-bottom: 4px; }
.dot { font-size: 1.1em; }
#status { min-height: 2.5em; }
#step-controls { align-items: center; }
footer { display: none !important; }
"""

# Plots drawn while their tab was hidden keep plotly's default width; plotly resizes responsive plots on
# window resize, so a tab switch sends one.
RESIZE_PLOTS = "() => { setTimeout(() => window.dispatchEvent(new Event('resize')), 50); }"

THEME = gr.themes.Soft(primary_hue="blue", neutral_hue="slate",
                       font=["ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif"],
                       font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"])

with gr.Blocks(theme=THEME, css=CSS, title="DiCo Explorer", delete_cache=(1800, 3600)) as demo:
    control = gr.State({"stop": False})      # per session: the Stop button's flag
    traces_state = gr.State([])              # per session: the traces on display
    playing = gr.State(False)
    gr.Markdown(INTRO, elem_id="intro")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            prompt = gr.Textbox(label="Prompt", lines=3, max_lines=8, elem_id="prompt",
                                placeholder="e.g. Tom has 5 apples. He buys 3 more apples. How many apples does "
                                            "Tom have now?")
            gr.Examples([[e["prompt"]] for e in EXAMPLES], inputs=[prompt],
                        label="Examples: held-out word problems and list tasks, and free prompts",
                        example_labels=[example_label(e) for e in EXAMPLES], examples_per_page=len(EXAMPLES),
                        elem_id="examples")
            with gr.Row():
                run_btn = gr.Button("Run", variant="primary", elem_id="run", scale=3)
                stop_btn = gr.Button("Stop", variant="stop", elem_id="stop", scale=1)
            status = gr.Markdown("Press **Run** to decode.", label="Status", elem_id="status")
            answers = gr.HTML(label="Answers", elem_id="answers", padding=False)
            with gr.Row():
                download = gr.DownloadButton("Download traces (JSON)", elem_id="download", size="sm")
                upload = gr.UploadButton("Replay a trace file…", file_types=[".json"], type="filepath",
                                         elem_id="upload", size="sm")
        with gr.Column(scale=2):
            model = gr.Dropdown(MODEL_CHOICES, value=EMBEDDED_NAME, label="Model", elem_id="model")
            gr.Markdown(model_note(), elem_id="model-note")
            mode = gr.Radio([("non-AR (whole response)", "non-ar"), ("semi-AR (blocks)", "semi-ar")], value="non-ar",
                            label="Mode", info="non-AR decodes anywhere in the response; semi-AR block by block")
            with gr.Row():
                gen_length = gr.Slider(8, MAX_GEN_LENGTH, value=96, step=8, label="gen_length", elem_id="gen-length",
                                       info="response positions to fill")
                block_length = gr.Slider(4, MAX_GEN_LENGTH, value=32, step=4, label="block_length", visible=False,
                                         info="semi-AR block size; must divide gen_length")
            methods = gr.CheckboxGroup(METHOD_CHOICES, value=DEFAULT_METHODS, label="Methods to run",
                                       elem_id="methods")
            with gr.Accordion("Advanced settings", open=False):
                gr.Markdown("DiCo's settings (paper defaults) and Fast-dLLM's threshold.")
                threshold = gr.Slider(0.5, 1.0, value=0.95, step=0.01, label="Fast-dLLM threshold",
                                      info="commit every masked token whose confidence is above this")
                with gr.Row():
                    alpha = gr.Slider(0.01, 1.0, value=0.5, step=0.01, label="alpha",
                                      info="trajectory guidance: how fast the weight floor rises with progress")
                    beta = gr.Slider(0.01, 1.0, value=0.05, step=0.01, label="beta",
                                     info="trajectory guidance: weight floor at the window end at the start")
                with gr.Row():
                    tau1 = gr.Slider(0.01, 1.0, value=0.3, step=0.01, label="tau1",
                                     info="Divide: guided confidence a seed and its cluster need")
                    tau2 = gr.Slider(0.01, 1.0, value=0.6, step=0.01, label="tau2",
                                     info="cluster confidence that ends Divide and keeps Conquer going")
                with gr.Row():
                    tau3 = gr.Slider(0.1, 10.0, value=3.0, step=0.1, label="tau3",
                                     info="Finalize: top1 - top2 logit margin that commits a token")
                    r_gate = gr.Slider(0.01, 1.0, value=0.8, step=0.01, label="R_gate",
                                       info="decoded fraction of the window after which Finalize takes over")
                with gr.Row():
                    seeds = gr.Slider(0, 64, value=0, step=1, label="N seeds",
                                      info="seeds per Divide step; 0 = 8 in non-AR, 4 in semi-AR")
                    t_max = gr.Slider(1, 100, value=10, step=1, label="T_max",
                                      info="at most this many Divide steps per round")
                with gr.Row():
                    gap = gr.Slider(0, 32, value=2, step=1, label="gap M",
                                    info="failing positions a growing cluster may skip over")
                    shortcut = gr.Slider(0.5, 1.0, value=0.98, step=0.01, label="shortcut",
                                         info="Conquer/Finalize commit any token above this confidence at once")
                with gr.Row():
                    guidance = gr.Checkbox(True, label="trajectory guidance (TG)",
                                           info="favour positions near the start of what is still masked")
                    logit_margin = gr.Checkbox(True, label="logit margin in Finalize",
                                               info="off: Finalize uses confidence only")
                with gr.Row():
                    conquer = gr.Radio(["factor", "threshold"], value="factor", label="Conquer rule",
                                       info="factor: adaptive per cluster; threshold: fixed confidence")
                    conquer_threshold = gr.Slider(0.01, 1.0, value=0.9, step=0.01, label="conquer threshold",
                                                  info="used when the Conquer rule is 'threshold'")
                capture_attention = gr.Checkbox(True, label="capture attention (DiCo run)",
                                                info="record attention maps when the model returns them")
    with gr.Tabs(elem_id="results"):
        with gr.Tab("DiCo trajectory", id="trajectory-tab") as trajectory_tab:
            trajectory = gr.Plot(label="Trajectory", show_label=False, elem_id="trajectory-plot")
            with gr.Row(equal_height=False):
                phases = gr.Plot(label="Phases", show_label=False, elem_id="phase-plot", scale=3)
                with gr.Column(scale=1, min_width=220):
                    gr.Markdown(PHASE_NOTE, elem_classes="phase-note")
            clusters = gr.Plot(label="Seeds and clusters", show_label=False, elem_id="cluster-plot")
        with gr.Tab("Comparison", id="comparison-tab") as comparison_tab:
            table = gr.Dataframe(label="Forward passes, speed and speed-up (relative to Vanilla)",
                                 elem_id="comparison-table", interactive=False, wrap=True)
            masked = gr.Plot(label="Masked fraction over steps", show_label=False, elem_id="masked-plot")
            side_by_side = gr.Plot(label="Trajectories side by side", show_label=False, elem_id="side-by-side-plot")
        with gr.Tab("Attention", id="attention-tab") as attention_tab:
            gr.Markdown("Where the still-masked positions of the DiCo run look, early, midway and late in decoding "
                        "(averaged over layers and heads). Key 0 is the whole prompt.")
            attention = gr.Plot(label="Attention by stage", show_label=False, elem_id="attention-plot")
        with gr.Tab("Step by step", id="step-tab") as step_tab:
            step_run = gr.Radio([], label="Run", elem_id="step-run")
            with gr.Row(equal_height=False, elem_id="step-controls"):
                step = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="step-slider", interactive=False,
                                 scale=6)
                play_btn = gr.Button(PLAY, elem_id="play", scale=1, min_width=110)
            step_text = gr.HTML(label="Step", elem_id="step-text", padding=False)
            step_view = gr.Plot(label="The response after this step", show_label=False, elem_id="step-plot")
            timer = gr.Timer(0.7, active=False)
        with gr.Tab("Benchmark", id="bench-tab") as bench_tab:
            bench_figure, bench_table = benchmark_view()
            gr.Markdown("Every method on held-out prompts of both task families, measured side by side in one run "
                        "on 2 CPU cores with the embedded model.")
            gr.Plot(bench_figure, label="Accuracy against forward passes", show_label=False, elem_id="bench-plot")
            gr.Markdown(bench_table, elem_id="bench-table")
        with gr.Tab("About", id="about-tab"):
            gr.Markdown(ABOUT, elem_id="about")

    result_outputs = [status, answers, trajectory, phases, clusters, side_by_side, masked, table, attention, step_run,
                      step, step_view, step_text, download, traces_state]
    run_inputs = [prompt, model, mode, gen_length, block_length, methods, alpha, beta, tau1, tau2, tau3, r_gate, seeds,
                  t_max, gap, shortcut, guidance, logit_margin, conquer, conquer_threshold, threshold,
                  capture_attention, control]
    run_event = run_btn.click(run, run_inputs, result_outputs, api_name="run", show_progress="minimal",
                              concurrency_limit=2, concurrency_id="decode")
    prompt.submit(run, run_inputs, result_outputs, show_api=False, show_progress="minimal",
                  concurrency_limit=2, concurrency_id="decode")
    stop_btn.click(stop, [control], None, queue=False, show_api=False)
    upload.upload(replay, [upload], result_outputs, api_name="replay", show_progress="minimal")
    step.change(show_step, [step_run, step, traces_state], [step_view, step_text], show_api=False,
                show_progress="hidden", concurrency_limit=4)
    step_run.input(choose_run, [step_run, traces_state], [step, step_view, step_text], show_api=False,
                   show_progress="hidden")
    play_btn.click(toggle_play, [playing, step, step_run, traces_state], [timer, play_btn, playing, step],
                   show_api=False, show_progress="hidden")
    timer.tick(tick, [step, step_run, traces_state], [step, timer, play_btn, playing], show_api=False,
               show_progress="hidden", concurrency_limit=4)
    model.input(choose_model, [model], [model], show_api=False)
    mode.change(show_block_length, [mode], [block_length], show_api=False, queue=False)
    for tab in (trajectory_tab, comparison_tab, attention_tab, step_tab, bench_tab):
        tab.select(None, None, None, js=RESIZE_PLOTS, show_api=False, queue=False)

demo.queue(max_size=32, default_concurrency_limit=2)


class WithoutCdnScripts:
    """ASGI middleware: gradio 5.50's page template loads iframeResizer from cdnjs; drop that tag so the page
    makes no request beyond this server (the script only resizes the page when embedded in an iframe)."""
    CDN_SCRIPT = re.compile(rb'<script[^>]*src="https://cdnjs\.cloudflare\.com/[^"]*"[^>]*>\s*</script>')

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] not in ("/", ""):
            return await self.app(scope, receive, send)
        start, body = {}, []

        async def rewrite(message):
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if not message.get("more_body"):
                    data = b"".join(body)
                    headers = dict(start["headers"])
                    html_page = headers.get(b"content-type", b"").startswith(b"text/html")
                    if html_page and b"content-encoding" not in headers:
                        data = self.CDN_SCRIPT.sub(b"", data)
                    headers[b"content-length"] = str(len(data)).encode()
                    await send({**start, "headers": list(headers.items())})
                    await send({"type": "http.response.body", "body": data})
            else:
                await send(message)
        await self.app(scope, receive, rewrite)


# demo.launch(**LAUNCH): the same options for `python app.py` and the test server.
LAUNCH = dict(max_file_size=MAX_UPLOAD_BYTES, ssr_mode=False, show_error=False,
              app_kwargs={"middleware": [Middleware(WithoutCdnScripts)]})


def preload() -> None:
    """Load the embedded model in the background at start, so the first Run does not wait for it."""
    try:
        get_predictor(EMBEDDED_NAME)
    except Exception:  # noqa: BLE001 - the first Run reports it to the user
        log.exception("could not preload the embedded model")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    threading.Thread(target=preload, name="preload", daemon=True).start()
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), **LAUNCH)
