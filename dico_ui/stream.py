"""One path from a click to what it decodes, for a run, a fork and a measurement alike: the request checked, a
place in the line of runs, the wait for a decoder, the frames streamed, then the last one drawn.

    yield from admitted(request, admit, page, "run")    # admit() -> a Job: handlers.RunJob, forks.ForkJob, ...

However it ends, it ends one way. A bad request is refused (on the page in the status and one toast, raised to an
API caller) and the page keeps what it shows; so is a request the library refuses when it starts to decode (a
ValueError before the first frame: a fork's replay finds the trace is not this model's): nothing the page shows is
replaced before the first frame. A full line is refused at once with the wait it would have had. Stop, or a page
that closed, ends the wait; Stop, a closed page, the time limit and a fault (any error of the model or a rule) end
the race, and its partial lanes stay on screen. A closed page gets nothing drawn and its session is forgotten. The
line is always left, and gradio's session tables trimmed. Jobs differ only in what they decode, how a live frame
reads and how the last one is drawn.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gradio as gr

from dico.models import MaskPredictor
from dico.trace import Trace
from dico_ui import runs
from dico_ui.race import Frame, LaneFailed, brief, settle
from dico_ui.text import clean

log = logging.getLogger("dico_ui")
STREAM_INTERVAL = 0.15      # s between streamed frames: enough to watch, few enough for a slow connection


@dataclass(frozen=True)
class End:
    """How a race ended: ``why`` "stop" or "time" (None: it finished, or failed), the fault, the seconds it ran."""
    why: str | None
    failed: Exception | None
    seconds: float


class Job:
    """A checked request ready to decode: what a run, a fork and a measurement do differently (``admit`` builds
    one)."""

    def __init__(self, predictor: MaskPredictor, warnings=()):
        self.predictor, self.warnings = predictor, list(warnings)
        # live traces have no vocabulary yet: the model's words, looked up once each
        self.token_text = functools.lru_cache(maxsize=4096)(predictor.token_text)

    def waiting(self, said: str) -> dict:
        """The line's words while it waits for a decoder (a measurement says them under its figure)."""
        return {"status": said}

    def start(self) -> dict:
        """What the page shows once a decoder is free, before the first frame: only what says it starts, since the
        library may still refuse the request, and then the page keeps what it shows."""
        raise NotImplementedError

    def frames(self) -> Iterator[Frame]:
        """The race (the call that runs the model); closed to stop it."""
        raise NotImplementedError

    def live(self, frame: Frame) -> dict:
        """A frame while it decodes: the status and the lanes."""
        raise NotImplementedError

    def first(self, frame: Frame) -> dict:
        """The first frame: the request was taken, so it may replace what the page showed (a run clears the last
        run's figures)."""
        return self.live(frame)

    def own(self, frame: Frame) -> list[Trace]:
        """The traces this job decoded in ``frame`` (a fork's runs on screen are not its own)."""
        return frame.traces

    def drawn(self, frame: Frame, end: End) -> dict:
        """Every output once the race ended (``frame`` finished, with at least one step of the job's own)."""
        raise NotImplementedError

    def ended(self, frame: Frame | None, end: End, noun: str) -> dict:
        """What the page shows once the race ended: its last frame (None before the first) finished and drawn, or
        what stopped it before a step of its own, the page keeping the rest."""
        if frame is not None and not frame.finished:
            frame = settle(frame, self.predictor)
        if frame is None or not self.own(frame):
            return {"status": f"**The {noun} failed** before its first step: {failure(end.failed)}" if end.failed
                    else f"Stopped before the {noun}'s first step."}
        return self.drawn(frame, end)


def refuse(message: str, title: str, page: bool):
    """A request that cannot start: said in the status, where the eye is after the click, and the page keeps what it
    shows. API callers also get it raised, the page one toast (plain text: a toast shows no Markdown)."""
    yield {"status": f"**{title}**: {clean(message)}"}
    if not page:
        raise gr.Error(clean(message), title=title, print_exception=False)
    gr.Warning(clean(message), title=title)


