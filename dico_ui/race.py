"""The race: the chosen lanes (a method, its settings and a label; ``dico.lanes``) decode the same prompt at the
same time, interleaved one step of each in turn (round-robin), so each round is one forward pass of every lane
still running and the step counters stay comparable. Two lanes may share a method. A lane ends when the loop closes
its trace: every position decoded ("done"), or the loop's pass limit reached ("limit": a rule that keeps taking
tokens back); the others go on. Stop closes every method's step generator, leaving partial traces marked
``stopped``. Asked to (``RunRequest.measure_clash``), a race that ended on its own then measures each lane's clash a
step (``dico.observe.annotate_clash``): extra passes after the decode, never part of it nor slowing its steps,
at most ``CLASH_BUDGET`` a run. On the embedded models a request measures by default. A fork races the same
way (``interleave``), one lane beside the finished runs on screen; a replay walks saved traces through the same
frames.

Whoever drives the race stops it by closing it between frames (``settle`` then finishes the last frame): that
works the same when the race runs in a worker process (ZeroGPU), where closing the stream there closes the
race at its next step, and a flag set in this process would not be seen.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dico.loop import close_snapshot, decode
from dico.models import MaskPredictor
from dico.observe import CLASH_BUDGET, annotate_clash
from dico.trace import Trace
from dico_ui.request import RunRequest


@dataclass
class LaneRun:
    """One lane in the race: its method and label, its (live) trace, the index of its last step, and its state."""
    method: str
    label: str
    trace: Trace | None = None
    k: int = -1
    state: str = "decoding"         # decoding | done | limit (stopped at the pass limit) | stopped


def end_state(trace: Trace) -> str:
    """The state of a lane whose trace the loop closed: "stopped" (closed early), "limit" (it ended at the loop's
    pass limit, ``Trace.limit_reached``) or "done"."""
    return "stopped" if trace.stopped else "limit" if trace.limit_reached else "done"


@dataclass
class Frame:
    lanes: list[LaneRun]
    round: int                      # forward passes of the longest-running method so far
    finished: bool = False
    stopped: bool = False
    measuring: str | None = None    # the label of the lane whose clash is being measured (the decode is over)

    @property
    def traces(self) -> list[Trace]:
        return [lane.trace for lane in self.lanes if lane.trace is not None]


def own_time(trace: Trace) -> Trace:
    """Time a run spent on its own steps (forward passes and selection). Interleaved methods share the clock,
    so the trace's wall time would also count the other methods' steps."""
    trace.set_time(sum(s.forward_s + s.select_s for s in trace.steps))
    return trace


def race(predictor: MaskPredictor, req: RunRequest, should_stop: Callable[[], bool] = lambda: False) \
        -> Iterator[Frame]:
    """Decode the request's lanes interleaved step by step; a frame after every round, the last one ``finished``.

    ``should_stop`` is asked between steps; closing this generator (the server cancelled the request) stops
    every lane as well. Attention maps are captured for the first DiCo lane only. With ``req.measure_clash``, the
    lanes' clash is measured once every lane ended (``measured``), before the last frame.
    """
    lanes = [LaneRun(lane.method, lane.label) for lane in req.lanes]
    attend = next((i for i, lane in enumerate(lanes) if lane.method == "dico"), None)
    runs = {}
    for i, lane in enumerate(req.lanes):
        options = req.options(lane)
        options["capture_attention"] = options["capture_attention"] and i == attend and predictor.supports_attention
        runs[i] = decode(predictor, req.prompt, lane.method, **options)
    for frame in interleave(lanes, runs, should_stop):
        if frame.finished and req.measure_clash and not frame.stopped:
            yield from measured(predictor, frame)
        else:
            yield frame


def measured(predictor: MaskPredictor, frame: Frame, budget: int = CLASH_BUDGET) -> Iterator[Frame]:
    """The clash of each lane that ended on its own, a lane at a time (a frame before each, so the driver can stop
    it between lanes), then ``frame``. Its passes go to ``Trace.clash``, apart from the lane's NFE; the steps and
    the text stay as decoded. The run spends at most ``budget`` passes: each lane may use an even share of what the
    lanes before it left, and the steps past its share stay unmeasured (``Trace.clash["skipped"]``)."""
    ended = [lane for lane in frame.lanes if lane.trace is not None and lane.state in ("done", "limit")]
    for i, lane in enumerate(ended):
        yield Frame(frame.lanes, frame.round, measuring=lane.label)
        annotate_clash(predictor, lane.trace, budget=budget // (len(ended) - i))
        budget -= lane.trace.clash["passes"]
    yield frame


def interleave(lanes: list[LaneRun], runs: dict[int, Iterator], should_stop: Callable[[], bool] = lambda: False) \
        -> Iterator[Frame]:
    """One step of each lane that ``runs`` holds a step generator for (``dico.decode``'s, or a fork's
    ``dico.forking.decode_fork``) in turn, a frame after every round, the last one ``finished``; the other lanes
    are shown as they are. A lane ends when the loop closes its trace (every position decoded, or the pass limit).

    A lane's error is raised as its ``LaneFailed``, but a ValueError before its first step as it is: the library
    refusing the request (a fork's replay finds the trace is not this model's). Closing this generator closes every
    run still decoding, which finishes its partial trace as stopped.
    """
    rounds, stopped = 0, False
    try:
        while runs:
            if should_stop():
                stopped = True
                break
            rounds += 1
            for i in list(runs):
                lane = lanes[i]
                try:
                    lane.trace, step = next(runs[i])
                except StopIteration:                    # it ended before a step (a fork with nothing left to do)
                    runs.pop(i)
                    lane.state = "done"
                    continue
                except Exception as exc:
                    if lane.trace is None and isinstance(exc, ValueError):
                        raise
                    raise LaneFailed(lane.label, lane.k + 2, exc) from exc
                lane.label, lane.k = lane.trace.name, step.index
                if lane.trace.response:             # the loop closed the trace (an editing rule lingers on a
                                                    # full response first; the pass limit closes it too)
                    runs.pop(i).close()
                    lane.state = end_state(lane.trace)
                    own_time(lane.trace)
            yield Frame(lanes, rounds)
    finally:
        for i in list(runs):
            runs.pop(i).close()                          # finishes the partial trace, stopped=True
            lanes[i].state = "stopped"
            if lanes[i].trace is not None:
                own_time(lanes[i].trace)
    yield Frame(lanes, rounds, finished=True, stopped=stopped)


class LaneFailed(RuntimeError):
    """A lane's step raised (a model or rule error): which lane (its label), at which step, and what was raised."""

    def __init__(self, label: str, step: int, error: Exception):
        super().__init__(f"{label} step {step}: {brief(error)}")
        self.label, self.step, self.error = label, step, error


