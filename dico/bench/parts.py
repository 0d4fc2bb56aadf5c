"""Finished parts of a long benchmark run, saved as each finishes, so a rerun of the same command skips them.

Table 1 at gen 256 with 200 items a family takes hours on a CPU; a session (or a Space) that stops halfway keeps
what it finished. A part is saved under a key naming everything its rows depend on that a command line can change:
the model's weights (a hash of the weight files of a local folder, the id of a hub model), the items, the batch size
and every config's label, method and settings. A rerun whose key differs (new weights, other settings) decodes the
part again and replaces the file. The key does not cover the decoders' code: after changing a decoder, empty the
folder (or name another).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


def weights_id(model: str | None) -> str:
    """What identifies a model's weights: a hash of a local folder's weight files (the embedded model is retrained
    under one name), or the hub id itself."""
    from dico.models import EMBEDDED, EMBEDDED_NAME

    folder = EMBEDDED if model in (None, "", EMBEDDED_NAME) else Path(model)
    files = sorted(p for p in folder.glob("*") if p.suffix in (".safetensors", ".bin")) if folder.is_dir() else []
    if not files:
        return str(model)
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return "sha256:" + digest.hexdigest()[:20]


class Parts:
    """A folder of finished parts: ``get(part)`` gives a part's saved rows (None if not finished under this run's
    key), ``put(part, rows, seconds)`` saves them atomically (a killed run never leaves half a file)."""

    def __init__(self, folder: str | os.PathLike, run_key: dict):
        self.folder = Path(folder)
        self.run_key = json.loads(json.dumps(run_key))      # as it reads back from a file (tuples become lists)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _key(self, part) -> dict:
        return {**self.run_key, "part": json.loads(json.dumps(part))}

    def _path(self, part) -> Path:
        name = hashlib.sha256(json.dumps(self._key(part), sort_keys=True).encode()).hexdigest()[:16]
        return self.folder / f"part-{name}.json"

    def get(self, part) -> list[dict] | None:
        try:
            saved = json.loads(self._path(part).read_text())
        except (OSError, ValueError):
            return None
        return saved["rows"] if saved.get("key") == self._key(part) else None

    def seconds(self, part) -> float:
        """The decoding time a saved part took when it ran (0 if not saved)."""
        try:
            return float(json.loads(self._path(part).read_text()).get("seconds", 0.0))
        except (OSError, ValueError):
            return 0.0

    def put(self, part, rows: list[dict], seconds: float) -> None:
        path = self._path(part)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".part-", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump({"key": self._key(part), "seconds": round(seconds, 1), "rows": rows}, fh, indent=1)
        os.replace(tmp, path)
