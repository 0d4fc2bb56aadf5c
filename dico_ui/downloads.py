"""Trace files offered for download, in one temporary folder that other requests, and other server processes
of the same machine, clean at the same time: the clean-up tolerates any file vanishing under it and never fails
the run that triggered it; writing a file never depends on the clean-up."""
from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from pathlib import Path

from dico.trace import Trace, bundle_json
from dico_ui.limits import LIMITS

log = logging.getLogger("dico_ui")
DOWNLOADS = Path(tempfile.gettempdir()) / "dico-explorer"
PREFIX = "dico-traces-"


def clean(folder: Path = DOWNLOADS, now: float | None = None, keep: int = LIMITS.downloads,
          ttl: float = LIMITS.download_ttl_s, grace: float = LIMITS.download_grace_s) -> int:
    """Remove trace files older than ``ttl``, and the oldest beyond ``keep`` (never one younger than ``grace``,
    which a page may still be fetching). A file gone between listing and removing (another request or
    process cleaned it) is skipped. Returns how many this call removed."""
    now = time.time() if now is None else now
    aged = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(PREFIX):             # a finished file, or one an ended process left
                    try:
                        aged.append((entry.stat().st_mtime, entry.path))
                    except FileNotFoundError:
                        continue
    except FileNotFoundError:
        return 0
    aged.sort(reverse=True)                                   # newest first
    removed = 0
    for i, (mtime, path) in enumerate(aged):
        age = now - mtime
        if age > ttl or (i >= keep and age > grace):
            try:
                os.unlink(path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def write_bundle(traces: list[Trace], folder: Path = DOWNLOADS) -> str:
    """The run's traces as one JSON file to download (written whole under a temporary name, then renamed, so a
    reader never sees half a file); then an attempt at clean-up, whose failure is logged, never raised."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}.json"
    partial = path.with_suffix(".part")
    partial.write_text(bundle_json(traces))
    os.replace(partial, path)
    try:
        clean(folder)
    except OSError as exc:          # e.g. the folder's permissions changed under us: the run still succeeds
        log.warning("could not clean %s: %s", folder, exc)
    return str(path)
