"""Forks of a recorded run at any step, with edits (docs/decoding.md §8).

    trace = dico.generate(predictor, prompt, "topk", constraints={0: "The", 3: "leader"})
    forked = dico.fork(predictor, trace, at=3, remask=[7])                # take back position 7 before step 3
    forked = dico.fork(predictor, trace, at=3, force={7: "Gill"})          # or write "Gill" there

A fork keeps the parent's steps before ``at`` and decodes from there on. Its state at step ``at`` is rebuilt by
replaying the parent's first ``at`` steps on the model (each replayed step must commit and take back exactly what
the parent's did, else the trace does not belong to this model and prompt), so every part of a decode's state comes
back as it was: the ids and masks, the semi-AR window, the rule's own memory (DiCo's phase and clusters, KLASS's KL
history, Saber's confidences), the random stream of sampling and the KV cache. A fork with no edit continues
exactly as its parent did. Forced and constrained positions are fixed: no rule commits or takes them back.
This module sits above the loop: it drives ``dico.loop`` (which never imports it).
"""
from __future__ import annotations

from collections.abc import Generator

import torch

from dico.block import BLOCK_KIND
from dico.constraints import encode_fixed, response_position
from dico.lanes import MAX_LABEL_CHARS, default_label
from dico.loop import Decoding, drive
from dico.trace import Step, Trace


def decode_fork(predictor, parent: Trace, at: int, *, force: dict | None = None, remask=None,
                method: str | None = None, settings=None,
                label: str | None = None) -> Generator[tuple[Trace, Step], None, Trace]:
    """Fork ``parent`` before its step ``at`` with edits, yielding ``(trace, step)`` for every step decoded from
    there on (the parent's steps before ``at`` are in the trace from the start). ``method``/``settings``: continue
    with another lane's rule (default: the parent's). The generator returns the fork's trace."""
    run = replay(predictor, parent, at)
    edits = apply_edits(run, force or {}, list(remask or []))
    if method is not None:
        run.switch_rule(method, settings)
    run.trace.fork = {"parent": parent.name, "at": at, "method": parent.method, **edits}
    run.trace.label = label or fork_label(parent, run, at, edits)
    return (yield from drive(run))


def fork(predictor, parent: Trace, at: int, **options) -> Trace:
    """``decode_fork`` drained: the fork's finished trace."""
    steps = decode_fork(predictor, parent, at, **options)
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value


def replay(predictor, parent: Trace, at: int):
    """A ``Decoding`` in the state ``parent`` was in before its step ``at``: its first ``at`` steps decoded again
    on the model, each checked against the parent's (commits, tokens, take-backs)."""
    _check_parent(predictor, parent, at)
    constraints = {int(p): t for p, t in (parent.constraints or {}).items()}
    gen_length = parent.gen_length
    if predictor.kind == BLOCK_KIND:     # the trace's response runs to the end of a block; the request's ended before
        gen_length -= -parent.prompt_length % predictor.block
    run = Decoding(predictor, parent.prompt, parent.method, mode=parent.mode, gen_length=gen_length,
                   block_length=parent.block_length, settings=parent.recorded_settings(), constraints=constraints,
                   label=parent.name)
    own = parent.fork["at"] if parent.fork is not None else None      # a fork's own edits come back where it made them
    for k in range(at + 1):
        if k == own:
            run.edit({int(p): t for p, t in parent.fork.get("force", {}).items()}, list(parent.fork.get("remask", [])))
        if k == at:
            break
        logits, attentions = run.forward()
        theirs = parent.steps[k]
        step = run.step(logits, attentions, recorded=theirs)
        if (step.committed, step.tokens, step.remasked, step.edited) != (theirs.committed, theirs.tokens,
                                                                          theirs.remasked, theirs.edited):
            raise ValueError(f"trace: step {k} does not replay on model {predictor.name!r} (it committed "
                             f"{step.committed} where the trace says {theirs.committed}); fork a trace of this model, "
                             "prompt and settings")
    return run


