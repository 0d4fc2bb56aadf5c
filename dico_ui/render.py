"""The response at step k, drawn one way for the live race, the final answers and the step view; the
status line, the comparison table and the "where the parallelism comes from" numbers of a run.

Everything here reads traces only (a live, partial trace while decoding; a finished or uploaded one
after), so a replayed run looks exactly like a live one.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dico.observe import CLASH_MARK, WITHIN, attention_locality, marked_steps, total_clash
from dico.settings import METHOD_LABELS
from dico.trace import END_TEXTS, STAGES, Trace
from dico_ui.limits import LIMITS
from dico_ui.text import clean, example_item, isolated, prose
from visuals import METHOD_COLORS, reference, run_colors
from visuals.takeaway import conf_color  # the race and the GIF share one colour scale

MASK_SYMBOL = "▢"
MARK = f"{CLASH_MARK:g} nat" + ("" if CLASH_MARK == 1 else "s")     # the clash a step is marked above, in words


def label(method: str) -> str:
    """A method's label (a lane is named by its own: ``trace.name``)."""
    return METHOD_LABELS.get(method, method)


@dataclass
class Cell:
    """One response position at step k: committed (with the confidence it was committed at) or masked."""
    pos: int
    text: str | None          # None while masked
    conf: float | None        # commit confidence, or the current confidence while masked
    step: int | None          # index of the step that committed it
    padding: bool             # at or after the answer's end (the first committed end-of-text)
    revised: str | None = None  # the text step k took back to the mask here (a revising rule), else None
    clash: float | None = None  # the clash of the step that committed it, when above CLASH_MARK (measured)
    replaced: str | None = None  # the text step k replaced here with another token (an editing rule), else None


def cells(trace: Trace, k: int, token_text: Callable[[int], str] | None = None) -> list[Cell]:
    """The response after step index ``k`` (-1: before the first step); a step's edits (``Step.edited``) write
    another token, its take-backs (``Step.remasked``, applied after its commits and edits) mask a position again."""
    text_of = token_text or trace.token_text
    k = min(k, len(trace.steps) - 1)
    token, when, conf, back, swapped = {}, {}, {}, {}, {}
    for step in trace.steps[:k + 1]:
        written, taken = trace.edits_at(step.index)     # by hand before this step: constraints, a fork's edits
        for p, t in written.items():
            token[p], when[p], conf[p] = t, step.index - 1, 1.0
        for p in taken:
            token.pop(p, None), when.pop(p, None), conf.pop(p, None)
        for p, t in zip(step.committed, step.tokens):
            token[p], when[p], conf[p] = t, step.index, step.confidence[p]
        swapped = {p: old for p, old, _ in step.edited}
        for p, _, new in step.edited:                   # the commit confidence stays the one it was written with
            token[p], when[p] = new, step.index
        back = {p: token.pop(p) for p in getattr(step, "remasked", None) or [] if p in token}
        for p in back:
            del when[p], conf[p]
    current = trace.steps[k].confidence if k >= 0 else [None] * trace.gen_length
    texts = {p: text_of(t) for p, t in token.items()}
    end = min((p for p, s in texts.items() if s.strip() in END_TEXTS), default=trace.gen_length)
    marked = marked_steps(trace)
    return [Cell(p, texts.get(p), conf.get(p, current[p]), when.get(p), p >= end,
                 text_of(back[p]) if p in back else None, marked.get(when.get(p)),
                 text_of(swapped[p]) if p in swapped and p in token else None) for p in range(trace.gen_length)]


def answer_complete(trace: Trace, k: int, token_text=None) -> int | None:
    """Steps the answer took, once it is complete after step index ``k``: every position before the first
    committed end-of-text is committed (the trace's ``answer_nfe`` at the end); None while it is not."""
    grid = cells(trace, k, token_text)
    answer = [c for c in grid if not c.padding]
    if any(c.text is None for c in answer) or (len(answer) == len(grid) and any(c.text is None for c in grid)):
        return None
    return max((c.step for c in answer), default=-1) + 1 if answer else 0


