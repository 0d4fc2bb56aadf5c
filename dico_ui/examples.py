"""Make the shipped examples the app replays without a model: the example run the page opens on (one example prompt
raced by the lesson's lanes, Vanilla, naive top-k, Fast-dLLM and DiCo, on the embedded model, saved as a trace
bundle), the example fork of the fork panel (that run and a fork of its naive lane that answers right) and the
editing example (LLaDA 2.1 replacing a written token mid-decode, which repairs its answer).

    python -m dico_ui.examples                        # the example chosen before (assets/examples.json "opens_on")
    python -m dico_ui.examples --choose pick,team --items 40   # measure held-out items, choose, write both files
    python -m dico_ui.examples --fork                 # the example fork of the run above (assets/ui/fork_example.json)
    python -m dico_ui.examples --edit pick,team --items 40     # the editing example (assets/ui/edit_example.json)
    python -m dico_ui.examples --clash                # measure the three shipped bundles' clash in place

Every bundle written carries each run's clash (``dico.observe.annotate_clash``, measured after the decode as the page
measures a run on the embedded model), so the page opens with Top-4's clash marked.

``--choose`` races every candidate item and keeps those that show the lesson: Vanilla (one token a step),
Fast-dLLM and DiCo answer right and naive top-k answers wrong. Of those it opens on the one whose DiCo answer is
complete soonest (then Fast-dLLM's, then the shorter prompt), adds it to assets/examples.json if it is not there
and records how it was chosen. ``--fork`` forks the naive lane of the shipped run at its clash (the step that
committed the most answer positions at once) by the first single edit that answers right. Rerun them when the
embedded model or the decoders change, and commit the JSON files.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from dico.forking import candidates, fork
from dico.observe import annotate_clash, marked_steps
from dico.settings import DEFAULT_GEN_LENGTH, NON_AR
from dico.trace import Trace, bundle_json, read_traces
from dico_ui.forks import EDIT_EXAMPLE, FORK_EXAMPLE
from dico_ui.handlers import EXAMPLE_RUN
from dico_ui.models import get_predictor, warm_up
from dico_ui.race import race
from dico_ui.render import judged_item
from dico_ui.request import DEFAULT_METHODS, parse_request
from dico_ui.text import EXAMPLES

# The lanes of the run the page opens on: the paper's Figure 1 (naive top-k) beside the methods that avoid it.
LESSON_LANES = list(DEFAULT_METHODS)         # the page's default race: Vanilla, naive top-k, Fast-dLLM, DiCo
NAIVE = 1                                   # LESSON_LANES' index of the lane that is meant to break


def race_traces(predictor, prompt: str, lanes=LESSON_LANES, gen_length: int = DEFAULT_GEN_LENGTH,
                measure_clash: bool = False) -> list:
    """The race the page runs (own-step timing), non-AR at ``gen_length``: its finished traces."""
    req = parse_request(prompt, list(lanes), model=predictor.name, mode=NON_AR, gen_length=gen_length,
                        measure_clash=measure_clash)
    *_, last = race(predictor, req)
    return last.traces


def verdicts(item, traces) -> list[bool]:
    """Each lane's answer judged by the item's own checker (every valid form right, mixtures and repeats wrong)."""
    from dico.embedded import tasks

    return [tasks.check(item, trace.text) for trace in traces]


def choose(predictor, families, n_items: int, progress: bool = True) -> tuple[object, list, dict]:
    """The held-out item that shows the lesson best, its race, and what the measurement found."""
    from tqdm import tqdm

    from dico.embedded import tasks

    items = [item for family in families for item in tasks.make_split(family, "test", n_items)]
    shown, naive_wrong = [], 0
    for item in tqdm(items, desc="examples", disable=not progress):
        traces = race_traces(predictor, item.prompt)
        right = verdicts(item, traces)
        naive_wrong += not right[NAIVE]
        if not right[NAIVE] and all(ok for i, ok in enumerate(right) if i != NAIVE):
            soonest = [next(t.answer_nfe for t in traces if t.method == m) for m in ("dico", "fast")]
            shown.append((*soonest, len(item.prompt), len(shown), item, traces))
    if not shown:
        raise SystemExit(f"no item of {', '.join(families)} (first {n_items} each) shows the lesson: naive top-k "
                         f"was wrong on {naive_wrong} of {len(items)}, never with the other lanes all right")
    *_, item, traces = min(shown, key=lambda s: s[:4])
    found = {"families": list(families), "items": len(items), "naive_wrong": naive_wrong, "lesson": len(shown)}
    return item, traces, found


def item_entry(item) -> dict:
    """A held-out item as an assets/examples.json entry (the same fields as the other pick and team entries)."""
    from dico.embedded import tasks

    index = next(i for i, x in enumerate(tasks.make_split(item.family, "test", tasks.TEST_SIZE)) if x == item)
    entry = {"prompt": item.prompt, "family": item.family, "target": item.target,
             "source": f"tasks.make_split({item.family!r}, 'test')[{index}]"}
    if getattr(item, "offered", None):
        entry |= {"offered": list(item.offered), "count": item.count}
    return entry


def example_entry(item, found: dict, model: str) -> dict:
    """The chosen item as an assets/examples.json entry, saying how it was chosen."""
    entry = item_entry(item)
    entry["chosen"] = (f"by python -m dico_ui.examples --choose on {model}: {found['lesson']} of {found['items']} "
                       f"held-out {'/'.join(found['families'])} items showed the lesson (Vanilla, Fast-dLLM and DiCo "
                       f"right, naive top-k wrong; top-k wrong on {found['naive_wrong']}); this one completes "
                       "DiCo's answer soonest")
    return entry


# ============================================================================ the long worked answers

# The long-answer examples open on the model trained for them, at the paper's length (its GSM8K runs: gen 256).
LONG_MODEL, LONG_GEN_LENGTH, LONG_FAMILY = "dico-tiny-long", 256, "chain"
LONG_EXAMPLE = "long_example_{}.json"       # under assets/ui, one bundle a long example


def choose_long(predictor, count: int, n_items: int, progress: bool = True) -> list[tuple[object, list]]:
    """The first ``count`` held-out chain items (of the first ``n_items``) whose Vanilla answer is right, each with
    its race at gen 256: not chosen for what DiCo or Fast-dLLM do on them, so the examples show the usual case."""
    from tqdm import tqdm

    from dico.embedded import tasks

    chosen = []
    for item in tqdm(tasks.make_split(LONG_FAMILY, "test", n_items), desc="long examples", disable=not progress):
        traces = race_traces(predictor, item.prompt, gen_length=LONG_GEN_LENGTH, measure_clash=True)
        if verdicts(item, traces)[0]:
            chosen.append((item, traces))
        if len(chosen) == count:
            return chosen
    raise SystemExit(f"only {len(chosen)} of the first {n_items} chain items are answered right by Vanilla")


def write_long_examples(predictor, count: int, n_items: int, examples: Path) -> None:
    """Race and save the long examples (assets/ui/long_example_N.json) and name them in the examples file."""
    shipped = json.loads(examples.read_text())
    shipped["examples"] = [e for e in shipped["examples"] if e.get("model") != LONG_MODEL]
    for n, (item, traces) in enumerate(choose_long(predictor, count, n_items), 1):
        out = EXAMPLE_RUN.parent / LONG_EXAMPLE.format(n)
        out.write_text(bundle_json(traces))
        right = verdicts(item, traces)
        shipped["examples"].append(item_entry(item) | {
            "model": LONG_MODEL, "gen_length": LONG_GEN_LENGTH, "trace": f"assets/ui/{out.name}",
            "chosen": f"by python -m dico_ui.examples --long {count}: the {n}. of the first held-out chain items "
                      "that Vanilla answers right on " + LONG_MODEL})
        for trace, ok in zip(traces, right):
            print(f"{'right' if ok else 'wrong'}  {trace.label}: nfe={trace.nfe} answer_nfe={trace.answer_nfe}")
        print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")
    examples.write_text(json.dumps(shipped, indent=1, ensure_ascii=False) + "\n")


# ============================================================================ the clash the shipped runs carry

def measured(predictor, traces: list[Trace]) -> list[Trace]:
    """The traces with their clash measured as a page run measures it (``dico.observe.annotate_clash``, a lane's
    steps at most ``CLASH_LIMIT`` tokens each): extra passes after the decode, which stays as it was. A trace
    measured before keeps its values."""
    for trace in traces:
        if trace.clash is None:
            annotate_clash(predictor, trace)
    return traces


def write_clash(predictor, bundles=(EXAMPLE_RUN, FORK_EXAMPLE, EDIT_EXAMPLE)) -> None:
    """Measure the clash of every run of the shipped bundles in place: the decodes, texts and timings unchanged, so
    the page opens with Top-4's clash on screen."""
    for path in bundles:
        traces = measured(predictor, read_traces(path.read_bytes()))
        path.write_text(bundle_json(traces))
        marks = [f"{t.name}: {render_marks(t)}" for t in traces]
        print(f"wrote {path}: " + "; ".join(marks))


