"""A block diffusion model on the page (docs/decoding.md §11): choosing it sets the mode and block length to the one
way it decodes, and a run on it decodes in its own blocks whatever those controls say, the status saying so in one
line; a lane that cannot decode that way is refused naming the lane. The model is the SDAR-shaped stand-in
(tests/standins.py), offered in the model menu for the test as a hub model is, and already loaded."""
import pytest
import torch

import dico
from standins import block_model_folder

gr = pytest.importorskip("gradio")

from dico_ui import handlers as h  # noqa: E402
from dico_ui.request import CONTROLS  # noqa: E402

NAME, BLOCK = "sdar-standin", 4


class Session:
    def __init__(self, name="blocks"):
        self.session_hash = name


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    torch.set_num_threads(1)
    folder = block_model_folder(tmp_path_factory.mktemp("sdar") / NAME)
    return dico.load_model(folder, trust_remote_code=True, dtype="float32")


@pytest.fixture
def offered(app_module, standin, monkeypatch):
    """The stand-in in the menu as a hub model on a machine with a GPU, loaded and warm."""
    import dico_ui.models as models
    monkeypatch.setitem(models.HUB_MODELS, NAME, f"{NAME}, block diffusion")
    monkeypatch.setitem(models._models, NAME, standin)
    monkeypatch.setattr(models, "gpu_available", lambda: True)
    models.mark_warm(NAME)
    return standin


def run(mode="non-ar", block_length=32.0, methods=("vanilla", "fast", "dico"), gen_length=8.0):
    """The Run button with the page's other defaults (attention capture on: the model has none, the race skips it)."""
    return list(h.run_ui(Session(), "w1 w2", NAME, mode, gen_length, block_length, list(methods), True,
                         *[spec.default for _, spec in CONTROLS]))


def test_choosing_a_block_model_sets_semi_ar_in_its_blocks_and_says_why(offered):
    out = h.choose_model(NAME)
    assert (out["mode"], out["block_length"]) == ("semi-ar", BLOCK)
    assert f"A block diffusion model: it decodes semi-AR, one of its own blocks of {BLOCK} a window" in \
        out["model_note"]
    assert "mode" not in h.choose_model("dico-tiny") and "block diffusion" not in h.choose_model("dico-tiny")[
        "model_note"]


@pytest.mark.parametrize("mode, block_length, asked", [("non-ar", 32.0, "non-ar"),
                                                       ("semi-ar", 8.0, "semi-ar, block_length 8")])
def test_a_run_on_it_decodes_in_its_own_blocks_and_the_status_says_so(offered, mode, block_length, asked):
    """The page's default mode (non-AR) or another block length: not refused, decoded the one way the model can."""
    frames = run(mode, block_length)
    line = f"is a block diffusion model, so this run decodes semi-AR in its own blocks of {BLOCK} (asked: {asked})."
    assert line in frames[0]["status"]                                      # said from the start
    result = frames[-1]
    assert result["status"].startswith("Done") and line in result["status"], result["status"]
    for trace in result["traces"]:
        assert (trace.mode, trace.block_length, trace.model_block) == ("semi-ar", BLOCK, BLOCK)
        alone = dico.generate(offered, "w1 w2", trace.method, mode="semi-ar", block_length=BLOCK, gen_length=8)
        assert trace.response == alone.response
    assert result["step_view"] is not None


def test_a_run_already_in_its_blocks_says_nothing_more(offered):
    result = run("semi-ar", float(BLOCK))[-1]
    assert result["status"].startswith("Done") and "block diffusion" not in result["status"]


def test_gen_length_is_rounded_up_to_whole_blocks_and_said(offered):
    """A length asked for a whole-response decode is rounded up to whole blocks; asked in the model's own blocks, it
    must fit them, as on any model (a choice made in the model's terms that cannot be honoured is refused)."""
    result = run("non-ar", gen_length=6.0)[-1]
    assert f"blocks of {BLOCK}, gen_length 8 (asked: non-ar; gen_length 6)." in result["status"]
    assert all(t.gen_length == 9 for t in result["traces"])          # to the end of its block: 7 prompt tokens + 9
    with pytest.warns(UserWarning, match="gen_length 6 is not a multiple of block_length 4"):
        assert [list(out) for out in run("semi-ar", float(BLOCK), gen_length=6.0)] == [["status"]]


def test_a_lane_that_cannot_decode_in_blocks_is_refused_naming_it(offered):
    """ReMDM decodes the whole response at once: the one thing a block model cannot do."""
    with pytest.warns(UserWarning) as toasts:
        outputs = run(methods=("vanilla", "remdm"))
    assert len(toasts) == 1 and [list(out) for out in outputs] == [["status"]]
    status = outputs[0]["status"]
    assert "Lane 2 (ReMDM): mode:" in status and f"is a block diffusion model: it decodes semi-AR, in its own " \
        f"blocks of {BLOCK}" in status and "\n" not in status
