"""Measurements of what the paper builds DiCo on, as functions of a finished trace (docs/observations.md).

    clashes = clash(predictor, trace)          # one value a step (nats), None where a step committed fewer than 2
    clashes.passes                             # the forward passes it spent, apart from the decode's NFE
    positions, matrix = dependency(predictor, trace, at=10)    # D[a][b]: how far writing a moves b (nats)
    locality(positions, matrix, answer_length=trace.answer_length)   # Observation II: near or far, much or little
    layer_locality(predictor, trace)           # the attention lens, layer by layer (one pass a step)

Each replays the state a step started from out of the trace alone (``Trace.tokens_before``: constraints, earlier
commits, take-backs and a fork's edits), runs extra forward passes on it and never changes the decode. The model's
distribution at a position is the softmax of its logits over the vocabulary without the mask token (temperature
1, whatever the decode sampled with; with ``cfg_scale`` the guided logits, as the decode saw them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dico.attention import response_rows, stage_index
from dico.sampling import Sampler
from dico.settings import SETTINGS
from dico.trace import CLASH_MARK, FLOOR_BOUND, STAGES, Trace

ROWS_PER_PASS = 16          # sequences put through the model at once (each counts as one pass)
CLASH_LIMIT = 8             # a step's most confident tokens the benchmark measures (a wide step's cost)
# The passes measuring the clash of a race may spend after it, all lanes together (the app, the CLI's exports): the
# lesson's race needs 124 (Top-4's 24 steps of 4 tokens: 96); six lanes at gen 256 could ask for about 1,500.
CLASH_BUDGET = 256
WITHIN = 3                  # positions: "near" for Observation II


class Measured(list):
    """A list of per-step values that also says how many forward passes measuring them spent (and which steps a
    budget of passes left out)."""
    passes: int = 0
    skipped: list = []


def _sampler(trace: Trace) -> Sampler:
    """The trace's own guidance (``cfg_scale``); everything else about sampling is left out of a measurement."""
    cls = SETTINGS[trace.method]
    return Sampler(cls.from_dict(trace.recorded_settings()))


class Replayed:
    """Log-probabilities of whole response states, many states a call, counting the passes."""

    def __init__(self, predictor, trace: Trace):
        self.predictor, self.trace, self.sampler = predictor, trace, _sampler(trace)
        self.prompt = predictor.encode_prompt(trace.prompt)
        if len(self.prompt) != trace.prompt_length:
            raise ValueError("trace: its prompt does not encode as it did when the trace was decoded (another "
                             "prompt or tokenizer)")
        self.passes = 0

    def ids(self, tokens: list[int | None]) -> list[int]:
        return self.prompt + [self.predictor.mask_id if t is None else t for t in tokens]

    def log_probs(self, states: list[list[int | None]], positions: list[int]) -> torch.Tensor:
        """(states, positions, vocabulary) log-probabilities at response ``positions``, on the CPU in float64."""
        out = []
        m = len(self.prompt)
        where = torch.tensor(positions, dtype=torch.long) + m
        for start in range(0, len(states), ROWS_PER_PASS):
            chunk = states[start:start + ROWS_PER_PASS]
            ids = torch.tensor([self.ids(s) for s in chunk], dtype=torch.long)
            logits, _ = self.sampler.logits(self.predictor, self.predictor.to_model(ids), m)
            rows = logits[:, self.predictor.to_model(where)].double()
            rows[..., self.predictor.mask_id] = -math.inf
            out.append(torch.log_softmax(rows, dim=-1).cpu())
            self.passes += len(chunk)
        return torch.cat(out)


def written(step) -> list[tuple[int, int]]:
    """Every (position, token) a step wrote: its commits (masked before it) and its edits (a written token replaced
    by another, ``Step.edited``); its take-backs write no token."""
    return list(zip(step.committed, step.tokens)) + [(p, new) for p, _, new in step.edited]


def _order(step, limit: int | None, edit_conf: dict[int, float] | None = None) -> list[tuple[int, int]]:
    """The step's written (position, token) pairs, most confident first (ties: the lower position), the first
    ``limit``. A commit's confidence is the one the trace recorded; an edited position has none recorded (it was not
    masked), so its confidence is the probability of its new token on the state before (``edit_conf``), as the
    editing rule itself reads it."""
    conf = {**{p: step.confidence[p] or 0.0 for p in step.committed}, **(edit_conf or {})}
    pairs = sorted(written(step), key=lambda pt: (-conf.get(pt[0], 0.0), pt[0]))
    return pairs[:limit] if limit else pairs