def _check_parent(predictor, parent: Trace, at: int) -> None:
    if parent.stopped and at > len(parent.steps):
        raise ValueError(f"at: the run stopped after {len(parent.steps)} steps")
    if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= len(parent.steps):
        raise ValueError(f"at: must be a step of the run, 0..{len(parent.steps)}, got {at!r}")
    if parent.model != predictor.name:
        raise ValueError(f"trace: was decoded by model {parent.model!r}, not {predictor.name!r}; fork it with that "
                         "model")
    if parent.prompt_length and len(predictor.encode_prompt(parent.prompt)) != parent.prompt_length:
        raise ValueError("trace: its prompt does not encode as it did when the trace was decoded (another prompt or "
                         "tokenizer)")
    if parent.fork is not None and parent.fork.get("method", parent.method) != parent.method:
        raise ValueError(f"trace: this fork went on with another method than its parent's ({parent.fork['method']}); "
                         "fork its parent instead")
    if parent.fork is not None and at < parent.fork["at"]:
        raise ValueError(f"at: this trace is itself a fork at step {parent.fork['at']}; fork it at that step or later "
                         "(or fork its parent)")


def apply_edits(run, force: dict, remask: list) -> dict:
    """Force positions to tokens (fixed from now on) and take decoded ones back, on a ``Decoding`` between steps.
    Returns the edits as the trace records them ({"force": {pos: token}, "remask": [pos]})."""
    forced = encode_fixed(run.predictor, force, run.n, field="force")
    taken = sorted({response_position(p, run.n, "remask") for p in remask})
    for pos in list(forced) + taken:
        if bool(run.fixed[pos]):
            raise ValueError(f"{'force' if pos in forced else 'remask'}: position {pos} is fixed by a constraint "
                             "(or an earlier edit)")
    if set(forced) & set(taken):
        raise ValueError(f"remask: position {sorted(set(forced) & set(taken))[0]} is also forced")
    for pos in taken:
        if bool(run.masked[pos]):
            raise ValueError(f"remask: position {pos} is still masked at this step; take back a decoded token")
    run.edit(forced, taken)
    return {"force": {str(p): t for p, t in forced.items()}, "remask": taken}


def fork_label(parent: Trace, run, at: int, edits: dict) -> str:
    """ "DiCo, fork at step 3: ate -> Lake, take back Gill" (the parent's tokens before the edit, from the run)."""
    parts = []
    before = parent_tokens_before(parent, at)
    for pos, token in edits["force"].items():
        old = before[int(pos)]
        parts.append(f"{_text(parent, run, old) if old is not None else '[mask]'} -> {_text(parent, run, token)}")
    for pos in edits["remask"]:
        parts.append(f"take back {_text(parent, run, before[pos])}")
    what = ", ".join(parts) if parts else "no edit"
    if run.trace.method != parent.method:                      # went on with another lane's method
        what += f", then {default_label(run.trace.method, run.rule.settings)}"
    return f"{parent.name}, fork at step {at}: {what}"[:MAX_LABEL_CHARS]


def parent_tokens_before(trace: Trace, at: int) -> list[int | None]:
    """The response as it stood before step ``at`` (None where masked)."""
    return trace.tokens_before(at)


def _text(parent: Trace, run, token: int) -> str:
    text = parent.vocab.get(str(token)) or run.predictor.token_text(token)
    return text.strip() or repr(text)


def candidates(predictor, trace: Trace, at: int, position: int, k: int = 5) -> list[tuple[int, str, float]]:
    """The model's top ``k`` tokens at a response ``position`` in the pass of step ``at`` (the state before that step,
    rebuilt as a fork rebuilds it): (token id, its text, its probability), most likely first. What a teacher's
    "force" offers (the mask token never among them)."""
    run = replay(predictor, trace, min(at, len(trace.steps)))
    pos = response_position(position, trace.gen_length, "position")
    if not 1 <= k <= 50:
        raise ValueError(f"k: must be in 1..50, got {k!r}")
    logits, _ = run.forward()
    row = logits[run.m + pos].float().clone()
    row[predictor.mask_id] = -torch.inf
    probs = torch.softmax(row, dim=-1)
    top = probs.topk(k)
    return [(int(t), predictor.token_text(int(t)), round(float(p), 5))
            for t, p in zip(top.indices.cpu(), top.values.cpu())]
