"""The page in a real browser (Playwright + Debian chromium): run an example, read the figures, step through the
run, download the traces and replay them; no console errors and no request beyond 127.0.0.1."""
import json
import re
from urllib.parse import urlparse

import pytest

pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

pytestmark = pytest.mark.e2e
expect.set_options(timeout=30_000)   # plotly renders after the data arrives; slow on a busy 2-core machine
LONG = 180_000     # ms: the first run may also load the model, and CI machines can be busy


@pytest.fixture
def watched_page(page, app_url):
    """The app's page with every console error, page error and off-host request recorded."""
    problems = {"console": [], "outside": []}
    page.on("console", lambda m: problems["console"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems["console"].append(str(e)))
    page.on("request", lambda r: problems["outside"].append(r.url)
            if urlparse(r.url).hostname not in ("127.0.0.1", None) and not r.url.startswith(("data:", "blob:"))
            else None)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(app_url, timeout=120_000)
    expect(page.locator("#run")).to_be_visible(timeout=120_000)
    yield page, problems
    assert problems["outside"] == [], f"requests left 127.0.0.1: {problems['outside']}"
    assert problems["console"] == [], f"console errors: {problems['console']}"


def set_number(page, elem_id, value):
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")
    expect(page.locator(f"#{elem_id} input[type=range]")).to_have_value(str(value))


def plot(page, elem_id):
    return page.locator(f"#{elem_id} .js-plotly-plot")


def fills_its_box(page, elem_id):
    """The plot spans its component (plots drawn in a hidden tab must be resized when the tab opens)."""
    page.wait_for_function("""id => { const box = document.getElementById(id);
        const svg = box && box.querySelector('.main-svg');
        return !!svg && svg.getBoundingClientRect().width > 0.9 * box.getBoundingClientRect().width; }""",
                           arg=elem_id, timeout=15_000)


def test_run_step_download_and_replay(watched_page, artifacts, tmp_path):
    page, _ = watched_page
    expect(page).to_have_title("DiCo Explorer")

    # Run the first example with the default methods (Vanilla, Fast-dLLM, DiCo), 48 positions to keep it quick.
    page.locator("#examples .gallery-item").first.click()
    expect(page.locator("#prompt textarea")).not_to_have_value("")
    set_number(page, "gen-length", 48)
    page.click("#run")
    expect(page.locator("#status")).to_contain_text("Done", timeout=LONG)
    for method in ("Vanilla", "Fast-dLLM", "DiCo"):
        expect(page.locator("#answers")).to_contain_text(method)

    expect(plot(page, "trajectory-plot")).to_be_visible()
    expect(plot(page, "phase-plot")).to_be_visible()
    page.wait_for_timeout(500)
    page.screenshot(path=str(artifacts / "results.png"), full_page=True)

    page.get_by_role("tab", name="Comparison").click()
    expect(plot(page, "masked-plot")).to_be_visible()
    expect(plot(page, "side-by-side-plot")).to_be_visible()
    fills_its_box(page, "masked-plot")
    fills_its_box(page, "side-by-side-plot")
    expect(page.locator("#comparison-table")).to_contain_text("DiCo")
    page.wait_for_timeout(300)
    page.screenshot(path=str(artifacts / "results-comparison.png"), full_page=True)

    # The step view follows the slider.
    page.get_by_role("tab", name="Step by step").click()
    expect(plot(page, "step-plot")).to_be_visible()
    fills_its_box(page, "step-plot")
    expect(page.locator("#step-text")).to_contain_text("Step 0")
    before = page.locator("#step-plot .gtitle").first.text_content()
    set_number(page, "step-slider", 2)
    expect(page.locator("#step-text")).to_contain_text("Step 2", timeout=15_000)
    expect(page.locator("#step-plot .gtitle").first).not_to_have_text(before, timeout=15_000)
    page.click("#play")                                     # Play steps on by itself; Pause stops it
    expect(page.locator("#play")).to_contain_text("Pause")
    expect(page.locator("#step-text")).to_contain_text("Step 3", timeout=15_000)
    page.click("#play")
    expect(page.locator("#play")).to_contain_text("Play")
    page.screenshot(path=str(artifacts / "results-step.png"), full_page=True)

    # Download the traces of the run, upload them again: the figures come back without a model.
    with page.expect_download() as download_info:
        page.click("#download")
    saved = tmp_path / download_info.value.suggested_filename
    download_info.value.save_as(saved)
    bundle = json.loads(saved.read_text())
    assert bundle["schema"] == "dico-bundle/1"
    assert [t["method"] for t in bundle["traces"]] == ["vanilla", "fast", "dico"]

    # The shipped benchmark: accuracy against forward passes, and its table.
    page.get_by_role("tab", name="Benchmark").click()
    expect(plot(page, "bench-plot")).to_be_visible()
    fills_its_box(page, "bench-plot")
    expect(page.locator("#bench-table")).to_contain_text("Fast-dLLM")
    page.screenshot(path=str(artifacts / "results-benchmark.png"), full_page=True)

    page.get_by_role("tab", name="DiCo trajectory").click()
    with page.expect_file_chooser() as chooser:
        page.click("#upload")
    chooser.value.set_files(str(saved))
    expect(page.locator("#status")).to_contain_text("Replayed 3 trace(s)", timeout=30_000)
    expect(plot(page, "trajectory-plot")).to_be_visible()
    expect(page.locator("#answers")).to_contain_text("DiCo")


def test_bad_input_shows_a_message_and_the_page_keeps_working(watched_page):
    page, problems = watched_page
    page.click("#run")                                      # empty prompt
    expect(page.get_by_text(re.compile("prompt: is empty"))).to_be_visible(timeout=30_000)
    page.locator("#prompt textarea").fill("Here is a list: 2, 4, 6. Add 5 to each number.")
    page.locator("#methods").get_by_label("Vanilla").uncheck()
    page.locator("#methods").get_by_label("Fast-dLLM", exact=True).uncheck()
    page.click("#run")
    expect(page.locator("#status")).to_contain_text("Done", timeout=LONG)
    # gr.Error's modal is an expected message, not a console error; only real errors fail the test
    problems["console"] = [m for m in problems["console"] if "prompt: is empty" not in m]


def test_stop_ends_a_long_run_early(watched_page):
    page, _ = watched_page
    page.locator("#prompt textarea").fill("Tom has 5 apples. He buys 3 more apples. How many apples does Tom have now?")
    for name in ("Fast-dLLM", "DiCo"):
        page.locator("#methods").get_by_label(name, exact=True).uncheck()
    set_number(page, "gen-length", 256)
    page.click("#run")
    expect(page.locator("#status")).to_contain_text("Vanilla: step", timeout=LONG)
    page.click("#stop")
    expect(page.locator("#status")).to_contain_text("Stopped", timeout=30_000)
    expect(page.locator("#answers")).to_contain_text("stopped early")
    expect(plot(page, "trajectory-plot")).to_be_visible()
