"""What the Gradio app does, without Gradio: the shared model cache, one run request checked before any
forward pass, several methods decoded in a worker thread with throttled progress snapshots, the
downloadable trace bundle, and the response text as it stood at a step.

Nothing here imports gradio or plotly; ``app.py`` turns these results into components and figures.

    req = RunRequest(prompt="Tom has 5 apples. ...", methods=["vanilla", "dico"], gen_length=48)
    predictor, warnings = prepare(req)
    for snap in decode_stream(predictor, req):
        print(snap.status_lines())          # throttled while decoding; the last one has snap.traces
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from dico.loop import Cancelled, check_request, generate
from dico.models import EMBEDDED_NAME, END_TOKENS, MaskPredictor, ModelError, load_model
from dico.rules import METHODS, make_rule
from dico.trace import MAX_JSON_BYTES, SCHEMA, Trace, TraceError

log = logging.getLogger("dico.app")

# Models the app offers: the embedded one runs anywhere; the 7-8B ones need a GPU with about 20 GB.
GPU_MODELS = {"GSAI-ML/LLaDA-8B-Instruct": "LLaDA-8B-Instruct", "Dream-org/Dream-v0-Instruct-7B": "Dream-7B-Instruct"}
MAX_GEN_LENGTH = 256            # the embedded model was trained with response regions up to ~256
BUNDLE_SCHEMA = "dico-bundle/1"
MAX_UPLOAD_BYTES = MAX_JSON_BYTES
MAX_BUNDLE_TRACES = 16
METHOD_LABELS = {"vanilla": "Vanilla", "fast": "Fast-dLLM", "fast-factor": "Fast-dLLM (factor)", "dico": "DiCo"}
MASK_SYMBOL = "▢"
# Special-token shapes, hidden in the step text.
_SPECIAL = re.compile(r"^(<\|[^|]*\|>|\[[A-Z]+\]|<[a-z/]+>)$")


# ----------------------------------------------------------------------------- models

def zero_gpu() -> bool:
    """On Hugging Face ZeroGPU, CUDA appears only inside @spaces.GPU functions; models still load to 'cuda'."""
    return bool(os.environ.get("SPACES_ZERO_GPU"))


def gpu_available() -> bool:
    import torch
    return torch.cuda.is_available() or zero_gpu()


_models: dict[str, MaskPredictor] = {}
_models_lock = threading.Lock()


def get_predictor(name: str | None = None) -> MaskPredictor:
    """The shared, loaded-once predictor for ``name`` (None: the embedded model, or $DICO_EMBEDDED_MODEL)."""
    key = name or EMBEDDED_NAME
    if key in GPU_MODELS and not gpu_available():
        raise ModelError(f"model: {GPU_MODELS[key]} needs a GPU with about 20 GB of memory and this machine has "
                         f"none; use the embedded model {EMBEDDED_NAME!r} here")
    if key != EMBEDDED_NAME and key not in GPU_MODELS:
        raise ModelError(f"model: {key!r} is not offered here; choose {EMBEDDED_NAME!r} or one of "
                         f"{', '.join(GPU_MODELS)}")
    with _models_lock:     # one load per model, even when the first requests arrive together
        if key not in _models:
            source = (os.environ.get("DICO_EMBEDDED_MODEL") or None) if key == EMBEDDED_NAME else key
            started = time.perf_counter()
            _models[key] = load_model(source, device="cuda" if zero_gpu() and key != EMBEDDED_NAME else None)
            log.info("loaded model %s in %.1f s", key, time.perf_counter() - started)
        return _models[key]


# ----------------------------------------------------------------------------- one run request

def whole(value):
    """UI numbers arrive as floats; integral ones become ints so the library's integer checks accept them."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


@dataclass
class RunRequest:
    prompt: str
    model: str = EMBEDDED_NAME
    mode: str = "non-ar"
    gen_length: int = 96
    block_length: int | None = 32
    methods: list[str] = field(default_factory=lambda: ["vanilla", "fast", "dico"])
    settings: dict[str, dict] = field(default_factory=dict)    # method -> keyword settings of its rule
    capture_attention: bool = True

    def __post_init__(self):
        self.gen_length, self.block_length = whole(self.gen_length), whole(self.block_length)
        # Runs go in a fixed order so the comparison reads the same every time.
        self.methods = [m for m in METHODS if m in (self.methods or [])] + \
                       [m for m in (self.methods or []) if m not in METHODS]


