"""Helpers of the dico_* lm-eval tasks (one per family of ``dico.embedded.tasks.FAMILIES``): the held-out items
shipped beside this file, scored with the project's own checker (``dico.embedded.tasks.check``), so a run needs no
hub and scores as the benchmark does."""
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(family: str, **_):
    """A family's held-out items (its YAML names the family in ``dataset_kwargs``)."""
    import datasets

    # an absolute path: lm-eval may run from any directory, and data_files would resolve against it
    return datasets.load_dataset("json", data_files={"test": str(HERE / f"{family}.jsonl")})


def task_metric(family: str) -> str:
    """The metric a dico_* task reports: exact_match where one answer is right, acc where any valid choice is."""
    from dico.embedded.tasks import NUMBER_FAMILIES

    return "exact_match" if family in NUMBER_FAMILIES else "acc"


def process_results(doc: dict, results: list[str]) -> dict:
    """exact_match for word and list (one right answer), acc for pick and team (any valid choice): the item is
    rebuilt from every field it was written with, the offered items and count of a pick or team included."""
    from dataclasses import fields

    from dico.embedded.tasks import Item, check

    item = Item(**{f.name: tuple(doc[f.name]) if isinstance(doc[f.name], list) else doc[f.name]
                   for f in fields(Item) if f.name in doc})
    return {task_metric(item.family): float(check(item, results[0]))}
