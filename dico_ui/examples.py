"""Make the example run the page opens on: one example prompt decoded with Vanilla, Fast-dLLM and DiCo on the
embedded model, saved as a trace bundle that the app replays without a model.

    python -m dico_ui.examples            # writes assets/ui/example_run.json (a few seconds on 2 cores)

Rerun it when the embedded model or the decoders change, and commit the JSON.
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
from dico_ui.request import DEFAULT_METHODS, RunRequest

EXAMPLES = Path(__file__).resolve().parent.parent / "assets" / "examples.json"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", type=int, default=0, help="index in assets/examples.json (default 0)")
    parser.add_argument("--out", type=Path, default=EXAMPLE_RUN, help=f"bundle to write (default {EXAMPLE_RUN})")
    args = parser.parse_args(argv)
    prompt = json.loads(EXAMPLES.read_text())["examples"][args.example]["prompt"]
    warm_up()
    req = RunRequest(prompt=prompt, mode=NON_AR, gen_length=DEFAULT_GEN_LENGTH, methods=list(DEFAULT_METHODS))
    *_, last = race(get_predictor(), req)           # the same race the page runs (own-step timing)
    args.out.write_text(bundle_json(last.traces))
    for t in last.traces:
        print(f"{t.label}: nfe={t.nfe} answer_nfe={t.answer_nfe} answer_tokens={t.answer_length}")
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
