"""One path from a click to the figures, for a run and a fork alike: the request checked, a place in the line of
runs, the wait for a decoder, the race streamed, then its last frame drawn.

    yield from admitted(request, admit, page, "run")    # admit() -> a Job: handlers.RunJob, forks.ForkJob

However it ends, it ends one way. A bad request is refused (on the page in the status and one toast, raised to an
API caller) and the page keeps what it shows; so is a request the library refuses when it starts to decode (a
ValueError before the first frame: a fork's replay finds the trace is not this model's). A full line is refused at
once with the wait it would have had. Stop, or a page that closed, ends the wait; Stop, a closed page, the time
limit and a fault (any error of the model or a rule) end the race, and its partial lanes stay on screen. A closed
page gets nothing drawn and its session is forgotten. The line is always left, and gradio's session tables trimmed.
A run and a fork differ only in their ``Job``: what it decodes, how a live frame reads, how the last one is drawn.
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
    """A checked request ready to decode: what a run and a fork do differently (``admit`` builds one)."""

    def __init__(self, predictor: MaskPredictor, warnings=()):
        self.predictor, self.warnings = predictor, list(warnings)
        # live traces have no vocabulary yet: the model's words, looked up once each
        self.token_text = functools.lru_cache(maxsize=4096)(predictor.token_text)

    def start(self) -> dict:
        """The outputs once a decoder is free, before the first frame (also what stays if nothing is decoded)."""
        raise NotImplementedError

    def frames(self) -> Iterator[Frame]:
        """The race (the call that runs the model); closed to stop it."""
        raise NotImplementedError

    def live(self, frame: Frame) -> dict:
        """A frame while it decodes: the status and the lanes."""
        raise NotImplementedError

    def own(self, frame: Frame) -> list[Trace]:
        """The traces this job decoded in ``frame`` (a fork's runs on screen are not its own)."""
        return frame.traces

    def drawn(self, frame: Frame, end: End) -> dict:
        """Every output once the race ended (``frame`` finished, with at least one step of the job's own)."""
        raise NotImplementedError


def refuse(message: str, title: str, page: bool):
    """A request that cannot start: said in the status, where the eye is after the click, and the page keeps what it
    shows. API callers also get it raised, the page one toast (plain text: a toast shows no Markdown)."""
    yield {"status": f"**{title}**: {clean(message)}"}
    if not page:
        raise gr.Error(clean(message), title=title, print_exception=False)
    gr.Warning(clean(message), title=title)


def admitted(request, admit: Callable[[], Job], page: bool, noun: str):
    """Check the request (``admit``: a ValueError naming the field is refused as "Cannot ``noun``"), join the line,
    wait for a decoder, stream the race, then draw it. A request past the line's size is refused at once."""
    session = runs.session_of(request)
    since = runs.asked(session)
    if runs.stopped_since(session, since):
        yield {"status": "Stopped before it started: Stop was pressed while this run waited in the queue."}
        return
    try:
        job = admit()
    except ValueError as exc:               # a bad value never wipes what the page shows
        yield from refuse(str(exc), f"Cannot {noun}", page)
        return
    ticket = runs.LINE.join(session)
    if ticket is None:
        yield from refuse(runs.busy(), "Busy", page)
        return
    try:
        for warning in job.warnings:
            gr.Warning(clean(warning))
        if (yield from wait_turn(session, since, ticket)):
            yield from _decoded(session, since, job, page, noun)
    finally:
        runs.LINE.leave(ticket)
        runs.trim_sessions()            # gradio's own per-session tables, bounded by the sessions it keeps


def wait_turn(session: str, since: float, ticket):
    """Wait for this request's turn to decode, saying how long; False when it must not run (Stop, page gone)."""
    while True:
        turn = runs.LINE.wait(ticket, timeout=1.0)
        why = runs.ended(session, since)             # asked after the turn too: a Stop meanwhile still counts
        if why == "gone":
            runs.forget_session(session)
            return False
        if why:
            yield {"status": "Stopped before it started: you left the line."}
            return False
        if turn:
            return True
        yield {"status": runs.waiting(ticket)}       # what the page shows stays meanwhile


def _decoded(session: str, since: float, job: Job, page: bool, noun: str):
    """Stream the job's race, then draw its last frame with a status saying how it ended."""
    start = job.start()
    yield start
    try:
        frame, end = yield from _frames(session, since, job, noun)
    except ValueError as exc:               # the library's word on the request, before anything decoded
        yield from refuse(str(exc), f"Cannot {noun}", page)
        return
    if end.why == "gone":          # nobody will see the figures: draw none; gradio just revived the session, drop it
        runs.forget_session(session)
        return
    if frame is not None and not frame.finished:
        frame = settle(frame, job.predictor)
    if frame is None or not job.own(frame):
        said = (f"**The {noun} failed** before its first step: {failure(end.failed)}" if end.failed else
                f"Stopped before the {noun}'s first step.")
        yield {**start, "status": said}
        return
    yield job.drawn(frame, end)


def _frames(session: str, since: float, job: Job, noun: str):
    """Stream the race's frames to the page, closing it when it must end (Stop, page closed, time limit, a fault);
    returns its last frame (None before the first) and how it ended. A ValueError before the first frame is raised:
    the request was refused, nothing decoded."""
    started, shown, frame, failed = time.perf_counter(), 0.0, None, None
    frames = job.frames()
    try:
        while not (why := runs.ended(session, since, started if frame is not None else None)):
            try:
                frame = next(frames)
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001 - a fault ends this race only; the partial lanes stay
                if frame is None and isinstance(exc, ValueError):
                    raise
                log.exception("the %s failed", noun)
                failed = exc
                break
            if frame.finished:
                break
            if time.perf_counter() - shown >= STREAM_INTERVAL:
                shown = time.perf_counter()
                yield job.live(frame)
    finally:
        frames.close()
    return frame, End(why, failed, time.perf_counter() - started)


def failure(exc: Exception | None) -> str:
    """What failed, for the user: the lane and step when a lane's step raised, and the error's kind."""
    if isinstance(exc, LaneFailed):
        return f"{clean(exc.label)} failed at step {exc.step} ({clean(brief(exc.error))})"
    return clean(brief(exc))
