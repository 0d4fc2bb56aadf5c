"""The embedded model's token-frequency table, which PC-Sampler calibrates its confidence with (docs/decoding.md
§7.12): each token's count in the model's training text, stored as PC-Sampler's code and d2Cache store LLaDA's and
Dream's (``{"num_token": N, "p_baseline_dict": {token id: count}}``), beside the weights where ``dico.load_model``
finds it.

    python -m dico.embedded.token_frequency            # assets/dico-tiny/token_frequency.json
    python -m dico.embedded.token_frequency --model dico-tiny-long

The text counted: the first ``--items`` (20,000) items of ``tasks.train_stream(0)`` in the family mix and wording of
the model's train_log.json, the stream the model was trained on, each as the model reads it: the prompt as encoded
for the model, the answer without special tokens and one end-of-text.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from itertools import islice
from pathlib import Path

from dico.embedded import tasks
from dico.models import EMBEDDED, TOKEN_FREQUENCY, embedded_folder, load_model, train_log

ITEMS = 20_000


def count_tokens(predictor, n_items: int = ITEMS, mix=tasks.TRAIN_MIX, wording: str = "free") -> Counter:
    counts: Counter = Counter()
    eos = predictor.tokenizer.eos_token_id
    for item in islice(tasks.train_stream(0, mix=mix, wording=wording), n_items):
        counts.update(predictor.encode_prompt(item.prompt))
        counts.update(predictor.tokenizer(item.answer, add_special_tokens=False)["input_ids"])
        counts[eos] += 1
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(EMBEDDED), help="model folder (default: the embedded model)")
    parser.add_argument("--items", type=int, default=ITEMS, help=f"training items counted (default {ITEMS})")
    parser.add_argument("--out", type=Path, help=f"file to write (default: <model>/{TOKEN_FREQUENCY})")
    args = parser.parse_args(argv)
    predictor = load_model(args.model, attention=False)
    # the mix and wording the model's last sitting trained on (dico-tiny-long's has the chain family), as its log says
    trained = train_log(args.model).get("args", {})
    mix = tuple(tuple(pair) for pair in trained.get("mix") or tasks.TRAIN_MIX)
    counts = count_tokens(predictor, args.items, mix, trained.get("wording") or "free")
    out = args.out or (embedded_folder(args.model) or Path(args.model)) / TOKEN_FREQUENCY
    out.write_text(json.dumps({"num_token": sum(counts.values()),
                               "p_baseline_dict": {str(k): v for k, v in sorted(counts.items())},
                               "made_by": f"python -m dico.embedded.token_frequency --model {args.model} "
                                          f"--items {args.items}", "mix": [list(p) for p in mix]}) + "\n")
    print(f"wrote {out}: {sum(counts.values())} tokens of {args.items} training items, {len(counts)} distinct")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