def render_marks(trace: Trace) -> str:
    marked = marked_steps(trace)
    return (", ".join(f"step {k} {v:+.1f} nats" for k, v in marked.items()) or "no mark") + \
        f" ({trace.clash['passes']} passes)"


# ============================================================================ the editing example

# LLaDA 2.1's joint threshold beside the same rule that never edits: a replacement must beat probability 1.0.
NO_EDITS = {"method": "llada21", "label": "LLaDA 2.1, no edits", "settings": {"edit_threshold": 1.0}}
EDIT_PAIR = (NO_EDITS, "llada21")
EDIT_LANES = ("vanilla", NO_EDITS, "llada21", "t2m")   # and Token-to-mask, which takes tokens back instead
PLAIN, EDITING = EDIT_LANES.index(NO_EDITS), EDIT_LANES.index("llada21")


def choose_edit(predictor, families, n_items: int, progress: bool = True) -> tuple[object, list, dict]:
    """The held-out item whose answer LLaDA 2.1's edits repair with the fewest replacements (then passes, then the
    shorter prompt), its race (``EDIT_LANES``) and what the measurement found."""
    from tqdm import tqdm

    from dico.embedded import tasks

    items = [item for family in families for item in tasks.make_split(family, "test", n_items)]
    repaired, broke, edited = [], 0, 0
    for item in tqdm(items, desc="edits", disable=not progress):
        plain, editing = race_traces(predictor, item.prompt, EDIT_PAIR)
        right = verdicts(item, (plain, editing))
        edited += editing.replaced() > 0
        broke += right[0] and not right[1]
        if right[1] and not right[0]:
            repaired.append((editing.replaced(), editing.nfe, len(item.prompt), len(repaired), item))
    found = {"families": list(families), "items": len(items), "edited": edited, "repaired": len(repaired),
             "broke": broke}
    if not repaired:
        raise SystemExit(f"no item of {', '.join(families)} (first {n_items} each) is repaired by LLaDA 2.1's edits: "
                         f"it replaced tokens on {edited} of {len(items)} and broke {broke}")
    *_, item = min(repaired, key=lambda r: r[:4])
    traces = race_traces(predictor, item.prompt, EDIT_LANES)
    plain, editing = traces[PLAIN], traces[EDITING]
    if not (verdicts(item, (editing,)) == [True] and verdicts(item, (plain,)) == [False] and editing.replaced()):
        raise SystemExit(f"the race of the chosen item does not show the repair it was chosen for: {plain.name} "
                         f"{plain.text!r}, {editing.name} {editing.text!r} ({editing.replaced()} replaced)")
    found["chosen"] = {"replaced": editing.replaced(), "nfe": editing.nfe}
    return item, traces, found


