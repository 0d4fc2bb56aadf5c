"""DiCo Explorer's app layer: the Gradio page, its handlers, the race of methods and their streaming.

    from dico_ui import build_demo, LAUNCH, QUEUE
    build_demo().queue(**QUEUE).launch(**LAUNCH)

``dico`` decodes and records traces, ``visuals`` draws them; this package wires them to a page and
imports gradio (``dico`` never does).
"""
from dico_ui.limits import bound_allocator

bound_allocator()       # before torch and gradio start their threads (dico_ui.limits says why)

from dico_ui.models import get_predictor, warm_up  # noqa: E402, F401, I001  (first: `spaces` before torch on ZeroGPU)
from dico_ui.layout import build_demo  # noqa: E402
from dico_ui.serve import LAUNCH, QUEUE, cheap_skipped_outputs, lazy_session_configs  # noqa: E402

lazy_session_configs()  # a new visitor costs gradio's event loop no config of every block (dico_ui.serve says why)
cheap_skipped_outputs()  # nor does an output a frame leaves as it is

__all__ = ["LAUNCH", "QUEUE", "build_demo", "get_predictor", "warm_up"]
