"""The app's handlers, called as plain functions (no server): runs, bad inputs, uploads, the step view."""
import json
import re
import threading
from pathlib import Path

import pytest

gr = pytest.importorskip("gradio")
import plotly.graph_objects as go  # noqa: E402

import dico  # noqa: E402
from dico import app_handlers  # noqa: E402
from dico.app_handlers import BUNDLE_SCHEMA, RunRequest, decode_stream, read_traces, step_segments  # noqa: E402
from dico.models import ModelError  # noqa: E402
from dico.trace import TraceError  # noqa: E402

PROMPT = "Tom has 5 apples. He buys 3 more apples. How many apples does Tom have now?"
DEFAULTS = dict(model="dico-tiny", mode="non-ar", gen_length=32, block_length=16, methods=["vanilla", "fast", "dico"],
                alpha=0.5, beta=0.05, tau1=0.3, tau2=0.6, tau3=3.0, r_gate=0.8, seeds=0, t_max=10, gap=2,
                shortcut=0.98, guidance=True, logit_margin=True, conquer="factor", conquer_threshold=0.9,
                threshold=0.95, capture_attention=True)


def run_app(app, prompt=PROMPT, control=None, **overrides):
    """All yields of the run handler; the last one as a dict keyed by app.RESULTS."""
    outputs = list(app.run(prompt=prompt, **{**DEFAULTS, **overrides}, control={} if control is None else control))
    return outputs, dict(zip(app.RESULTS, outputs[-1], strict=True))


def run_error(app, **kwargs) -> str:
    with pytest.raises(gr.Error) as info:
        run_app(app, **kwargs)
    return info.value.message


@pytest.fixture(scope="module")
def finished(app_module, predictor):
    """One default three-method run, shared by the tests that read its results."""
    return run_app(app_module)


# ----------------------------------------------------------------------------- a run

def test_run_renders_every_result(app_module, finished):
    _, result = finished
    assert result["status"].startswith("Done")
    traces = result["traces"]
    assert [t.method for t in traces] == ["vanilla", "fast", "dico"]
    for name in ("trajectory", "phases", "clusters", "side_by_side", "masked", "attention", "step_view"):
        assert isinstance(result[name], go.Figure), name
    table = result["table"]
    assert list(table["method"]) == ["Vanilla", "Fast-dLLM", "DiCo"]
    assert list(table["NFE (forward passes)"]) == [t.nfe for t in traces]
    assert result["step_run"]["value"] == 2                    # the step view starts on DiCo
    assert result["step"]["maximum"] >= 1
    assert "Step 0" in result["step_text"]


def test_run_matches_the_library(finished, predictor):
    _, result = finished
    for trace in result["traces"]:
        direct = dico.generate(predictor, PROMPT, trace.method, gen_length=32)
        assert trace.response == direct.response and trace.nfe == direct.nfe
        assert trace.text == direct.text


def test_dico_run_captures_attention(finished):
    _, result = finished
    dico_trace = result["traces"][-1]
    assert dico_trace.attention is not None
    assert all(t.attention is None for t in result["traces"][:-1])


def test_download_is_a_bundle_that_replays(app_module, finished):
    _, result = finished
    path = result["download"]
    data = json.loads(Path(path).read_text())
    assert data["schema"] == BUNDLE_SCHEMA and len(data["traces"]) == 3
    replayed = dict(zip(app_module.RESULTS, app_module.replay(path), strict=True))
    assert [t.to_dict() for t in replayed["traces"]] == [t.to_dict() for t in result["traces"]]
    assert replayed["status"].startswith("Replayed 3 trace(s)")


def test_run_streams_status_before_the_end(app_module, predictor):
    outputs, _ = run_app(app_module, gen_length=128, methods=["vanilla"])
    streamed = outputs[:-1]
    assert streamed, "a 128-step run should stream at least once"
    status, answers = streamed[0][:2]
    assert "Vanilla: step" in status and "/128 decoded" in status
    assert "answer-card" in answers
    assert all(o == gr.skip() for o in streamed[0][2:])