def _cell_html(c: Cell, k: int) -> str:
    new = " new" if c.step is not None and c.step == k else ""
    if c.text is None:
        shade = 0.0 if c.conf is None else c.conf
        kind = "mask pad" if c.padding else "mask"
        if c.revised is not None:          # taken back at this step: the old token struck through, then the mask
            return (f' <span class="tok revised" title="position {c.pos}: taken back to the mask at step {k}">'
                    f'<s>{clean(c.revised.strip()) or "␣"}</s></span><span class="tok {kind}" style="--shade:'
                    f'{shade:.2f}" title="position {c.pos}: masked again, confidence {shade:.2f}">{MASK_SYMBOL}</span>')
        return (f' <span class="tok {kind}" style="--shade:{shade:.2f}" '
                f'title="position {c.pos}: masked, confidence {shade:.2f}">{MASK_SYMBOL}</span>')
    if c.padding:
        return (f'<span class="tok pad{new}" title="position {c.pos}: padding (end-of-text), committed at '
                f'step {c.step} with confidence {c.conf:.2f}"></span>')
    bg, fg = conf_color(c.conf)
    space = " " if c.text[:1].isspace() else ""
    if c.replaced is not None:              # replaced at this step: the old token struck through, then the new one
        old = clean(c.replaced.strip())
        return (f'{space}<span class="tok revised" title="position {c.pos}: replaced at step {k}"><s>{old or "␣"}</s>'
                f'</span><span class="tok edited new" title="position {c.pos}: written at step {k} in place of '
                f'{old!r}">{clean(c.text.strip())}</span>')
    clash = "" if c.clash is None else f"; step {c.step} clashed: {c.clash:+.1f} nats"
    return (f'{space}<span class="tok{new}{" clash" if clash else ""}" style="background:{bg};color:{fg}" '
            f'title="position {c.pos}: committed at step {c.step} with confidence {c.conf:.2f}{clash}">'
            f'{clean(c.text.strip())}</span>')


def response_html(trace: Trace, k: int, token_text=None) -> str:
    """THE response at step index k: committed tokens coloured by their commit confidence, masked positions as
    placeholders shaded by their current confidence, this step's commits outlined, tokens this step took back
    struck through, padding as small grey marks."""
    parts, padding_started = [], False
    for c in cells(trace, k, token_text):
        if c.padding and not padding_started:
            padding_started = True
            parts.append('<span class="end-mark" title="end of the answer: the rest is padding">⟂</span>')
        parts.append(_cell_html(c, k))
    return f'<div class="response" dir="auto">{"".join(parts).strip()}</div>'


ORDINALS = ("1st", "2nd", "3rd", "4th")
NOT_JUDGED = ('<div class="judge-note">Not judged: the app cannot check answers to this prompt (it judges pick and '
              'team prompts, list tasks and word problems it can read).</div>')


def _place(rank: int | None) -> str:
    return f' <span class="place">{ORDINALS[rank]}</span>' if rank is not None and rank < len(ORDINALS) else ""


def _verdict(right: bool | None) -> str:
    if right is None:
        return ""
    return '<span class="verdict right">right</span>' if right else '<span class="verdict wrong">wrong answer</span>'


def lane_html(trace: Trace, k: int, state: str, token_text=None, rank: int | None = None,
              color: str | None = None, right: bool | None = None) -> str:
    """One lane's card in the race, headed by its label: its step counter, its answer-complete moment (and its
    place among the lanes whose answer is complete and not wrong), whether a finished answer is right (``right``:
    None when it cannot be checked) and the response at step k."""
    steps = min(k + 1, len(trace.steps))
    done = answer_complete(trace, k, token_text)
    flags = [f"step <b>{steps}</b>" + (f" of {trace.nfe}" if state == "done" else "")]
    if done is None:
        flags.append("answer not complete yet")
    else:
        flags.append(f"answer complete at step <b>{done}</b>" + ("" if right is False else _place(rank)))
    if state == "done":
        flags += ["finished"] + ([_verdict(right)] if right is not None else [])
    elif state == "stopped":
        flags.append(f"stopped at step {steps}")
    elif state == "limit":
        flags.append(f"stopped at the pass limit (step {steps})")
    elif state == "decoding":
        flags.append('<span class="live">decoding…</span>')
    if trace.clash is not None:
        flags.append(clash_flag(trace, k))
    cls = "lane done" + (" wrong" if right is False else "") if state == "done" else "lane"
    color = color or METHOD_COLORS.get(trace.method, "#999999")
    return (f'<div class="{cls}" style="border-left-color:{color}"><div class="lane-head">'
            f'<b class="lane-label">{clean(trace.name)}</b> · '
            f'{" · ".join(flags)}</div>{response_html(trace, k, token_text)}</div>')


