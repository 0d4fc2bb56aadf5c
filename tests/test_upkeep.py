"""What keeps the public demo up, without a server: the stores that forget (a clock moved by hand), the line of
runs, the download clean-up racing other processes, a closed page ending its run, a fault mid-decode, Stop when
the race runs in another process, and a broken shipped example."""
import multiprocessing
import os
import threading
import time
from dataclasses import replace

import pytest

from dico_ui import limits
from dico_ui.bounded import Bounded, Line, about
from dico_ui.limits import LIMITS, Limits

gr = pytest.importorskip("gradio")

from dico_ui import downloads, runs  # noqa: E402
from dico_ui import handlers as h  # noqa: E402

PROMPT = "Tom has 5 apples. He buys 3 more apples. How many apples does Tom have now?"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Session:
    def __init__(self, name):
        self.session_hash = name


def close_page(name):
    """gradio's unload for this page: an async handler that never awaits, run to its end here (a test may already
    be inside an event loop, so no asyncio.run)."""
    with pytest.raises(StopIteration):
        runs.closed(Session(name)).send(None)


def run_api(session, gen_length=96, methods=("vanilla", "fast", "dico")):
    return h.run_api(Session(session), PROMPT, "dico-tiny", "non-ar", gen_length, 32, list(methods), "", True)


# ============================================================================ stores that forget

def test_a_bounded_table_forgets_the_least_recently_used_past_its_size():
    table = Bounded(size=2, ttl=100, clock=Clock())
    table["a"], table["b"] = 1, 2
    assert table.get("a") == 1                    # "a" is now the most recently used
    table["c"] = 3
    assert "b" not in table and table.get("a") == 1 and table.get("c") == 3 and len(table) == 2


def test_a_bounded_table_forgets_an_entry_its_ttl_after_last_use():
    clock = Clock()
    table = Bounded(size=10, ttl=60, clock=clock)
    table["a"], table["b"] = 1, 2
    clock.now = 50
    assert table.get("a") == 1                    # read at 50: kept until 110
    clock.now = 61
    assert "b" not in table and table.get("a") == 1
    clock.now = 200
    assert len(table) == 0 and table.pop("a", "gone") == "gone"


def test_the_line_admits_its_size_decodes_in_order_and_refuses_the_rest():
    clock = Clock()
    line = Line(decoders=1, size=3, guess_s=10, clock=clock)
    first, second, third = (line.join(s) for s in ("a", "b", "c"))
    assert line.join("d") is None                                  # full: refused at once
    assert line.wait(first, 0) and not line.wait(third, 0) and not line.wait(second, 0)
    assert line.ahead(second) == 1 and line.ahead(third) == 2 and line.holds("c") == "waiting"
    assert line.holds("a") == "decoding" and line.holds("d") is None
    assert line.wait_s(line.ahead(third)) == 20                    # two runs of the 10 s guess before it
    clock.now = 4
    line.leave(first)                                              # took 4 s: the estimate follows
    assert line.run_s() == 4 and line.wait(second, 0) and not line.wait(third, 0)
    line.leave(third)                                              # gave up waiting: its place is free
    assert not line.holds("c") and line.join("d") is not None


def test_every_cap_lives_in_limits_and_docs_serving_lists_it():
    from pathlib import Path
    page = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text()
    for name, value in LIMITS.rows():
        assert f"| `{name}` | {value:g} |" in page, name
    assert isinstance(LIMITS, Limits) and about(2) == "a few seconds" and about(41) == "about 40 s"


ARENAS = """
import ctypes, runpy, sys, threading
runpy.run_path(sys.argv[1])["bound_allocator"](int(sys.argv[2]))
gate = threading.Barrier(8)

def allocate():                     # eight threads alive at once, each calling malloc (blocks past pymalloc's 512 B)
    gate.wait()
    kept = [bytearray(4000) for _ in range(100)]
    gate.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
ctypes.CDLL(None).malloc_stats()    # one "Arena n:" section an arena, on stderr
"""


