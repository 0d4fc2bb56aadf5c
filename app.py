"""DiCo Explorer: watch diffusion LLMs race to fill in their answers with Vanilla, Fast-dLLM and DiCo decoding.

    python app.py            # http://127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT override)

The Spaces entry point, and nothing else: the page, its handlers and the race live in ``dico_ui``,
decoding in ``dico``, figures in ``visuals``. ``demo`` is module level because Spaces and the tests
import it.
"""
import os

# No outbound traffic: set before gradio (and huggingface_hub) are imported.
for _key in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ.setdefault(_key, "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import logging  # noqa: E402
import threading  # noqa: E402

import dico_ui  # noqa: E402  (imports `spaces` before torch, as ZeroGPU wants)

log = logging.getLogger("dico_ui")
LAUNCH = dico_ui.LAUNCH
demo = dico_ui.build_demo()
demo.queue(**dico_ui.QUEUE)


def preload() -> None:
    """Load the embedded model and run one short decode at start, so the first Run is neither waiting for the
    model nor timed cold."""
    try:
        dico_ui.warm_up()
    except Exception:  # noqa: BLE001 - the first Run reports it to the user
        log.exception("could not preload the embedded model")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    threading.Thread(target=preload, name="preload", daemon=True).start()
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), **LAUNCH)
