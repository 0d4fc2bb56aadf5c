"""Every cap that keeps a public demo up, in one place (docs/serving.md, "Limits of the public demo", lists them).

A Space is one long-running process on 2 CPU cores that strangers use for weeks: what a session keeps, how
much work a run may do, how many runs wait, and what lies on disk are all bounded here, and nowhere else.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Limits:
    # --- work
    decoders: int = 2               # races decoding at once (one per core of a CPU Space)
    queue: int = 32                 # runs admitted at once, decoding or waiting; the next one is told "busy"
    run_seconds: float = 60.0       # a run still decoding after this stops, with its partial answers shown
    max_gen_length: int = 256       # response positions a run may ask for
    dependency_masked: int = 96     # masked positions a dependency map may cover (one pass each: a few seconds)
    layer_steps: int = 256          # steps the locality layer by layer may replay (one pass each: a few seconds)
    # --- memory
    # sessions whose state (traces on screen) is kept, least recently used first out (env DICO_SESSION_CAP: a soak
    # reaches past a small cap sooner)
    sessions: int = int(os.environ.get("DICO_SESSION_CAP", "200"))
    session_ttl_s: float = 1800.0   # a page's traces are dropped this long after the run (or upload) that wrote them
    flags: int = 1024               # entries of each small per-session table (Run clicks, Stops, closed pages)
    flag_ttl_s: float = 3600.0      # how long an entry of those tables is kept
    run_times: int = 32             # recent run durations kept to estimate the wait
    # glibc's malloc arenas (0: glibc's own, 8 a core); each thread that allocates may get an arena of its own, which
    # keeps the freed memory it once peaked at (env DICO_MALLOC_ARENAS: a soak compares)
    malloc_arenas: int = int(os.environ.get("DICO_MALLOC_ARENAS", "2"))
    # --- disk
    downloads: int = 200            # trace files kept for download; older ones go first
    download_ttl_s: float = 1800.0  # a trace file is removed this long after it was written
    download_grace_s: float = 300.0  # no trace file younger than this is removed (its page may still fetch it)
    # --- gradio's own
    gradio_queue: int = 256         # gradio's queue, a backstop far above `queue`: overload gets the app's words
    threads: int = 64               # gradio's worker threads: every admitted run plus the page's small events

    def rows(self) -> list[tuple[str, object]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


LIMITS = Limits()
M_ARENA_MAX = -8                    # glibc's malloc.h


def bound_allocator(arenas: int = LIMITS.malloc_arenas) -> bool:
    """Cap glibc's malloc arenas from inside the process, as ``MALLOC_ARENA_MAX`` would from outside (a Space cannot
    set its server's environment). glibc fixes its arena count when a thread first wants a new arena past its
    eighth, so this is called at import, before the server's threads start; True when set, False where the C
    library is not glibc (nothing to do) or ``arenas`` is 0."""
    if arenas <= 0 or not _glibc():
        return False
    return ctypes.CDLL(None).mallopt(M_ARENA_MAX, arenas) == 1


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (AttributeError, ValueError, OSError):       # no confstr (Windows), or a C library that is not glibc
        return False
