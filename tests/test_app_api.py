"""The served app through gradio_client: runs, errors with the library's message, replay, many users at once."""
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("gradio_client")
from gradio_client import Client, handle_file  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

import dico  # noqa: E402

PROMPT = "Tom has 5 apples. He buys 3 more apples. How many apples does Tom have now?"
RESULTS = ("status", "answers", "trajectory", "phases", "clusters", "side_by_side", "masked", "table", "attention",
           "step_run", "step", "step_view", "step_text", "download")        # app.RESULTS without the session state


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    return tmp_path_factory.mktemp("downloads")


def connect(url, downloads) -> Client:
    """A client that waits for a busy server (CI machines are slow) and keeps its files in the test's folder."""
    return Client(url, verbose=False, httpx_kwargs={"timeout": 120}, download_files=str(downloads),
                  analytics_enabled=False)


@pytest.fixture(scope="module")
def client(app_url, downloads):
    return connect(app_url, downloads)


def run(client, prompt=PROMPT, **kwargs) -> dict:
    outputs = client.predict(prompt=prompt, **{"gen_length": 32, **kwargs}, api_name="/run")
    return dict(zip(RESULTS, outputs, strict=True))


def bundle(result) -> list[dico.Trace]:
    data = json.loads(Path(result["download"]).read_text())
    assert data["schema"] == "dico-bundle/1"
    return [dico.Trace.from_dict(t) for t in data["traces"]]


def test_api_outputs_are_the_apps_results(app_module):
    assert RESULTS == app_module.RESULTS[:-1]        # every result but the per-session state is an API output


def test_api_lists_run_and_replay(client):
    names = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/run", "/replay"} <= set(names)


def test_run_returns_text_figures_and_traces(client, predictor):
    result = run(client)
    assert result["status"].startswith("Done")
    for name in ("trajectory", "phases", "clusters", "side_by_side", "masked", "attention", "step_view"):
        assert result[name]["type"] == "plotly", name
        figure = json.loads(result[name]["plot"])
        assert figure["data"] or figure["layout"].get("annotations"), name     # a plot, or the figure's notice
    assert [row[0] for row in result["table"]["data"]] == ["Vanilla", "Fast-dLLM", "DiCo"]
    traces = bundle(result)
    assert [t.method for t in traces] == ["vanilla", "fast", "dico"]
    for trace in traces:
        direct = dico.generate(predictor, PROMPT, trace.method, gen_length=32)
        assert trace.text == direct.text and trace.nfe == direct.nfe
        assert f"{trace.nfe} steps" in result["answers"]


def test_run_streams(client):
    job = client.submit(prompt=PROMPT, gen_length=128, methods=["vanilla"], api_name="/run")
    updates = [status for status, *_ in job]
    assert len(updates) >= 2
    assert any("Vanilla: step" in u and "/128 decoded" in u for u in updates[:-1])
    assert updates[-1].startswith("Done")


@pytest.mark.parametrize("kwargs, message", [
    (dict(prompt=""), "prompt: is empty"),
    (dict(mode="semi-ar", gen_length=48, block_length=40),
     "block_length: gen_length 48 is not a multiple of block_length 40"),
    (dict(prompt="Tom has 5 apples . " * 60, gen_length=96),
     "gen_length: prompt (302 tokens) + gen_length (96) exceeds"),
    (dict(prompt="Tom has 5 apples . " * 80), "prompt: is 402 tokens"),
    (dict(methods=[]), "methods: choose at least one method"),
    (dict(seeds=2.5), "seeds: N must be an integer in 1..64"),
    (dict(gen_length=1000), "Value 1000 is greater than maximum value 256"),   # gradio's own bounds check
    (dict(model="GSAI-ML/LLaDA-8B-Instruct"), "needs a GPU"),
])
def test_bad_input_comes_back_as_an_error(client, kwargs, message):
    import torch
    if "model" in kwargs and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(AppError) as info:
        run(client, **kwargs)
    assert message in str(info.value)
    assert "Traceback" not in str(info.value)


def test_server_keeps_answering_after_errors(client):
    for _ in range(2):
        with pytest.raises(AppError):
            run(client, prompt="")
    assert run(client, methods=["dico"])["status"].startswith("Done")


def test_replay_uploaded_bundle(client, tmp_path):
    result = run(client, methods=["fast", "dico"])
    outputs = client.predict(handle_file(result["download"]), api_name="/replay")
    replayed = dict(zip(RESULTS, outputs, strict=True))
    assert replayed["status"].startswith("Replayed 2 trace(s)")
    assert [t.to_dict() for t in bundle(replayed)] == [t.to_dict() for t in bundle(result)]
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "nope"}')
    with pytest.raises(AppError, match="file.schema: expected 'dico-bundle/1'"):
        client.predict(handle_file(str(broken)), api_name="/replay")


def test_eight_users_at_once_each_get_their_own_result(app_url, app_module, predictor, downloads):
    prompts = [e["prompt"] for e in app_module.EXAMPLES][:8]
    assert len(set(prompts)) == 8

    def one_user(prompt):
        result = dict(zip(RESULTS, connect(app_url, downloads).predict(
            prompt=prompt, gen_length=32, methods=["dico"], api_name="/run"), strict=True))
        return prompt, result

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one_user, prompts))
    for prompt, result in results:
        (trace,) = bundle(result)
        assert trace.prompt == prompt
        direct = dico.generate(predictor, prompt, "dico", gen_length=32)
        assert trace.response == direct.response and trace.text == direct.text