def step_cost(step, limit: int | None) -> int:
    """The passes ``step_clash`` spends on a step: a pass a token written, at most ``limit``; none under two."""
    n = len(step.committed) + len(step.edited)
    n = min(n, limit) if limit else n
    return n if n >= 2 else 0


def step_clash(model: Replayed, trace: Trace, k: int, limit: int | None = None) -> float | None:
    """The clash of step ``k``: the sum of its written tokens' marginal log-probabilities on the state before it,
    minus their joint log-probability by the chain rule (written one at a time, most confident first). Every token
    the step wrote counts, its commits and its edits (an edited position holds its old token until its turn), so a
    step that commits one token and edits three is measured on four. 0 when the tokens are independent given the
    state; large when each was likely alone and unlikely together."""
    step = trace.steps[k]
    if step_cost(step, limit) == 0:
        return None
    before = trace.tokens_before(k)
    first = None
    if step.edited:             # the edits' confidences come from the state before: its pass first, then the rest
        edited = [p for p, _, _ in step.edited]
        first = model.log_probs([before], [p for p, _ in written(step)])[0]
        index = {p: i for i, (p, _) in enumerate(written(step))}
        news = {p: t for p, _, t in step.edited}
        pairs = _order(step, limit, {p: math.exp(float(first[index[p], news[p]])) for p in edited})
        first = first[[index[p] for p, _ in pairs]]
    else:
        pairs = _order(step, limit)
    states = []
    for j in range(len(pairs)):                         # state j: the tokens before j written
        state = list(before)
        for p, t in pairs[:j]:
            state[p] = t
        states.append(state)
    positions = [p for p, _ in pairs]
    if first is None:
        lp = model.log_probs(states, positions)         # (j, positions, v)
    else:
        lp = torch.cat([first[None], model.log_probs(states[1:], positions)]) if len(states) > 1 else first[None]
    marginal = sum(float(lp[0, i, t]) for i, (_, t) in enumerate(pairs))
    joint = sum(float(lp[j, j, t]) for j, (_, t) in enumerate(pairs))
    return marginal - joint


def clash(predictor, trace: Trace, limit: int | None = None, budget: int | None = None) -> Measured:
    """One value a step (nats; ``step_clash``), None where a step wrote fewer than 2 tokens. A step of s tokens
    costs s passes (``.passes``). ``limit``: measure only a step's ``limit`` most confident tokens (on a large model
    a wide step is costly; the default, None, measures every token, as the embedded model affords). ``budget``: at
    most this many passes in all, spent on the steps in order; a step that would pass it is left out (None, listed
    in ``.skipped``) and a later, cheaper one may still be measured."""
    model = Replayed(predictor, trace)
    out, skipped = Measured(), []
    for k, step in enumerate(trace.steps):
        if budget is not None and model.passes + step_cost(step, limit) > budget:
            skipped += [k] if step_cost(step, limit) else []
            out.append(None)
            continue
        out.append(step_clash(model, trace, k, limit))
    out.passes, out.skipped = model.passes, skipped
    return out


def annotate_clash(predictor, trace: Trace, limit: int | None = CLASH_LIMIT, budget: int | None = None) -> Trace:
    """Measure the clash of every step and record it on the trace (``Trace.clash``: the values, the passes spent,
    the cap, and the steps a ``budget`` of passes left out), so that the figures and the app draw it and a saved
    trace keeps it. The decode is left as it was."""
    measured = clash(predictor, trace, limit, budget)
    trace.clash = {"values": [None if v is None else round(v, 4) for v in measured], "passes": measured.passes,
                   "limit": limit}
    if measured.skipped:
        trace.clash["skipped"] = measured.skipped
    return trace


def clash_cost(trace: Trace, limit: int | None = CLASH_LIMIT) -> int:
    """The passes measuring a run's clash would spend (``annotate_clash``), known from the trace before any."""
    return sum(step_cost(step, limit) for step in trace.steps)


def marked_steps(trace: Trace) -> dict[int, float]:
    """The steps whose measured clash is above ``CLASH_MARK`` (nats), by index: the ones the race marks; none when
    the clash was not measured, and never a step of one token (it has no clash)."""
    values = (trace.clash or {}).get("values") or []
    return {k: v for k, v in enumerate(values) if v is not None and v > CLASH_MARK}


def total_clash(trace: Trace) -> float | None:
    """A run's clash: its steps' positive clashes summed (nats; a step's clash below 0 is noise, not a credit);
    None when it was not measured."""
    if trace.clash is None:
        return None
    return sum(v for v in trace.clash["values"] if v is not None and v > 0)


