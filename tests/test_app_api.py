"""The app through gradio_client, as an API user calls it: /run with the settings as one JSON object,
streaming, cancelling then running again, errors, and /replay of a downloaded bundle."""
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("gradio_client")
from gradio_client import Client, handle_file  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

from dico_ui.render import TABLE_COLUMNS  # noqa: E402

PROMPT = "Here is a list: 4, 9, 13. Make every item smaller by 3. Keep the order."


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def call(client, prompt=PROMPT, settings="", methods=("vanilla", "fast", "dico"), gen_length=32, mode="non-ar"):
    return client.predict(prompt, "dico-tiny", mode, gen_length, 16, list(methods), settings, True, api_name="/run")


def results(app_module, out):
    from dico_ui.handlers import RESULTS
    return dict(zip(RESULTS, out))


def test_api_lists_run_and_replay(client):
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert {"/run", "/replay"} <= names


def test_run_returns_the_race_the_table_and_figures(client, app_module, predictor):
    out = results(app_module, call(client))
    assert out["status"].startswith("Done")
    assert out["answers"].count("answer complete at step") == 3
    assert [row[0] for row in out["table"]["data"]] == ["Vanilla", "Fast-dLLM", "DiCo"]
    assert out["trajectory"]["type"] == "plotly"
    bundle = json.loads(Path(out["download"]).read_text(encoding="utf-8"))
    assert [t["method"] for t in bundle["traces"]] == ["vanilla", "fast", "dico"]


def test_settings_travel_as_one_json_object(client, app_module, predictor):
    default = results(app_module, call(client, methods=["fast"]))["table"]["data"][0][1]
    eager = results(app_module, call(client, methods=["fast"], settings='{"fast": {"threshold": 0.05}}'))
    assert eager["table"]["data"][0][1] < default          # a low threshold commits more per step
    as_dict = results(app_module, call(client, methods=["fast"], settings={"fast": {"threshold": 0.05}}))
    timed = TABLE_COLUMNS.index("own time (s)")
    untimed = lambda row: row[:timed] + row[timed + 1:]     # noqa: E731
    assert untimed(as_dict["table"]["data"][0]) == untimed(eager["table"]["data"][0])        # all but the time


@pytest.mark.parametrize("kwargs, message", [
    (dict(prompt=""), "prompt"),
    (dict(settings='{"fast": {"threshold": 2}}'), "threshold: must be in"),
    (dict(settings='{"vanilla": {"nope": 1}}'), "nope"),
    (dict(methods=["nope"]), "methods"),
    (dict(gen_length=100000), "gen_length"),
])
def test_bad_input_comes_back_as_an_error_naming_the_field(app_url, kwargs, message):
    # a client of its own: gradio_client once applied this error's streamed diff to the shared client's last result
    with pytest.raises(AppError, match=message):
        call(Client(app_url, verbose=False), **kwargs)


def test_lanes_are_method_names_or_objects_and_two_may_share_a_method(client, app_module, predictor):
    lanes = ["vanilla", {"method": "topk", "settings": {"k": 4}}, "fast",
             {"method": "fast", "label": "eager Fast-dLLM", "settings": {"threshold": 0.5}}]
    out = results(app_module, call(client, methods=lanes, settings={"fast": {"threshold": 0.9}}))
    assert out["status"].startswith("Done") and out["answers"].count("answer complete at step") == 4
    assert [row[0] for row in out["table"]["data"]] == ["Vanilla", "Top-4 per step", "Fast-dLLM", "eager Fast-dLLM"]
    for label in ("Top-4 per step", "eager Fast-dLLM"):
        assert f'<b class="lane-label">{label}</b>' in out["answers"]
    traces = json.loads(Path(out["download"]).read_text(encoding="utf-8"))["traces"]
    assert [t["label"] for t in traces] == ["Vanilla", "Top-4 per step", "Fast-dLLM", "eager Fast-dLLM"]
    assert [t["settings"].get("threshold") for t in traces[2:]] == [0.9, 0.5] and traces[1]["settings"]["k"] == 4
    assert traces[1]["nfe"] == 32 // 4