def admitted(request, admit: Callable[[], Job], page: bool, noun: str):
    """Join the line, check the request (``admit``: a ValueError naming the field is refused as "Cannot ``noun``"),
    wait for a decoder, stream the race, then draw it. A request past the line's size is refused at once, before any
    work on it (a burst of strangers is told "busy" without waiting for a model to load or a request to be read)."""
    session = runs.session_of(request)
    since = runs.asked(session)
    if runs.stopped_since(session, since):
        yield {"status": "Stopped before it started: Stop was pressed while this run waited in the queue."}
        return
    ticket = runs.LINE.join(session)
    if ticket is None:
        yield from refuse(runs.busy(), "Busy", page)
        return
    try:
        try:
            job = admit()
        except ValueError as exc:           # a bad value never wipes what the page shows
            yield from refuse(str(exc), f"Cannot {noun}", page)
            return
        for warning in job.warnings:
            gr.Warning(clean(warning))
        if (yield from wait_turn(session, since, ticket, job.waiting)):
            yield from _decoded(session, since, job, page, noun)
    finally:
        runs.LINE.leave(ticket)
        runs.trim_sessions()            # gradio's own per-session tables, bounded by the sessions it keeps


def wait_turn(session: str, since: float, ticket, said: Callable[[str], dict]):
    """Wait for this request's turn to decode, saying how long (``said``: where) whenever that changes; False when it
    must not run (Stop, page gone). Each word sent costs gradio's event loop, which must stay free to answer a
    burst: thirty runs in line saying the same thing every second would not."""
    told = None
    while True:
        turn = runs.LINE.wait(ticket, timeout=1.0)
        why = runs.ended(session, since)             # asked after the turn too: a Stop meanwhile still counts
        if why == "gone":
            runs.forget_session(session)
            return False
        if why:
            yield said("Stopped before it started: you left the line.")
            return False
        if turn:
            return True
        if (words := runs.waiting(ticket)) != told:
            told = words
            yield said(words)                        # what the page shows stays meanwhile


def _decoded(session: str, since: float, job: Job, page: bool, noun: str):
    """Stream the job's race, then draw its last frame with a status saying how it ended."""
    yield job.start()
    try:
        frame, end = yield from _frames(session, since, job, noun)
    except ValueError as exc:               # the library's word on the request, before anything decoded
        yield from refuse(str(exc), f"Cannot {noun}", page)
        return
    if end.why == "gone":          # nobody will see the figures: draw none; gradio just revived the session, drop it
        runs.forget_session(session)
        return
    yield job.ended(frame, end, noun)


def _frames(session: str, since: float, job: Job, noun: str):
    """Stream the race's frames to the page, closing it when it must end (Stop, page closed, time limit, a fault);
    returns its last frame (None before the first) and how it ended. A ValueError before the first frame is raised:
    the request was refused, nothing decoded."""
    started, shown, frame, failed = time.monotonic(), None, None, None      # the clock of the limits (``runs``)
    frames = job.frames()
    try:
        while not (why := runs.ended(session, since, started if frame is not None else None)):
            try:
                frame = next(frames)
            except StopIteration:
                break
            except TimeLimit:               # the job's own model call reached the time limit between two passes
                why = "time"
                break
            except Exception as exc:  # noqa: BLE001 - a fault ends this race only; the partial lanes stay
                if frame is None and isinstance(exc, ValueError):
                    raise
                log.exception("the %s failed", noun)
                failed = exc
                break
            if frame.finished:
                break
            if shown is None:
                shown = time.monotonic()
                yield job.first(frame)
            elif time.monotonic() - shown >= STREAM_INTERVAL:
                shown = time.monotonic()
                yield job.live(frame)
    finally:
        frames.close()
    return frame, End(why, failed, time.monotonic() - started)


class TimeLimit(Exception):
    """A job's one model call that makes many passes (a measurement) reached the time limit between two of them
    (``Timed``): it ends as a race ends at the time limit between its frames."""


class Timed:
    """A predictor each of whose forward passes first raises ``TimeLimit`` once ``time.monotonic()`` passed
    ``deadline`` (a number: it pickles, so it holds in a worker process too)."""

    def __init__(self, predictor: MaskPredictor, deadline: float):
        self.predictor, self.deadline = predictor, deadline

    def __getattr__(self, name):
        return getattr(self.predictor, name)

    def forward(self, *args, **kwargs):
        if time.monotonic() > self.deadline:
            raise TimeLimit(f"past the time limit of {runs.LIMITS.run_seconds:.0f} s")
        return self.predictor.forward(*args, **kwargs)


def failure(exc: Exception | None) -> str:
    """What failed, for the user: the lane and step when a lane's step raised, and the error's kind."""
    if isinstance(exc, LaneFailed):
        return f"{clean(exc.label)} failed at step {exc.step} ({clean(brief(exc.error))})"
    return clean(brief(exc))
