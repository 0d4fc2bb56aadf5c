"""The page, declared in one ``gr.Blocks`` block, top to bottom: prose and CSS come from ``assets/ui``, the
settings controls are generated from ``dico.settings.specs``; every component gets a name (``c["status"]``), the
events are wired by name in ``dico_ui.wiring`` and the handlers live in ``dico_ui.handlers``."""
from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import gradio as gr

import visuals
from dico.models import EMBEDDED_NAME
from dico.observe import CLASH_BUDGET, CLASH_LIMIT, CLASH_MARK
from dico.settings import DEFAULT_BLOCK_LENGTH, DEFAULT_GEN_LENGTH, MODES, SETTINGS
from dico_ui import forks, lane_controls
from dico_ui import handlers as h
from dico_ui.about import about_text
from dico_ui.limits import LIMITS
from dico_ui.long_examples import button_label, long_examples
from dico_ui.models import model_choices
from dico_ui.render import TABLE_COLUMNS
from dico_ui.request import CONTROLS, MAX_GEN_LENGTH, group_label
from dico_ui.text import EXAMPLES, prose
from dico_ui.wiring import wire

# gradio 5.50 is pinned (see requirements.txt); its notices about gradio 6 APIs are noise here.
warnings.filterwarnings("ignore", message=r".*Gradio 6\.0", category=DeprecationWarning)
log = logging.getLogger("dico_ui")
ROOT = Path(__file__).resolve().parent.parent
BENCH_TABLE = ROOT / "assets" / "bench" / "table1_gen96.json"     # Table 1 and its floor, combined
# The shipped frontier and the floor decoded later on the same items, combined (its record names both commands).
FRONTIER = ROOT / "assets" / "bench" / "frontier_gen96.json"
FRONTIER_COMMAND = ("python -m dico.bench frontier --json assets/bench/frontier_gen96.json "
                    "--markdown assets/bench/frontier_gen96.md")