@pytest.mark.skipif(not limits._glibc(), reason="malloc arenas are glibc's")
def test_the_app_caps_glibcs_malloc_arenas_however_many_threads_allocate():
    """A Space cannot set MALLOC_ARENA_MAX for its server, so the app calls mallopt itself (``bound_allocator``, at
    import): eight threads allocating at once get an arena each by glibc's default, and share
    ``LIMITS.malloc_arenas`` with the cap. (limits.py is run alone, so the test process's own arenas do not count.)"""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}

    def arenas(cap: int) -> int:
        done = subprocess.run([sys.executable, "-c", ARENAS, limits.__file__, str(cap)], capture_output=True,
                              text=True, timeout=60, check=True, env=env)
        return sum(line.startswith("Arena ") for line in done.stderr.splitlines())
    # glibc's default: the main arena and one a thread (it fixes a limit, 8 a core, only past 8 arenas)
    assert arenas(0) == 9 and arenas(LIMITS.malloc_arenas) == LIMITS.malloc_arenas == 2


# ============================================================================ downloads on a shared folder

def _churn(folder, seconds, errors):
    """What a server does with the folder: write a bundle, clean; here with old files appearing all the time."""
    from dico.trace import Trace
    trace = Trace(model="m", method="vanilla", mode="non-ar", settings={}, prompt="p", prompt_length=1,
                  gen_length=1, block_length=None)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            path = downloads.write_bundle([trace], folder)
            os.utime(path, (0, 0))              # looks a day old at once: every process races to remove it
            downloads.clean(folder)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        errors.put(repr(exc))


@pytest.mark.soak
def test_clean_up_never_fails_whatever_other_processes_remove(tmp_path):
    """Two 'servers' (processes) and two concurrent runs (threads) write and clean the same folder, every file
    old at once, so they race to list, stat and remove the same files: nothing raises, and a young file is
    never removed."""
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    servers = [ctx.Process(target=_churn, args=(tmp_path, 3.0, errors)) for _ in range(2)]
    for server in servers:
        server.start()
    threads = [threading.Thread(target=_churn, args=(tmp_path, 3.0, errors)) for _ in range(2)]
    for thread in threads:
        thread.start()
    young = downloads.write_bundle(h.read_traces(h.EXAMPLE_RUN.read_bytes()), tmp_path)
    for worker in threads + servers:
        worker.join(60)
    assert errors.empty(), errors.get()
    assert [str(p) for p in tmp_path.iterdir()] == [young]


def test_clean_up_keeps_a_cap_and_spares_young_files(tmp_path):
    now = time.time()
    for i in range(6):
        path = tmp_path / f"dico-traces-{i}.json"
        path.write_text("{}")
        os.utime(path, (now - 1000 * i, now - 1000 * i))          # file i is i*1000 s old
    assert downloads.clean(tmp_path, now=now, keep=2, ttl=4500, grace=1500) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dico-traces-0.json", "dico-traces-1.json"]
    assert downloads.clean(tmp_path / "missing", now=now) == 0


# ============================================================================ runs that must end

def test_a_closed_page_stops_its_decode_before_the_next_step_and_draws_nothing(predictor, counted_race):
    seen = counted_race
    stream = run_api("closing")
    next(stream)                                         # cleared
    assert "decoding" in next(stream)["answers"]        # a live frame
    computed = seen["rounds"]
    close_page("closing")                  # gradio's unload for this page
    assert list(stream) == []                            # no figures for nobody
    assert seen["rounds"] == computed and seen["closed"] and not runs.LINE.holds("closing")