def clash_flag(trace: Trace, k: int) -> str:
    """A measured lane's word on its clash up to step index ``k``: the steps above ``CLASH_MARK`` (marked), or none."""
    marked = {s: v for s, v in marked_steps(trace).items() if s <= k}
    skipped = [s for s in trace.clash.get("skipped", []) if s <= k]
    unmeasured = f" ({len(skipped)} steps not measured: the run's budget of passes)" if skipped else ""
    if not marked:
        one = all(v is None for v in trace.clash["values"][:k + 1]) and not skipped
        return "one token a step: no clash" if one else f"no clash above {MARK}{unmeasured}"
    worst = max(marked, key=marked.get)
    where = (f"at {len(marked)} steps, the largest {marked[worst]:+.1f} nats at step {worst}" if len(marked) > 3 else
             f"at step{'s' if len(marked) > 1 else ''} " + ", ".join(f"{s} ({v:+.1f} nats)" for s, v in marked.items()))
    return f'<span class="clash-flag">clash above {MARK} {where}</span>{unmeasured}'


def lanes_html(lanes: list[tuple[Trace, int, str]], token_text=None, banner: str = "") -> str:
    """Every lane's card side by side, with the colour legend. Places go to complete answers not judged wrong: a
    wrong answer is marked wrong, never "3rd"."""
    if not lanes:
        return banner
    rights = verdicts(lanes)
    complete = [answer_complete(t, k, token_text) for t, k, _ in lanes]
    order = sorted({c for c, right in zip(complete, rights) if c is not None and right is not False})
    colors = run_colors([t for t, _, _ in lanes])
    cards = "".join(lane_html(t, k, state, token_text, order.index(c) if c in order and right is not False else None,
                              color, right)
                    for (t, k, state), c, color, right in zip(lanes, complete, colors, rights))
    unjudged = any(state == "done" for _, _, state in lanes) and judged_item(lanes[0][0].prompt) is None
    legend = prose("legend.html").replace("${clash_mark}", MARK)
    return f'{banner}{NOT_JUDGED if unjudged else ""}<div class="race">{cards}</div>{legend}'


def judged_item(prompt: str):
    """The task item a prompt is judged by: a shipped example's own, else the one read from the prompt
    (``dico.embedded.judge``); None when the app cannot check answers to it."""
    from dico.embedded.judge import item_for
    return example_item(prompt) or item_for(prompt)


def verdicts(lanes: list[tuple[Trace, int, str]]) -> list[bool | None]:
    """Each finished lane's answer judged by its family's checker (every valid form right, mixtures and repeats
    wrong): True, False, or None for a lane not finished or a prompt the app cannot judge."""
    from dico.embedded import tasks

    finished = [state == "done" for _, _, state in lanes]
    item = judged_item(lanes[0][0].prompt) if any(finished) else None
    return [tasks.check(item, t.text) if item is not None and done else None
            for (t, _, _), done in zip(lanes, finished)]


# ----------------------------------------------------------------------------- numbers of a run

def parallelism(trace: Trace) -> dict:
    """Where a run's tokens per step come from: answer commits and padding commits, per run and per phase.
    ``answer_nfe`` is None for a run stopped before its answer was complete."""
    complete = answer_complete(trace, trace.nfe - 1) if trace.steps else None
    decoded = sum(len(s.committed) for s in trace.steps)
    biggest = max(trace.steps, key=lambda s: len(s.committed), default=None)
    phases: dict[str, list[int]] = {}
    for s in trace.steps:
        row = phases.setdefault(s.phase, [0, 0, 0])
        row[0] += 1
        row[1] += len(trace.answer_commits(s))
        row[2] += len(trace.padding_commits(s))
    return dict(method=trace.method, label=trace.name, nfe=trace.nfe, answer_nfe=complete,
                answer=trace.answer_length if complete is not None else None,
                padding=trace.gen_length - trace.answer_length if complete is not None else None,
                answer_per_step=round(trace.answer_length / complete, 2) if complete else None,
                tokens_per_step=round(decoded / trace.nfe, 2) if trace.nfe else 0.0,
                biggest=(biggest.index, len(trace.answer_commits(biggest)), len(trace.padding_commits(biggest)))
                if biggest else (0, 0, 0),
                padding_only=sum(1 for s in trace.steps if s.committed and not trace.answer_commits(s)),
                phases=phases, wall_s=trace.wall_s, tokens_per_s=trace.tokens_per_s, stopped=trace.stopped,
                limit=trace.limit_reached)