EDIT_CHOSEN = "the editing example"         # how an examples-file entry chosen by --edit says so


def edit_entry(item, found: dict, model: str, plain: str) -> dict:
    """The editing example as an assets/examples.json entry: why its answers can mix (``plain``: the answer without
    edits) and how it was chosen."""
    entry = item_entry(item)
    offered, count = len(getattr(item, "offered", ()) or ()) or "several", getattr(item, "count", 1) or 1
    head = f"Any {count} of the {offered} offered are right, in any order" if count > 1 else \
        f"Any of the {offered} offered is right"
    why = ("a first name and a surname must belong to the same person. Committed in the same step, or the one "
           "before the other is written, they can mix two people" if item.family == "team" else
           "the answer's slots depend on each other. Committed in the same step, or one before the other is "
           "written, they can repeat a thing or join the pieces of two")
    entry["note"] = (f"{head}, but {why} (“{plain.strip()}” without edits); LLaDA 2.1 "
                     "may replace a written token once its neighbours are written (token-to-token editing), which "
                     "repairs it here.")
    entry["chosen"] = (f"{EDIT_CHOSEN} (assets/ui/edit_example.json), by python -m dico_ui.examples --edit on "
                       f"{model}: of {found['items']} held-out {'/'.join(found['families'])} items LLaDA 2.1 replaced "
                       f"written tokens on {found['edited']}; its edits repaired {found['repaired']} (right, and wrong "
                       f"at edit_threshold 1.0, which never edits) and broke {found['broke']}; this one is repaired "
                       f"with the fewest replacements ({found['chosen']['replaced']}, in {found['chosen']['nfe']} "
                       "passes)")
    return entry