def test_a_closed_pages_waiting_run_leaves_the_line(app_module, predictor, monkeypatch):
    monkeypatch.setattr(runs, "LINE", Line(decoders=1, size=2))
    busy = runs.LINE.join("someone")
    assert runs.LINE.wait(busy, 0)                       # the only decoder is taken
    stream = run_api("queued-then-closed")
    assert next(stream)["status"].startswith("Waiting for a free decoder: 1 run ahead")
    close_page("queued-then-closed")
    assert list(stream) == [] and not runs.LINE.holds("queued-then-closed")


def test_a_waiting_run_says_its_words_once_until_they_change(app_module, predictor, monkeypatch):
    """Every message is work on gradio's event loop, which a burst's answers need: a run in line re-checks Stop and
    its turn every second but sends nothing while its words stay the same."""
    monkeypatch.setattr(runs, "LINE", Line(decoders=1, size=2))
    busy = runs.LINE.join("someone")
    assert runs.LINE.wait(busy, 0)                       # the only decoder is taken
    stream = run_api("patient")
    assert next(stream)["status"].startswith("Waiting for a free decoder: 1 run ahead")
    threading.Timer(2.5, h.stop, [Session("patient")]).start()          # after two or three checks of the line
    started = time.monotonic()
    assert next(stream)["status"] == "Stopped before it started: you left the line."
    assert time.monotonic() - started >= 2.0 and list(stream) == [] and not runs.LINE.holds("patient")


def test_a_run_past_the_time_limit_stops_with_its_partial_answers(app_module, predictor, monkeypatch):
    monkeypatch.setattr(runs, "LIMITS", replace(LIMITS, run_seconds=0.0))       # over after the first step
    *_, last = run_api("slow", gen_length=48)
    result = last
    assert result["status"].startswith("Stopped at the time limit")
    assert all(t.stopped for t in result["traces"]) and result["trajectory"] is not None


def test_a_full_line_refuses_at_once_with_the_wait(app_module, predictor, monkeypatch):
    monkeypatch.setattr(runs, "LINE", Line(decoders=1, size=1, guess_s=30))
    runs.LINE.join("someone")
    monkeypatch.setattr(h, "check", lambda *a: pytest.fail("a full line read the request"))      # said first
    with pytest.raises(gr.Error, match=r"The demo is busy: .* wait about 30 s\. Please try again"):
        list(run_api("late"))
    from dico_ui.request import CONTROLS
    with pytest.warns(UserWarning, match="The demo is busy"):
        page = list(h.run_ui(Session("late"), PROMPT, "dico-tiny", "non-ar", 48.0, 16.0, ["dico"], True,
                             *[spec.default for _, spec in CONTROLS]))
    assert len(page) == 1 and page[0]["status"].startswith("**Busy**: The demo is busy")      # the page: status + toast


def test_a_request_the_library_refuses_as_it_starts_keeps_what_the_page_shows(app_module, predictor, monkeypatch):
    """The library may refuse a request only once a decoder is free (a ValueError before the first frame): the
    page then says so in the status and one toast, and no other output is replaced (the last run stays)."""
    def refused(req):
        raise ValueError("prompt: refused by the library")
        yield                                            # a generator, as the race is
    monkeypatch.setattr(h, "decode_race", refused)
    from dico_ui.request import CONTROLS
    with pytest.warns(UserWarning, match="refused by the library"):
        page = list(h.run_ui(Session("refused"), PROMPT, "dico-tiny", "non-ar", 48.0, 16.0, ["dico"], True,
                             *[spec.default for _, spec in CONTROLS]))
    assert [list(out) for out in page] == [["status"], ["status"]]
    assert page[0]["status"].startswith("Starting…")
    assert page[1]["status"] == "**Cannot run**: prompt: refused by the library"
    assert runs.LINE.holds("refused") is None


