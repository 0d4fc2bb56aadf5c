"""DiCo Explorer's library: decode with a diffusion LM and record every step.

    import dico
    predictor = dico.load_model()              # the embedded model; or "GSAI-ML/LLaDA-8B-Instruct" on a GPU
    trace = dico.generate(predictor, "Tom has 5 apples. He buys 3 more. How many apples does Tom have now?",
                          method="dico", mode="non-ar", gen_length=96)
    print(trace.text, trace.nfe, trace.answer_nfe)

    for trace, step in dico.decode(predictor, prompt, "dico"): ...      # one step at a time (stream, stop, race)
    lanes = dico.parse_lanes(["vanilla", {"method": "topk", "settings": {"k": 4}}])   # a race's lanes, checked
    traces = dico.generate_batch(predictor, prompts, "dico", batch_size=8)   # many prompts per forward pass
    trace = dico.generate(predictor, prompt, "topk", constraints={0: "The", 3: "leader"})   # words fixed first
    forked = dico.fork(predictor, trace, at=5, force={7: "Gill"}, remask=[8])  # rewind to step 5, edit, go on
"""
import importlib

# Lazy exports: ``import dico.trace`` (the figures' only dependency) must not pull in torch.
_EXPORTS = {
    "Decoding": "dico.loop", "decode": "dico.loop", "generate": "dico.loop",
    "fork": "dico.forking", "decode_fork": "dico.forking", "candidates": "dico.forking",
    "parse_constraints": "dico.constraints",
    "decode_batch": "dico.batch", "generate_batch": "dico.batch",
    "EMBEDDED_NAME": "dico.models", "MaskPredictor": "dico.models", "ModelError": "dico.models",
    "from_module": "dico.models", "load_model": "dico.models",
    "Lane": "dico.lanes", "parse_lanes": "dico.lanes", "make_rule": "dico.methods", "METHODS": "dico.settings",
    "DiCoSettings": "dico.settings",
    "FastSettings": "dico.settings", "FastFactorSettings": "dico.settings", "VanillaSettings": "dico.settings",
    "settings_for": "dico.settings",
    "SCHEMA": "dico.trace", "Step": "dico.trace", "Trace": "dico.trace", "TraceError": "dico.trace",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dico' has no attribute {name!r}")