def record_edit(shipped: dict, entry: dict) -> dict:
    """The examples file with the editing example recorded: added (an entry an earlier ``--edit`` added for another
    item goes), or its note of how it was chosen set on the entry already there (as ``edit_chosen`` beside a
    ``chosen`` of another kind), the example the page opens on unchanged."""
    examples = shipped["examples"]
    opens_on = examples[shipped["opens_on"]]["prompt"] if "opens_on" in shipped else None
    examples = [dict(e) for e in examples if e["prompt"] == entry["prompt"]
                or not str(e.get("chosen", "")).startswith(EDIT_CHOSEN)]
    for e in examples:
        if e["prompt"] != entry["prompt"]:
            e.pop("edit_chosen", None)
    same = next((e for e in examples if e["prompt"] == entry["prompt"]), None)
    if same is None:
        examples.append(entry)
    elif str(same.get("chosen", EDIT_CHOSEN)).startswith(EDIT_CHOSEN):
        same["chosen"] = entry["chosen"]
    else:
        same["edit_chosen"] = entry["chosen"]
    shipped = {**shipped, "examples": examples}
    if opens_on is not None:
        shipped["opens_on"] = [e["prompt"] for e in examples].index(opens_on)
    return shipped


def write_edit_example(predictor, families, n_items: int, out: Path, examples: Path) -> None:
    """Measure, choose and write the editing example, and record it in the examples file."""
    item, traces, found = choose_edit(predictor, families, n_items)
    entry = edit_entry(item, found, predictor.name, traces[PLAIN].text)
    shipped = record_edit(json.loads(examples.read_text()), entry)
    examples.write_text(json.dumps(shipped, indent=1, ensure_ascii=False) + "\n")
    out.write_text(bundle_json(measured(predictor, traces)))
    print(entry["chosen"])
    for t in traces:
        print(f"{t.label}: nfe={t.nfe} replaced={t.replaced()} text={t.text!r} right={verdicts(item, [t])[0]}")
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")


# ============================================================================ the example fork

def example_forks(predictor, parent: Trace, at: int, positions) -> list[tuple[Trace, bool | None]]:
    """Every single edit at the clash, each with its verdict (the prompt's checker): each token step ``at``
    committed taken back after it, then the model's next two candidates forced before it at each position."""
    from dico.embedded import tasks
    item = judged_item(parent.prompt)
    tried = [fork(predictor, parent, at + 1, remask=[pos]) for pos in positions]
    for pos in positions:
        tried += [fork(predictor, parent, at, force={pos: token})
                  for token, _, _ in candidates(predictor, parent, at, pos, k=3)[1:]]
    return [(t, tasks.check(item, t.text) if item is not None else None) for t in tried]


def widest_step(trace: Trace) -> int:
    """The step of a run that committed the most answer positions at once, the latest of equals (on the lesson's
    example Top-4's step 23 commits ` S`, `ara`, ` G`, `ill` together: the step whose tokens clash)."""
    return max(range(len(trace.steps)), key=lambda k: (len(trace.answer_commits(trace.steps[k])), k))


