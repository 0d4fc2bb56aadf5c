"""lm-eval-harness with the project's decoders: a model named ``dico`` and offline tasks for the embedded model.

    python -m dico.bench.eval --model assets/dico-tiny --method dico --tasks dico_word --limit 16 --batch-size 8
    python -m dico.bench.eval --model GSAI-ML/LLaDA-8B-Instruct --method dico --mode semi-ar --gen-length 256 \\
        --block-length 32 --tasks gsm8k
    python -m dico.bench.eval --method fast --settings threshold=0.9 --tasks dico_list --batch-size 8
    accelerate launch -m dico.bench.eval ...       # data-parallel: each process decodes its share, results are gathered
    accelerate launch --multi_gpu --num_processes 2 -m dico.bench.eval ...    # the same with two CPU processes (gloo)

The paper, LLaDA and Fast-dLLM all report through lm-eval, so results here compare with theirs. A task per family
of ``dico.embedded.tasks.FAMILIES`` (``dico_word``, ``dico_list``, ``dico_pick``, ``dico_team``, ``dico_chain``,
whose answers need ``--gen-length 256``; in ``dico/bench/lm_eval_tasks``) holds the held-out items as local
JSONL, scored with ``dico.embedded.tasks.check`` (word, list and chain: the exact final answer, ``exact_match``;
pick and team: any valid choice, ``acc``): ``--limit N``
scores exactly the benchmark's first N items. Any other task (gsm8k,
humaneval, mbpp, minerva_math) and any lm-eval option not listed here (--num_fewshot, --log_samples, ...)
pass straight through to lm-eval. Needs the eval extra: ``pip install -r requirements-eval.txt``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
except ImportError as exc:          # the base install has no lm-eval: say how to get it
    raise ImportError("dico.bench.eval needs lm-eval-harness: pip install -r requirements-eval.txt") from exc

from dico.bench.lm_eval_tasks.utils import task_metric
from dico.embedded.tasks import FAMILIES, NUMBER_FAMILIES
from dico.settings import (
    DEFAULT_BLOCK_LENGTH,
    DEFAULT_GEN_LENGTH,
    METHODS,
    MODES,
    NON_AR,
    SEMI_AR,
    method_id,
    settings_for,
)

TASKS_DIR = Path(__file__).resolve().parent / "lm_eval_tasks"
OWN_TASKS = {f"dico_{family}" for family in FAMILIES}
_OWN_LISTED = ", ".join(f"dico_{family}" for family in FAMILIES)
UNSUPPORTED = ("dico: {kind} is not supported: diffusion decoders here only generate text; choose generate_until "
               f"tasks ({_OWN_LISTED}, gsm8k, humaneval, mbpp, minerva_math)")


@register_model("dico")
class DiCoLM(LM):
    """generate_until with Vanilla, Fast-dLLM or DiCo; ``model_args`` are the model, method, mode, lengths and
    any setting of the method (``threshold=0.9``), checked before the model loads."""

    def __init__(self, pretrained: str = "dico-tiny", method: str = "dico", mode: str = NON_AR,
                 gen_length: int = DEFAULT_GEN_LENGTH, block_length: int = DEFAULT_BLOCK_LENGTH, batch_size=1,
                 max_batch_size=None, device: str | None = None, dtype: str | None = None,
                 trust_remote_code: bool = False, **settings):
        super().__init__()
        from dico.loop import check_inputs
        from dico.models import load_model

        method = method_id(method)                          # --model_args method=...: an old id too
        check_inputs("-", method, mode, gen_length, block_length)
        self.method, self.mode, self.gen_length = method, mode, gen_length
        self.block_length = block_length if mode == SEMI_AR else None
        self.settings = settings_for(method, settings)
        self.batch_size = _batch_size(batch_size, max_batch_size)
        self.accelerator = None
        self._distribute()
        if self.accelerator is not None:
            device = str(self.accelerator.device)
        elif device and device.startswith("cuda") and not _has_cuda():   # lm-eval's default; as its hf model does
            device = None
        self.predictor = load_model(pretrained, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                                    attention=False)
        self._device = self.predictor.device

    def _distribute(self) -> None:
        """Under ``accelerate launch`` with several processes, take this process's rank: lm-eval then hands
        each rank its share of the requests and gathers the metrics through the methods below."""
        import os

        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=not _has_cuda())     # CPU processes join over gloo (tests, laptops)
        if accelerator.num_processes > 1:
            self.accelerator = accelerator
            self._rank, self._world_size = accelerator.process_index, accelerator.num_processes

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Every request decoded in batches of ``batch_size``, then cut at its first stop string. A diffusion
        decoder fills ``gen_length`` positions at once, so that (not the task's max_gen_toks) bounds answers,
        as in the paper's lm-eval runs."""
        from tqdm import tqdm

        from dico.batch import decode_batch, drain

        contexts = [request.args[0] for request in requests]
        if self.world_size > 1:
            print(f"dico: process {self.rank + 1} of {self.world_size} decodes {len(contexts)} requests",
                  file=sys.stderr)
        runs = decode_batch(self.predictor, contexts, self.method, batch_size=self.batch_size, mode=self.mode,
                            gen_length=self.gen_length, block_length=self.block_length, settings=self.settings)
        bar = tqdm(total=len(contexts), desc=f"dico {self.method}", disable=disable_tqdm or self.rank != 0)
        traces = drain(runs, lambda: bar.update(1))
        bar.close()
        answers = []
        for request, trace in zip(requests, traces):
            until = request.args[1].get("until") or []
            text = trace.text
            for stop in [until] if isinstance(until, str) else until:
                text = text.split(stop)[0] if stop else text       # lm-eval's convention: cut at the first stop
            answers.append(text)
            self.cache_hook.add_partial("generate_until", request.args, text)
        return answers

    def loglikelihood(self, requests):
        raise NotImplementedError(UNSUPPORTED.format(kind="loglikelihood (multiple-choice tasks)"))

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError(UNSUPPORTED.format(kind="loglikelihood_rolling (perplexity tasks)"))

    # Distributed primitives lm-eval's evaluator calls to pad, synchronise and gather across ranks.
    def all_gather(self, tensor):
        return tensor if self.accelerator is None else self.accelerator.gather(tensor)

    def gather_object(self, obj, dst=0):
        if self.accelerator is None:
            return [obj]
        import torch.distributed as dist

        gathered = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, gathered, dst=dst)
        return gathered

    def barrier(self) -> None:
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _batch_size(value, most) -> int:
    """lm-eval passes its --batch_size as text ('8', 'auto'); 'auto' means the most it allows, or 8."""
    if str(value).startswith("auto"):
        return int(most or 8)
    size = int(value)
    if size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {value!r}")
    return size