def test_a_race_puts_a_method_beside_itself_with_a_kv_cache(client, app_module, predictor):
    lanes = ["fast", {"method": "fast", "settings": {"cache": "dual", "cache_refresh": 1}},
             {"method": "fast", "settings": {"cache": "dual"}}]
    out = results(app_module, call(client, methods=lanes, mode="semi-ar"))
    traces = json.loads(Path(out["download"]).read_text(encoding="utf-8"))["traces"]
    labels = ["Fast-dLLM", "Fast-dLLM (dual cache, cache_refresh=1)", "Fast-dLLM (dual cache)"]
    assert [t["label"] for t in traces] == [row[0] for row in out["table"]["data"]] == labels
    plain, exact, cached = traces
    # refreshing every pass is no cache at all; refreshing at block starts only computes fewer positions
    assert exact["text"] == plain["text"] and exact["token_forwards"] == plain["token_forwards"]
    assert cached["token_forwards"] < plain["token_forwards"]
    assert all(step["refresh"] for step in exact["steps"])
    assert cached["steps"][0]["refresh"] and not all(step["refresh"] for step in cached["steps"])


@pytest.mark.parametrize("methods, message", [
    (["vanilla"] * 7, r"methods: 7 lanes, at most 6"),
    (["fast", "fast"], r"methods\[1\].label: 'Fast-dLLM' is also the label of methods\[0\]"),
    ([{"method": "greedy"}], r"methods\[0\].method: unknown method 'greedy'"),
    ([{"method": "topk", "settings": {"threshold": 0.9}}], r"threshold: not a setting of 'topk'"),
    ([{"method": "topk", "settings": {"k": 0}}], r"k: must be in \[1, 4096\]"),
    (["fast", {"method": "vanilla", "settings": {"steps": 3}}],
     r"methods\[1\] \(Vanilla, 3 steps\): steps: 3 is not a multiple of the number of blocks \(2\)"),
])
def test_a_bad_lane_is_an_error_naming_it_and_nothing_runs(app_url, counted_race, methods, message):
    # a client of its own, as for bad input above: under load gradio_client once applied an error's streamed diff
    # to the shared client's last result (``apply_diff``: ``del current[int('headers')]``) and raised its own error
    with pytest.raises(AppError, match=message):
        call(Client(app_url, verbose=False), methods=methods, mode="semi-ar")
    assert counted_race["rounds"] == 0


def test_run_streams_and_a_cancelled_run_leaves_the_next_one_working(client, app_module, predictor, wait_until):
    job = client.submit(PROMPT, "dico-tiny", "non-ar", 192, 16, ["vanilla", "fast", "dico"], "", True,
                        api_name="/run")
    wait_until(lambda: any("decoding" in str(o[1]) for o in job.outputs()), 120, "a streamed race frame")
    job.cancel()
    wait_until(job.done, 120, "the cancelled job to end")
    out = results(app_module, call(client, gen_length=16))
    assert out["status"].startswith("Done")


def test_replay_a_downloaded_bundle(client, app_module, predictor):
    first = results(app_module, call(client, gen_length=16))
    again = results(app_module, client.predict(handle_file(first["download"]), api_name="/replay"))
    assert again["status"].startswith("Replayed 3 trace(s)")
    assert again["table"]["data"] == first["table"]["data"]


@pytest.mark.soak
def test_users_at_once_each_get_their_own_race(app_url, app_module, predictor):
    prompts = [f"Here is a list: {a}, {a + 3}, 9. Add 2 to each number." for a in (1, 2, 3, 4)]

    def one(prompt):
        out = results(app_module, call(Client(app_url, verbose=False), prompt=prompt, gen_length=24))
        return json.loads(Path(out["download"]).read_text(encoding="utf-8"))["traces"][0]["prompt"]

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, prompts)) == prompts


@pytest.mark.soak
def test_the_soaks_bare_http_burst_reads_each_answer_as_gradio_sends_it(app_url, app_module, predictor, monkeypatch):
    """The soak times a burst's answers over bare HTTP, speaking gradio's queue protocol itself: a result is read as
    right, a full line's refusal as busy, with the app's words."""
    from dico_ui import runs, soak
    from dico_ui.bounded import Line
    assert [kind for kind, _, _ in soak.bare_burst(app_url, 2, 8)] == ["right", "right"]
    monkeypatch.setattr(runs, "LINE", Line(decoders=1, size=1, guess_s=30))
    holder = runs.LINE.join("someone")
    try:
        told = soak.bare_burst(app_url, 3, 8)
    finally:
        runs.LINE.leave(holder)
    assert [kind for kind, _, _ in told] == ["busy"] * 3 and all("The demo is busy" in text for _, _, text in told)


# ============================================================================ staying up

