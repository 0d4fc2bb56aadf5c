"""The race: the chosen methods decode the same prompt at the same time, interleaved one step of each in
turn (round-robin), so each round is one forward pass of every method still running and the step
counters stay comparable. Stop closes every method's step generator, leaving partial traces marked
``stopped``; a replay walks saved traces through the same frames.

Whoever drives the race stops it by closing it between frames (``settle`` then finishes the last frame): that
works the same when the race runs in a worker process (ZeroGPU), where closing the stream there closes the
race at its next step, and a flag set in this process would not be seen.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dico.loop import close_snapshot, decode
from dico.models import MaskPredictor
from dico.trace import Trace
from dico_ui.request import RunRequest


@dataclass
class Lane:
    """One method in the race: its (live) trace, the index of its last step, and its state."""
    method: str
    trace: Trace | None = None
    k: int = -1
    state: str = "decoding"         # decoding | done | stopped


@dataclass
class Frame:
    lanes: list[Lane]
    round: int                      # forward passes of the longest-running method so far
    finished: bool = False
    stopped: bool = False

    @property
    def traces(self) -> list[Trace]:
        return [lane.trace for lane in self.lanes if lane.trace is not None]


def own_time(trace: Trace) -> Trace:
    """Time a run spent on its own steps (forward passes and selection). Interleaved methods share the clock,
    so the trace's wall time would also count the other methods' steps."""
    spent = sum(s.forward_s + s.select_s for s in trace.steps)
    decoded = sum(len(s.committed) for s in trace.steps)
    trace.wall_s = round(spent, 6)
    trace.tokens_per_s = round(decoded / spent, 3) if spent > 0 else 0.0
    return trace


def race(predictor: MaskPredictor, req: RunRequest, should_stop: Callable[[], bool] = lambda: False) \
        -> Iterator[Frame]:
    """Decode ``req.methods`` interleaved step by step; a frame after every round, the last one ``finished``.

    ``should_stop`` is asked between steps; closing this generator (the server cancelled the request) stops
    every method as well.
    """
    lanes = [Lane(m) for m in req.methods]
    runs = {}
    for m in req.methods:
        options = req.options(m)
        options["capture_attention"] = options["capture_attention"] and m == "dico" and predictor.supports_attention
        runs[m] = decode(predictor, req.prompt, m, **options)
    rounds, stopped = 0, False
    try:
        while any(lane.state == "decoding" for lane in lanes):
            if should_stop():
                stopped = True
                break
            rounds += 1
            for lane in lanes:
                if lane.state != "decoding":
                    continue
                try:
                    lane.trace, step = next(runs[lane.method])
                except Exception as exc:
                    raise LaneFailed(lane.method, lane.k + 2, exc) from exc
                lane.k = step.index
                if step.unmasked_fraction >= 1.0:        # the loop closed the trace with this step
                    runs.pop(lane.method).close()
                    lane.state = "done"
                    own_time(lane.trace)
            yield Frame(lanes, rounds)
    finally:
        for lane in lanes:
            if lane.method in runs:
                runs.pop(lane.method).close()            # finishes the partial trace, stopped=True
                lane.state = "stopped"
                if lane.trace is not None:
                    own_time(lane.trace)
    yield Frame(lanes, rounds, finished=True, stopped=stopped)


class LaneFailed(RuntimeError):
    """A method's step raised (a model or rule error): which method, at which step, and what was raised."""

    def __init__(self, method: str, step: int, error: Exception):
        super().__init__(f"{method} step {step}: {type(error).__name__}: {error}")
        self.method, self.step, self.error = method, step, error


def settle(frame: Frame, predictor: MaskPredictor) -> Frame:
    """The finished frame of a race its driver closed early (Stop, a time limit, a fault): every lane still
    decoding is stopped. Closed in this process, the race already finished each trace; a frame that crossed from
    a worker process holds copies, finished here from their steps."""
    for lane in frame.lanes:
        if lane.state == "decoding":
            lane.state = "stopped"
        if lane.trace is not None and not lane.trace.response:
            own_time(close_snapshot(predictor, lane.trace))
    return Frame(frame.lanes, frame.round, finished=True, stopped=True)


def replay(traces: list[Trace]) -> Iterator[Frame]:
    """Saved traces through the same frames as a live race: round r shows every run after its step r."""
    total = max((t.nfe for t in traces), default=0)
    for r in range(total):
        lanes = [Lane(t.method, t, min(r, t.nfe - 1), "decoding" if r < t.nfe - 1 else
                      ("stopped" if t.stopped else "done")) for t in traces]
        yield Frame(lanes, r + 1, finished=r == total - 1)
