"""DiCo Explorer's library: decode with a diffusion LM and record every step.

    import dico
    predictor = dico.load_model()              # the embedded model; or "GSAI-ML/LLaDA-8B-Instruct" on a GPU
    trace = dico.generate(predictor, "Tom has 5 apples. He buys 3 more. How many apples does Tom have now?",
                          method="dico", mode="non-ar", gen_length=96)
    print(trace.text, trace.nfe)
"""
from dico.loop import Cancelled, generate
from dico.models import EMBEDDED_NAME, MaskPredictor, ModelError, from_module, load_model
from dico.rules import METHODS, DiCoSettings, make_rule
from dico.trace import SCHEMA, Step, Trace, TraceError

__all__ = ["Cancelled", "generate", "EMBEDDED_NAME", "MaskPredictor", "ModelError", "from_module", "load_model",
           "METHODS", "DiCoSettings", "make_rule", "SCHEMA", "Step", "Trace", "TraceError"]