@dataclass
class Dependency:
    """D[a][b] (nats): how far writing masked position ``positions[a]``'s top prediction moves the model's
    distribution at ``positions[b]``, KL(after || before); D[a][a] = 0."""
    at: int
    positions: list[int]
    matrix: list[list[float]]
    passes: int

    def __iter__(self):                     # positions, matrix = dependency(...)
        return iter((self.positions, self.matrix))


def dependency(predictor, trace: Trace, at: int) -> Dependency:
    """The dependency among the masked response positions before step ``at``: one pass on that state, then one per
    masked position with its top prediction written (the mask token never)."""
    if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at < max(len(trace.steps), 1):
        raise ValueError(f"at: must be a step of the run, 0..{len(trace.steps) - 1}, got {at!r}")
    model = Replayed(predictor, trace)
    before = trace.tokens_before(at)
    positions = [p for p, t in enumerate(before) if t is None]
    if not positions:
        return Dependency(at, [], [], 0)
    base = model.log_probs([before], positions)[0]                      # (positions, v)
    written = []
    for i, p in enumerate(positions):
        state = list(before)
        state[p] = int(base[i].argmax())
        written.append(state)
    after = model.log_probs(written, positions)                         # (a, b, v)
    q = after.exp()
    terms = torch.where(q > 0, q * (after - base[None]), torch.zeros_like(q))    # the mask token: 0, not 0 x inf
    kl = terms.sum(-1).clamp(min=0.0)                                           # (a, b)
    kl.fill_diagonal_(0.0)
    return Dependency(at, positions, [[round(float(v), 6) for v in row] for row in kl], model.passes)


@dataclass
class Locality:
    """How a dependency matrix (or attention) spreads: the share within ``w`` positions against the share an even
    spread over the same pairs would put there, the mean distance, and the total."""
    within: float
    even: float
    mean_distance: float
    total: float
    pairs: int


def locality(positions: list[int], matrix, w: int = 3, among: set[int] | None = None) -> Locality | None:
    """Observation II from a dependency matrix: ``among`` keeps only pairs whose both positions are in it (e.g.
    the answer's positions, leaving padding out). None when there is no pair."""
    keep = [i for i, p in enumerate(positions) if among is None or p in among]
    if len(keep) < 2:
        return None
    pos = torch.tensor([positions[i] for i in keep], dtype=torch.float64)
    d = torch.tensor(matrix, dtype=torch.float64)[keep][:, keep]
    distance = (pos[:, None] - pos[None, :]).abs()
    off = ~torch.eye(len(keep), dtype=torch.bool)
    near = off & (distance <= w)
    total = float(d[off].sum())
    even = float(near.sum()) / float(off.sum())
    if total <= 0:
        return Locality(0.0, even, 0.0, 0.0, int(off.sum()))
    return Locality(float(d[near].sum()) / total, even, float((d * distance)[off].sum()) / total, total,
                    int(off.sum()))


def attention_locality(trace: Trace, w: int = 3, among: set[int] | None = None) -> dict[str, Locality | None]:
    """Observation II through the paper's own lens, by stage (``STAGES``): of a masked query's attention to
    response keys, the share within ``w`` positions (itself left out) against an even spread's share, and the mean
    distance; ``total`` is the share of its attention that goes to the response at all (the rest to the prompt).
    From the attention the decode captured (layer- and head-averaged), so it costs no pass."""
    if trace.attention is None:
        raise ValueError("attention: the trace has no attention maps; decode with capture_attention=True")
    return {stage: _rows_locality(rows, w, among) for stage, rows in zip(STAGES, trace.attention.matrix)}


def _rows_locality(rows: list, w: int, among: set[int] | None) -> Locality | None:
    """``attention_locality`` of one stage's rows (a masked query's row: its attention to the prompt, summed, then
    to each response key; None for a query never masked in that stage)."""
    queries = [q for q, row in enumerate(rows) if row is not None and (among is None or q in among)]
    if not queries:
        return None
    keys = torch.tensor([rows[q][1:] for q in queries], dtype=torch.float64)   # drop the prompt column
    n = keys.shape[1]
    key_pos = torch.arange(n, dtype=torch.float64)
    allowed = torch.ones(len(queries), n, dtype=torch.bool)
    if among is not None:
        allowed &= torch.tensor([k in among for k in range(n)])[None]
    qpos = torch.tensor(queries, dtype=torch.float64)[:, None]
    allowed &= key_pos[None] != qpos
    weights = keys * allowed
    distance = (key_pos[None] - qpos).abs()
    near = allowed & (distance <= w)
    mass = float(weights.sum())
    response = float(sum(sum(rows[q][1:]) for q in queries)) / sum(sum(rows[q]) for q in queries)
    return Locality(float(weights[near].sum()) / mass if mass else 0.0, float(near.sum()) / float(allowed.sum()),
                    float((weights * distance).sum()) / mass if mass else 0.0, response, len(queries))


