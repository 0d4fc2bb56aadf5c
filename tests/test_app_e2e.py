"""The page in a real browser (Playwright + Debian chromium): the first impression, the race with its coloured
stream, Stop then Run, the phone width, messages for bad input, the replay of the race. Screenshots go to
tests/artifacts/; no console errors and no request beyond 127.0.0.1."""
from urllib.parse import urlparse

import pytest

pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

pytestmark = pytest.mark.e2e
expect.set_options(timeout=30_000)   # plotly renders after the data arrives; slow on a busy 2-core machine
LONG = 180_000     # ms: CI machines can be busy
LIST_EXAMPLE = 4   # the first list item in assets/examples.json
DEFAULT_LANES = 4  # Vanilla, Top-4 per step, Fast-dLLM, DiCo (dico_ui.request.DEFAULT_METHODS)


def watch(page, app_url, width=1400, height=1000):
    problems = {"console": [], "outside": []}
    page.on("console", lambda m: problems["console"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems["console"].append(str(e)))
    page.on("request", lambda r: problems["outside"].append(r.url)
            if urlparse(r.url).hostname not in ("127.0.0.1", None) and not r.url.startswith(("data:", "blob:"))
            else None)
    page.set_viewport_size({"width": width, "height": height})
    page.goto(app_url, timeout=120_000)
    expect(page.locator("#run")).to_be_visible(timeout=120_000)
    expect(page.locator("#status")).to_contain_text("finished example run", timeout=120_000)   # what a visitor sees
    return problems


@pytest.fixture
def watched_page(page, app_url):
    """The app's page with every console error, page error and off-host request recorded."""
    problems = watch(page, app_url)
    yield page
    assert problems["outside"] == [], f"requests left 127.0.0.1: {problems['outside']}"
    assert problems["console"] == [], f"console errors: {problems['console']}"


def lanes(page):
    return page.locator("#answers .lane")


def status_of(page) -> str:
    """What the page said last (for a failure's message: a run waiting in line says so there)."""
    return page.locator("#status").inner_text(timeout=5_000)


def wait_live(page, lanes_live: int | None = None):
    """Wait for a live race frame (a lane still decoding); a timeout fails with what the status said meanwhile,
    so a run that waited in line, was refused or ended before any live frame says which."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    count = f" && a.querySelectorAll('.lane').length === {lanes_live}" if lanes_live else ""
    try:
        page.wait_for_function(f"""() => {{ const a = document.querySelector('#answers');
            return a && a.querySelector('.lane .live') && a.querySelector('.tok.mask') && a.querySelector('.tok.new')
                   {count}; }}""", timeout=LONG, polling=20)
    except PlaywrightTimeout:
        raise AssertionError(f"no live race frame within {LONG // 1000} s; the status said: {status_of(page)!r}; "
                             f"lanes on the page: {lanes(page).count()}") from None


def set_gen_length(page, value):
    box = page.locator("#gen-length input")
    box.fill(str(value))
    box.press("Tab")


def test_the_page_opens_on_a_finished_example_run(watched_page, artifacts):
    page = watched_page
    expect(page).to_have_title("DiCo Explorer")
    expect(lanes(page)).to_have_count(DEFAULT_LANES)
    expect(page.locator("#status")).to_contain_text("finished example run")
    expect(page.locator("#prompt textarea")).not_to_have_value("")
    for plot in ("trajectory-plot", "phase-plot", "cluster-plot"):
        expect(page.locator(f"#{plot} .js-plotly-plot")).to_be_visible()
    expect(lanes(page).first).to_contain_text("answer complete at step")
    expect(page.locator("#answers .lane-label")).to_have_text(["Vanilla", "Top-4 per step", "Fast-dLLM", "DiCo"])
    expect(page.locator("#answers .verdict.wrong")).to_have_count(1)       # the lesson: naive top-k broke it
    expect(lanes(page).nth(1).locator(".verdict")).to_have_text("wrong answer")
    expect(page.locator("#model-note")).to_contain_text("dico-tiny on cpu (float32)")
    page.screenshot(path=str(artifacts / "first-impression.png"), full_page=True)


def test_the_race_streams_confidence_coloured_answers_side_by_side(watched_page, artifacts):
    page = watched_page
    page.locator("#examples .gallery-item").nth(LIST_EXAMPLE).click()
    set_gen_length(page, 96)
    page.locator("#run").click()
    # While decoding: masked placeholders shaded by confidence, coloured commits, this step's commits outlined.
    wait_live(page, DEFAULT_LANES)
    page.locator("#answers").screenshot(path=str(artifacts / "race-live.png"))
    expect(page.locator("#status")).to_contain_text("Done", timeout=LONG)
    expect(lanes(page)).to_have_count(DEFAULT_LANES)
    for i in range(3):
        expect(lanes(page).nth(i)).to_contain_text("answer complete at step")
    colours = page.locator("#answers .lane .tok:not(.mask):not(.pad)").first.evaluate(
        "t => getComputedStyle(t).backgroundColor")
    assert colours not in ("", "rgba(0, 0, 0, 0)")
    expect(page.locator("#answers .tok.pad").first).to_be_visible()
    page.locator("#answers").screenshot(path=str(artifacts / "race-done.png"))


def test_stop_keeps_the_partial_answers_and_run_starts_again(watched_page, artifacts):
    page = watched_page
    page.locator("#examples .gallery-item").nth(LIST_EXAMPLE).click()
    set_gen_length(page, 256)
    page.locator("#run").click()
    wait_live(page)
    page.locator("#stop").click()
    expect(page.locator("#status")).to_contain_text("Stopped at step", timeout=LONG)
    expect(lanes(page)).to_have_count(DEFAULT_LANES)
    expect(page.locator("#answers")).to_contain_text("stopped at step")
    expect(page.locator("#answers .live")).to_have_count(0)
    expect(page.locator("#trajectory-plot .js-plotly-plot")).to_be_visible()      # the partial run is drawn
    page.screenshot(path=str(artifacts / "stopped.png"))
    set_gen_length(page, 16)
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("Done", timeout=LONG)
    expect(lanes(page)).to_have_count(DEFAULT_LANES)


def test_the_wait_for_a_decoder_shows_in_the_status(watched_page, app_url, artifacts, wait_until):
    from gradio_client import Client
    page = watched_page
    clients = [Client(app_url, verbose=False) for _ in range(2)]
    busy = [c.submit("Here is a list: 4, 9, 13. Add 3 to each number.", "dico-tiny", "non-ar", 256, 16,
                     ["vanilla", "fast", "dico"], "", True, api_name="/run") for c in clients]   # both decode slots
    try:
        wait_until(lambda: all(len(job.outputs()) > 1 for job in busy), 120, "two running API races")
        page.locator("#run").click()
        expect(page.locator("#status")).to_contain_text("Waiting for a free decoder: 2 runs ahead", timeout=LONG)
        page.screenshot(path=str(artifacts / "queue.png"), clip={"x": 0, "y": 550, "width": 1400, "height": 250})
        page.locator("#stop").click()                  # Stop while waiting: the run leaves the line
    finally:
        for job in busy:
            job.cancel()
    expect(page.locator("#status")).to_contain_text("Stopped before it started", timeout=LONG)
    expect(lanes(page)).to_have_count(DEFAULT_LANES)            # the example run is still on screen
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("Done", timeout=LONG)


def test_the_page_reads_at_phone_width(page, app_url, artifacts):
    problems = watch(page, app_url, width=390, height=844)
    expect(lanes(page)).to_have_count(DEFAULT_LANES)
    overflow = page.evaluate("() => document.documentElement.scrollWidth")
    assert overflow <= 392, f"the page is {overflow} px wide at a 390 px viewport"
    page.screenshot(path=str(artifacts / "phone-top.png"))
    lanes(page).first.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "phone-race.png"))
    box = lanes(page).first.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 392
    assert problems["console"] == [] and problems["outside"] == []


def test_bad_values_get_a_clear_message_and_an_outside_prompt_a_notice(watched_page, artifacts):
    page = watched_page
    page.locator("#settings").click()
    box = page.locator("#settings input[type=number]").first
    box.fill("-5")
    page.locator("#run").click()
    expect(page.locator(".toast-body").first).to_contain_text("must be", timeout=LONG)
    expect(page.locator("#status")).to_contain_text("Cannot run", timeout=LONG)
    page.screenshot(path=str(artifacts / "bad-value.png"))
    expect(page.locator("#answers .lane")).to_have_count(DEFAULT_LANES)   # a refused run keeps the example
    expect(page.locator(COMPONENT_ERROR)).to_have_count(0)
    box.fill("0")
    page.locator("#prompt textarea").fill("What is the capital of France?")
    set_gen_length(page, 8)
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("Done", timeout=LONG)
    expect(page.locator("#answers .banner")).to_contain_text("outside what dico-tiny was trained on")
    expect(page.locator("#answers .banner")).to_contain_text("no word problem")


def test_a_hub_model_that_cannot_load_says_so_and_the_embedded_model_stays(watched_page, artifacts):
    import dico_ui.models
    if dico_ui.models.gpu_available():
        pytest.skip("this machine has a GPU: the hub model would start downloading")
    page = watched_page
    page.locator("#model input").click()
    page.get_by_role("option", name="LLaDA-8B-Instruct").click()
    expect(page.locator(".toast-body").first).to_contain_text("embedded model dico-tiny keeps working")
    expect(page.locator("#model-note")).to_contain_text("could not be loaded here")
    expect(page.locator("#model input")).to_have_value("dico-tiny (embedded, runs anywhere)")
    page.screenshot(path=str(artifacts / "hub-model.png"))


def test_replay_the_race_from_the_traces_on_screen(watched_page):
    page = watched_page
    expect(lanes(page)).to_have_count(DEFAULT_LANES)
    page.locator("#speed input").fill("50")
    page.locator("#replay-race").click()
    expect(page.locator("#status")).to_contain_text("Replaying the race", timeout=LONG)
    expect(page.locator("#status")).to_contain_text("(end)", timeout=LONG)
    expect(lanes(page)).to_have_count(DEFAULT_LANES)


def test_a_second_lane_of_one_method_with_another_setting_races_under_its_label(watched_page, artifacts):
    page = watched_page
    page.locator("#examples .gallery-item").nth(LIST_EXAMPLE).click()
    set_gen_length(page, 32)
    page.locator("#lane-preset input").click()
    page.get_by_role("option", name="Vanilla vs Top-4 per step").click()
    expect(page.locator("#lane-2")).to_be_hidden()
    expect(page.locator("#lane-1-knob input")).to_have_value("4")
    page.locator("#add-lane").click()                        # a third lane, then the same method as the second
    expect(page.locator("#lane-2")).to_be_visible()
    page.locator("#lane-2-method input").click()
    expect(page.locator("#lane-2-knob")).to_contain_text("threshold")          # the added lane is Fast-dLLM's
    page.get_by_role("option", name="Top-k per step").click()
    # the new method's knob arrives from the server (blank, named k): type only once it has, or it blanks the 2
    expect(page.locator("#lane-2-knob")).not_to_contain_text("threshold")
    knob = page.locator("#lane-2-knob input")
    knob.fill("2")
    knob.press("Tab")
    expect(knob).to_have_value("2")
    page.locator("#lanes").screenshot(path=str(artifacts / "lanes.png"))
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("Done", timeout=LONG)
    expect(page.locator("#answers .lane-label")).to_have_text(["Vanilla", "Top-4 per step", "Top-2 per step"])
    expect(page.locator("#answers")).to_contain_text("step 8 of 8")
    page.locator("#answers").screenshot(path=str(artifacts / "race-lanes.png"))
    page.locator("#lane-1-remove").click()                  # the Top-2 row moves up
    expect(page.locator("#lane-2")).to_be_hidden()
    expect(page.locator("#lane-1-knob input")).to_have_value("2")


# ---------------------------------------------------------------------------- the page a visitor meets

PROJECTOR, PHONE = (1400, 900), (390, 844)
COMPONENT_ERROR = ".block .error"          # gradio's red "Error" pill on an output (toasts are outside blocks)


def boxes_of(page, selector: str) -> list[dict]:
    return [b for b in (e.bounding_box() for e in page.locator(selector).all()) if b and b["width"] and b["height"]]


def overlapping(a: dict, b: dict) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


def upload(page, path):
    with page.expect_file_chooser() as chooser:
        page.locator("#upload").click()
    chooser.value.set_files(str(path))


def judged_bundle(tmp_path, prompt: str, texts: list[str]):
    """The shipped example run under another prompt, its lanes' answers replaced: what the judge reads is the
    trace's text, so a replayed file tests right and wrong in the page without a model's whims."""
    import json
    from pathlib import Path
    bundle = json.loads((Path(__file__).resolve().parents[1] / "assets" / "ui" / "example_run.json").read_text())
    for trace, text in zip(bundle["traces"], texts):
        trace["prompt"], trace["text"] = prompt, text
    path = tmp_path / "judged.json"
    path.write_text(json.dumps(bundle))
    return path


@pytest.mark.parametrize("size", [PROJECTOR, PHONE], ids=["projector", "phone"])
def test_the_first_screen_shows_the_run_and_the_finished_race_starts_above_the_fold(page, app_url, artifacts, size):
    problems = watch(page, app_url, *size)
    expect(lanes(page)).to_have_count(DEFAULT_LANES)
    expect(page.locator("#trajectory-plot .js-plotly-plot")).to_be_visible()
    name = "projector" if size == PROJECTOR else "phone"
    page.screenshot(path=str(artifacts / f"{name}-first-screen.png"))
    assert page.locator("#run").bounding_box()["y"] + 40 <= size[1], "Run is below the first screen"
    if size == PROJECTOR:
        assert lanes(page).first.bounding_box()["y"] + 60 <= size[1], "the example race starts below the fold"
    assert page.locator(COMPONENT_ERROR).count() == 0
    assert problems["console"] == [] and problems["outside"] == []


def test_at_phone_width_the_phase_note_the_tabs_and_the_lanes_read(page, app_url, artifacts):
    watch(page, app_url, *PHONE)
    expect(page.locator("#phase-plot .js-plotly-plot")).to_be_visible()
    note = page.locator(".row > .phase-note")
    expect(note).to_be_visible()                          # the example run has a DiCo lane
    assert note.bounding_box()["width"] >= 300, "the Divide/Conquer/Finalize note is squeezed"
    tabs = page.locator("#results [role=tab]")
    expect(tabs).to_have_count(6)                         # none hidden behind "..."
    for i in range(6):
        expect(tabs.nth(i)).to_be_visible()
    method, remove = (page.locator(f"#lane-0-{part}").bounding_box() for part in ("method", "remove"))
    assert remove["y"] < method["y"] + method["height"], "a lane's remove button sits on a row of its own"
    assert remove["x"] + remove["width"] <= PHONE[0]
    for plot in ("trajectory-plot", "phase-plot"):
        title, frame = (page.locator(f"#{plot} {part}").first.bounding_box() for part in (".gtitle", ".main-svg"))
        assert title["x"] >= frame["x"] and title["x"] + title["width"] <= frame["x"] + frame["width"] + 1, plot
    assert page.locator("#trajectory-plot .modebar-container").first.is_hidden()      # not over the title
    note.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "phone-phase-note.png"))
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE[0] + 2


@pytest.mark.parametrize("size", [PROJECTOR, PHONE], ids=["projector", "phone"])
def test_the_benchmark_axis_titles_do_not_overlap_and_table_words_stay_whole(page, app_url, artifacts, size):
    watch(page, app_url, *size)
    page.get_by_role("tab", name="Benchmark").click()
    expect(page.locator("#bench-plot .js-plotly-plot")).to_be_visible()
    shared = page.locator("#bench-plot .annotation").filter(has_text="NFE")     # one title under every panel
    expect(shared).to_have_count(1)
    page.wait_for_timeout(500)                           # the tab's resize redraws the figure once more
    titles = boxes_of(page, "#bench-plot .xtitle") + [b for b in (e.bounding_box() for e in shared.all()) if b]
    ticks = boxes_of(page, "#bench-plot .xtick text")
    assert titles, "the benchmark figure has no x-axis title"
    for i, a in enumerate(titles):
        assert not any(overlapping(a, b) for b in titles[i + 1:] + ticks), "x-axis titles overlap"
    cell = page.locator("#bench-table th").first
    assert cell.evaluate("e => getComputedStyle(e).wordBreak") == "normal"
    page.screenshot(path=str(artifacts / f"benchmark-{size[0]}.png"), full_page=True)


def test_a_wrong_answer_to_any_judgeable_prompt_is_marked_wrong_and_gets_no_place(watched_page, artifacts, tmp_path):
    page = watched_page
    expect(lanes(page)).to_have_count(DEFAULT_LANES)
    upload(page, judged_bundle(tmp_path, "Pick two of these: kites, drums, hats and cups.",
                               ["I pick kites and cups.", "I pick dres and dres.", "I pick hats and drums.",
                                "I pick drums and cups."]))
    expect(page.locator("#status")).to_contain_text("Replayed", timeout=LONG)
    wrong = lanes(page).nth(1)
    expect(wrong.locator(".verdict.wrong")).to_have_text("wrong answer")
    expect(wrong.locator(".place")).to_have_count(0)                       # wrong is not "3rd"
    expect(page.locator("#answers .verdict.right")).to_have_count(3)
    expect(page.locator("#answers .judge-note")).to_have_count(0)
    page.locator("#answers").screenshot(path=str(artifacts / "judged-typed-prompt.png"))
    upload(page, judged_bundle(tmp_path, "Write a poem about kites.", ["Kites fly."] * 4))
    expect(page.locator("#answers .judge-note")).to_contain_text("Not judged")
    expect(page.locator("#answers .verdict")).to_have_count(0)


def test_after_a_bad_upload_a_good_run_leaves_no_error_on_the_page(watched_page, artifacts, tmp_path):
    page = watched_page
    bad = tmp_path / "garbage.json"
    bad.write_text('{"garbage": 1')
    upload(page, bad)
    expect(page.locator(".toast-body").first).to_contain_text("not valid JSON", timeout=LONG)
    page.locator("#examples .gallery-item").nth(LIST_EXAMPLE).click()
    set_gen_length(page, 16)
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("Done", timeout=LONG)
    expect(lanes(page)).to_have_count(DEFAULT_LANES)
    expect(page.locator(COMPONENT_ERROR)).to_have_count(0)
    page.screenshot(path=str(artifacts / "good-run-after-bad-upload.png"), full_page=True)