def make_fork_example(predictor, source: Path = EXAMPLE_RUN, lane: str = "Top-4 per step") \
        -> tuple[list[Trace], list]:
    """The lesson's example run and a fork of its naive lane at its clashing step that answers right (the first
    such single edit, take-backs first): the runs to ship and every edit tried with its verdict."""
    traces = read_traces(source.read_bytes())
    parent = next(t for t in traces if t.name == lane)
    at = widest_step(parent)
    tried = example_forks(predictor, parent, at, parent.answer_commits(parent.steps[at]))
    right = [t for t, ok in tried if ok]
    if not right:
        raise ValueError(f"fork: no single edit at step {at} of {lane} answers right; tried "
                         + "; ".join(f"{t.name}: {t.text!r}" for t, _ in tried))
    return [*traces, right[0]], tried


def write_fork_example(predictor, out: Path) -> None:
    traces, tried = make_fork_example(predictor)
    for trace, ok in tried:
        print(f"{'right' if ok else 'wrong'}  {trace.name}: {trace.text.strip()!r} ({trace.nfe} steps)")
    out.write_text(bundle_json(measured(predictor, traces)))
    print(f"wrote {out}: {traces[-1].name}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", type=int, default=None,
                        help="index in assets/examples.json (default: its 'opens_on', else 0)")
    parser.add_argument("--choose", metavar="FAMILIES", help="measure held-out items of these families and open on "
                        "the one that shows the lesson best (adds it to assets/examples.json)")
    parser.add_argument("--items", type=int, default=40, help="with --choose or --edit: items per family (default 40)")
    parser.add_argument("--examples", type=Path, default=EXAMPLES, help=f"examples file (default {EXAMPLES})")
    parser.add_argument("--fork", action="store_true", help=f"write the example fork of the shipped run instead "
                        f"({FORK_EXAMPLE.relative_to(EXAMPLES.parent.parent)})")
    parser.add_argument("--edit", metavar="FAMILIES", nargs="?", const="pick,team",
                        help="measure held-out items of these families (default pick,team) and write the editing "
                        f"example ({EDIT_EXAMPLE.relative_to(EXAMPLES.parent.parent)}, added to the examples file)")
    parser.add_argument("--out", type=Path, help=f"bundle to write (default {EXAMPLE_RUN}, with --fork {FORK_EXAMPLE}, "
                        f"with --edit {EDIT_EXAMPLE})")
    parser.add_argument("--long", type=int, metavar="N", help=f"race the first N held-out chain items Vanilla answers "
                        f"right on {LONG_MODEL} at gen {LONG_GEN_LENGTH} and ship them as examples (assets/ui/"
                        f"{LONG_EXAMPLE.format('N')})")
    parser.add_argument("--clash", action="store_true", help="measure the clash of the shipped example run, fork "
                        "example and editing example in place (their decodes unchanged)")
    args = parser.parse_args(argv)
    shipped = json.loads(args.examples.read_text())
    if args.clash:
        write_clash(get_predictor())
        return 0
    if args.long:
        write_long_examples(get_predictor(LONG_MODEL), args.long, args.items, args.examples)
        return 0
    warm_up()
    predictor = get_predictor()
    if args.fork:
        write_fork_example(predictor, args.out or FORK_EXAMPLE)
        return 0
    if args.edit:
        write_edit_example(predictor, tuple(args.edit.split(",")), args.items, args.out or EDIT_EXAMPLE, args.examples)
        return 0
    args.out = args.out or EXAMPLE_RUN
    if args.choose:
        item, traces, found = choose(predictor, tuple(args.choose.split(",")), args.items)
        entry = example_entry(item, found, predictor.name)
        prompts = [e["prompt"] for e in shipped["examples"]]
        if item.prompt in prompts:
            shipped["examples"][prompts.index(item.prompt)] |= {"chosen": entry["chosen"]}
        else:
            shipped["examples"].append(entry)
        shipped["opens_on"] = [e["prompt"] for e in shipped["examples"]].index(item.prompt)
        args.examples.write_text(json.dumps(shipped, indent=1, ensure_ascii=False) + "\n")
        print(entry["chosen"])
    else:
        index = shipped.get("opens_on", 0) if args.example is None else args.example
        traces = race_traces(predictor, shipped["examples"][index]["prompt"])
    args.out.write_text(bundle_json(measured(predictor, traces)))
    for t in traces:
        print(f"{t.label}: nfe={t.nfe} answer_nfe={t.answer_nfe} answer_tokens={t.answer_length} text={t.text!r}")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
