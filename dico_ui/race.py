"""The race: the chosen lanes (a method, its settings and a label; ``dico.lanes``) decode the same prompt at the
same time, interleaved one step of each in turn (round-robin), so each round is one forward pass of every lane
still running and the step counters stay comparable. Two lanes may share a method. Stop closes every method's
step generator, leaving partial traces marked ``stopped``; a replay walks saved traces through the same frames.

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
class LaneRun:
    """One lane in the race: its method and label, its (live) trace, the index of its last step, and its state."""
    method: str
    label: str
    trace: Trace | None = None
    k: int = -1
    state: str = "decoding"         # decoding | done | stopped


@dataclass
class Frame:
    lanes: list[LaneRun]
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
    """Decode the request's lanes interleaved step by step; a frame after every round, the last one ``finished``.

    ``should_stop`` is asked between steps; closing this generator (the server cancelled the request) stops
    every lane as well. Attention maps are captured for the first DiCo lane only.
    """
    lanes = [LaneRun(lane.method, lane.label) for lane in req.lanes]
    attend = next((i for i, lane in enumerate(lanes) if lane.method == "dico"), None)
    runs = {}
    for i, lane in enumerate(req.lanes):
        options = req.options(lane)
        options["capture_attention"] = options["capture_attention"] and i == attend and predictor.supports_attention
        runs[i] = decode(predictor, req.prompt, lane.method, **options)
    rounds, stopped = 0, False
    try:
        while any(lane.state == "decoding" for lane in lanes):
            if should_stop():
                stopped = True
                break
            rounds += 1
            for i, lane in enumerate(lanes):
                if lane.state != "decoding":
                    continue
                try:
                    lane.trace, step = next(runs[i])
                except Exception as exc:
                    raise LaneFailed(lane.label, lane.k + 2, exc) from exc
                lane.k = step.index
                if step.unmasked_fraction >= 1.0:        # the loop closed the trace with this step
                    runs.pop(i).close()
                    lane.state = "done"
                    own_time(lane.trace)
            yield Frame(lanes, rounds)
    finally:
        for i, lane in enumerate(lanes):
            if i in runs:
                runs.pop(i).close()                      # finishes the partial trace, stopped=True
                lane.state = "stopped"
                if lane.trace is not None:
                    own_time(lane.trace)
    yield Frame(lanes, rounds, finished=True, stopped=stopped)


class LaneFailed(RuntimeError):
    """A lane's step raised (a model or rule error): which lane (its label), at which step, and what was raised."""

    def __init__(self, label: str, step: int, error: Exception):
        super().__init__(f"{label} step {step}: {type(error).__name__}: {error}")
        self.label, self.step, self.error = label, step, error


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
        lanes = [LaneRun(t.method, t.name, t, min(r, t.nfe - 1),
                         "decoding" if r < t.nfe - 1 else ("stopped" if t.stopped else "done")) for t in traces]
        yield Frame(lanes, r + 1, finished=r == total - 1)
