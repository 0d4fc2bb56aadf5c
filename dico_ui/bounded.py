"""Stores that forget, for a server strangers use for weeks: a table capped in size and age, and the line of runs.

Both take their clock as an argument (tests move time by hand) and a lock of their own (gradio calls handlers
from many threads). Neither imports gradio.
"""
from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any


class Bounded:
    """A dict with at most ``size`` entries, each forgotten ``ttl`` seconds after it was last set or read; past
    the size, the least recently used entry goes first."""

    def __init__(self, size: int, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.size, self.ttl, self.clock = size, ttl, clock
        self._data: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()      # oldest use first
        self._lock = threading.Lock()

    def _sweep(self, now: float) -> None:
        while self._data and (len(self._data) > self.size or next(iter(self._data.values()))[0] + self.ttl <= now):
            self._data.popitem(last=False)

    def __setitem__(self, key, value) -> None:
        with self._lock:
            now = self.clock()
            self._data[key] = (now, value)
            self._data.move_to_end(key)
            self._sweep(now)

    def get(self, key, default=None):
        with self._lock:
            now = self.clock()
            self._sweep(now)
            if key not in self._data:
                return default
            value = self._data[key][1]
            self._data[key] = (now, value)
            self._data.move_to_end(key)
            return value

    def pop(self, key, default=None):
        with self._lock:
            self._sweep(self.clock())
            return self._data.pop(key, (0.0, default))[1]

    def __contains__(self, key) -> bool:
        with self._lock:
            self._sweep(self.clock())
            return key in self._data

    def __len__(self) -> int:
        with self._lock:
            self._sweep(self.clock())
            return len(self._data)


@dataclass(frozen=True)
class Ticket:
    session: str
    number: int


class Line:
    """The runs admitted at once: ``decoders`` of them decode, the others wait in arrival order; with ``size``
    admitted, the next run is refused at once (``join`` returns None) instead of waiting without bound. Recent
    run durations (the last ``history``) estimate how long a wait is."""

    def __init__(self, decoders: int, size: int, history: int = 32, guess_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.decoders, self.size, self.guess_s, self.clock = decoders, size, guess_s, clock
        self._waiting: list[Ticket] = []
        self._decoding: dict[Ticket, float] = {}        # ticket -> when it started decoding
        self._took: deque[float] = deque(maxlen=history)
        self._numbers = itertools.count()
        self._changed = threading.Condition()

    def join(self, session: str) -> Ticket | None:
        with self._changed:
            if len(self._waiting) + len(self._decoding) >= self.size:
                return None
            ticket = Ticket(session, next(self._numbers))
            self._waiting.append(ticket)
            self._changed.notify_all()
            return ticket

    def _turn(self, ticket: Ticket) -> bool:
        if ticket in self._decoding:
            return True
        if len(self._decoding) < self.decoders and self._waiting and self._waiting[0] == ticket:
            self._waiting.pop(0)
            self._decoding[ticket] = self.clock()
            return True
        return False

    def wait(self, ticket: Ticket, timeout: float) -> bool:
        """Block up to ``timeout`` s for this ticket's turn to decode; True once it has it."""
        with self._changed:
            return self._changed.wait_for(lambda: self._turn(ticket), timeout)

    def leave(self, ticket: Ticket) -> None:
        """The run ended (or gave up waiting): its place goes to the next one; a finished decode's time is kept."""
        with self._changed:
            started = self._decoding.pop(ticket, None)
            if started is not None:
                self._took.append(self.clock() - started)
            elif ticket in self._waiting:
                self._waiting.remove(ticket)
            self._changed.notify_all()

    def ahead(self, ticket: Ticket) -> int:
        """Runs before this one: those decoding and those waiting in front of it."""
        with self._changed:
            waiting = self._waiting.index(ticket) if ticket in self._waiting else 0
            return len(self._decoding) + waiting if ticket not in self._decoding else 0

    def holds(self, session: str) -> str | None:
        """Whether ``session`` has a run here: "decoding", "waiting" or None."""
        with self._changed:
            if any(t.session == session for t in self._decoding):
                return "decoding"
            return "waiting" if any(t.session == session for t in self._waiting) else None

    def run_s(self) -> float:
        """A typical run's duration: the median of the recent ones (a guess before any)."""
        with self._changed:
            return statistics.median(self._took) if self._took else self.guess_s

    def wait_s(self, ahead: int | None = None) -> float:
        """About how long a run with ``ahead`` runs before it (default: one joining now) waits for a decoder."""
        if ahead is None:
            with self._changed:
                ahead = len(self._waiting) + len(self._decoding)
        return (ahead // self.decoders) * self.run_s() if ahead >= self.decoders else 0.0


def about(seconds: float) -> str:
    """A wait as a person says it: 'a few seconds', 'about 40 s', 'about 3 minutes'."""
    if seconds < 5:
        return "a few seconds"
    if seconds < 90:
        return f"about {round(seconds / 5) * 5:.0f} s"
    return f"about {round(seconds / 60):.0f} minutes"
