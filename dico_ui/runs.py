"""Who may decode, and when a run must end: the line of runs, Stop, pages that closed, the time limit.

Stop is cooperative: a run stops when its session pressed Stop after the run was asked for (its click, or its
start for API calls); a run still waiting ends as soon as it sees it. No thread is killed: the handler closes
the race between two steps (``dico_ui.race``). Every table here is bounded (``dico_ui.limits``).
"""
from __future__ import annotations

import logging
import statistics
import time
from collections import deque

import gradio as gr

from dico_ui.bounded import Bounded, Line, about
from dico_ui.limits import LIMITS
from dico_ui.serve import client_connected, forget_session, trim_sessions  # noqa: F401  (handlers use these too)

log = logging.getLogger("dico_ui")
LINE = Line(LIMITS.decoders, LIMITS.queue, history=LIMITS.run_times)
_clicks = Bounded(LIMITS.flags, LIMITS.flag_ttl_s)    # session -> when Run (or Replay) was last clicked
_stops = Bounded(LIMITS.flags, LIMITS.flag_ttl_s)     # session -> when Stop was last pressed
_closed = Bounded(LIMITS.flags, LIMITS.flag_ttl_s)    # sessions whose page closed (their runs end at the next step)
_paces: deque[float] = deque(maxlen=LIMITS.run_times)   # seconds per forward pass and position, recent warm runs
# s per forward pass and position before any run: the embedded model on a busy 2-core CPU (Vanilla at gen 256 with
# three more lanes reached step 216 in 60 s: about 0.17 s a pass of about 300 positions)
POSITION_S_GUESS = 0.17 / 300


def session_of(request) -> str:
    return getattr(request, "session_hash", None) or "local"


def clicked(request: gr.Request):
    """Run or Replay was clicked (before the queue): a Stop after this moment stops that run, waiting or running."""
    _clicks[session_of(request)] = time.monotonic()


def asked(session: str) -> float:
    """When the run starting now was asked for: its click, or now (API calls have no click)."""
    return _clicks.pop(session) or time.monotonic()


def stopped_since(session: str, since: float) -> bool:
    return _stops.get(session, float("-inf")) >= since


def stop(request: gr.Request):
    """Stop: this session's running race ends after its current round and draws what it has (status "Stopped at
    step k", partial answers and figures); a run or replay still waiting ends as soon as it sees it."""
    session = session_of(request)
    _stops[session] = time.monotonic()
    held = LINE.holds(session)
    if held == "decoding":
        return "Stopping after the current step…"
    if held == "waiting":
        return "Leaving the line…"
    return "Stopped: nothing of yours was decoding; a queued run is cancelled before it starts."


async def closed(request: gr.Request):
    """The page closed (gradio's unload): its runs end at their next step, and its state is freed now rather than
    an hour later (gradio keeps a closed page's state that long). Async: it runs on the event loop, where gradio
    sweeps its session table, so the two never overlap."""
    session = session_of(request)
    _closed[session] = True
    _clicks.pop(session)
    _stops.pop(session)
    forget_session(session)


def ended(session: str, since: float, started: float | None = None) -> str | None:
    """Why a run must end now, if it must: "stop" (its Stop), "gone" (its page closed or its client left), "time"
    (it ran ``LIMITS.run_seconds``)."""
    if stopped_since(session, since):
        return "stop"
    if session in _closed or not client_connected():
        return "gone"
    if started is not None and time.monotonic() - started > LIMITS.run_seconds:
        return "time"
    return None


def busy() -> str:
    wait = LINE.wait_s()
    return (f"The demo is busy: {LIMITS.queue} runs are decoding or waiting for its {LIMITS.decoders} decoders "
            f"(a run takes {about(LINE.run_s())}), so a new one would wait {about(wait)}. Please try again "
            f"in {about(max(wait, 30.0))}.")


def waiting(ticket) -> str:
    ahead = LINE.ahead(ticket)
    return (f"Waiting for a free decoder: {ahead} run{'s' if ahead != 1 else ''} ahead of yours, "
            f"{about(LINE.wait_s(ahead))} to go. Stop leaves the line.")


def paced(seconds: float, passes: int, positions: int) -> None:
    """A finished run took ``seconds`` for ``passes`` forward passes (all its lanes together) over ``positions``
    (prompt and response): a pass costs about in proportion to its positions."""
    if passes > 0 and positions > 0:
        _paces.append(seconds / passes / positions)


def pass_s(positions: int) -> float:
    """About how long one forward pass over ``positions`` takes here now: recent runs' median (a guess before any)."""
    return (statistics.median(_paces) if _paces else POSITION_S_GUESS) * positions
