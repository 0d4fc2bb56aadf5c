"""The step trace: what happened at every step of one decoding run, and its public JSON form.

The trace is the one contract between the library, the figures and the app, and the file users
download and upload, so its JSON form is versioned (``schema``) and round-trips losslessly:
``Trace.from_json(trace.to_json()) == trace``.

JSON form, ``schema = "dico-trace/4"`` (positions are response offsets 0..gen_length-1; files of
schema 1, without the answer fields, of schema 2, without revision, and of schema 3, without edits, are still
read)::

    {"schema": "dico-trace/4", "model": str, "method": str, "mode": "non-ar" | "semi-ar",
     "label": str,                      # its lane's label ("Top-4 per step"); older files: the method's
     "settings": {...}, "prompt": str, "prompt_length": int, "gen_length": int,
     "block_length": int | null,
     "model_block": int | null,         # a block-causal model's block (dico.block): its blocks are counted from
                                        # absolute position 0, the prompt included; null for any other model
                                        # (older files: null)
     "text": str, "nfe": int, "wall_s": float, "tokens_per_s": float,
     "answer_length": int,              # positions before the first end-of-text token (the answer);
                                        # the rest of the response is padding
     "answer_nfe": int,                 # forward passes until the last answer position was committed
     "device": str,                     # where the model ran ("cpu", "cuda:0", ...)
     "response": [int, ...],            # final token id at every response position
     "vocab": {"<id>": "<token text>"}, # display text of every token id the trace mentions, spaced so
                                        # that joining a response's tokens in order reads as text
     "stopped": bool,                   # true when the run was cancelled before the end (then
                                        # "response" holds the mask id at undecoded positions)
     "attention": null | {...},         # optional aggregates, see AttentionStages
     "steps": [{"index": int, "phase": "vanilla" | "fast" | "divide" | "conquer" | "finalize" | "edit",
                "window": [start, end),   # positions the rule could commit at this step
                "committed": [pos, ...], "tokens": [id, ...],
                "confidence": [float | null] * gen_length,  # max softmax of still-masked positions
                "prediction": [int | null] * gen_length,    # their argmax token ids
                "seeds": [pos, ...], "clusters": [[start, end], ...],  # inclusive, after the step
                "unmasked_fraction": float,  # share of the response decoded after this step
                "guided_confidence": [float | null] * gen_length | null,  # DiCo Divide steps: the
                                             # confidence times trajectory guidance that seeds were ranked by
                "guidance": [float] * gen_length | null,   # that step's guidance weights w
                "seed_threshold": float | null,  # the guided confidence a seed needed (DiCo Divide)
                "shortcut": [pos, ...],      # DiCo Divide with the Divide shortcut on: commits made for a
                                             # confidence above the shortcut, beside the seeds (older files: [])
                "forward_s": float, "select_s": float,  # model call; scoring + the rule's choice
                "refresh": bool,           # this pass recomputed the whole KV cache (false without one)
                "remasked": [pos, ...],    # revising rules (WINO, Saber): decoded positions taken back to the
                                           # mask after this step's commits (older files: [])
                "edited": [[pos, old, new], ...],  # editing rules (LLaDA 2.1): decoded positions whose token this
                                           # step replaced, with the token before and after (older files: [])
                "token_forwards": int}, ...],  # positions this pass put through the model
     "token_forwards": int,             # the steps' token_forwards summed (the run's counted work)
     "limit_reached": bool,             # the run ended at the pass limit (PASS_LIMIT x gen_length) with
                                        # masks left (older files: false)
     "length_search": null | {"tried": [int], "end_confidence": [float], "passes": int,
                              "token_forwards": int, "chosen": int}}   # gen_length "auto" (dico.length):
                                        # the lengths checked before decoding, counted apart from nfe
     "constraints": null | {"<offset>": int},   # tokens fixed before decoding (words, "0:The,5:leader")
     "fork": null | {"parent": str, "at": int, "method": str,   # a fork: the parent's steps before "at",
                     "force": {"<pos>": int}, "remask": [int]},  # then these edits, then its own steps
     "clash": null | {"values": [float | null], "passes": int,   # measured after the decode (dico.observe):
                      "limit": int | null, "skipped": [int]},    # nats a step; passes apart from nfe; skipped:
                                        # steps a budget of passes left unmeasured (absent: none)
     "decode_order": {"written_at": [int | null] * gen_length,  # derived from the steps (Trace.decode_order),
                      "edited": [[pos, step]], "taken_back": [[pos, step]],   # written for other readers;
                      "writes": [int] * gen_length}}  # ignored on load, so files without it load

Files written before the KV cache (``token_forwards`` absent) are read as uncached runs: every pass computed
every position, twice with classifier-free guidance.

``confidence`` and ``prediction`` are null at positions already decoded before the step. A commit
at position p is an answer commit when p < answer_length, a padding commit otherwise
(``Trace.answer_commits`` / ``Trace.padding_commits``).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields

from dico.lanes import default_label, distinct_settings
from dico.settings import MAX_POST_EDIT_STEPS, MODES, SETTINGS, method_id

SCHEMA = "dico-trace/4"
READABLE_SCHEMAS = ("dico-trace/1", "dico-trace/2", "dico-trace/3", SCHEMA)
# "edit": a pass over a window with no mask left that may only edit it (LLaDA 2.1's post-edit passes)
PHASES = ("vanilla", "fast", "divide", "conquer", "finalize", "edit")
MAX_JSON_BYTES = 20 * 1024 * 1024
BUNDLE_SCHEMA = "dico-bundle/1"      # the app's download: several traces of one run in one file
MAX_BUNDLE_TRACES = 16
STAGES = ("early", "middle", "late")
# nats: a step whose measured clash (``Trace.clash``) is above it is marked as a clash (the lesson's Top-4 step: 13.7;
# Fast-dLLM's and DiCo's steps there: within 0.05; a step of one token: none). Declared here, beside the trace that
# carries the clash, so the figures read it without the library's torch code (dico.observe).
CLASH_MARK = 1.0
# nats: the floor's bound on a step's clash (``dico.observe.floor``), here for the same reason: the benchmark's tables
# name it without torch. Fast-dLLM's and DiCo's steps on the lesson stay within 0.05 nats; Top-4's clash is 13.7.
FLOOR_BOUND = 0.1
# Confidences (or logit margins) this close are interchangeable across machines: another CPU's last bits move a
# confidence by up to ~1.4e-5 on the embedded model (docs/decoding.md §2.2). A fork's replay lets them fall the
# way the trace recorded (``dico.loop.Decoding._choose``); the tests compare decodes up to them (tests/near_ties.py).
NEAR_TIE = 1e-4
# A trace can hold at most this many steps per response position (a sampler may waste passes; a
# file claiming more is not a decode).
MAX_STEPS_PER_POSITION = 16
# End-of-text tokens of the supported tokenizers (embedded, LLaDA/Llama-3, Dream/Qwen, GPT-2, BERT-like):
# the loader's stop ids, and where the answer ends in a schema-1 file.
END_TEXTS = frozenset({"<|eot|>", "<|endoftext|>", "<|eot_id|>", "<|im_end|>", "</s>"})


class TraceError(ValueError):
    """A trace file that does not follow the schema; the message names the field."""


@dataclass
class Step:
    index: int
    phase: str
    window: list[int]
    committed: list[int]
    tokens: list[int]
    confidence: list[float | None]
    prediction: list[int | None]
    seeds: list[int] = field(default_factory=list)
    clusters: list[list[int]] = field(default_factory=list)
    unmasked_fraction: float = 0.0
    guided_confidence: list[float | None] | None = None
    guidance: list[float] | None = None
    seed_threshold: float | None = None
    shortcut: list[int] = field(default_factory=list)
    forward_s: float = 0.0
    select_s: float = 0.0
    refresh: bool = False
    token_forwards: int = 0
    remasked: list[int] = field(default_factory=list)
    edited: list[list[int]] = field(default_factory=list)     # [position, token before, token after]


@dataclass
class AttentionStages:
    """Attention of still-masked response positions, averaged over layers, heads and the steps of a stage.

    ``matrix[stage][q][k]``: mean attention from response position q (while masked) to key k, where
    k = 0 is the whole prompt summed and k = 1 + j is response position j; a row is null when q was
    never masked during that stage. Stages split the run by unmasked fraction: early < 1/3 <= middle
    < 2/3 <= late.
    """
    stages: list[str]
    steps: list[list[int]]
    matrix: list[list[list[float | None]]]


@dataclass
class Trace:
    model: str
    method: str
    mode: str
    settings: dict
    prompt: str
    prompt_length: int
    gen_length: int
    block_length: int | None
    text: str = ""
    nfe: int = 0
    wall_s: float = 0.0
    tokens_per_s: float = 0.0
    response: list[int] = field(default_factory=list)
    vocab: dict[str, str] = field(default_factory=dict)
    answer_length: int = 0
    answer_nfe: int = 0
    device: str = "cpu"
    stopped: bool = False
    token_forwards: int = 0
    attention: AttentionStages | None = None
    steps: list[Step] = field(default_factory=list)
    label: str = ""
    limit_reached: bool = False
    length_search: dict | None = None
    constraints: dict | None = None     # {"offset": token id} fixed before decoding (dico.constraints)
    fork: dict | None = None            # {"parent": label, "at": k, "method": parent's, "force": {"pos": id},
                                        #  "remask": [pos]}: edits made before step k of the parent's run
    model_block: int | None = None      # a block-causal model's block size (dico.block), None for any other model
    clash: dict | None = None           # measured after the decode (dico.observe.annotate_clash): {"values": one
                                        # per step, nats or null, "passes": n, "limit": m or null}; null unless asked
    schema: str = SCHEMA

    # ------------------------------------------------------------------ convenience for readers
    @property
    def name(self) -> str:
        """How figures and tables name this run: its lane's label (a trace built without one: the method's)."""
        return self.label or default_label(self.method, self.settings_given())

    def recorded_settings(self) -> dict:
        """The settings the run recorded that its method knows today, as a dict its settings class takes (what a
        fork, a replay or a measurement decodes with; DiCo's N in effect is recorded, not set)."""
        known = set(SETTINGS[self.method].names())
        return {k: v for k, v in self.settings.items() if k in known}

    def settings_given(self) -> dict:
        """The recorded settings that differ from the method's defaults (what tells this run apart)."""
        return distinct_settings(self.method, self.settings)

    def token_text(self, token_id: int | None) -> str:
        return "" if token_id is None else self.vocab.get(str(token_id), f"<{token_id}>")

    def commit_step(self) -> list[int | None]:
        """For every response position, the index of the step that committed the token it ends with (None if it
        ends masked: never committed, or taken back after its last commit)."""
        when: list[int | None] = [None] * self.gen_length
        for step in self.steps:
            for pos in step.committed + [e[0] for e in step.edited]:
                when[pos] = step.index
            for pos in step.remasked:
                when[pos] = None
        return when

    def decode_order(self) -> dict:
        """When each position was written, for the decode-order map: ``written_at`` the step index that last wrote
        each response position (a commit or an edit; -1 for a token fixed by hand before the run or a fork's forced
        token before its first step, null where the response ends masked), ``edited`` and ``taken_back`` every edit
        and take-back as [position, step index] (a fork's take-backs by hand at its step ``at - 1``), and ``writes``
        how many times each position was written."""
        at: list[int | None] = [None] * self.gen_length
        writes = [0] * self.gen_length
        edited, taken_back = [], []
        for step in self.steps:
            written, taken = self.edits_at(step.index)
            for p in written:
                at[p] = step.index - 1
            for p in taken:
                at[p] = None
                taken_back.append([p, step.index - 1])
            for p in step.committed:
                at[p], writes[p] = step.index, writes[p] + 1
            for p, _, _ in step.edited:
                at[p], writes[p] = step.index, writes[p] + 1
                edited.append([p, step.index])
            for p in step.remasked:
                at[p] = None
                taken_back.append([p, step.index])
        return {"written_at": at, "edited": edited, "taken_back": taken_back, "writes": writes}

    def edits_at(self, k: int) -> tuple[dict[int, int], list[int]]:
        """The tokens written and the positions taken back by hand before step ``k`` (constraints before step 0, a
        fork's edits before its step ``at``)."""
        if k == 0 and self.constraints:
            return {int(p): t for p, t in self.constraints.items()}, []
        if self.fork is not None and k == self.fork["at"]:
            return {int(p): t for p, t in self.fork.get("force", {}).items()}, list(self.fork.get("remask", []))
        return {}, []

    def tokens_before(self, k: int) -> list[int | None]:
        """The response as it stood before step ``k`` (None where masked), edits by hand included."""
        tokens: list[int | None] = [None] * self.gen_length
        for i in range(k + 1):
            written, taken = self.edits_at(i)
            for p, t in written.items():
                tokens[p] = t
            for p in taken:
                tokens[p] = None
            if i == k:
                break
            step = self.steps[i]
            for p, t in zip(step.committed, step.tokens):
                tokens[p] = t
            for p, _, t in step.edited:
                tokens[p] = t
            for p in step.remasked:
                tokens[p] = None
        return tokens

    def remasks(self) -> int:
        """How many committed tokens the run took back (revising rules)."""
        return sum(len(s.remasked) for s in self.steps)

    def replaced(self) -> int:
        """How many written tokens the run replaced with others (editing rules)."""
        return sum(len(s.edited) for s in self.steps)

    def answer_commits(self, step: Step) -> list[int]:
        """Positions this step committed inside the answer (before the first end-of-text)."""
        return [p for p in step.committed if p < self.answer_length]

    def padding_commits(self, step: Step) -> list[int]:
        """Positions this step committed in the end-of-text padding after the answer."""
        return [p for p in step.committed if p >= self.answer_length]

    @property
    def answer_tokens(self) -> int:
        return self.answer_length

    @property
    def padding_tokens(self) -> int:
        return self.gen_length - self.answer_length

    def set_time(self, wall_s: float) -> None:
        """Record the seconds the run took and its speed: the tokens its steps committed, a second of them."""
        self.wall_s = round(wall_s, 6)
        decoded = sum(len(s.committed) for s in self.steps)
        self.tokens_per_s = round(decoded / self.wall_s, 3) if self.wall_s > 0 else 0.0

    def set_answer(self, answer_length: int) -> None:
        """Record where the answer ends, and the forward pass that completed it."""
        self.answer_length = answer_length
        when = self.commit_step()
        for k in sorted({0, self.fork["at"] if self.fork else 0}):      # tokens written by hand count from then
            written, taken = self.edits_at(k)
            for p in written:
                if when[p] is None or when[p] < k:
                    when[p] = k - 1
            for p in taken:
                if when[p] is not None and when[p] < k:
                    when[p] = None
        if any(when[p] is None for p in range(answer_length)):
            self.answer_nfe = self.nfe                          # the answer never completed
        else:
            self.answer_nfe = max((when[p] + 1 for p in range(answer_length)), default=0)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        """The JSON form: the fields, and the decode order (``decode_order``), which is derived from the steps and
        written for readers of the file (a loaded trace computes it again; a file without it, older, loads)."""
        return {**asdict(self), "decode_order": self.decode_order()}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, separators=(",", ":") if indent is None else None)

    @classmethod
    def from_dict(cls, data: dict) -> Trace:
        return _parse_trace(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        if len(text) > MAX_JSON_BYTES:
            raise TraceError(f"trace: file is {len(text) / 1e6:.1f} MB, over the {MAX_JSON_BYTES // 2**20} MiB limit")
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceError(f"trace: not valid JSON ({exc})") from None
        return _parse_trace(data)

    def save(self, path) -> None:
        from pathlib import Path
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path) -> Trace:
        from pathlib import Path
        return cls.from_json(Path(path).read_bytes())