def test_a_model_error_mid_decode_names_what_failed_and_keeps_the_partial_run(app_module, predictor, monkeypatch,
                                                                               caplog):
    forward, calls = predictor.forward, {"dico": 0}

    def faulty(ids, attentions=False, **kwargs):
        if attentions:                                   # only the DiCo run captures attention
            calls["dico"] += 1
            if calls["dico"] == 3:
                raise RuntimeError("injected fault")
        return forward(ids, attentions=attentions, **kwargs)
    monkeypatch.setattr(predictor, "forward", faulty)
    *_, last = run_api("faulty")
    result = last
    assert result["status"].startswith("**The run failed**: DiCo failed at step 3 (RuntimeError: injected fault)")
    assert [t.nfe for t in result["traces"]] == [3, 3, 2] and all(t.stopped for t in result["traces"])
    assert result["trajectory"] is not None and "stopped at step 2" in result["answers"]
    assert "injected fault" in caplog.text                                    # the operator sees it logged
    monkeypatch.setattr(predictor, "forward", forward)
    assert list(run_api("faulty", gen_length=8))[-1]["status"].startswith("Done")      # the next run is fine


# ============================================================================ Stop across a worker process

def _work(fn, args, results, stop, rounds):
    """The worker side of spaces.GPU for a generator (spaces/zero/wrappers.py): iterate, send each result back
    pickled, and close the generator at the first step after the caller closed its stream."""
    gen = fn(*args)
    for item in gen:
        rounds.value += 1
        if stop.is_set():
            gen.close()
            break
        results.put(("item", item))
    results.put(("end", None))


def in_worker(fn, rounds):
    """``fn`` run as ZeroGPU runs a @spaces.GPU generator: in another process. The queue holds one result, so how
    far the worker ran ahead of the caller is bounded and measurable (spaces' queue is unbounded)."""
    def handler(*args):
        ctx = multiprocessing.get_context("fork")
        results, stop = ctx.Queue(maxsize=1), ctx.Event()
        worker = ctx.Process(target=_work, args=(fn, args, results, stop, rounds))
        worker.start()
        try:
            while (message := results.get(timeout=120))[0] == "item":
                yield message[1]
        finally:
            stop.set()
            deadline = time.monotonic() + 60
            while worker.is_alive() and time.monotonic() < deadline:
                while not results.empty():
                    results.get()
                worker.join(0.1)
            if worker.is_alive():               # a stuck worker fails the test instead of hanging the suite
                worker.kill()
                raise AssertionError("the worker process did not stop within 60 s of Stop")
    return handler


@pytest.mark.subprocess
def test_stop_reaches_a_race_running_in_a_worker_process(app_module, predictor, monkeypatch):
    rounds = multiprocessing.get_context("fork").Value("i", 0)
    monkeypatch.setattr(h, "decode_race", in_worker(h.decode_race, rounds))
    stream = run_api("worker", gen_length=192)
    next(stream)
    live = next(stream)
    assert "decoding" in live["answers"]
    h.stop(Session("worker"))
    *_, last = stream
    result = last
    traces = result["traces"]
    assert result["status"].startswith("Stopped at step")
    seen = int(result["status"].split("Stopped at step ")[1].split(";")[0])
    assert rounds.value <= seen + 3 < 192                       # the worker stopped within a step or two
    vanilla = traces[0]                                         # one position a step: still decoding at Stop
    assert vanilla.method == "vanilla" and vanilla.stopped and vanilla.nfe == seen
    decoded = [t for t in vanilla.response if t != predictor.mask_id]                       # finished here
    assert len(vanilla.response) == 192 and len(decoded) == seen and vanilla.vocab and vanilla.answer_nfe == seen
    assert all(t.stopped or t.nfe < seen for t in traces)
    assert result["trajectory"] is not None and "stopped at step" in result["answers"]


# ============================================================================ a broken shipped example

