"""Measuring: the benchmark (``python -m dico.bench``: the paper's Table 1, ablations, throughput, selection speed, the
KV caches, the speed-accuracy frontier, what broke wrong answers), its tables and the docs they go into, and the
lm-eval-harness model and tasks (``python -m dico.bench.eval``, ``lm_eval_tasks/``).

The shared core, which no subcommand's module is imported by:
    core.py        Table 1's configs, a cell and decoding it, its row, the Wilson interval
    options.py     the options the subcommands share and their checks (one ``ValueError`` naming the option)
    runner.py      the one way a subcommand runs: threads, model load, ``error:`` lines and exit 2, timing, output
    parts.py       finished parts saved and taken back, parts decoded in worker processes
    hardware.py    the model's device and dtype, the machine line, the weights' training step
    tables.py      every table's Markdown from its rows (``render`` picks it by what a result file holds)
The subcommands, each registering its own options (``cli.py`` gathers them; ``python -m dico.bench`` runs it):
    benchmark.py (table1, the default), ablation.py, throughput.py, speed.py, cache.py, blocks.py, frontier.py,
    breaks.py, docs.py (docs, alias readme: every table in docs/ rewritten from the committed JSON)
The blocks bench's model code, sdar_standin.py, is an SDAR-shaped stand-in (random weights) that the tests' stand-in
folders ship too; it is read inside ``dico.block.release_imports``, never imported plainly.

It may import the decoding library (``dico``'s top-level modules) and the embedded model's tasks
(``dico.embedded``); neither imports it.
"""
