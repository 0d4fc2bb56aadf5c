"""Finished parts of a long benchmark run, saved as each finishes, so a rerun of the same command skips them; and
``run_parts``, which decodes Table 1 or an ablation a (family, length, mode) part at a time: in parallel processes,
resuming from saved parts, or both.

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
import time
from pathlib import Path

from dico.bench.hardware import load_bench_model


def weights_id(model: str | None) -> str:
    """What identifies a model's weights: a hash of a local folder's weight files (the embedded model is retrained
    under one name), or the hub id itself."""
    from dico.models import embedded_folder

    folder = embedded_folder(model) or Path(model)
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

    def load(self, part) -> tuple[list[dict], float] | None:
        """A saved part's rows and the decoding seconds it took when it ran (None if not finished under this key)."""
        try:
            saved = json.loads(self._path(part).read_text())
        except (OSError, ValueError):
            return None
        return (saved["rows"], float(saved.get("seconds", 0.0))) if saved.get("key") == self._key(part) else None

    def get(self, part) -> list[dict] | None:
        loaded = self.load(part)
        return loaded[0] if loaded else None

    def saved(self) -> list[tuple[dict, float]]:
        """Every part saved under this run's key: its part (as ``put`` was given it) and the seconds it took."""
        found = []
        for path in sorted(self.folder.glob("part-*.json")):
            try:
                saved = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            key = saved.get("key", {})
            if {k: v for k, v in key.items() if k != "part"} == self.run_key:
                found.append((key["part"], float(saved.get("seconds", 0.0))))
        return found

    def drop(self, part) -> None:
        """Forget a saved part (one whose rows a larger part now holds)."""
        self._path(part).unlink(missing_ok=True)

    def put(self, part, rows: list[dict], seconds: float) -> None:
        path = self._path(part)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".part-", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump({"key": self._key(part), "seconds": round(seconds, 1), "rows": rows}, fh, indent=1)
        os.replace(tmp, path)


def run_parts(decode, model, configs, families, modes, n_items: int, lengths, batch_size: int, jobs: int = 1,
              parts=None, predictor=None, progress: bool = True) -> tuple[list[dict], dict]:
    """The rows of ``decode`` (``dico.bench.benchmark.run``: a module-level function, so that it pickles), decoded
    one (family, length, mode) part at a time, and how: the parts, how many came from ``parts`` and the decoding
    seconds of all of them (one process each, summed).

    With ``jobs > 1`` each part runs in its own process: on a CPU the forward pass is compute-bound, so batching
    gains little there, while a process per core decodes in parallel. With ``parts`` (a ``dico.bench.parts.Parts``)
    each finished part is saved as it finishes and a part saved earlier under the same key is not decoded again,
    so a long run killed halfway goes on where it stopped. Ratios stay within a part (Vanilla is in each)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    order = [(family, pair, mode) for family in families for pair in lengths for mode in modes]   # run's row order
    loaded = {part: parts.load(_part_key(part)) for part in order} if parts else {}
    loaded = {part: saved for part, saved in loaded.items() if saved is not None}
    done = {part: rows for part, (rows, _) in loaded.items()}
    seconds = {part: took for part, (_, took) in loaded.items()}
    todo = sorted((p for p in order if p not in done), key=lambda part: -part[1][0])   # longest generation first
    if done and progress:
        print(f"resuming: {len(done)} of {len(order)} parts already decoded in {parts.folder}", flush=True)

    def finish(part, rows, took):
        done[part], seconds[part] = rows, took
        if parts:
            parts.put(_part_key(part), rows, took)

    if jobs > 1 and todo:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_part, decode, model, configs, (family,), (mode,), n_items, (pair,), batch_size):
                       (family, pair, mode) for family, pair, mode in todo}
            for future in tqdm(as_completed(futures), total=len(todo), desc="bench parts", disable=not progress):
                finish(futures[future], *future.result())
    for family, pair, mode in (todo if jobs <= 1 else ()):
        start = time.perf_counter()
        rows = decode(predictor, configs, (family,), (mode,), n_items, (pair,), batch_size, progress=progress)
        finish((family, pair, mode), rows, time.perf_counter() - start)
    resumed = len(order) - len(todo)
    return [row for part in order for row in done[part]], {"parts": len(order), "parts_resumed": resumed,
                                                            "decode_seconds": round(sum(seconds.values()))}


def _part_key(part) -> dict:
    family, (gen, block), mode = part
    return {"family": family, "gen_length": gen, "block_length": block, "mode": mode}


_PREDICTORS: dict = {}


def _predictor(model: tuple):
    """This process's model (``hardware.bench_model``'s spec), loaded once per process, on one torch thread (a
    process per core)."""
    import torch

    torch.set_num_threads(1)
    if model not in _PREDICTORS:
        _PREDICTORS[model] = load_bench_model(model)
    return _PREDICTORS[model]


def _part(decode, model, *args) -> tuple[list[dict], float]:
    """One process's part of ``run_parts``: its rows and the seconds they took."""
    predictor = _predictor(model)
    start = time.perf_counter()
    rows = decode(predictor, *args, progress=False)
    return rows, time.perf_counter() - start


def _cell(work, model, cell) -> list[dict]:
    return work(_predictor(model), *cell)


def in_processes(work, model, cells: list[tuple], jobs: int, progress: bool = True, desc: str = "cells",
                 parts: Parts | None = None, predictor=None) -> list[dict]:
    """The rows of ``work(predictor, *cell)`` for every cell, each cell decoded in one of ``jobs`` processes (on a
    compute-bound CPU a process per core decodes in parallel), in ``cells``' order. ``work`` is a module-level
    function or a partial of one, so that it pickles. With ``parts`` each cell is saved as it finishes and a cell
    saved earlier under the same key is not decoded again (a long run killed halfway goes on where it stopped);
    with ``jobs`` 1 the cells are then decoded one after another in this process, on ``predictor``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    done = {cell: rows for cell in cells if parts and (rows := parts.get(list(cell))) is not None}
    todo = [cell for cell in cells if cell not in done]
    if done and progress:
        print(f"resuming: {len(done)} of {len(cells)} {desc} already decoded in {parts.folder}", flush=True)

    def finish(cell, rows, seconds):
        done[cell] = rows
        if parts:
            parts.put(list(cell), rows, seconds)

    if jobs > 1 and todo:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_timed_cell, work, model, cell): cell for cell in todo}
            for future in tqdm(as_completed(futures), total=len(todo), desc=desc, disable=not progress):
                finish(futures[future], *future.result())
    if jobs <= 1 and todo:
        predictor = predictor if predictor is not None else _predictor(model)
        for cell in todo:
            start = time.perf_counter()
            finish(cell, work(predictor, *cell), time.perf_counter() - start)
    return [row for cell in cells for row in done[cell]]


def _timed_cell(work, model, cell) -> tuple[list[dict], float]:
    start = time.perf_counter()
    return _cell(work, model, cell), time.perf_counter() - start