def test_a_missing_or_corrupt_shipped_example_still_opens_the_page(app_module, monkeypatch, tmp_path):
    from dico_ui import layout
    shipped, notice = layout.load_examples()                    # the shipped file: its prompts, no notice
    assert shipped and all(isinstance(e["prompt"], str) for e in shipped) and notice == ""
    broken = tmp_path / "broken.json"
    broken.write_text('{"examples": [{"no prompt": 1}')
    unprompted = tmp_path / "unprompted.json"
    unprompted.write_text('{"examples": [{"no prompt": 1}]}')
    for path in (broken, unprompted, tmp_path / "missing.json"):
        monkeypatch.setattr(h, "EXAMPLE_RUN", path)
        out = h.first_impression()
        assert "could not be read" in out["status"] and out["traces"] == [] and "prompt" not in out
        examples, notice = layout.load_examples(path)
        assert examples == [] and "could not be read" in notice
    monkeypatch.setattr(layout, "EXAMPLES", broken)
    demo = layout.build_demo()
    notices = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "examples-notice"]
    assert len(notices) == 1 and "could not be read" in notices[0].value


# ============================================================================ one typed request, pickled

def test_a_request_is_parsed_once_into_frozen_dataclasses_that_pickle_for_the_worker(app_module, predictor):
    """ZeroGPU runs ``decode_race`` in a worker process: its argument and every frame cross pickled. The request is
    parsed once; the race reads its typed lanes and checks nothing again."""
    import dataclasses
    import pickle

    from dico_ui.race import race
    from dico_ui.request import RunRequest, api_request
    req = api_request(PROMPT, "dico-tiny", "semi-ar", 16.0, 8.0, ["vanilla", {"method": "dico", "label": "mine"}],
                      '{"dico": {"authors_code": true}}', True)
    assert isinstance(req, RunRequest) and pickle.loads(pickle.dumps(req)) == req
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.gen_length = 32
    assert req.block_length == 8 and req.lanes[1].label == "mine" and req.lanes[1].settings.short_right_growth
    frames = list(race(predictor, pickle.loads(pickle.dumps(req))))
    last = pickle.loads(pickle.dumps(frames[-1]))
    assert last.finished and [t.label for t in last.traces] == ["Vanilla", "mine"]
    assert last.traces[1].settings["authors_code"] is True


# ============================================================================ a run that may outlast the limit

def test_a_one_token_a_step_lane_that_may_outlast_the_time_limit_is_said_before_the_run(app_module, predictor):
    """Vanilla at gen 256 takes 256 passes; at the pace runs have here that may pass the time limit, so
    the page says so before the run (a toast and the status), and says nothing for a race that fits."""
    from dico_ui.request import api_request, too_long
    long = api_request(PROMPT, "dico-tiny", "non-ar", 256, 32, ["vanilla", "fast", "dico"], "", True)
    said = too_long(long, pass_s=0.2)
    assert said.startswith("gen_length: Vanilla takes 256 forward passes at gen_length 256 (one token a step)")
    assert "stops at 60 s, so it may not finish" in said
    assert too_long(long, pass_s=0.01) == ""                                      # a fast server: nothing to say
    short = api_request(PROMPT, "dico-tiny", "non-ar", 32, 32, ["vanilla", "fast"], "", True)
    assert too_long(short, pass_s=0.2) == ""
    topk = api_request(PROMPT, "dico-tiny", "non-ar", 256, 32, [{"method": "topk", "settings": {"k": 1}}], "", True)
    assert "Top-1 per step takes 256 forward passes" in too_long(topk, pass_s=0.2)
    adaptive = api_request(PROMPT, "dico-tiny", "non-ar", 256, 32, ["fast", "dico"], "", True)
    assert too_long(adaptive, pass_s=1.0) == ""                 # the adaptive rules finish sooner: no promise broken


def test_the_page_warns_before_a_long_run_and_says_it_in_the_status(app_module, predictor, monkeypatch):
    monkeypatch.setattr(runs, "_paces", __import__("collections").deque([1.0]))       # 1 s a pass and position
    stream = run_api("long", gen_length=64, methods=("vanilla",))
    with pytest.warns(UserWarning, match="Vanilla takes 64 forward passes"):
        first = next(stream)
    assert first["status"].startswith("Starting…") and "may not finish" in first["status"]
    stream.close()


