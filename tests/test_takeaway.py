"""A race taken away, as an animated GIF sized for a slide and one self-contained HTML file that
replays it offline, from the page, the CLI and the API. Bad input (an unknown lane, a trace without steps, a path that
cannot be written) gets one line naming the field and writes nothing."""
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dico.trace import read_traces
from visuals.takeaway import frame_cells, frame_count, race_gif, write_takeaway

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "assets" / "ui" / "example_run.json"


@pytest.fixture(scope="module")
def lesson():
    return read_traces(LESSON.read_bytes())


@pytest.fixture(scope="module")
def written(lesson, tmp_path_factory):
    folder = tmp_path_factory.mktemp("takeaway")
    gif, page = folder / "race.gif", folder / "race.html"
    assert write_takeaway(lesson, gif, page) == [str(gif), str(page)]
    return gif, page


def test_the_gif_has_a_frame_a_round_of_the_longest_lane_and_a_last_frame(written, lesson):
    from PIL import Image
    gif, _ = written
    image = Image.open(gif)
    assert image.n_frames == max(t.nfe for t in lesson) + 1 == frame_count(lesson) == 97
    assert image.size == (1280, 720)                        # a 16:9 slide
    only_fast = Image.open(io.BytesIO(race_gif([t for t in lesson if t.name == "Fast-dLLM"])))
    assert only_fast.n_frames == 3 + 1


def test_a_frame_shows_each_lane_after_its_step_with_the_clash_marked(lesson):
    """Frame cells read the trace as the page's race does: after Top-4's step 23 its four clashing tokens carry the
    mark; before it, nothing does."""
    topk = next(t for t in lesson if t.name == "Top-4 per step")
    after = frame_cells(topk, 23)
    assert sorted(p for p, c in enumerate(after) if c.clash) == sorted(topk.steps[23].committed)
    assert not any(c.clash for c in frame_cells(topk, 22))
    assert "".join(c.text for c in after if c.text is not None and not c.padding).strip() == topk.text.strip()


def test_the_html_is_one_file_that_fetches_nothing(written, lesson):
    _, page = written
    from plotly.offline import get_plotlyjs
    text = page.read_text(encoding="utf-8")
    assert get_plotlyjs() in text                           # plotly's script inlined whole, once
    rest = text.replace(get_plotlyjs(), "")                 # the page around it names no outside resource
    assert "<script src" not in rest and "cdn.plot.ly" not in rest and "<link" not in rest
    assert "Plotly.newPlot" in text and text.count('class="figure"') == 3
    data = json.loads(text.split('<script id="race-data" type="application/json">')[1].split("</script>")[0])
    assert data["frames"] == 97 and [lane["label"] for lane in data["lanes"]] == [t.name for t in lesson]
    assert data["lanes"][1]["steps"][23]["x"] == pytest.approx(13.7, abs=0.1)       # Top-4's marked step


def test_bad_input_is_one_line_naming_the_field_and_writes_nothing(lesson, tmp_path):
    gif, page = tmp_path / "a.gif", tmp_path / "a.html"
    with pytest.raises(ValueError, match=r"^lanes: no run named 'Nope'; the runs are Vanilla, Top-4 per step"):
        write_takeaway(lesson, gif, page, lanes="DiCo,Nope")
    empty = read_traces(lesson[0].to_json())[0]
    empty.steps = []
    with pytest.raises(ValueError, match=r"^trace.steps: 'Vanilla' has no steps"):
        write_takeaway([empty], gif, page)
    with pytest.raises(ValueError, match=r"^html: cannot write .*no-such-folder.*its folder does not exist"):
        write_takeaway(lesson, gif, tmp_path / "no-such-folder" / "a.html")
    with pytest.raises(ValueError, match=r"^gif: .* must end in \.gif"):
        write_takeaway(lesson, tmp_path / "a.png", None)
    assert list(tmp_path.iterdir()) == []                   # the GIF was not written before the HTML's path failed


def test_the_cli_refuses_a_path_it_cannot_write_before_loading_a_model(capsys):
    import dico.__main__ as cli
    code = cli.main(["generate", "--prompt", "Pick one leader of Lily Howard, Don Gill and Sara Lake.",
                     "--gif", "/no/such/folder/run.gif"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["error: gif: cannot write '/no/such/folder/run.gif' (its folder does not exist)"]


@pytest.mark.subprocess
def test_the_cli_writes_both_take_aways_of_a_run_with_its_clash(tmp_path):
    """``python -m dico generate ... --gif run.gif --html run.html``: Top-4's lesson, its clash measured on the
    embedded model and marked."""
    from PIL import Image
    gif, page = tmp_path / "run.gif", tmp_path / "run.html"
    done = subprocess.run([sys.executable, "-m", "dico", "generate", "--prompt",
                           "Pick one leader of Lily Howard, Don Gill and Sara Lake.", "--method", "topk", "--k", "4",
                           "--gif", str(gif), "--html", str(page)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert Image.open(gif).n_frames == 24 + 1
    text = page.read_text(encoding="utf-8")
    data = json.loads(text.split('<script id="race-data" type="application/json">')[1].split("</script>")[0])
    marked = [s["x"] for s in data["lanes"][0]["steps"] if s["x"] is not None]
    assert marked and max(marked) > 1.0                                   # measured on the embedded model, marked


def test_the_page_and_the_api_take_the_race_away(app_module, lesson, tmp_path):
    from dico_ui import handlers as h
    out = h.take_away_ui(lesson)
    gif, page = out["takeaway"]
    assert gif.endswith(".gif") and page.endswith(".html") and Path(gif).stat().st_size > 0
    with pytest.warns(UserWarning):
        said = h.take_away_ui([])
    assert said == {"status": "**Cannot take the race away**: traces: there is no race on this page to take away; "
                              "run or replay one first"}
    api = h.take_away_api(str(LESSON), "Top-4 per step")
    assert len(api["takeaway"]) == 2
    import gradio as gr
    with pytest.raises(gr.Error, match="lanes: no run named 'Nope'"):
        h.take_away_api(str(LESSON), "Nope")


@pytest.mark.e2e
def test_in_a_browser_the_html_opens_from_a_file_and_plays_with_the_network_off(written, browser, artifacts):
    """The HTML opened from disk in Chromium with the network off: the figures draw, Play walks the rounds and the
    last frame shows Top-4's clash; no request leaves the file and no script fails."""
    from playwright.sync_api import expect
    _, page_path = written
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    context.set_offline(True)
    page = context.new_page()
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:", "blob:")) else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(page_path.as_uri())
    expect(page.locator(".js-plotly-plot")).to_have_count(3, timeout=60_000)
    expect(page.locator("#counter")).to_have_text("round 1 of 96")
    page.select_option("#speed", "80")
    page.locator("#play").click()
    expect(page.locator("#counter")).to_have_text("final answers", timeout=60_000)
    expect(page.locator(".lane").nth(1)).to_contain_text("clash +13.7 nats at step 23")
    assert page.locator(".lane").nth(1).locator(".tok.clash").count() == 4
    page.screenshot(path=str(artifacts / "takeaway-html.png"), full_page=True)
    context.close()
    assert requests == [] and errors == []
