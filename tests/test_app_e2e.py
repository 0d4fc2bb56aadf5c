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
    page.wait_for_function("""() => { const a = document.querySelector('#answers');
        return a && a.querySelector('.lane .live') && a.querySelector('.tok.mask') && a.querySelector('.tok.new')
               && a.querySelectorAll('.lane').length === 4; }""", timeout=LONG, polling=20)
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
    expect(page.locator("#answers .lane .live").first).to_be_visible(timeout=LONG)
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
    expect(page.locator("#answers .lane")).to_have_count(0)          # the error cleared the old results
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