# ============================================================================ the event loop stays free

def test_figures_leave_the_handler_as_json_so_gradios_event_loop_only_sends_them():
    import gradio as gr
    import plotly.graph_objects as go

    from dico_ui.wiring import keyed
    figure = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    names = {"status": "status", "trajectory": "trajectory", "later": "later"}

    def handler():
        yield {"status": "Done", "trajectory": figure, "later": gr.update(value=figure, visible=True)}
    out = next(keyed(handler, names)())
    assert out["status"] == "Done"
    sent = out["trajectory"]
    assert sent.type == "plotly" and sent.plot == figure.to_json()       # what gr.Plot's postprocess would make
    assert gr.Plot().postprocess(sent) is sent                            # and gradio passes it as it is
    assert out["later"]["visible"] and out["later"]["value"].plot == figure.to_json()


def test_a_new_session_is_gradios_own_with_each_blocks_config_computed_when_read(app_module):
    """A new visitor's session holds what gradio 5.50's own ``SessionState`` holds, field for field and config for
    config, but computes no block's config until one is read (gradio computed all 257 of them per new session, on
    its event loop)."""
    from gradio.state_holder import SessionState
    demo = app_module.demo
    lazy = SessionState(demo)
    eager = SessionState.__new__(SessionState)
    SessionState.__init__.eager(eager, demo)
    assert SessionState.__init__.lazy_config and vars(lazy).keys() == vars(eager).keys()
    assert not lazy.config_values._values                                  # nothing computed yet
    some = next(iter(eager.config_values))
    assert lazy.config_values[some] == eager.config_values[some] and len(lazy.config_values._values) == 1
    for state in (lazy, eager):                  # what gradio does as a handler updates a value or a component
        state._update_value_in_config(some, "changed")
    assert list(lazy.components) == list(eager.components)               # the deep link's read: same order, same
    assert some in lazy.config_values and -1 not in lazy.config_values


def test_an_output_a_frame_leaves_out_is_sent_as_gradio_sends_it_without_building_a_component(app_module):
    """A race frame gives a few of the run's outputs; gradio 5.50 built a new component of every other one on its
    event loop, each frame. The outputs sent are the pinned gradio's own, and no component is built for those left
    out."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    import gradio as gr
    from gradio.blocks import Blocks
    from gradio.state_holder import SessionState
    demo = app_module.demo
    run = next(fn for fn in demo.fns.values() if fn.api_name == "run")
    status, answers = (next(b for b in run.outputs if getattr(b, "elem_id", None) == name)
                       for name in ("status", "answers"))
    frame = {status: "**Busy**: try again", answers: "<p>the race</p>"}
    assert Blocks.postprocess_data.cheap_skips and len(run.outputs) > 10
    ours, gradios = SessionState(demo), SessionState(demo)

    def postprocessed(how, state):             # in a thread of its own: a browser test may hold this one's loop
        with ThreadPoolExecutor(1) as alone:
            return alone.submit(asyncio.run, how(demo, run, dict(frame), state)).result()
    sent = postprocessed(Blocks.postprocess_data, ours)
    built = []
    real = gr.Plot.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        real(self, *args, **kwargs)
    gr.Plot.__init__ = counted
    try:
        assert postprocessed(Blocks.postprocess_data, ours) == sent and built == []
        assert postprocessed(Blocks.postprocess_data.everything, gradios) == sent
        assert built                                       # gradio's own builds the plots it leaves as they are
    finally:
        gr.Plot.__init__ = real
    assert sent[run.outputs.index(status)] == "**Busy**: try again"
    kept = [value for block, value in zip(run.outputs, sent) if block not in frame and not block.stateful]
    assert kept == [{"__type__": "update"}] * len(kept)