def test_semi_ar_run(app_module, predictor):
    _, result = run_app(app_module, mode="semi-ar", gen_length=32, block_length=16, methods=["dico"])
    trace = result["traces"][0]
    assert trace.mode == "semi-ar" and trace.block_length == 16
    assert all(step.window in ([0, 16], [16, 32]) for step in trace.steps)


def test_stop_ends_the_run_with_a_partial_trace(app_module, predictor):
    control = {}
    runs = app_module.run(prompt=PROMPT, **{**DEFAULTS, "gen_length": 256, "methods": ["vanilla", "dico"]},
                          control=control)
    first = next(runs)
    assert "Vanilla: step" in first[0]
    app_module.stop(control)
    final = dict(zip(app_module.RESULTS, list(runs)[-1], strict=True))
    assert final["status"].startswith("Stopped")
    traces = final["traces"]
    assert len(traces) == 1 and traces[0].stopped and traces[0].nfe < 256


def test_closing_the_stream_stops_the_worker(predictor):
    req = RunRequest(prompt=PROMPT, gen_length=256, methods=["vanilla"])
    stream = decode_stream(predictor, req)
    next(stream)
    stream.close()
    assert not any(t.name == "dico-decode" and t.is_alive() for t in threading.enumerate())


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("overrides, message", [
    (dict(prompt=""), "prompt: is empty"),
    (dict(prompt="   \n"), "prompt: is empty"),
    (dict(prompt="apples " * 700), "prompt: is 4900 characters, over the 4000-character limit"),
    (dict(prompt="Tom has 5 apples . " * 60, gen_length=96),
     "gen_length: prompt (302 tokens) + gen_length (96) exceeds"),
    (dict(prompt="Tom has 5 apples . " * 80), "prompt: is 402 tokens"),
    (dict(gen_length=300), "gen_length: must be a whole number in 1..256"),
    (dict(mode="semi-ar", gen_length=48, block_length=40), "block_length: gen_length 48 is not a multiple of "
                                                           "block_length 40"),
    (dict(mode="semi-ar", gen_length=32, block_length=64), "block_length: must be a whole number in 1..gen_length"),
    (dict(methods=[]), "methods: choose at least one method"),
    (dict(alpha=0.0), "alpha: must be in (0, 1]"),
    (dict(tau2=1.5), "tau2: must be in (0, 1]"),
    (dict(tau3=-1.0), "tau3: the logit-margin threshold must be > 0"),
    (dict(seeds=2.5), "seeds: N must be an integer in 1..64"),
    (dict(t_max=0), "t_max: must be an integer in 1..100"),
    (dict(threshold=0.0), "threshold: must be in (0, 1]"),
    (dict(conquer="greedy"), "conquer: must be 'factor' or 'threshold'"),
])
def test_bad_input_gives_the_library_message(app_module, predictor, overrides, message):
    assert message in run_error(app_module, **overrides)
    _, result = run_app(app_module, gen_length=16, methods=["fast"])      # the next run works
    assert result["status"].startswith("Done")


def test_gpu_models_without_a_gpu(app_module, monkeypatch):
    monkeypatch.setattr(app_handlers, "gpu_available", lambda: False)
    monkeypatch.setattr(app_module, "gpu_available", lambda: False)
    message = run_error(app_module, model="GSAI-ML/LLaDA-8B-Instruct")
    assert "LLaDA-8B-Instruct needs a GPU" in message
    with pytest.warns(UserWarning, match="Dream-7B-Instruct needs a GPU"):
        assert app_module.choose_model("Dream-org/Dream-v0-Instruct-7B") == "dico-tiny"
    assert app_module.choose_model("dico-tiny") == gr.skip()