TABLE_COLUMNS = ("lane", "steps (NFE)", "answer complete at step", "answer tokens", "padding tokens",
                 "answer tokens / step", "tokens / step", "speed-up (NFE)", "speed-up (answer)", "own time (s)",
                 f"total clash, steps above {MARK} (extra passes)", "worst clash (step)")


def clash_cell(trace: Trace) -> str:
    """A lane's clash for the comparison: its steps' positive clashes summed, how many steps were above
    ``CLASH_MARK``, and the passes measuring spent (apart from its NFE); "not measured" when it was not."""
    total = total_clash(trace)
    if total is None:
        return "not measured"
    marked = len(marked_steps(trace))
    skipped = len(trace.clash.get("skipped", []))
    return (f"{total:.2f} nats, {marked} step{'' if marked == 1 else 's'} above {MARK} "
            f"({trace.clash['passes']} passes" + (f"; {skipped} steps not measured, the run's budget spent)"
                                                   if skipped else ")"))


def worst_cell(trace: Trace) -> str:
    """A lane's worst step for the comparison: its largest clash and the step, "no step of two tokens" when every
    step wrote one, "not measured" when it was not."""
    if trace.clash is None:
        return "not measured"
    found = worst_step(trace)
    if found is None:
        return "no step of two tokens or more"
    k, value = found
    value = value if abs(value) >= 0.005 else 0.0           # a rounded -0.00 reads as a credit; it is none
    return f"{value:+.2f} nats at step {k}" + (" (marked)" if value > CLASH_MARK else "")


def worst_step(trace: Trace) -> tuple[int, float] | None:
    """The measured step with the largest clash (the first of equals) and its nats; None when none was measured."""
    values = [(k, v) for k, v in enumerate((trace.clash or {}).get("values") or []) if v is not None]
    return max(values, key=lambda kv: (kv[1], -kv[0])) if values else None


def table_rows(traces: list[Trace]) -> list[list]:
    """The comparison, a row per lane: answer against padding beside the raw step counts; speed-ups against
    Vanilla (one token a step) if it ran."""
    rows = [parallelism(t) for t in traces]
    base = rows[traces.index(reference(traces))] if rows else None

    def ratio(a, b):
        return round(a / b, 2) if a and b else None

    return [[r["label"] + (" (stopped)" if r["stopped"] else " (pass limit)" if r["limit"] else ""), r["nfe"],
             r["answer_nfe"], r["answer"], r["padding"], r["answer_per_step"], r["tokens_per_step"],
             ratio(base["nfe"], r["nfe"]), ratio(base["answer_nfe"], r["answer_nfe"]), round(r["wall_s"], 3),
             clash_cell(t), worst_cell(t)]
            for r, t in zip(rows, traces)]


def table_frame(traces: list[Trace]):
    import pandas as pd
    return pd.DataFrame(table_rows(traces), columns=list(TABLE_COLUMNS))


def step_head(trace: Trace, k: int) -> str:
    """The step view's caption: what step k did, answer and padding commits apart."""
    if not trace.steps:
        return '<div class="step-head">This run has no steps.</div>'
    step = trace.steps[k]
    clusters = ", ".join(f"[{a}, {b}]" for a, b in step.clusters) or "none"
    return (f'<div class="step-head"><b>{clean(trace.name)}</b>, step index <b>{k}</b> of '
            f'{len(trace.steps) - 1} · phase <b>{clean(step.phase)}</b> · '
            f'committed {len(trace.answer_commits(step))} '
            f'answer + {len(trace.padding_commits(step))} padding (outlined)'
            + (f' · took back {len(step.remasked)} (struck through)' if getattr(step, "remasked", None) else '')
            + (f' · replaced {len(step.edited)} (old struck through, new in blue)' if step.edited else '')
            + f' · clusters: {clusters} · {step_clash(trace, k)}</div>')