def brief(error: Exception, chars: int = 200) -> str:
    """An error in one line: its kind and the first line of what it says, cut at ``chars``; never a value it
    carries rather than words (a generator's return value: a whole trace)."""
    words = "" if error.args and not isinstance(error.args[0], (str, int, float)) else str(error).strip()
    words = words.split("\n", 1)[0]
    words = words if len(words) <= chars else words[:chars - 1] + "…"
    return f"{type(error).__name__}: {words}" if words else type(error).__name__


def settle(frame: Frame, predictor: MaskPredictor) -> Frame:
    """The finished frame of a race its driver closed early (Stop, a time limit, a fault): every lane still
    decoding is stopped. Closed in this process, the race already finished each trace; a frame that crossed from
    a worker process holds copies, finished here from their steps."""
    for lane in frame.lanes:
        if lane.state == "decoding":
            lane.state = "stopped"
        if lane.trace is not None and not lane.trace.response:
            own_time(close_snapshot(predictor, lane.trace))
    return Frame(frame.lanes, frame.round, finished=True, stopped=True, measuring=frame.measuring)


def replay(traces: list[Trace]) -> Iterator[Frame]:
    """Saved traces through the same frames as a live race: round r shows every run after its step r."""
    total = max((t.nfe for t in traces), default=0)
    for r in range(total):
        lanes = [LaneRun(t.method, t.name, t, min(r, t.nfe - 1), "decoding" if r < t.nfe - 1 else end_state(t))
                 for t in traces]
        yield Frame(lanes, r + 1, finished=r == total - 1)
