"""Measuring: the benchmark (``python -m dico.bench``: the paper's Table 1, ablations, throughput, selection
speed), its tables (``tables``: rows read and written, Markdown, README's block) and the lm-eval-harness model and
tasks (``python -m dico.bench.eval``, ``lm_eval_tasks/``).

It may import the decoding library (``dico``'s top-level modules) and the embedded model's tasks
(``dico.embedded``); neither imports it.
"""