def step_clash(trace: Trace, k: int) -> str:
    """The clash of step ``k`` in words: nats (marked above ``CLASH_MARK``), no clash for a step of fewer than two
    tokens, or not measured."""
    if trace.clash is None:
        return "clash not measured"
    step = trace.steps[k]
    value, n = trace.clash["values"][k], len(step.committed) + len(step.edited)
    if k in trace.clash.get("skipped", []):
        return "clash not measured (the run's budget of passes was spent on earlier steps)"
    if value is None:
        return "one token: no clash" if n == 1 else "no clash (nothing written)" if n == 0 else "clash: none"
    limit = trace.clash.get("limit")
    of = f" (its {limit} most confident of {n} tokens)" if limit and n > limit else \
        f" ({len(step.committed)} committed, {len(step.edited)} edited)" if step.edited else ""
    if value > CLASH_MARK:
        return f'<span class="clash-flag">clash <b>{value:+.2f}</b> nats{of}, above {MARK}</span>'
    return f"clash <b>{value:+.2f}</b> nats{of}"


def step_html(trace: Trace | None, k: int) -> str:
    if trace is None:
        return ""
    k = max(0, min(int(k), len(trace.steps) - 1))
    return step_head(trace, k) + (response_html(trace, k) if trace.steps else "")


def ended(row: dict) -> str:
    """How a run whose answer is not complete ended (a row of ``parallelism``)."""
    return "stopped at the pass limit" if row["limit"] else "stopped"


def summary(traces: list[Trace], outside: str = "") -> str:
    """One paragraph under the race: answer-complete steps first; speed praise only for prompts in the model's tasks."""
    if not traces:
        return "No runs yet."
    rows = [parallelism(t) for t in traces]
    parts = ["**Answer complete at step**: " + "; ".join(
        f"{r['label']} {r['answer_nfe']} of {r['nfe']}" if r["answer_nfe"] is not None else
        f"{r['label']} not complete ({ended(r)} at step {r['nfe']})" for r in rows) + "."]
    tail = [f"{r['label']} its last {r['nfe'] - r['answer_nfe']}" for r in rows
            if r["answer_nfe"] is not None and r["answer_nfe"] < r["nfe"]]
    if tail:
        parts.append("Steps spent on padding only, after the answer was complete: " + "; ".join(tail) + ".")
    pad = max(rows, key=lambda r: r["padding"] or 0)
    if pad["padding"]:
        parts.append(f"Up to {pad['padding']} of the {traces[0].gen_length} positions are end-of-text padding "
                     f"({pad['label']}): tokens per step counts them, the answer-complete step does not.")
    base = rows[traces.index(reference(traces))]
    base = base if base["method"] == "vanilla" else None
    best = next((r for r in rows if r["method"] == "dico"), None)
    if outside:
        parts.append(f"⚠ {outside} Speed numbers say nothing about the quality of this answer.")
    elif base and best and base["answer_nfe"] and best["answer_nfe"]:
        parts.append(f"{best['label']} completed the answer in {base['answer_nfe'] / best['answer_nfe']:.1f}× fewer "
                     f"forward passes than {base['label']}.")
    if any(t.stopped for t in traces):
        parts.append("The run was stopped early: the figures show the steps taken.")
    measured = [t for t in traces if t.clash is not None]
    if measured:
        parts.append(f"Measuring the clash took {sum(t.clash['passes'] for t in measured)} passes after the decode, "
                     f"not counted above; a clash above {MARK} is marked in the race.")
    return " ".join(parts)


def run_caption(trace: Trace) -> str:
    mode = "non-AR" if trace.mode == "non-ar" else f"semi-AR, blocks of {trace.block_length}"
    return (f"model {isolated(trace.model)} on {clean(trace.device)}, {mode}, {trace.gen_length} positions; "
            f"prompt: “{isolated(trace.prompt[:160])}”")


# ----------------------------------------------------------------------------- Observation II and the dependency map

def attention_locality_md(trace: Trace) -> str:
    """Beside the Attention tab's stages, Observation II in numbers (``stage_locality_md``; no pass), and what the
    same numbers layer by layer would cost."""
    if trace.attention is None:
        return ""
    return stage_locality_md(trace) + "\n\n" + layer_plan(trace)[1]