# ---------------------------------------------------------------------- validation on load

def _expect(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise TraceError(f"{where}: {what}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool))


def _parse_step(raw, i: int, n: int) -> Step:
    where = f"steps[{i}]"
    _expect(isinstance(raw, dict), where, "must be an object")
    names = {f.name for f in fields(Step)}
    required = ("index", "phase", "window", "committed", "tokens", "confidence", "prediction")
    missing = [k for k in required if k not in raw]
    _expect(not missing, where, f"missing field(s) {', '.join(missing)}")
    _expect(raw["phase"] in PHASES, f"{where}.phase", f"must be one of {', '.join(PHASES)}")
    _expect(_is_int(raw["index"]), f"{where}.index", "must be an integer")
    _expect(isinstance(raw["window"], list) and len(raw["window"]) == 2 and all(_is_int(v) for v in raw["window"])
            and 0 <= raw["window"][0] < raw["window"][1] <= n, f"{where}.window",
            "must be [start, end) inside the response")
    for key in ("committed", "tokens", "seeds", "shortcut", "remasked"):
        values = raw.get(key, [])
        _expect(isinstance(values, list) and all(_is_int(v) for v in values), f"{where}.{key}",
                "must be a list of integers")
    _expect(len(raw["committed"]) == len(raw["tokens"]), where, "committed and tokens must have the same length")
    _expect(set(raw.get("shortcut", [])) <= set(raw["committed"]), f"{where}.shortcut",
            "must list positions this step committed")
    _expect(all(0 <= p < n for p in raw["committed"] + raw.get("seeds", []) + raw.get("remasked", [])),
            f"{where}.committed",
            "positions must be response offsets 0..gen_length-1")
    for key, check in (("confidence", _is_num), ("prediction", _is_int)):
        values = raw[key]
        _expect(isinstance(values, list) and len(values) == n, f"{where}.{key}", f"must have gen_length = {n} entries")
        _expect(all(v is None or check(v) for v in values), f"{where}.{key}", "entries must be numbers or null")
    _expect(all(v is None or 0.0 <= v <= 1.0 for v in raw["confidence"]), f"{where}.confidence", "must lie in [0, 1]")
    clusters = raw.get("clusters", [])
    _expect(isinstance(clusters, list) and all(isinstance(c, list) and len(c) == 2 and all(_is_int(v) for v in c)
                                               and 0 <= c[0] <= c[1] < n for c in clusters),
            f"{where}.clusters", "must be a list of inclusive [start, end] response offsets")
    for key in ("unmasked_fraction", "forward_s", "select_s"):
        _expect(_is_num(raw.get(key, 0.0)), f"{where}.{key}", "must be a number")
    _expect(isinstance(raw.get("refresh", False), bool), f"{where}.refresh", "must be true or false")
    _expect(len(set(raw.get("remasked", []))) == len(raw.get("remasked", [])), f"{where}.remasked",
            "takes a position back twice")
    edited = raw.get("edited", [])
    _expect(isinstance(edited, list) and all(isinstance(e, list) and len(e) == 3 and all(_is_int(v) for v in e)
                                             and 0 <= e[0] < n and e[1] != e[2] and min(e[1:]) >= 0 for e in edited),
            f"{where}.edited", "must be a list of [position, token before, token after] (two different token ids)")
    _expect(len({e[0] for e in edited}) == len(edited), f"{where}.edited", "edits a position twice")
    _expect(_is_int(raw.get("token_forwards", 0)) and raw.get("token_forwards", 0) >= 0, f"{where}.token_forwards",
            "must be a non-negative integer")
    _expect(raw.get("seed_threshold") is None or _is_num(raw["seed_threshold"]), f"{where}.seed_threshold",
            "must be a number or null")
    for key in ("guided_confidence", "guidance"):
        values = raw.get(key)
        _expect(values is None or (isinstance(values, list) and len(values) == n
                                   and all(v is None or _is_num(v) for v in values)),
                f"{where}.{key}", f"must be null or {n} numbers (or nulls)")
    return Step(**{k: v for k, v in raw.items() if k in names})


def _parse_trace(data) -> Trace:
    _expect(isinstance(data, dict), "trace", "must be a JSON object")
    _expect(data.get("schema") in READABLE_SCHEMAS, "trace.schema",
            f"must be one of {', '.join(map(repr, READABLE_SCHEMAS))} (got {data.get('schema')!r})")
    required = ("model", "method", "mode", "settings", "prompt", "gen_length", "text", "nfe", "wall_s",
                "tokens_per_s", "steps")
    missing = [k for k in required if k not in data]
    _expect(not missing, "trace", f"missing field(s) {', '.join(missing)}")
    n = data["gen_length"]
    _expect(_is_int(n) and 1 <= n <= 4096, "trace.gen_length", "must be an integer in 1..4096")
    _expect(data["mode"] in MODES, "trace.mode", f"must be one of {', '.join(MODES)}")
    for key in ("model", "method", "prompt", "text"):
        _expect(isinstance(data[key], str), f"trace.{key}", "must be a string")
    _expect(isinstance(data.get("label", ""), str), "trace.label", "must be a string")
    _expect(isinstance(data["settings"], dict), "trace.settings", "must be an object")
    _expect(_is_int(data["nfe"]) and data["nfe"] >= 0, "trace.nfe", "must be a non-negative integer")
    for key in ("wall_s", "tokens_per_s"):
        _expect(_is_num(data[key]) and data[key] >= 0, f"trace.{key}", "must be a non-negative number")
    windows = -(-n // data["block_length"]) if _is_int(data.get("block_length")) and data["block_length"] > 0 else 1
    _expect(isinstance(data["steps"], list)
            and len(data["steps"]) <= MAX_STEPS_PER_POSITION * n + windows * (MAX_POST_EDIT_STEPS + 1),
            "trace.steps", "must be a list of steps")
    vocab = data.get("vocab", {})
    _expect(isinstance(vocab, dict) and all(isinstance(v, str) for v in vocab.values()), "trace.vocab",
            "must map token ids to strings")
    attention = data.get("attention")
    if attention is not None:
        _expect(isinstance(attention, dict) and {"stages", "steps", "matrix"} <= attention.keys(), "trace.attention",
                "must have stages, steps and matrix")
        attention = AttentionStages(**{k: attention[k] for k in ("stages", "steps", "matrix")})
    names = {f.name for f in fields(Trace)}
    kwargs = {k: v for k, v in data.items() if k in names and k not in ("steps", "attention")}
    kwargs["method"] = method_id(kwargs["method"])           # a file may name its method by an old id
    if isinstance(kwargs.get("fork"), dict) and "method" in kwargs["fork"]:
        kwargs["fork"] = {**kwargs["fork"], "method": method_id(kwargs["fork"]["method"])}
    kwargs.setdefault("prompt_length", 0)
    kwargs.setdefault("block_length", None)
    block = kwargs.get("model_block")
    _expect(block is None or (_is_int(block) and block >= 1 and data["mode"] == "semi-ar"), "trace.model_block",
            "must be null or a block size >= 1 (a block-causal model decodes semi-AR)")
    kwargs["schema"] = SCHEMA
    trace = Trace(**kwargs, attention=attention, steps=[_parse_step(s, i, n) for i, s in enumerate(data["steps"])])
    _expect(isinstance(trace.response, list) and len(trace.response) in (0, n), "trace.response",
            f"must have gen_length = {n} token ids")
    _check_story(trace)
    _count_work(trace, data)
    trace.label = trace.name            # a file from before lanes: the method's label and its distinct settings
    if "answer_length" in data:
        _expect(_is_int(trace.answer_length) and 0 <= trace.answer_length <= n, "trace.answer_length",
                f"must be an integer in 0..{n}")
        _expect(_is_int(trace.answer_nfe) and 0 <= trace.answer_nfe <= trace.nfe, "trace.answer_nfe",
                "must be an integer in 0..nfe")
    else:       # schema 1: the answer ends at the first end-of-text token of the response
        ends = [p for p, tok in enumerate(trace.response) if trace.token_text(tok).strip() in END_TEXTS]
        trace.set_answer(ends[0] if ends else (n if trace.response else 0))
    return trace


def _count_work(trace: Trace, data: dict) -> None:
    """token_forwards: checked against the steps, or for a file from before the cache, every position every pass."""
    if "token_forwards" in data:
        _expect(_is_int(trace.token_forwards) and trace.token_forwards == sum(s.token_forwards for s in trace.steps),
                "trace.token_forwards", "must be the sum of the steps' token_forwards")
        return
    per_pass = (trace.prompt_length + trace.gen_length) * (2 if trace.settings.get("cfg_scale") else 1)
    for step in trace.steps:
        step.token_forwards = per_pass
    trace.token_forwards = per_pass * len(trace.steps)


def _check_edits(trace: Trace) -> None:
    """Constraints and a fork's edits: positions of the response, token ids, a step of the run."""
    n = trace.gen_length
    for key, value in (("constraints", trace.constraints), ("fork.force", (trace.fork or {}).get("force"))):
        _expect(value is None or (isinstance(value, dict) and all(
            str(k).isdigit() and int(k) < n and _is_int(t) and t >= 0 for k, t in value.items())),
            f"trace.{key}", "must map response offsets to token ids")
    if trace.fork is not None:
        fork = trace.fork
        _expect(isinstance(fork, dict) and _is_int(fork.get("at")) and 0 <= fork["at"] <= len(trace.steps),
                "trace.fork.at", "must be a step of the run")
        _expect(isinstance(fork.get("remask", []), list) and all(_is_int(p) and 0 <= p < n
                                                                  for p in fork.get("remask", [])),
                "trace.fork.remask", "must list response offsets")


def _check_clash(trace: Trace) -> None:
    """A measured clash: a value (or null) a step, the passes it spent, the cap it was measured with."""
    clash = trace.clash
    if clash is None:
        return
    _expect(isinstance(clash, dict) and isinstance(clash.get("values"), list)
            and len(clash["values"]) == len(trace.steps), "trace.clash.values", "must hold one value a step")
    _expect(all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
                for v in clash["values"]), "trace.clash.values", "must be numbers (nats) or null")
    _expect(_is_int(clash.get("passes")) and clash["passes"] >= 0, "trace.clash.passes", "must be a count of passes")
    _expect(clash.get("limit") is None or (_is_int(clash["limit"]) and clash["limit"] >= 2), "trace.clash.limit",
            "must be null or a number of tokens >= 2")
    _expect(isinstance(clash.get("skipped", []), list) and all(_is_int(k) and 0 <= k < len(trace.steps)
                                                                and clash["values"][k] is None
                                                                for k in clash.get("skipped", [])),
            "trace.clash.skipped", "must list steps of the run left unmeasured (their values null)")


def _check_story(trace: Trace) -> None:
    """Cross-field rules the figures rely on: steps in order, each position committed once while masked."""
    _expect(trace.nfe == len(trace.steps), "trace.nfe", f"must equal the number of steps ({len(trace.steps)})")
    _expect(isinstance(trace.limit_reached, bool), "trace.limit_reached", "must be true or false")
    _check_edits(trace)
    _check_clash(trace)
    search = trace.length_search
    _expect(search is None or (isinstance(search, dict) and search.get("chosen") == trace.gen_length
                               and isinstance(search.get("tried"), list)), "trace.length_search",
            "must be null or the search that chose gen_length")
    decoded: set[int] = set()
    taken_back: set[int] = set()            # a revising rule may commit a position taken back before its window
    for i, step in enumerate(trace.steps):
        where = f"steps[{i}]"
        written, taken = trace.edits_at(i)
        decoded.update(written)
        decoded.difference_update(taken)
        taken_back.update(taken)
        _expect(step.index == i, f"{where}.index", f"must be {i}")
        _expect(all((c is None) == (p in decoded) for p, c in enumerate(step.confidence)), f"{where}.confidence",
                "must be null exactly at positions decoded before this step")
        _expect(len(set(step.committed)) == len(step.committed) and not decoded & set(step.committed),
                f"{where}.committed", "commits a position twice")
        finishes = len(decoded) + len(step.committed) == trace.gen_length      # an early commit of all that is left
        _expect(finishes or all(step.window[0] <= p < step.window[1] or p in taken_back for p in step.committed),
                f"{where}.committed", "positions must lie inside the step's window")
        edited = {e[0] for e in step.edited}
        _expect(edited <= decoded - set(step.remasked), f"{where}.edited",
                "must list positions decoded before the step and kept by it")
        decoded.update(step.committed)
        _expect(set(step.remasked) <= decoded, f"{where}.remasked", "must list positions decoded after the step")
        decoded.difference_update(step.remasked)
        taken_back.update(step.remasked)
    attention = trace.attention
    if attention is not None:
        n = trace.gen_length
        _expect(len(attention.matrix) == len(attention.stages) == len(attention.steps), "trace.attention",
                "stages, steps and matrix must have one entry per stage")
        for stage, rows in enumerate(attention.matrix):
            _expect(isinstance(rows, list) and len(rows) == n and all(
                row is None or (isinstance(row, list) and len(row) == n + 1 and all(_is_num(v) and v >= 0 for v in row))
                for row in rows), f"trace.attention.matrix[{stage}]",
                f"must have {n} rows of {n + 1} non-negative numbers (or null)")


# ---------------------------------------------------------------------- bundles (the app's download)

def bundle_json(traces: list[Trace]) -> str:
    """The download: {"schema": "dico-bundle/1", "traces": [trace JSON, ...]}."""
    return json.dumps({"schema": BUNDLE_SCHEMA, "traces": [t.to_dict() for t in traces]}, separators=(",", ":"))


def read_traces(data: bytes | str) -> list[Trace]:
    """Traces from an uploaded file: a bundle, one trace, or a JSON list of traces. Errors name the field."""
    if len(data) > MAX_JSON_BYTES:
        raise TraceError(f"file: is {len(data) / 2**20:.1f} MiB, over the {MAX_JSON_BYTES // 2**20} MiB limit")
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
    elif isinstance(raw, dict) and raw.get("schema") in READABLE_SCHEMAS:
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