class ByLayer(dict):
    """{stage: [one value a layer]}, and the forward passes measuring them spent."""
    passes: int = 0


def layer_maps(predictor, trace: Trace) -> ByLayer:
    """Each layer's attention, by stage, as the decode's capture keeps their mean (``dico.loop``): every step's
    state replayed (one pass a step, ``ROWS_PER_PASS`` at once), each layer's head-averaged map of the masked
    response queries averaged over the steps of a stage; rows as ``AttentionStages.matrix`` holds them. The
    decode itself keeps only the layers' mean; its capture is skipped on a cached pass that did not refresh, the
    replay never is."""
    if not predictor.supports_attention:
        raise ValueError(f"attention: model {predictor.name!r} does not return attention maps")
    model, n = Replayed(predictor, trace), trace.gen_length
    m, layers = trace.prompt_length, None
    states = [trace.tokens_before(k) for k in range(len(trace.steps))]
    for begin in range(0, len(states), ROWS_PER_PASS):
        chunk = states[begin:begin + ROWS_PER_PASS]
        ids = predictor.to_model(torch.tensor([model.ids(t) for t in chunk], dtype=torch.long))
        _, maps = predictor.forward(ids, attentions=True, per_layer=True)
        model.passes += len(chunk)
        if layers is None:
            layers = len(maps)
            sums = torch.zeros(len(STAGES), layers, n, n + 1, dtype=torch.float64)
            counts = torch.zeros(len(STAGES), n, dtype=torch.float64)
        for row, tokens in enumerate(chunk):
            masked = torch.tensor([t is None for t in tokens])
            stage, masked = stage_index(masked, len(STAGES)), masked.double()
            for layer, a in enumerate(maps):
                keyed = response_rows(a[row].float().mean(dim=0).double().cpu(), m, n)     # n, n + 1
                sums[stage, layer] += keyed * masked[:, None]
            counts[stage] += masked
    out = ByLayer()
    for s, stage in enumerate(STAGES):
        out[stage] = [[row if counts[s, q] > 0 else None for q, row in
                       enumerate((sums[s, layer] / counts[s].clamp(min=1)[:, None]).tolist())]
                      for layer in range(layers or 0)]
    out.passes = model.passes
    return out


def layer_locality(predictor, trace: Trace, w: int = WITHIN, among: set[int] | None = None,
                   maps: ByLayer | None = None) -> ByLayer:
    """Observation II through the attention lens, layer by layer: {stage: [``Locality`` or None,
    one a layer]}, as ``attention_locality`` measures the layers' mean (``layer_maps``: one pass a step; ``maps``:
    those already measured, so that two lenses cost one replay)."""
    maps = layer_maps(predictor, trace) if maps is None else maps
    out = ByLayer({stage: [_rows_locality(rows, w, among) for rows in per_layer] for stage, per_layer in maps.items()})
    out.passes = maps.passes
    return out


def stage_of(trace: Trace, at: int) -> str:
    """The stage (``STAGES``) a step falls in, by the unmasked fraction before it, as the attention stages split."""
    return STAGES[stage_index(torch.tensor([t is None for t in trace.tokens_before(at)]), len(STAGES))]


# Observation III: moderate, stable confidence forms clusters that soon become sure. The band is DiCo's own pair of
# thresholds: a seed needs confidence 0.3, a cluster above 0.6 ends Divide (its defaults, docs/settings.md).
MODERATE = (0.3, 0.6)


@dataclass
class Clusters:
    """Runs (two or more adjacent masked answer positions) of moderate confidence, over a whole run: how many a step,
    how long, how many of their positions the run committed within ``soon`` steps, and the overlooked positions
    (moderate at some step, left masked ``late`` steps or more after it)."""
    band: tuple[float, float]
    steps: int
    runs: int
    positions: int
    committed_soon: int
    overlooked: list[int]

    @property
    def per_step(self) -> float:
        return self.runs / self.steps if self.steps else 0.0

    @property
    def mean_length(self) -> float:
        return self.positions / self.runs if self.runs else 0.0

    @property
    def soon_share(self) -> float:
        return self.committed_soon / self.positions if self.positions else 0.0


