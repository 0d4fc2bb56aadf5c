"""Helpers of the dico_word / dico_list lm-eval tasks: the held-out items shipped beside this file, scored
with the project's own checker (``dico.embedded.tasks.check``), so a run needs no hub and scores as the benchmark
does."""
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(family: str):
    import datasets

    # an absolute path: lm-eval may run from any directory, and data_files would resolve against it
    return datasets.load_dataset("json", data_files={"test": str(HERE / f"{family}.jsonl")})


def load_word(**_):
    return _load("word")


def load_list(**_):
    return _load("list")


def process_results(doc: dict, results: list[str]) -> dict:
    from dico.embedded.tasks import Item, check

    item = Item(family=doc["family"], prompt=doc["prompt"], answer=doc["answer"], target=doc["target"])
    return {"exact_match": float(check(item, results[0]))}
