"""Shared test setup: no outbound traffic, the `e2e` marker, the app served on a free local port, Playwright on
the system chromium.

The app fixtures import gradio lazily, so library and figure tests never pay for it.
"""
import os
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

# Before anything imports gradio or huggingface_hub (see /work/shared/notes/gradio-testing.md).
for _key in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ.setdefault(_key, "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: real-browser tests of the app (Playwright + system chromium)")
    config.addinivalue_line("filterwarnings", r"ignore:.*Gradio 6\.0:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:Session-scoped fixtures defined as instance methods")
    config.addinivalue_line("filterwarnings", "ignore:'HTTP_422_UNPROCESSABLE_ENTITY' is deprecated:DeprecationWarning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_module():
    """The app module, imported once per session (gradio takes seconds to import)."""
    import app
    return app


@pytest.fixture(scope="session")
def predictor(app_module):
    """The app's shared embedded model (the same object the served app uses)."""
    from dico.app_handlers import get_predictor
    return get_predictor()


@pytest.fixture(scope="session")
def app_url(app_module, predictor):
    """The app served in-process on a free 127.0.0.1 port for the whole session."""
    demo = app_module.demo
    port = free_port()
    demo.queue(max_size=64, default_concurrency_limit=2)
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **app_module.LAUNCH)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if time.time() > deadline:
            raise RuntimeError(f"the app did not answer at {url}")
        time.sleep(0.2)
    yield url
    demo.close()


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