def test_a_full_line_is_told_busy_at_once_in_the_apps_words(client, app_module, predictor, monkeypatch):
    import time

    from dico_ui import runs
    from dico_ui.bounded import Line
    monkeypatch.setattr(runs, "LINE", Line(decoders=1, size=1, guess_s=30))
    holder = runs.LINE.join("someone")
    started = time.monotonic()
    with pytest.raises(AppError, match=r"The demo is busy: .* would wait about 30 s\. Please try again"):
        call(client, gen_length=8)
    assert time.monotonic() - started < 30                 # at once, not after the wait
    runs.LINE.leave(holder)
    assert results(app_module, call(client, gen_length=8))["status"].startswith("Done")


def test_a_model_error_mid_decode_ends_that_run_only(client, app_module, predictor, monkeypatch):
    forward, calls = predictor.forward, []

    def faulty(ids, attentions=False, **kwargs):
        calls.append(attentions)
        if calls.count(True) == 3:                         # the DiCo run's third step
            raise RuntimeError("injected fault")
        return forward(ids, attentions=attentions, **kwargs)
    monkeypatch.setattr(predictor, "forward", faulty)
    out = results(app_module, call(client, gen_length=48))
    assert out["status"].startswith("**The run failed**: DiCo failed at step 3 (RuntimeError: injected fault)")
    assert [row[0] for row in out["table"]["data"]] == ["Vanilla (stopped)", "Fast-dLLM (stopped)", "DiCo (stopped)"]
    assert out["answers"].count("stopped at step") == 3 and out["trajectory"]["type"] == "plotly"
    monkeypatch.setattr(predictor, "forward", forward)
    assert results(app_module, call(client, gen_length=8))["status"].startswith("Done")


def test_a_client_that_leaves_stops_its_decode_and_its_state_is_freed(app_url, app_module, predictor, monkeypatch,
                                                                     counted_race, wait_until):
    monkeypatch.setenv("GRADIO_IS_E2E_TEST", "1")           # gradio's heartbeat every 0.25 s instead of 15 s
    seen = counted_race
    leaving = Client(app_url, verbose=False)
    job = leaving.submit(PROMPT, "dico-tiny", "non-ar", 256, 16, ["vanilla"], "", True, api_name="/run")
    wait_until(lambda: seen["rounds"] >= 2, 120, "the race to start")
    assert leaving.session_hash in app_module.demo.state_holder
    leaving.close()                                         # the tab closes: its heartbeat ends
    wait_until(lambda: seen["closed"], 60, "the decode to stop")
    assert seen["rounds"] < 256
    wait_until(lambda: leaving.session_hash not in app_module.demo.state_holder, 30, "the session to be forgotten")
    job.cancel()
    later = Client(app_url, verbose=False)              # its finished events go when a later page closes
    later.predict(PROMPT, "dico-tiny", "non-ar", 8, 16, ["dico"], "", True, api_name="/run")
    later.close()
    events = app_module.demo._queue.event_ids_to_events
    wait_until(lambda: not [e for e in list(events.values()) if e.session_hash in (leaving.session_hash,
                                                                                later.session_hash)],
               30, "the finished events of closed pages to be dropped")


@pytest.mark.soak       # many sessions, one after another (11 s): CI runs it, the quick default tier does not
def test_gradios_per_session_tables_stay_within_the_session_cap(app_url, app_module, predictor, wait_until,
                                                                 monkeypatch):
    """Past ``state_session_capacity`` gradio 5.50 dropped a session's state but kept an entry per
    session in the tables beside it (finished events with their requests, message queues, last-use times), so
    memory grew with every new visitor; and four tables gained an entry per event (the queue's record of it, its
    finished task, the server's generator slot and reset set). Each run now trims them to the sessions whose state
    is kept and the events still pending."""
    from dico_ui.serve import session_tables
    demo = app_module.demo
    monkeypatch.setattr(demo.state_holder, "capacity", 3)
    for _ in range(7):                                           # 7 new sessions, past a cap of 3
        client = Client(app_url, verbose=False)
        out = client.predict(PROMPT, "dico-tiny", "non-ar", 4, 4, ["vanilla"], "", False, api_name="/run")
        assert out[0].startswith("Done")
        client.close()
    wait_until(lambda: session_tables(demo)["events"] <= 1, 30, "the last run's trim")
    tables = session_tables(demo)
    assert tables["state"] <= 3 and max(tables.values()) <= 3, tables