def stage_locality_md(trace: Trace) -> str:
    """Of a still-masked position's attention to the response, by stage (``dico.observe.attention_locality``): the
    share within ``WITHIN`` positions against an even spread's, the mean distance, and the share that goes to the
    response at all; answer positions apart from all."""
    lenses = _lenses(trace, lambda: attention_locality(trace, WITHIN, among=set(range(trace.answer_length))),
                     attention_locality(trace, WITHIN))
    rows = []
    for stage in STAGES:
        for name, found in lenses:
            near = found[stage]
            rows.append(f"| {stage} | {name} | {_locality_cells(near)} |")
    return (f"**Locality of attention, {clean(trace.name)}** (the paper's Observation II; docs/observations.md): "
            "of a still-masked position's attention to the response, "
            f"the share within {WITHIN} positions against the share an even spread would put there, the mean distance "
            "(positions), and the share of its attention that goes to the response at all (the rest goes to the "
            "prompt). The answer's positions are told apart from the end-of-text padding.\n\n"
            f"| stage | positions | within {WITHIN} | even spread | mean distance | to the response |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows))


def _lenses(trace: Trace, answer, every) -> list[tuple]:
    """The locality lenses a table shows: the answer's positions (``answer()``: measured only when the run has
    padding to tell apart) and all positions."""
    return ([("answer", answer())] if trace.answer_length < trace.gen_length else []) + [("all positions", every)]


def _locality_cells(near) -> str:
    return (" | ".join([f"{near.within:.2f}", f"{near.even:.2f}", f"{near.mean_distance:.1f}", f"{near.total:.2f}"])
            if near is not None else "no masked position | | |")


def layer_plan(trace: Trace | None) -> tuple[int, str]:
    """What the locality layer by layer would cost, in passes and in words: the run's steps replayed, a forward pass
    each (``dico.observe.layer_maps``: the decode keeps only the layers' mean); 0 passes when the run captured no
    attention or it is refused (more than ``LIMITS.layer_steps`` steps)."""
    if trace is None or trace.attention is None or not trace.steps:
        return 0, "This run captured no attention: tick “capture attention” and run again."
    n = len(trace.steps)
    if n > LIMITS.layer_steps:
        return 0, (f"{clean(trace.name)} took {n} steps; the locality layer by layer replays each (a forward pass "
                   f"each), and this server replays at most {LIMITS.layer_steps}.")
    return n, (f"*Layer by layer* (the button below): the {n} steps of {clean(trace.name)} replayed, {n} forward "
               "passes apart from the run's.")


def layer_locality_md(trace: Trace, answer, every, seconds: float) -> str:
    """The Attention tab's locality of each stage, then each layer's (``dico.observe.layer_locality``: ``answer`` over
    the answer's positions, ``every`` over all), where the layers' mean can hide a layer that looks near and one that
    looks far."""
    lenses = _lenses(trace, lambda: answer, every)
    rows = [f"| {stage} | {layer} | {name} | {_locality_cells(found[stage][layer])} |"
            for stage in STAGES for layer in range(len(every[stage])) for name, found in lenses]
    return (stage_locality_md(trace) +
            f"\n\n**Layer by layer** ({every.passes} forward passes apart from the run's, {seconds:.1f} s; layer 0 "
            "reads the embeddings): the same numbers for each layer's head-averaged map.\n\n"
            f"| stage | layer | positions | within {WITHIN} | even spread | mean distance | to the response |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def dependency_plan(trace: Trace | None, k: int) -> tuple[int, str]:
    """What the dependency map before step ``k`` would cost, in passes and in words: one forward pass on the state
    before it and one per masked position; 0 passes when there is nothing to map or it is refused (more than
    ``LIMITS.dependency_masked`` masked positions)."""
    if trace is None or not trace.steps:
        return 0, ""
    k = max(0, min(int(k), len(trace.steps) - 1))
    masked = sum(t is None for t in trace.tokens_before(k))
    if masked < 2:
        return 0, f"Fewer than two positions are masked before step {k}: there is no dependency to map."
    if masked > LIMITS.dependency_masked:
        return 0, (f"{masked} positions are masked before step {k}; a dependency map costs a forward pass each, and "
                   f"this server maps at most {LIMITS.dependency_masked}: choose a later step.")
    return masked + 1, (f"The dependency map before step {k} costs {masked + 1} forward passes (one on the state, one "
                        "per masked position), apart from the run's steps.")
