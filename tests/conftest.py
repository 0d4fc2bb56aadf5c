"""Shared test setup: no outbound traffic, the `noisy` pass, the app served on a free local port, Playwright on
the system chromium.

The app fixtures import gradio lazily, so figure tests and library tests that decode nothing never pay for it.
"""
import os
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

# Keep pytest's rewritten test modules and the project's bytecode in __pycache__ (git ignores it) even where the
# environment sets PYTHONDONTWRITEBYTECODE (this machine's image does): otherwise every worker of every run rewrites
# the suite's ~2,600 asserts again. Measured here: collecting takes 12.0 s without the cache and 7.9 s with it.
sys.dont_write_bytecode = False

# Before anything imports gradio or huggingface_hub (see /work/shared/notes/gradio-testing.md).
for _key in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ.setdefault(_key, "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# A process per core (pytest-xdist) with torch's thread per core: while both workers decode, four OpenMP threads spin
# on two cores. Measured here, 100 forward passes of the embedded model (2 x 130 tokens) in each of two processes at
# once: 96 s with two spinning threads each, 6-7 s with one thread, 7.0-7.4 s with two threads that sleep while they
# wait (OMP_WAIT_POLICY=PASSIVE); alone, one process takes 3.6, 6.2 and 4.9 s. Sleeping threads keep most of the
# second core's gain when one worker runs alone (the last long file) and lose little when both run.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"


def pytest_collection_modifyitems(config, items):
    """Under ``-p noise_plugin`` (../shared/tools: CPU noise on every BertForMaskedLM logit) the emulated
    accelerator's tests cannot run: the plugin adds a CPU tensor to the accelerator's logits, which the emulation
    refuses as CUDA would. They compare a decode on the accelerator with the same computation on the CPU, which
    no CPU's float noise can tell apart; the golden, batch and example decodes carry the noise instead."""
    if not config.pluginmanager.hasplugin("noise_plugin"):
        return
    skip = pytest.mark.skip(reason="the noise plugin's CPU noise tensor cannot join accelerator logits")
    for item in items:
        if item.nodeid.startswith("tests/test_devices.py"):
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", r"ignore:.*Gradio 6\.0:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:Session-scoped fixtures defined as instance methods")
    config.addinivalue_line("filterwarnings", "ignore:'HTTP_422_UNPROCESSABLE_ENTITY' is deprecated:DeprecationWarning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, timeout: float = 60.0, what: str = "a condition"):
    """Poll ``condition`` until it returns something truthy (returned), or fail after a generous deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(name="wait_until", scope="session")
def wait_until_fixture():
    """``wait_until(condition, timeout, what)`` for tests (conftest is not importable without sys.path tricks)."""
    return wait_until


@pytest.fixture(scope="session")
def app_module():
    """The app module, imported once per session (gradio takes seconds to import). Runs get 10 minutes instead of
    the public server's minute: a test machine shared with other work decodes several times slower, and a race
    stopped by the clock is not what those tests check (tests/test_upkeep.py checks the limit itself)."""
    from dataclasses import replace

    import app
    from dico_ui import runs
    runs.LIMITS = replace(runs.LIMITS, run_seconds=600.0)
    return app


@pytest.fixture(scope="session")
def predictor():
    """The embedded model, loaded once for the whole session by every test that decodes with it: the app's shared
    instance (the very object the served app decodes with, so an app test may patch it), which is what
    ``dico.load_model()`` gives (attention maps available: eager attention, as the golden decodes were made),
    warmed up as the app warms it at start. Modules that need another model (a stand-in, one pinned to
    ``DICO_TEST_DEVICE`` in float32) define their own."""
    import dico_ui
    dico_ui.warm_up()
    return dico_ui.get_predictor()


@pytest.fixture(scope="session")
def remote_folders(tmp_path_factory) -> dict:
    """LLaDA- and Dream-shaped model folders with their own code (tests/standins.py: REMOTE_VARIANTS, each also with
    one layer as "llada-1" / "dream-1"), built without the tests' end-of-text push (the wrapper adds it after the
    head, where a cached forward does not look), so cached and uncached passes compute the same function."""
    import torch

    from standins import REMOTE_LAYERS, REMOTE_VARIANTS, remote_model_folder

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("remote-models")
    made = {}
    for name, (kind, extra) in REMOTE_VARIANTS.items():
        made[name] = remote_model_folder(root / name, kind, end_token_id=None, **extra)
        if not extra:
            made[f"{kind}-1"] = remote_model_folder(root / f"{kind}-1", kind, end_token_id=None,
                                                    **{REMOTE_LAYERS[kind]: 1})
    return made


@pytest.fixture(scope="session")
def remote_models(remote_folders) -> dict:
    """Each of ``remote_folders`` loaded through ``trust_remote_code`` on DICO_TEST_DEVICE in float32."""
    import dico
    from standins import TEST_DEVICE

    return {name: dico.load_model(folder, trust_remote_code=True, device=TEST_DEVICE, dtype="float32")
            for name, folder in remote_folders.items()}


@pytest.fixture(scope="session")
def app_url(app_module, predictor):
    """The app served in-process on a free 127.0.0.1 port for the whole session."""
    demo = app_module.demo
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **app_module.LAUNCH)
    url = f"http://127.0.0.1:{port}/"

    def answers():
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False
    wait_until(answers, 30, f"the app at {url}")
    yield url
    demo.close()


@pytest.fixture
def counted_race(app_module, monkeypatch):
    """The app's race wrapped so a test sees how many rounds it computed and whether it was closed."""
    from dico_ui import handlers
    seen, original = {"rounds": 0, "closed": False}, handlers.decode_race

    def counted(req):
        frames = original(req)
        try:
            for frame in frames:
                seen["rounds"] += 1
                yield frame
        finally:
            seen["closed"] = True
            frames.close()
    monkeypatch.setattr(handlers, "decode_race", counted)
    return seen


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """pytest-playwright's launch, on Debian's chromium (its own browser download is not available here)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM,
            "args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync"]}


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


# ---------------------------------------------------------------------------- another CPU's last bits

LOGIT_NOISE = 1e-6      # relative: about what another CPU's vector kernels change in the embedded model's logits


def pytest_addoption(parser):
    parser.addoption("--logit-noise", type=float, default=LOGIT_NOISE,
                     help=f"relative noise of the 'noisy' pass of the behaviour-pinning tests (default {LOGIT_NOISE})")


NOISY = pytest.param("noisy", marks=pytest.mark.noisy, id="noisy")


@pytest.fixture(params=["exact", NOISY])
def logit_noise(request, monkeypatch):
    """Runs a test twice: as this CPU computes, then with seeded relative noise on every logit the embedded model
    (a ``BertForMaskedLM``) returns, as another CPU would compute them. A test that pins behaviour must pass both:
    it may not depend on which of two near-equal confidences wins. Yields the noise (0 for the exact pass). The noisy
    pass carries the ``noisy`` marker: the default run leaves it to CI (``-m ""``)."""
    if request.param == "exact":
        yield 0.0
        return
    import torch
    from transformers import BertForMaskedLM

    rel, original, calls = request.config.getoption("--logit-noise"), BertForMaskedLM.forward, [0]

    def noisy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls[0] += 1
        g = torch.Generator().manual_seed(calls[0])
        noise = torch.randn(out.logits.shape, generator=g, dtype=out.logits.dtype).to(out.logits.device)
        out.logits = out.logits + out.logits.abs() * rel * noise
        return out
    monkeypatch.setattr(BertForMaskedLM, "forward", noisy)
    yield rel
