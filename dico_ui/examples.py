"""Make the example run the page opens on: one example prompt raced by the lesson's lanes (Vanilla, naive top-k,
Fast-dLLM and DiCo) on the embedded model, saved as a trace bundle that the app replays without a model.

    python -m dico_ui.examples                        # the example chosen before (assets/examples.json "opens_on")
    python -m dico_ui.examples --choose pick,team --items 40   # measure held-out items, choose, write both files

``--choose`` races every candidate item and keeps those that show the lesson: Vanilla (one token a step),
Fast-dLLM and DiCo answer right and naive top-k answers wrong. Of those it opens on the one whose DiCo answer is
complete soonest (then Fast-dLLM's, then the shorter prompt), adds it to assets/examples.json if it is not there
and records how it was chosen. Rerun it when the embedded model or the decoders change, and commit both JSON files.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from dico.settings import DEFAULT_GEN_LENGTH, NON_AR
from dico.trace import bundle_json
from dico_ui.handlers import EXAMPLE_RUN
from dico_ui.models import get_predictor, warm_up
from dico_ui.race import race
from dico_ui.request import DEFAULT_METHODS, parse_request
from dico_ui.text import EXAMPLES

# The lanes of the run the page opens on: the paper's Figure 1 (naive top-k) beside the methods that avoid it.
LESSON_LANES = list(DEFAULT_METHODS)         # the page's default race: Vanilla, naive top-k, Fast-dLLM, DiCo
NAIVE = 1                                   # LESSON_LANES' index of the lane that is meant to break


def race_traces(predictor, prompt: str, lanes=LESSON_LANES) -> list:
    """The race the page runs (own-step timing), non-AR at the default length: its finished traces."""
    req = parse_request(prompt, list(lanes), mode=NON_AR, gen_length=DEFAULT_GEN_LENGTH)
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


def example_entry(item, found: dict, model: str) -> dict:
    """The chosen item as an assets/examples.json entry (the same fields as the other pick and team entries)."""
    from dico.embedded import tasks

    index = next(i for i, x in enumerate(tasks.make_split(item.family, "test", tasks.TEST_SIZE)) if x == item)
    entry = {"prompt": item.prompt, "family": item.family, "target": item.target,
             "source": f"tasks.make_split({item.family!r}, 'test')[{index}]"}
    if getattr(item, "offered", None):
        entry |= {"offered": list(item.offered), "count": item.count}
    entry["chosen"] = (f"by python -m dico_ui.examples --choose on {model}: {found['lesson']} of {found['items']} "
                       f"held-out {'/'.join(found['families'])} items showed the lesson (Vanilla, Fast-dLLM and DiCo "
                       f"right, naive top-k wrong; top-k wrong on {found['naive_wrong']}); this one completes "
                       "DiCo's answer soonest")
    return entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", type=int, default=None,
                        help="index in assets/examples.json (default: its 'opens_on', else 0)")
    parser.add_argument("--choose", metavar="FAMILIES", help="measure held-out items of these families and open on "
                        "the one that shows the lesson best (adds it to assets/examples.json)")
    parser.add_argument("--items", type=int, default=40, help="with --choose: items per family (default 40)")
    parser.add_argument("--examples", type=Path, default=EXAMPLES, help=f"examples file (default {EXAMPLES})")
    parser.add_argument("--out", type=Path, default=EXAMPLE_RUN, help=f"bundle to write (default {EXAMPLE_RUN})")
    args = parser.parse_args(argv)
    shipped = json.loads(args.examples.read_text())
    warm_up()
    predictor = get_predictor()
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
    args.out.write_text(bundle_json(traces))
    for t in traces:
        print(f"{t.label}: nfe={t.nfe} answer_nfe={t.answer_nfe} answer_tokens={t.answer_length} text={t.text!r}")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
