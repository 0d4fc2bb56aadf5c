"""A block diffusion model on the page, in a real browser: choosing it in the menu sets semi-AR and its block, the
note says why, and a run from the page's default mode decodes in its blocks, the status saying so; the step view
draws its blocks and cache. The SDAR-shaped stand-in (tests/standins.py) is offered in the menu of a page built for
this module, as a hub model on a machine with a GPU."""
import pytest

pytest.importorskip("playwright")
from playwright.sync_api import expect  # noqa: E402

pytestmark = pytest.mark.e2e
LONG = 180_000              # ms: a busy 2-core machine
NAME, BLOCK = "sdar-standin", 4


@pytest.fixture(scope="module")
def blocks_url(app_module, predictor, tmp_path_factory):
    import torch

    import dico
    import dico_ui
    import dico_ui.models as models
    from conftest import free_port, wait_until
    from standins import block_model_folder
    torch.set_num_threads(1)
    standin = dico.load_model(block_model_folder(tmp_path_factory.mktemp("sdar") / NAME), trust_remote_code=True,
                              dtype="float32")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(models.HUB_MODELS, NAME, f"{NAME}, block diffusion")
        patch.setitem(models._models, NAME, standin)
        patch.setattr(models, "gpu_available", lambda: True)
        models.mark_warm(NAME)
        demo = dico_ui.build_demo()                     # its menu offers the stand-in
        demo.queue(**dico_ui.QUEUE)
        port = free_port()
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                    **app_module.LAUNCH)
        url = f"http://127.0.0.1:{port}/"
        wait_until(lambda: _answers(url), 30, f"the app at {url}")
        yield url
        demo.close()


def _answers(url: str) -> bool:
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_choosing_a_block_model_sets_its_blocks_and_a_run_says_how_it_decoded(page, blocks_url, artifacts):
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(blocks_url, timeout=120_000)
    expect(page.locator("#run")).to_be_visible(timeout=120_000)
    page.locator("#model input").click()
    page.get_by_role("option", name=f"{NAME}, block diffusion").click()
    expect(page.locator("#model-note")).to_contain_text(f"A block diffusion model: it decodes semi-AR, one of its own "
                                                        f"blocks of {BLOCK} a window")
    expect(page.locator("#mode input[value='semi-ar']")).to_be_checked()
    expect(page.locator("#block-length input")).to_have_value(str(BLOCK))
    page.locator("#mode input[value='non-ar']").check()                 # the visitor goes back to non-AR
    page.locator("#gen-length input").fill("8")
    page.locator("#gen-length input").press("Tab")
    page.locator("#prompt textarea").fill("w1 w2")
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("Done", timeout=LONG)
    expect(page.locator("#status")).to_contain_text(f"is a block diffusion model, so this run decodes semi-AR in its "
                                                    f"own blocks of {BLOCK} (asked: non-ar).")
    page.screenshot(path=str(artifacts / "block-model-run.png"), full_page=True)
    assert errors == []