def dico_settings(alpha=0.5, beta=0.05, tau1=0.3, tau2=0.6, tau3=3.0, r_gate=0.8, seeds=0, t_max=10, gap=2,
                  shortcut=0.98, guidance=True, logit_margin=True, conquer="factor", conquer_threshold=0.9) -> dict:
    """DiCo's settings from UI values; seeds 0 means the mode's default N (8 non-AR, 4 semi-AR)."""
    seeds = whole(seeds)
    return dict(alpha=alpha, beta=beta, tau1=tau1, tau2=tau2, tau3=tau3, r_gate=r_gate,
                seeds=None if seeds in (0, None) else seeds, t_max=whole(t_max), gap=whole(gap), shortcut=shortcut,
                guidance=bool(guidance), logit_margin=bool(logit_margin), conquer=conquer,
                conquer_threshold=conquer_threshold)


def prepare(req: RunRequest) -> tuple[MaskPredictor, list[str]]:
    """Check everything a run needs before any forward pass; return the predictor and warnings for the user.

    Raises ValueError (ModelError included) whose message names the field, as the library does.
    """
    if not isinstance(req.prompt, str) or not req.prompt.strip():
        raise ValueError("prompt: is empty; type a question for the model or pick an example")
    if not req.methods:
        raise ValueError("methods: choose at least one method to run")
    unknown = [m for m in req.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods: unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    if not isinstance(req.gen_length, int) or not 1 <= req.gen_length <= MAX_GEN_LENGTH:
        raise ValueError(f"gen_length: must be a whole number in 1..{MAX_GEN_LENGTH}, got {req.gen_length!r}")
    if req.mode == "semi-ar" and not isinstance(req.block_length, int):
        raise ValueError(f"block_length: must be a whole number, got {req.block_length!r}")
    predictor = get_predictor(req.model)
    check_request(predictor, req.prompt, req.methods[0], req.mode, req.gen_length,
                  req.block_length if req.mode == "semi-ar" else None)
    for method in req.methods:
        make_rule(method, req.mode, **req.settings.get(method, {}))      # settings errors name the field
    warnings = []
    unknown_words = predictor.unknown_words(req.prompt)
    if unknown_words:
        shown = ", ".join(f"'{w}'" for w in dict.fromkeys(unknown_words[:12]))
        warnings.append(f"prompt: the model {predictor.name!r} does not know {shown}; it reads "
                        f"{'them' if len(unknown_words) > 1 else 'it'} as an unknown word, so the answer may not "
                        "make sense. It still runs.")
    return predictor, warnings


# ----------------------------------------------------------------------------- decoding with progress

@dataclass
class Progress:
    """Where one method stands: steps taken, positions decoded, the phase of its last step."""
    method: str
    total: int
    step: int = 0
    decoded: int = 0
    phase: str | None = None
    state: str = "waiting"          # waiting | running | done | stopped
    wall_s: float = 0.0
    tokens: list[int | None] = field(default_factory=list)   # committed token at each position, None if masked

    def line(self) -> str:
        name = METHOD_LABELS.get(self.method, self.method)
        if self.state == "waiting":
            return f"{name}: waiting"
        text = f"{name}: step {self.step}, {self.decoded}/{self.total} decoded"
        if self.phase and self.phase not in ("vanilla", "fast"):
            text += f", phase {self.phase}"
        if self.state == "done":
            text += f", done in {self.wall_s:.2f} s"
        elif self.state == "stopped":
            text += ", stopped"
        return text


@dataclass
class Snapshot:
    progress: list[Progress]
    traces: list[Trace]              # finished (or stopped) runs so far
    finished: bool = False
    stopped: bool = False

    def status_lines(self) -> list[str]:
        return [p.line() for p in self.progress]


class _Board:
    """Progress written by the worker thread, read by the streaming generator."""

    def __init__(self, methods: list[str], n: int):
        self.lock = threading.Lock()
        self.progress = {m: Progress(m, n, tokens=[None] * n) for m in methods}
        self.traces: list[Trace] = []
        self.version = 0
        self.stopped = False
        self.error: BaseException | None = None
        self.closed = threading.Event()
        self.started = time.perf_counter()

    def on_step(self, method: str) -> Callable:
        p = self.progress[method]

        def record(trace: Trace, step) -> None:
            with self.lock:
                for pos, tok in zip(step.committed, step.tokens, strict=True):
                    p.tokens[pos] = tok
                p.step, p.decoded, p.phase, p.state = len(trace.steps), p.decoded + len(step.committed), step.phase, \
                    "running"
                p.wall_s = time.perf_counter() - self.started
                self.version += 1
        return record

    def start(self, method: str) -> None:
        with self.lock:
            self.progress[method].state = "running"
            self.started = time.perf_counter()
            self.version += 1

    def finish(self, method: str, trace: Trace, stopped: bool = False) -> None:
        with self.lock:
            p = self.progress[method]
            p.state, p.wall_s, p.step = ("stopped" if stopped else "done"), trace.wall_s, trace.nfe
            self.traces.append(trace)
            self.stopped = self.stopped or stopped
            self.version += 1

    def snapshot(self, finished: bool = False) -> Snapshot:
        with self.lock:
            progress = [Progress(p.method, p.total, p.step, p.decoded, p.phase, p.state, p.wall_s, list(p.tokens))
                        for p in self.progress.values()]
            return Snapshot(progress, list(self.traces), finished, self.stopped)


def decode_stream(predictor: MaskPredictor, req: RunRequest, should_stop: Callable[[], bool] | None = None,
                  interval: float = 0.15) -> Iterator[Snapshot]:
    """Decode ``req.methods`` one after another in a worker thread; yield a snapshot at most every ``interval`` s.

    The last snapshot has ``finished=True`` and every trace (a stopped run ends early with ``stopped=True``
    and its partial trace). Errors of the worker are raised here. Closing the generator stops the worker.
    """
    board = _Board(req.methods, req.gen_length)
    closing = threading.Event()

    def stop() -> bool:
        return closing.is_set() or bool(should_stop and should_stop())

    def work() -> None:
        try:
            for method in req.methods:
                board.start(method)
                capture = req.capture_attention and method == "dico" and predictor.supports_attention
                try:
                    trace = generate(predictor, req.prompt, method, mode=req.mode, gen_length=req.gen_length,
                                     block_length=req.block_length if req.mode == "semi-ar" else None,
                                     capture_attention=capture, on_step=board.on_step(method), should_stop=stop,
                                     **req.settings.get(method, {}))
                except Cancelled as cancelled:
                    board.finish(method, cancelled.trace, stopped=True)
                    return
                board.finish(method, trace)
        except BaseException as exc:    # handed to the generator, which raises it in the request's thread
            board.error = exc
        finally:
            board.closed.set()

    worker = threading.Thread(target=work, name="dico-decode", daemon=True)
    worker.start()
    seen = -1
    try:
        while not board.closed.wait(interval):
            if board.version != seen:
                seen = board.version
                yield board.snapshot()
        if board.error is not None:
            raise board.error
        yield board.snapshot(finished=True)
    finally:
        closing.set()       # the consumer went away (Stop, disconnect): let the worker end at its next step
        worker.join(timeout=10)


# ----------------------------------------------------------------------------- response text

Segment = tuple[str, str]     # (text, kind) with kind "text", "new" (committed at this step) or "mask"


def preview_segments(predictor: MaskPredictor, tokens: list[int | None]) -> list[Segment]:
    """The response while decoding: decoded runs as text, masks as MASK_SYMBOL, cut at the first end-of-text."""
    stops = predictor.stop_ids()
    segments: list[Segment] = []
    run: list[int] = []

    def flush():
        if run:
            text = predictor.decode(run)
            if text:
                segments.append((text, "text"))
            run.clear()

    for tok in tokens:
        if tok is None:
            flush()
            segments.append((MASK_SYMBOL, "mask"))
        elif tok in stops:
            break
        else:
            run.append(tok)
    flush()
    return segments


def _joiner(trace: Trace) -> str:
    """How token texts join: sub-word vocabularies carry their own spaces, word-level ones need one between."""
    texts = [t for t in trace.vocab.values() if not _SPECIAL.match(t.strip())]
    return "" if any(t[:1].isspace() for t in texts) else " "


def step_segments(trace: Trace, k: int) -> list[Segment]:
    """The response after step ``k`` of a trace (no model needed): decoded, just committed, still masked."""
    if not trace.steps:
        return []
    k = max(0, min(int(k), len(trace.steps) - 1))
    when = trace.commit_step()
    token_at: dict[int, int] = {}
    for step in trace.steps[:k + 1]:
        token_at.update(zip(step.committed, step.tokens, strict=True))
    sep = _joiner(trace)
    segments: list[Segment] = []
    for pos in range(trace.gen_length):
        tok = token_at.get(pos)
        if tok is None:
            segments.append((MASK_SYMBOL, "mask"))
            continue
        text = trace.token_text(tok)
        if text.strip() in END_TOKENS:
            break
        if _SPECIAL.match(text.strip()):
            continue
        segments.append((text, "new" if when[pos] == k else "text"))
    if segments and segments[0][1] != "mask":
        segments[0] = (segments[0][0].lstrip(), segments[0][1])
    if not sep:
        return segments
    # Word-level: a space between pieces, except where the tokenizer's clean-up removes it ("5 ." -> "5.",
    # "Zoe ' s" -> "Zoe's"), so the last step reads exactly as the trace's final text.
    joined: list[Segment] = []
    for i, (text, kind) in enumerate(segments):
        glued = i == 0 or text in _NO_SPACE_BEFORE or segments[i - 1][0] == "'"
        joined.append((text if glued else sep + text, kind))
    return joined


_NO_SPACE_BEFORE = {".", ",", "?", "!", "'"}


# ----------------------------------------------------------------------------- trace files

def bundle_json(traces: list[Trace]) -> str:
    """The download: {"schema": "dico-bundle/1", "traces": [trace JSON, ...]}."""
    return json.dumps({"schema": BUNDLE_SCHEMA, "traces": [t.to_dict() for t in traces]}, separators=(",", ":"))


def read_traces(data: bytes | str) -> list[Trace]:
    """Traces from an uploaded file: a bundle, one trace, or a JSON list of traces. Errors name the field."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise TraceError(f"file: is {len(data) / 2**20:.1f} MiB, over the {MAX_UPLOAD_BYTES // 2**20} MiB limit")
    if not data.strip():
        raise TraceError("file: is empty")
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"file: not valid JSON ({exc}); expected a trace or a bundle downloaded from this app") \
            from None
    if isinstance(raw, dict) and raw.get("schema") == BUNDLE_SCHEMA:
        items = raw.get("traces")
        if not isinstance(items, list) or not items:
            raise TraceError("bundle.traces: must be a non-empty list of traces")
        where = "bundle.traces"
    elif isinstance(raw, dict) and raw.get("schema") == SCHEMA:
        items, where = [raw], None
    elif isinstance(raw, list) and raw:
        items, where = raw, "traces"
    else:
        got = raw.get("schema") if isinstance(raw, dict) else type(raw).__name__
        raise TraceError(f"file.schema: expected {BUNDLE_SCHEMA!r} (a bundle of traces) or {SCHEMA!r} (one trace), "
                         f"got {got!r}")
    if len(items) > MAX_BUNDLE_TRACES:
        raise TraceError(f"{where}: holds {len(items)} traces, at most {MAX_BUNDLE_TRACES} are replayed")
    traces = []
    for i, item in enumerate(items):
        try:
            traces.append(Trace.from_dict(item))
        except TraceError as exc:
            raise TraceError(f"{where}[{i}]: {exc}" if where else str(exc)) from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:   # shapes the schema check let through
            raise TraceError(f"{where or 'trace'}[{i}]: malformed ({type(exc).__name__}: {exc})") from None
    return traces
