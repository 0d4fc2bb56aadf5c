"""lm-eval-harness: the `dico` model answers generate_until with the project's decoders, its offline tasks are
the benchmark's held-out items scored by the project's checker, and batch size or process count never changes
a result. Skipped when the eval extra (requirements-eval.txt) is not installed."""
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.lmeval
pytest.importorskip("lm_eval")
pytest.importorskip("accelerate")

from dico.bench import benchmark  # noqa: E402
from dico.bench.eval import OWN_TASKS, TASKS_DIR, DiCoLM, main, task_files  # noqa: E402
from dico.embedded import tasks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LIMIT, GEN = 4, 48
ARGS = ["--model", "assets/dico-tiny", "--method", "dico", "--tasks", "dico_word", "--limit", str(LIMIT),
        "--gen-length", str(GEN), "--log_samples"]


def evaluate(tmp_path, monkeypatch, capsys, *extra) -> tuple[float, dict, str]:
    """Run ``python -m dico.bench.eval`` in this process; its accuracy, its answers by item, and what it printed."""
    import lm_eval.tasks

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", lm_eval.tasks.TaskManager)
    assert main([*ARGS, "--output-path", str(tmp_path), *extra]) == 0
    return (*read_run(tmp_path), capsys.readouterr().out)


def read_run(folder: Path) -> tuple[float, dict]:
    results = json.loads(next(folder.rglob("results_*.json")).read_text())["results"]["dico_word"]
    samples = [json.loads(line) for line in next(folder.rglob("samples_dico_word_*.jsonl")).read_text().splitlines()]
    return results["exact_match,none"], {s["doc_id"]: s["resps"][0][0] for s in samples}


def test_task_data_is_the_benchmarks_held_out_split_in_order():
    for family in tasks.FAMILIES:
        lines = (TASKS_DIR / f"{family}.jsonl").read_text().splitlines()
        expected = [json.loads(json.dumps(asdict(item))) for item in tasks.make_split(family)]
        assert [json.loads(line) for line in lines] == expected, \
            "stale task data: run python -m dico.bench.eval --write-task-data"
        for name, text in task_files(family).items():
            assert (TASKS_DIR / name).read_text() == text, f"stale {name}: run python -m dico.bench.eval " \
                "--write-task-data"
    assert {f"dico_{family}" for family in tasks.FAMILIES} == OWN_TASKS


def test_answers_are_scored_by_the_projects_checker():
    from dico.bench.lm_eval_tasks.utils import process_results

    item = tasks.make_split("list", "test", 1)[0]
    assert process_results(asdict(item), [item.answer]) == {"exact_match": 1.0}
    assert process_results(asdict(item), ["The answer is 0."]) == {"exact_match": 0.0}


def test_lm_eval_loads_a_task_per_family_and_any_valid_choice_is_right():
    """Each dico_* task, as lm-eval loads it, is its family's held-out split; a pick or team item carries what the
    checker needs (the offered items and the count), so another valid choice scores and a mixture does not."""
    from lm_eval.tasks import TaskManager, get_task_dict

    from dico.bench.lm_eval_tasks.utils import process_results

    loaded = get_task_dict(sorted(OWN_TASKS), TaskManager(include_path=str(TASKS_DIR), include_defaults=False))
    for family in tasks.FAMILIES:
        docs = list(loaded[f"dico_{family}"].test_docs())
        assert [d["prompt"] for d in docs] == [item.prompt for item in tasks.make_split(family)]
    pick = next(d for d in loaded["dico_pick"].test_docs() if d["count"] == 2)
    a, b, c = pick["offered"][:3]
    assert process_results(pick, [f"I pick {b} and {a}."]) == process_results(pick, [f"I pick {c} and {a}."]) == \
        {"acc": 1.0}
    mixed = f"{a[:2]}{b[2:]}"                                       # the pieces of two things
    assert process_results(pick, [f"I pick {a} and {a}."]) == process_results(pick, [f"I pick {mixed} and {c}."]) == \
        {"acc": 0.0}
    team = next(d for d in loaded["dico_team"].test_docs() if d["count"] == 1)
    (first, last), (other, surname) = (name.split() for name in team["offered"][:2])
    assert process_results(team, [f"The leader is {other} {surname}."]) == {"acc": 1.0}
    assert process_results(team, [f"The leader is {first} {surname}."]) == {"acc": 0.0}       # two people mixed


def test_batch_sizes_agree_with_each_other_and_with_the_benchmark(tmp_path, monkeypatch, capsys):
    batched, answers, printed = evaluate(tmp_path / "b4", monkeypatch, capsys, "--batch-size", "4")
    alone, answers_alone, _ = evaluate(tmp_path / "b1", monkeypatch, capsys, "--batch-size", "1")
    assert "|dico_word|" in printed and "exact_match" in printed            # lm-eval's own table
    assert (batched, answers) == (alone, answers_alone) and len(answers) == LIMIT
    from dico.models import load_model

    rows = benchmark.run(load_model(attention=False), [("DiCo", "dico", {})], ("word",), ("non-ar",), LIMIT,
                     ((GEN, GEN),), batch_size=4, progress=False)
    assert [r["accuracy"] for r in rows if r["method"] == "dico"] == [batched]


def test_two_processes_share_the_requests_and_match_one(tmp_path, monkeypatch, capsys):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # as the two processes below: sums in another order can flip a near tie
    try:
        one, answers, _ = evaluate(tmp_path / "one", monkeypatch, capsys, "--batch-size", "2")
    finally:
        torch.set_num_threads(threads)
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "dico.bench.eval",
              *ARGS, "--batch-size", "2", "--output-path", str(tmp_path / "two")]
    result = subprocess.run(launch, cwd=ROOT, capture_output=True, text=True, timeout=240,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                                 "HF_DATASETS_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "process 1 of 2 decodes 2 requests" in result.stderr and "process 2 of 2 decodes 2 requests" in result.stderr
    assert read_run(tmp_path / "two") == (one, answers)


def test_generation_stops_at_the_tasks_stop_strings_and_loglikelihood_is_refused():
    from lm_eval.api.instance import Instance

    lm = DiCoLM(method="fast", gen_length=GEN, batch_size=2)
    prompt = tasks.make_split("word", "test", 1)[0].prompt
    ask = lambda until: Instance("generate_until", {}, (prompt, {"until": until}), 0)      # noqa: E731
    full, cut = lm.generate_until([ask([]), ask(["answer"])], disable_tqdm=True)
    assert "answer" in full and cut == full.split("answer")[0]
    with pytest.raises(NotImplementedError, match="loglikelihood .*not supported"):
        lm.loglikelihood([Instance("loglikelihood", {}, ("a", " b"), 0)])


@pytest.mark.parametrize("bad, field", [(["--settings", "speed=9"], "speed"),
                                        (["--mode", "semi-ar", "--block-length", "40"], "block_length"),
                                        (["--batch-size", "0"], "batch_size")])
def test_bad_requests_exit_2_naming_the_field(bad, field, capsys):
    assert main(["--tasks", "dico_word", *bad]) == 2
    assert field in capsys.readouterr().err