def test_a_model_that_cannot_load(app_module, monkeypatch):
    def fail(name=None, **kwargs):
        raise ModelError("model: cannot load 'dico-tiny' (no network). Hub models need network access")
    monkeypatch.setattr(app_handlers, "_models", {})
    monkeypatch.setattr(app_handlers, "load_model", fail)
    assert "model: cannot load 'dico-tiny' (no network)" in run_error(app_module)
    monkeypatch.undo()
    _, result = run_app(app_module, gen_length=16, methods=["dico"])
    assert result["status"].startswith("Done")


def test_unexpected_errors_are_logged_not_shown(app_module, monkeypatch, caplog):
    def explode(*args, **kwargs):
        raise RuntimeError("secret internals /srv/path")
        yield
    monkeypatch.setattr(app_module, "decode", explode)
    message = run_error(app_module)
    assert "Something went wrong on the server (RuntimeError)" in message
    assert "secret" not in message and "Traceback" not in message
    assert "secret internals" in caplog.text


def test_unknown_words_warn_but_still_run(app_module, predictor):
    with pytest.warns(UserWarning, match="does not know 'capital', 'France'"):
        _, result = run_app(app_module, prompt="What is the capital of France?", gen_length=16, methods=["dico"])
    assert result["status"].startswith("Done")


def test_warnings_and_errors_are_html_escaped(app_module, predictor):
    with pytest.warns(UserWarning) as record:
        run_app(app_module, prompt="Tom has 5 <img src=x onerror=alert(1)> apples.", gen_length=16, methods=["fast"])
    messages = " ".join(str(w.message) for w in record)
    assert "does not know" in messages and "'&lt;'" in messages and "<" not in messages


# ----------------------------------------------------------------------------- uploads

def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def replay_error(app, path) -> str:
    with pytest.raises(gr.Error) as info:
        app.replay(path)
    return info.value.message


def test_upload_a_single_trace(app_module, finished, tmp_path):
    _, result = finished
    trace = result["traces"][-1]
    outputs = app_module.replay(_write(tmp_path, "one.json", trace.to_json()))
    replayed = dict(zip(app_module.RESULTS, outputs, strict=True))
    assert [t.to_dict() for t in replayed["traces"]] == [trace.to_dict()]
    assert isinstance(replayed["trajectory"], go.Figure)


def test_upload_a_list_of_traces(app_module, finished, tmp_path):
    _, result = finished
    content = json.dumps([t.to_dict() for t in result["traces"][:2]])
    outputs = app_module.replay(_write(tmp_path, "list.json", content))
    replayed = dict(zip(app_module.RESULTS, outputs, strict=True))
    assert [t.method for t in replayed["traces"]] == ["vanilla", "fast"]


@pytest.mark.parametrize("content, message", [
    ("this is not json {", "file: not valid JSON"),
    ("", "file: is empty"),
    ("[]", "file.schema: expected 'dico-bundle/1'"),
    ('{"schema": "something-else/9", "traces": []}', "file.schema: expected 'dico-bundle/1' (a bundle of traces) or "
                                                     "'dico-trace/1' (one trace), got 'something-else/9'"),
    ('{"schema": "dico-bundle/1", "traces": []}', "bundle.traces: must be a non-empty list"),
    ('{"schema": "dico-bundle/1", "traces": [{"schema": "dico-trace/1"}]}', "bundle.traces[0]: trace: missing"),
    (b"\xff\xfe\x00garbage", "file: not valid JSON"),
])
def test_broken_uploads_say_what_is_wrong(app_module, tmp_path, content, message):
    assert message in replay_error(app_module, _write(tmp_path, "broken.json", content))


def test_upload_with_a_broken_field_names_it(app_module, finished, tmp_path):
    _, result = finished
    data = json.loads(app_handlers.bundle_json(result["traces"]))
    data["traces"][2]["steps"][1]["phase"] = "guess"
    message = replay_error(app_module, _write(tmp_path, "field.json", json.dumps(data)))
    assert "bundle.traces[2]: steps[1].phase: must be one of" in message


