"""Comparing two decodes of one prompt as another CPU may give them: the same text and the same commits, up to
the order among near-tied positions (docs/decoding.md §2.2).

Another CPU's vector kernels change the last bits of the logits (about 1e-6 relative), which moves a confidence
by up to ~1.4e-5 (measured on the embedded model). Where two masked positions' confidences lie within
``TOLERANCE`` of each other, on either side of one step's commit decision, either may be committed first, and one
flip carries on: the golden decode commits 64 at step 7 and 50 at step 8, another machine 50 then 64. Everything
else must match exactly: phase, seeds, clusters, the number of commits, the token at every position, the number
of steps and the text.

    ties = near_ties(conf, candidates, committed)            # per step, from the reference decode's scores
    problem = first_difference(reference_steps, reference_text, trace)       # None when they agree
"""
from __future__ import annotations

from dico.trace import NEAR_TIE

TOLERANCE = NEAR_TIE    # confidences this close are interchangeable (~7x the largest shift 1e-6 noise makes)
ROUNDING = 1e-5         # a trace rounds confidences to 5 digits: two of them move apart by at most this


def near_ties(values, candidates, committed, tol: float = TOLERANCE) -> list[int]:
    """Candidate positions whose value lies within ``tol`` of a candidate on the other side of the commit decision
    (committed vs left masked): the positions another machine may commit instead, or leave for later."""
    chosen = set(committed)
    inside = [(values[p], p) for p in candidates if p in chosen]
    outside = [(values[p], p) for p in candidates if p not in chosen]
    return sorted({p for group, other in ((inside, outside), (outside, inside)) for v, p in group
                   if any(abs(v - w) <= tol for w, _ in other)})


def trace_ties(step, tol: float = TOLERANCE + ROUNDING) -> list[int]:
    """``near_ties`` of a recorded step, from the (rounded) values its rule ranked: guided confidence in Divide."""
    values = step.guided_confidence or step.confidence
    start, end = step.window
    candidates = [p for p in range(start, end) if values[p] is not None]
    return near_ties(values, candidates, step.committed, tol)


def steps_of(trace) -> list[list]:
    """A trace's steps as the golden file writes them: phase, committed, tokens, seeds, clusters, near ties."""
    return [[s.phase, s.committed, s.tokens, s.seeds, s.clusters, trace_ties(s)] for s in trace.steps]


def first_difference(reference: list[list], text: str, trace) -> str | None:
    """Where ``trace`` departs from the reference decode (steps as in ``steps_of``), or None.

    A position committed earlier than in the reference must be near-tied at the reference step where it went
    early, and one committed later near-tied where the reference committed it; every such difference is paid
    back (the reference commits it later, or the run does) before the end.
    """
    token_of = {p: t for step in reference for p, t in zip(step[1], step[2])}
    if len(trace.steps) != len(reference):
        return f"{len(trace.steps)} steps, the reference took {len(reference)}"
    ahead: set[int] = set()     # committed by the run, not yet by the reference
    owed: set[int] = set()      # committed by the reference, not yet by the run
    for k, (s, step) in enumerate(zip(trace.steps, reference)):
        problem = _exact_difference(s, step, token_of) or _order_difference(s, step, ahead, owed)
        if problem:
            return f"step {k}: {problem}"
    if ahead or owed:
        return f"the run committed {sorted(ahead)} that the reference never did, and never {sorted(owed)}"
    if trace.text != text:
        return f"text {trace.text!r} != {text!r}"
    return None


def _exact_difference(s, step: list, token_of: dict) -> str | None:
    """What must match exactly at one step: phase, seeds, clusters, the number of commits and their tokens."""
    phase, committed, _, seeds, clusters, _ = step
    for field, mine, theirs in (("phase", s.phase, phase), ("seeds", s.seeds, seeds),
                                ("clusters", s.clusters, clusters)):
        if mine != theirs:
            return f"{field} {mine} != {theirs}"
    if len(s.committed) != len(committed):
        return f"{len(s.committed)} commits, the reference made {len(committed)}"
    wrong = [(p, t) for p, t in zip(s.committed, s.tokens) if token_of.get(p) != t]
    if wrong:
        return f"(position, token) {wrong} differ from the reference's"
    return None


def _order_difference(s, step: list, ahead: set[int], owed: set[int]) -> str | None:
    """Which positions one step commits, up to near ties: updates ``ahead`` and ``owed`` (see first_difference)."""
    committed, ties = step[1], step[5]
    mine, theirs = set(s.committed), set(committed)
    for differ, paid, pending, what in ((mine - theirs, owed, ahead, "committed {}, which the reference did not"),
                                        (theirs - mine, ahead, owed,
                                         "left {} masked, which the reference committed")):
        for p in sorted(differ):      # a difference pays back an earlier one, or starts one among near ties
            if p in paid:
                paid.remove(p)
            elif p in ties:
                pending.add(p)
            else:
                return f"{what.format(p)} and which is not near-tied {ties}"
    return None