def moderate_clusters(trace: Trace, band: tuple[float, float] = MODERATE, soon: int = 3, late: int = 10) -> Clusters:
    """Observation III from the confidences the trace recorded (no pass): at each step, the runs of adjacent masked
    answer positions whose confidence lies in ``band`` (low inclusive, high exclusive)."""
    low, high = band
    committed_at = {}
    for k, step in enumerate(trace.steps):
        for p in step.committed:
            committed_at[p] = k                         # the last commit (a revising rule may commit twice)
    runs = positions = soon_count = 0
    first_moderate: dict[int, int] = {}
    for k, step in enumerate(trace.steps):
        moderate = [p for p in range(min(trace.answer_length, len(step.confidence)))
                    if step.confidence[p] is not None and low <= step.confidence[p] < high]
        for p in moderate:
            first_moderate.setdefault(p, k)
        for run in _runs(moderate):
            if len(run) < 2:
                continue
            runs += 1
            positions += len(run)
            soon_count += sum(k <= committed_at.get(p, -1) < k + soon for p in run)
    overlooked = sorted(p for p, k in first_moderate.items() if committed_at.get(p, k) - k >= late)
    return Clusters(band, len(trace.steps), runs, positions, soon_count, overlooked)


def _runs(positions: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for p in positions:
        if out and out[-1][-1] == p - 1:
            out[-1].append(p)
        else:
            out.append([p])
    return out


@dataclass
class Floor:
    """A decode that commits, each step, the most confident masked positions of the window one by one while the
    step's clash stays within ``bound`` nats, ending the step at the first that would not: a greedy bound on the steps
    this model needs without committing tokens that clash (another order of commits may need fewer). ``nfe`` is its
    steps (what a decoder that knew the clash would pay); ``passes`` every pass it spent, the conditionals that
    checked each addition included; ``answer_nfe`` the steps until the last answer token was
    committed (the answer: the positions before the first end-of-text); ``token_forwards`` the positions its passes
    put through the model."""
    response: list[int]
    text: str
    nfe: int
    passes: int
    per_step: list[int]
    answer_nfe: int = 0
    token_forwards: int = 0



def floor(predictor, prompt: str, *, mode: str = "non-ar", gen_length: int = 96, block_length: int | None = 32,
          bound: float = FLOOR_BOUND) -> Floor:
    """Greedy (argmax) decoding with the clash-bounded step: a step's first token always commits (a step of one
    token cannot clash); each next one, most confident first, commits if the step's clash with it stays within
    ``bound`` (one pass gives its conditional), and the step ends at the first that would not."""
    from dico.loop import check_request
    width = block_length if mode == "semi-ar" else gen_length
    check_request(predictor, prompt, "vanilla", mode, gen_length, width if mode == "semi-ar" else None)
    trace = Trace(model=predictor.name, method="vanilla", mode=mode, settings={}, prompt=prompt,
                  prompt_length=len(predictor.encode_prompt(prompt)), gen_length=gen_length, block_length=None)
    model = Replayed(predictor, trace)
    tokens: list[int | None] = [None] * gen_length
    per_step, committed_at = [], [0] * gen_length
    for start in range(0, gen_length, width):
        window = range(start, min(start + width, gen_length))
        while any(tokens[p] is None for p in window):
            masked = [p for p in window if tokens[p] is None]
            marginal = model.log_probs([tokens], masked)[0]                       # (masked, v)
            best, pred = marginal.max(-1)
            order = sorted(range(len(masked)), key=lambda i: (-float(best[i]), masked[i]))
            state, spent = list(tokens), 0.0
            first = order[0]
            state[masked[first]] = int(pred[first])
            taken = 1
            for i in order[1:]:
                conditional = model.log_probs([state], [masked[i]])[0, 0, int(pred[i])]
                cost = float(best[i]) - float(conditional)
                if spent + cost > bound:
                    break
                spent += cost
                state[masked[i]] = int(pred[i])
                taken += 1
            for p in masked:
                if state[p] is not None:
                    committed_at[p] = len(per_step)
            tokens = state
            per_step.append(taken)
    response = [int(t) for t in tokens]
    answer = predictor.answer_length(response)
    return Floor(response, predictor.decode(response), len(per_step), model.passes, per_step,
                 answer_nfe=max((committed_at[p] + 1 for p in range(answer)), default=0),
                 token_forwards=model.passes * (trace.prompt_length + gen_length))