THEME = gr.themes.Soft(primary_hue="blue", neutral_hue="slate",
                       font=["ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif"],
                       font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"])


def example_label(example: dict) -> str:
    families = ("word", "list", "pick", "team", "chain", "free")
    kind = {f: f.capitalize() for f in families}.get(example.get("family"), "Example")
    prompt = example["prompt"]
    return f"{kind} · {prompt[:30].rstrip()}…" if len(prompt) > 32 else f"{kind} · {prompt}"


def load_examples(path: Path = EXAMPLES) -> tuple[list[dict], str]:
    """The example prompts, and a notice for the page if the shipped file is missing or broken (the page opens
    without them rather than not at all)."""
    try:
        examples = json.loads(path.read_text())["examples"]
        if not examples or not all(isinstance(e, dict) and isinstance(e.get("prompt"), str) for e in examples):
            raise ValueError("every example needs a prompt")
        return examples, ""
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("no example prompts from %s: %s", path, exc)
        return [], "_The example prompts shipped with this copy could not be read; type a prompt instead._"


def setting_control(group: str, spec):
    """One settings control from its Spec: its range and help are the library's; values are checked by
    ``spec.check`` when Run is pressed (a number box never clamps silently)."""
    origin = "; ".join(f"{k}: {v}" for k, v in (("paper", spec.paper), ("authors' code", spec.code)) if v is not None)
    preset = SETTINGS[group].presets.get(spec.name) if group in SETTINGS else None
    if preset:              # a preset switch says what it sets
        origin = "sets " + ", ".join(f"{k} = {v}" for k, v in preset.items())
    kw = dict(label=f"{group_label(group)} · {spec.label or spec.name}", elem_id=f"setting-{group}-{spec.name}",
              info=spec.help + (f" ({origin})" if origin else ""))
    if spec.type is bool:
        return gr.Checkbox(spec.default, **kw)
    if spec.choices:
        return gr.Radio(list(spec.choices), value=spec.default, **kw)
    kw["info"] += f"; allowed {spec.interval()}"
    return gr.Number(spec.default, step=spec.step, **kw)


def benchmark_view(path: Path = BENCH_TABLE) -> tuple:
    """The shipped benchmark (``python -m dico.bench``) as a figure and its table; a notice if it is missing."""
    from dico.bench.tables import markdown, read_results
    try:
        rows, run = read_results(path)
    except (OSError, ValueError) as exc:
        log.warning("no benchmark to show: %s", exc)
        return visuals.accuracy_nfe_figure([]), "No benchmark results are shipped with this copy."
    measured = (f" It ran in {run['seconds'] / 60:.1f} minutes on {run['machine']}."
                if "seconds" in run and "machine" in run else "")
    return visuals.accuracy_nfe_figure(rows), (
        markdown(rows, str(run.get("title", "benchmark"))) + f"\n\n{remake(run, 'python -m dico.bench')}.{measured} "
        "The embedded model is small: its accuracy is its own, not the paper's.")


def remake(run: dict, default: str) -> str:
    """How to make a shipped result again: its command, after its runs' commands where it combines several."""
    runs = "".join(f"`{source['command']}`, " for source in run.get("sources", []))
    return f"Regenerate with {runs}{'then ' if runs else ''}`{run.get('command', default)}`"


def frontier_view(path: Path = FRONTIER) -> tuple:
    """The shipped speed-accuracy frontier (``python -m dico.bench frontier``) as a figure and a note on how it was
    made; a notice saying how to make it if none is shipped."""
    from dico.bench.tables import FRONTIER_FIELDS, read_results
    try:
        rows, run = read_results(path, FRONTIER_FIELDS)
    except (OSError, ValueError) as exc:
        log.warning("no frontier to show: %s", exc)
        return visuals.frontier_figure([]), ("No speed-accuracy frontier is shipped with this copy: "
                                             f"`{FRONTIER_COMMAND}` makes it.")
    measured = (f" It ran in {run['seconds'] / 60:.1f} minutes on {run['machine']}."
                if "seconds" in run and "machine" in run else "")
    return visuals.frontier_figure(rows), (
        f"{run.get('title', 'Speed-accuracy frontier')}, {max(r['n'] for r in rows)} held-out items per task and mode; "
        f"model {run.get('model', '?')}. {remake(run, FRONTIER_COMMAND)}.{measured} Top-k per "
        "step commits the k most confident masked positions each pass, whether or not they fit together.")


def build_demo() -> gr.Blocks:
    """The page: its layout, declared top to bottom, then its events (``dico_ui.wiring.wire``)."""
    with gr.Blocks(theme=THEME, css=prose("style.css"), title="DiCo Explorer", delete_cache=(1800, 3600)) as demo:
        gr.Markdown(prose("intro.md").replace("${embedded}", EMBEDDED_NAME), elem_id="intro")
        with gr.Row(equal_height=False, elem_id="top"):
            with gr.Column(scale=3, min_width=300):
                c = run_column()
            with gr.Column(scale=2, min_width=300):
                c |= lanes_column()
        c |= result_tabs() | api_inputs()
        # A page's traces: dropped when the page closes (handlers.closed), LIMITS.session_ttl_s after the last
        # write, or when LIMITS.sessions newer sessions push it out (launch's state_session_capacity).
        c |= {name: gr.State(value, time_to_live=LIMITS.session_ttl_s)
              for name, value in (("traces", []), ("playing", False), ("lanes", []))}
        wire(demo, c)
    return demo


def run_column() -> dict:
    """The prompt, its examples, Run and Stop, the status and the race, replay, download and upload."""
    examples, examples_notice = load_examples(EXAMPLES)
    c = {"prompt": gr.Textbox(h.example_prompt(), label="Prompt", lines=3, max_lines=8, elem_id="prompt",
                              placeholder="e.g. Tom has 5 apples. He buys 3 more apples. How many apples does "
                                          "Tom have now?")}
    examples = [e for e in examples if not e.get("model")]    # the long ones open on their own model: buttons below
    if examples:
        gr.Examples([[e["prompt"]] for e in examples], inputs=[c["prompt"]], label="Examples",
                    example_labels=[example_label(e) for e in examples], examples_per_page=len(examples),
                    elem_id="examples")
    else:
        gr.Markdown(examples_notice, elem_id="examples-notice")
    with gr.Row(elem_id="run-row"):
        c["run"] = gr.Button("Run", variant="primary", elem_id="run", scale=3, min_width=100)
        c["stop"] = gr.Button("Stop", variant="stop", elem_id="stop", scale=1, min_width=80)
    c["status"] = gr.Markdown("Loading the example run…", elem_id="status")
    c["answers"] = gr.HTML(elem_id="answers", padding=False)
    long = long_examples()
    if long:            # below the race, so the first screen still shows the example race above the fold
        with gr.Row(elem_id="long-examples"):
            gr.Markdown("**Long worked answers**, where the paper measures DiCo (replayed, no model needed):",
                        elem_classes="long-title")
            c["long_examples"] = [gr.Button(button_label(e), size="sm", elem_id=f"long-example-{i}", min_width=160)
                                  for i, e in enumerate(long)]
    with gr.Row(elem_id="replay-row"):
        c["speed"] = gr.Number(10, label="replay speed (steps per second)", elem_id="speed", min_width=160,
                               info=f"in (0, {h.MAX_SPEED}]")
        c["replay"] = gr.Button("Replay the race", elem_id="replay-race", size="sm", min_width=140)
    with gr.Row():
        c["download"] = gr.DownloadButton("Download traces (JSON)", elem_id="download", size="sm")
        c["upload"] = gr.UploadButton("Replay a trace file…", file_types=[".json"], type="filepath",
                                      elem_id="upload", size="sm")
    with gr.Row(elem_id="takeaway-row"):
        c["takeaway_button"] = gr.Button("Take the race away: an animated GIF and an offline HTML page", size="sm",
                                         elem_id="takeaway-button")
        c["takeaway"] = gr.File(label="take-away files (GIF for slides, HTML that replays offline)",
                                file_count="multiple", interactive=False, elem_id="takeaway", height=90)
    return c


def lanes_column() -> dict:
    """The model, the mode and lengths, the lanes to race and the generated settings."""
    c = {"model": gr.Dropdown(model_choices(), value=EMBEDDED_NAME, label="Model", elem_id="model"),
         "model_note": gr.Markdown(elem_id="model-note"),
         "mode": gr.Radio([("non-AR (whole response)", MODES[0]), ("semi-AR (blocks)", MODES[1])], value=MODES[0],
                          label="Mode", elem_id="mode", info="non-AR decodes anywhere in the response; semi-AR "
                          "block by block")}
    with gr.Row():
        c["gen_length"] = gr.Number(DEFAULT_GEN_LENGTH, label="gen_length", elem_id="gen-length", step=8,
                                    info=f"response positions to fill, 1..{MAX_GEN_LENGTH}", min_width=140)
        c["block_length"] = gr.Number(DEFAULT_BLOCK_LENGTH, label="block_length", visible=False, step=4,
                                      elem_id="block-length", info="semi-AR block; divides gen_length", min_width=140)
    c["constraints"] = gr.Textbox(label="word constraints (every lane starts from them)", elem_id="constraints",
                                  placeholder="e.g. 0:The, 3:leader", max_lines=1,
                                  info="offset:word, fixed before decoding and never changed (as LLaDA's demo)")
    gr.Markdown("**Lanes to race**: a method, the setting that names it and a label; two lanes may share a method.",
                elem_id="lanes-title")
    c["slots"] = lane_controls.build()
    c["capture_attention"] = gr.Checkbox(True, label="capture attention (DiCo run)",
                                         info="record attention maps when the model returns them")
    c["measure_clash"] = gr.Checkbox(True, label="Measure the clash of each step (extra passes)",
                                     elem_id="measure-clash",
                                     info=f"after the decode, which it never changes or slows: a step that wrote "
                                          f"several tokens costs a pass a token (at most {CLASH_LIMIT}), at most "
                                          f"{CLASH_BUDGET} passes a run; a clash above {CLASH_MARK:g} nat is marked in "
                                          "the race. On by default for the embedded models; on a large model each "
                                          "pass costs as much as a step of the decode, so it is off until ticked")
    with gr.Accordion("Settings (generated from dico/settings.py)", open=False, elem_id="settings"):
        gr.Markdown("Checked when you press Run: a value outside its range is reported, never clamped.")
        c["controls"] = [setting_control(group, spec) for group, spec in CONTROLS]
    return c


def result_tabs() -> dict:
    """The figures of a run, tab by tab, then the benchmark and About tabs."""
    c, tabs = {}, []
    with gr.Tabs(elem_id="results"):
        with gr.Tab("Trajectory", id="trajectory-tab") as tab:
            tabs.append(tab)
            c["trajectory"] = gr.Plot(show_label=False, elem_id="trajectory-plot")
            with gr.Row(equal_height=False):
                c["phases"] = gr.Plot(show_label=False, elem_id="phase-plot", scale=3, min_width=300)
                gr.Markdown(prose("phases.md"), elem_classes="phase-note", min_height=0)
            c["clusters"] = gr.Plot(show_label=False, elem_id="cluster-plot")
        with gr.Tab("Comparison", id="comparison-tab") as tab:
            tabs.append(tab)
            c["table"] = gr.Dataframe(headers=list(TABLE_COLUMNS), label="Answer against padding, steps and "
                                      "speed-ups (relative to Vanilla)", elem_id="comparison-table", interactive=False,
                                      wrap=True)
            c["clash_plot"] = gr.Plot(show_label=False, elem_id="clash-plot")
            c["masked"] = gr.Plot(show_label=False, elem_id="masked-plot")
            c["side_by_side"] = gr.Plot(show_label=False, elem_id="side-by-side-plot")
            c["order"] = gr.Plot(show_label=False, elem_id="order-plot")
        with gr.Tab("Attention", id="attention-tab") as tab:
            tabs.append(tab)
            gr.Markdown("Where the still-masked positions of the DiCo run look, early, midway and late in "
                        "decoding (averaged over layers and heads). Key 0 is the whole prompt.")
            c["attention"] = gr.Plot(show_label=False, elem_id="attention-plot")
            c["locality"] = gr.Markdown(elem_id="attention-locality")
            c["layers_button"] = gr.Button("Locality layer by layer (a forward pass a step)", elem_id="layers-button",
                                           size="sm")
        with gr.Tab("Step by step", id="step-tab") as tab:
            tabs.append(tab)
            c |= step_view()
        with gr.Tab("Benchmark", id="bench-tab") as tab:
            tabs.append(tab)
            benchmark_tab()
        with gr.Tab("About", id="about-tab"):
            c["about"] = gr.Markdown(about_text([]), elem_id="about")
    return c | {"plot_tabs": tabs}


def step_view() -> dict:
    c = {"step_run": gr.Radio([], label="Run", elem_id="step-run")}
    with gr.Row(equal_height=False, elem_id="step-controls"):
        c["step"] = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="step-slider", interactive=False,
                              scale=6, min_width=200)
        c["play"] = gr.Button(h.PLAY, elem_id="play", scale=1, min_width=100)
    c["step_text"] = gr.HTML(elem_id="step-text", padding=False)
    c["step_view"] = gr.Plot(show_label=False, elem_id="step-plot")
    with gr.Row(equal_height=False, elem_id="dependency-row"):
        c["dependency_button"] = gr.Button("Map the dependency at this step (a pass per masked position)",
                                           elem_id="dependency-button", size="sm", scale=1, min_width=200)
        with gr.Column(scale=3, min_width=240):
            c["dependency_note"] = gr.Markdown(elem_id="dependency-note")
    c["dependency"] = gr.Plot(show_label=False, elem_id="dependency-plot")
    c |= forks.fork_panel()
    c["timer"] = gr.Timer(0.7, active=False)
    return c