TASK_YAML = """\
# The embedded model's {family} family (dico/embedded/tasks.py): the 500 held-out items of \
make_split("{family}", "test"),
# in order, so --limit N evaluates the benchmark's first N items. Scored by dico.embedded.tasks.check: {scoring}.
# Written with {family}.jsonl by python -m dico.bench.eval --write-task-data.
task: dico_{family}
custom_dataset: !function utils.load
dataset_kwargs:
  family: {family}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{target}}}}"
generation_kwargs:
  until: []
  do_sample: false
process_results: !function utils.process_results
metric_list:
  - metric: {metric}
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""
SCORING = {True: "the final answer\n# line's numbers, exactly",
           False: "any valid\n# choice is right (each line carries the offered items and the count; its target is one "
                  "valid answer, for reading)"}


def task_files(family: str) -> dict[str, str]:
    """File name -> text of one family's task: its held-out items in order (``dico.embedded.tasks.make_split``,
    every field the checker reads) and its lm-eval YAML."""
    from dataclasses import asdict

    from dico.embedded import tasks

    lines = [json.dumps(asdict(item), ensure_ascii=False) for item in tasks.make_split(family, "test")]
    yaml = TASK_YAML.format(family=family, metric=task_metric(family), scoring=SCORING[family in NUMBER_FAMILIES])
    return {f"{family}.jsonl": "\n".join(lines) + "\n", f"dico_{family}.yaml": yaml}


def write_task_data(folder: Path = TASKS_DIR) -> None:
    """The JSONL and YAML files of a dico_* task per family of ``dico.embedded.tasks.FAMILIES``."""
    for family in FAMILIES:
        for name, text in task_files(family).items():
            (folder / name).write_text(text, encoding="utf-8")


def _only_own_tasks() -> None:
    """lm-eval indexes its ~15,000 bundled task files (about 10 s a process) before it runs even our local
    tasks; when only ours are asked for, its CLI gets a task manager that indexes just our folder."""
    import lm_eval.tasks

    class OwnTasks(lm_eval.tasks.TaskManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "include_defaults": False})

    lm_eval.tasks.TaskManager = OwnTasks


def _settings(text: str) -> dict:
    from lm_eval.utils import simple_parse_args_string

    return simple_parse_args_string(text) if text else {}


def lm_eval_argv(args, rest: list[str]) -> list[str]:
    """The ``lm-eval run`` command line that our options stand for (our tasks folder included)."""
    model_args = {"pretrained": args.model, "method": args.method, "mode": args.mode, "gen_length": args.gen_length,
                  "block_length": args.block_length, **_settings(args.settings)}
    for key in ("device", "dtype"):
        if getattr(args, key):
            model_args[key] = getattr(args, key)
    if args.trust_remote_code:
        model_args["trust_remote_code"] = True
    argv = ["run", "--model", "dico", "--model_args", ",".join(f"{k}={v}" for k, v in model_args.items()),
            "--tasks", args.tasks, "--include_path", str(TASKS_DIR), "--batch_size", str(args.batch_size)]
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    if args.output_path:
        argv += ["--output_path", args.output_path]
    return argv + rest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dico.bench.eval", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--model", default="dico-tiny", help="hub id or folder (default: the embedded model)")
    parser.add_argument("--method", default="dico", choices=METHODS)
    parser.add_argument("--mode", default=NON_AR, choices=MODES)
    parser.add_argument("--gen-length", type=int, default=DEFAULT_GEN_LENGTH)
    parser.add_argument("--block-length", type=int, default=DEFAULT_BLOCK_LENGTH, help="semi-AR block length")
    parser.add_argument("--settings", default="", help="the method's settings, 'threshold=0.9' "
                        "(python -m dico generate --help lists them)")
    parser.add_argument("--tasks", help=f"comma-separated: {_OWN_LISTED}, or any lm-eval task")
    parser.add_argument("--limit", type=int, default=None, help="the first N items of each task")
    parser.add_argument("--batch-size", type=int, default=1, help="prompts per forward pass (same answers at any size)")
    parser.add_argument("--output-path", default=None, help="folder for lm-eval's results JSON")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--write-task-data", action="store_true",
                        help="rewrite the dico_* tasks' JSONL and YAML and exit")
    args, rest = parser.parse_known_args(argv)
    if args.write_task_data:
        write_task_data()
        print(f"wrote the held-out items and YAML of {_OWN_LISTED} under {TASKS_DIR}")
        return 0
    try:
        if not args.tasks:
            raise ValueError("tasks: name at least one task, e.g. --tasks dico_word")
        if args.batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {args.batch_size}")
        from dico.loop import check_inputs

        check_inputs("-", args.method, args.mode, args.gen_length, args.block_length)
        settings_for(args.method, _settings(args.settings))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from lm_eval._cli import HarnessCLI

    if {t.strip() for t in args.tasks.split(",")} <= OWN_TASKS:
        _only_own_tasks()
    sys.argv = ["lm-eval", *lm_eval_argv(args, rest)]
    cli = HarnessCLI()
    cli.execute(cli.parse_args())
    _leave_process_group()           # after every rank's work: an error above ends the process as it is
    return 0


def _leave_process_group() -> None:
    """Under ``accelerate launch`` the ranks joined a gloo/NCCL group; a process that exits with the group alive can
    die in its threads' teardown ("terminate called without an active exception", seen once in a test run here)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(main())