def test_upload_too_large(app_module, tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:
        f.truncate(21 * 2**20)
    assert "over the 20 MiB limit" in replay_error(app_module, str(path))
    with pytest.raises(TraceError, match="over the 20 MiB limit"):
        read_traces(b" " * (20 * 2**20 + 1))


def test_no_upload(app_module):
    assert "No file" in replay_error(app_module, None)


# ----------------------------------------------------------------------------- step view and play

def test_step_view_follows_the_slider(app_module, finished):
    _, result = finished
    traces = result["traces"]
    fig_a, text_a = app_module.show_step(2, 0, traces)
    fig_b, text_b = app_module.show_step(2, 1, traces)
    assert "Step 0" in text_a and "Step 1" in text_b and text_a != text_b
    assert fig_a.layout.title.text != fig_b.layout.title.text
    slider, _, text = app_module.choose_run(0, traces)               # Vanilla: one step per position
    assert slider["maximum"] == traces[0].nfe - 1 and slider["value"] == 0 and "Step 0" in text


def test_play_steps_to_the_end_and_stops(app_module, finished):
    _, result = finished
    traces = result["traces"]
    last = traces[2].nfe - 1
    timer, button, playing, k = app_module.toggle_play(False, last, 2, traces)
    assert timer.active and playing and button["value"] == app_module.PAUSE and k == 0      # rewinds at the end
    assert app_module.tick(3, 2, traces)[0] == 4
    k, timer, button, playing = app_module.tick(last, 2, traces)
    assert not timer.active and playing is False and button["value"] == app_module.PLAY
    timer, button, playing, _ = app_module.toggle_play(True, 3, 2, traces)
    assert not timer.active and playing is False


def test_step_text_joins_word_level_tokens(finished):
    _, result = finished
    trace = result["traces"][-1]
    last = len(trace.steps) - 1
    text = "".join(t for t, kind in step_segments(trace, last) if kind != "mask").strip()
    # the same words as the final text, spaced by the trace's token texts (which glue ':' as decode does not)
    assert text.split()[:3] == trace.text.split()[:3]
    assert re.sub(r"\s+", "", text) == re.sub(r"\s+", "", trace.text)


def test_answers_are_escaped(app_module, finished):
    _, result = finished
    trace = result["traces"][0]
    trace = dico.Trace.from_dict({**trace.to_dict(), "text": "<script>alert(1)</script>"})
    assert "<script>" not in app_module.answers_html([trace])


def test_examples_fit_the_embedded_model(app_module, predictor):
    families = {e["family"] for e in app_module.EXAMPLES}
    assert {"word", "list", "free"} <= families
    for example in app_module.EXAMPLES:
        dico.loop.check_request(predictor, example["prompt"], "dico", "non-ar", 96, None)
    known = [e for e in app_module.EXAMPLES if e["family"] != "free"]
    assert all(not predictor.unknown_words(e["prompt"]) for e in known)


def test_benchmark_tab_shows_the_shipped_table(app_module):
    figure, table = app_module.benchmark_view()
    rows = json.loads((Path(app_module.ROOT) / "assets" / "bench" / "table1.json").read_text())["rows"]
    points = sum(len(trace.x) for trace in figure.data)
    assert points == len(rows)                                   # one point per method x mode x task
    assert "| word | DiCo |" in table and "python -m dico.bench" in table


def test_benchmark_tab_without_results_says_so(app_module, tmp_path):
    (tmp_path / "broken.json").write_text('{"rows": [{"method": "DiCo"}]}')
    for path in (tmp_path / "missing.json", tmp_path / "broken.json"):
        figure, table = app_module.benchmark_view(path)
        assert "No benchmark" in table and not any(len(t.x or ()) for t in figure.data)