def benchmark_tab() -> None:
    bench_figure, bench_table = benchmark_view()
    gr.Plot(bench_figure, show_label=False, elem_id="bench-plot")
    gr.Markdown(bench_table, elem_id="bench-table")
    frontier_figure, frontier_note = frontier_view()
    gr.Plot(frontier_figure, show_label=False, elem_id="frontier-plot")
    gr.Markdown(frontier_note, elem_id="frontier-note")


def api_inputs() -> dict:
    """The API's inputs: plain values the handler checks itself (a choice component would reject a bad value
    inside gradio, with a logged traceback and gradio's wording instead of the library's)."""
    return {"api_run": [gr.Textbox(visible=False), gr.Textbox(visible=False), gr.Textbox(visible=False),
                        gr.Number(visible=False), gr.Number(visible=False), gr.JSON(visible=False),
                        gr.JSON(visible=False), gr.Checkbox(visible=False), gr.Textbox("", visible=False),
                        gr.JSON(None, visible=False)],      # measure_clash: true, false or null (the model's default)
            "api": gr.Button(visible=False), "api_file": gr.File(visible=False, type="filepath"),
            "api_replay": gr.Button(visible=False),
            "api_takeaway_in": [gr.File(visible=False, type="filepath"), gr.Textbox("", visible=False)],
            "api_takeaway": gr.Button(visible=False)} | forks.api_inputs()
