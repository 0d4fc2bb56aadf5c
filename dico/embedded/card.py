"""Measurements for the embedded model's card: capability, confidence profile, load and forward time.

    python -m dico.embedded.card [--model assets/dico-tiny] [--items 500] [--profile-items 200] [--decode-items 200] \
        [--json PATH]
    python -m dico.embedded.card --curve runs/NAME --items 100   # every checkpoint snapshot of a run: curve.json, .md
    python -m dico.embedded.card --by-operation --model M --items 150   # computed results by operation and number size
    python -m dico.embedded.card --editing --model M --items 200   # what a written position predicts (token editing)

- Masked alone: each number (or, for word problems, each mention of the name and the object, every BPE piece
  of it) of the worked answer masked on its own with everything else given: does the model copy and compute it?
  Names and objects are measured separately on the word problems that use training words
  (``name_object_accuracy_word``) and on those that use held-out words never seen in training
  (``name_object_heldout_accuracy_word``).
- Computed results: each equation result masked together with all its later mentions, so it must be
  computed from the operands rather than read back from the next step (and names and objects masked
  with all later mentions, so they must come from the prompt: ``*_first_mention_*``).
- Teacher-forced answer accuracy: the whole worked answer is given except the numbers of the final
  answer line, which are masked; one forward pass must predict them all.
- Decoded (DiCo, non-AR, gen_length 96): accuracy by ``dico.embedded.tasks.check`` (word and list: the exact
  final answer; pick and team: any valid choice) and, for word and list, the stutter rate, the share of answers with
  a word or number repeated right after itself ("Adding 3 3") where the worked answer has none.
- Three prompts as a new user typed them (``ISSUE_PROMPTS``) decoded with every method in both modes.
- Confidence profile at the first decoding step (everything masked), per region of the response:
  the first 8 answer positions, the rest of the answer (content), the 10 positions after the true
  end (the end-of-text boundary) and the far end-of-text tail: mean confidence and share above 0.95.
  A real LLM is unsure in free wording and sure of the tail; a model sure of everything teaches nothing.

The number measures (masked alone, computed results, names and objects, held-out words, teacher-forced answer
numbers, stutter) are those of ``tasks.NUMBER_FAMILIES``; decoded accuracy and the profile are every family's, so
pick and team (whose answers are choices, not numbers) are measured on what they are for.

Every measure reads the held-out prompts with worked answers in the wording the model was trained in (its
train_log.json, ``dico.embedded.wordings``; "free" when it does not say): the prompts are the same in every wording,
and a probe of answers worded otherwise would measure the wording, and put the profile's end in the wrong place.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time

import torch

from dico.embedded import tasks
from dico.sampling import score

GEN_LENGTH = 96


def gen_for(family: str) -> int:
    """The family's gen length: its own where its answers do not fit GEN_LENGTH (tasks.LONG_FAMILIES)."""
    return tasks.LONG_FAMILIES.get(family, GEN_LENGTH)


def _layout(predictor, item, gen_length):
    prompt = predictor.encode_prompt(item.prompt)
    answer = predictor.tokenizer(item.answer, add_special_tokens=False)["input_ids"]
    eot = predictor.tokenizer.eos_token_id
    response = (answer + [eot] * gen_length)[:gen_length]
    return prompt, answer, response


def _texts(predictor, ids) -> list[str]:
    """Each token's text without its space marker (" 17" -> "17", BPE "Ġ=" -> "="; word-level tokens as they are)."""
    tok = predictor.tokenizer
    return [tok.convert_tokens_to_string([piece]).strip() for piece in tok.convert_ids_to_tokens(list(ids))]


def teacher_forced(predictor, items, gen_length=GEN_LENGTH) -> float:
    """Share of items whose final-answer numbers are all right in one pass with the rest given."""
    right = 0
    for item in items:
        prompt, answer, response = _layout(predictor, item, gen_length)
        tail = item.answer.rsplit(".", 2)[-2] if item.answer.endswith(".") else item.answer
        n_tail = len(predictor.tokenizer(tail, add_special_tokens=False)["input_ids"]) + 1   # final line + "."
        start = len(answer) - n_tail
        texts = _texts(predictor, answer)
        numbers = [i for i in range(max(start, 0), len(answer)) if re.fullmatch(r"\d+", texts[i])]
        ids = torch.tensor([prompt + response])
        ids[0, [len(prompt) + i for i in numbers]] = predictor.mask_id
        logits, _ = predictor.forward(ids)
        pred = logits[0, len(prompt):].argmax(-1)
        right += all(int(pred[i]) == answer[i] for i in numbers)
    return right / len(items)


NUMBER = re.compile(r"\d+")


def _mentions(predictor, item) -> list[list[list[int]]]:
    """Per entity of the item (name, object), the answer-token index lists of its mentions."""
    from dico.embedded.tokenizer import entity_spans

    return entity_spans(predictor.tokenizer, item.answer, item.entities)


def masked_alone_accuracy(predictor, items, which: re.Pattern | str = NUMBER, gen_length=GEN_LENGTH, *,
                          after: str | None = None, with_later: bool = False) -> float:
    """Share of the answer's numbers (or, with ``which="entities"``, name and object mentions) predicted right
    when each alone is masked, all else given.

    For numbers this is copy and arithmetic; for names and objects it is copying from the prompt: every token of
    the mention is masked (a name may be several BPE pieces) and all must be right. ``after="="`` keeps only
    numbers right after that token (equation results). ``with_later`` also masks every later mention of the same
    number or entity, so nothing later in the answer gives it away: a result must then be computed and a name
    copied from the prompt, which is the state confidence-ordered decoding reaches when it leaves those for last.
    """
    results = list(_masked_alone(predictor, items, which, gen_length, after, with_later))
    return sum(ok for _, ok in results) / max(len(results), 1)


def _masked_alone(predictor, items, which, gen_length, after, with_later):
    """(the unit's answer tokens as text, right or not) for every unit ``masked_alone_accuracy`` scores."""
    for item in items:
        prompt, answer, response = _layout(predictor, item, gen_length)
        answer = answer[:len(response)]
        texts = _texts(predictor, answer)
        units = []                                    # (positions to predict, positions to mask)
        if which == "entities":
            for mentions in _mentions(predictor, item):
                for k, mention in enumerate(mentions):
                    mention = [i for i in mention if i < len(answer)]
                    if mention:
                        later = [i for m in mentions[k:] for i in m if i < len(answer)] if with_later else mention
                        units.append((mention, later))
        else:
            for i, text in enumerate(texts):
                if which.fullmatch(text) and (after is None or (i and texts[i - 1] == after)):
                    later = [j for j in range(i, len(answer)) if answer[j] == answer[i]] if with_later else [i]
                    units.append(([i], later))
        if not units:
            continue
        batch = torch.tensor([prompt + response] * len(units))
        for row, (_, hidden) in enumerate(units):
            batch[row, [len(prompt) + i for i in hidden]] = predictor.mask_id
        pred = predictor.forward(batch)[0][:, len(prompt):].argmax(-1)
        for row, (wanted, _) in enumerate(units):
            context = texts[max(0, wanted[0] - 4):wanted[-1] + 1]
            yield context, all(int(pred[row, i]) == answer[i] for i in wanted)


def _size(text: str) -> str:
    return "?" if not text.isdigit() else "<=20" if int(text) <= 20 else "21-60" if int(text) <= 60 else ">60"


def computed_by_operation(predictor, items, gen_length=GEN_LENGTH) -> dict:
    """Computed step results (each masked with its later mentions) split by operation and by the size of the
    first operand and of the result: where the arithmetic fails, to plan the next training data."""
    groups: dict[str, list[int]] = {}
    for context, ok in _masked_alone(predictor, items, NUMBER, gen_length, "=", True):
        a, op, _, _, result = context if len(context) == 5 else ("?", "?", "", "", context[-1])    # "a op b = result"
        for key in (f"op {op}", f"first operand {_size(a)}", f"result {_size(result)}", "all"):
            groups.setdefault(key, [0, 0])
            groups[key][0] += ok
            groups[key][1] += 1
    return {key: {"n": n, "accuracy": round(right / n, 3)} for key, (right, n) in sorted(groups.items())}


def _stutters(text: str) -> bool:
    """A word or number right after itself ("Adding 3 3", "from 18 18."); punctuation counts as a word."""
    words = re.findall(r"[\w']+|[^\w\s]", text)
    return any(a == b and a[0].isalnum() for a, b in zip(words, words[1:]))


def decoded(predictor, items, method: str = "dico", gen_length=GEN_LENGTH) -> dict:
    """Decode each item (non-AR) and report accuracy (``tasks.check``), forward passes and, when the items are of a
    number family, the stutter rate: the share of answers with a word repeated right after itself ("Adding 3 3")
    where the worked answer has no such repeat."""
    from dico.loop import generate

    right = stutter = nfe = numbers = 0
    for item in items:
        trace = generate(predictor, item.prompt, method, gen_length=gen_length)
        right += tasks.check(item, trace.text)
        nfe += trace.nfe
        if item.family in tasks.NUMBER_FAMILIES:
            numbers += 1
            stutter += _stutters(trace.text) and not _stutters(item.answer)
    n = max(len(items), 1)
    report = {"accuracy": round(right / n, 4), "nfe": round(nfe / n, 1), "items": len(items), "method": method}
    return report | ({"stutter_rate": round(stutter / numbers, 4)} if numbers else {})


def first_step_profile(predictor, items, gen_length=GEN_LENGTH) -> dict:
    """Mean confidence and share > 0.95 per response region when everything is still masked."""
    regions = {"first 8": [], "content": [], "boundary (10 after end)": [], "far tail": []}
    for item in items:
        prompt, answer, _ = _layout(predictor, item, gen_length)
        ids = torch.tensor([prompt + [predictor.mask_id] * gen_length])
        conf, _, _ = score(predictor.forward(ids)[0][0, len(prompt):])
        end = len(answer)
        regions["first 8"] += conf[:8].tolist()
        regions["content"] += conf[8:end].tolist()
        regions["boundary (10 after end)"] += conf[end:end + 10].tolist()
        regions["far tail"] += conf[end + 10:].tolist()
    return {name: {"mean": round(sum(v) / len(v), 3), "share_above_0.95": round(sum(c > 0.95 for c in v) / len(v), 3)}
            for name, v in regions.items() if v}


# Three prompts as a new user typed them: each must decode right with every method in every mode
# it decodes in (``issue_runs``).
ISSUE_PROMPTS = [
    tasks.Item("word", "Tom has 5 apples. He buys 3 more. How many apples does Tom have now?", "", "8",
               ("Tom", "apples")),
    tasks.Item("word", "Nora has 14 shells. She finds 5 more shells at the beach. Then she gives 3 shells to her "
                       "brother. How many shells does Nora have now?", "", "16", ("Nora", "shells")),
    tasks.Item("list", "Take the numbers 12, 5, 8, 1. Subtract 1 from each number.", "", "11, 4, 7, 0"),
]


def issue_runs(methods=None) -> list[tuple[tasks.Item, str, str]]:
    """The decodes ``issue_prompts`` makes: each issue prompt with every method (default: ``dico.settings.METHODS``)
    in every mode that method decodes in (``decodes_in``: ReMDM, non-AR only, has no semi-AR run)."""
    from dico.settings import METHODS, MODES, decodes_in

    return [(item, mode, method) for item in ISSUE_PROMPTS for mode in MODES for method in methods or METHODS
            if decodes_in(method, mode)]


def issue_prompts(predictor, gen_length=GEN_LENGTH, block_length=32) -> list[dict]:
    """Decode the issue's prompts (``issue_runs``): right answer, and the name and object copied (every word-problem
    entity appears in the text and no other list name or object does)."""
    from dico.loop import generate

    others = [w for w in tasks.NAMES + tasks.OBJECTS + tasks.HELD_OUT_NAMES + tasks.HELD_OUT_OBJECTS]
    rows = []
    for item, mode, method in issue_runs():
        trace = generate(predictor, item.prompt, method, mode=mode, gen_length=gen_length,
                         block_length=block_length if mode == "semi-ar" else None)
        words = set(re.findall(r"[A-Za-z]+(?: cars)?", trace.text))
        copied = all(e in trace.text for e in item.entities) and not any(
            w in words for w in others if w not in item.entities and w not in item.prompt)
        rows.append({"prompt": item.prompt[:30], "mode": mode, "method": method,
                     "right": tasks.check(item, trace.text), "copied": copied, "nfe": trace.nfe,
                     "text": trace.text})
    return rows


def family_measures(predictor, family: str, split, profile_items=200, decode_items=200) -> dict:
    """The card's measures of one family's held-out items: the number measures for ``tasks.NUMBER_FAMILIES`` only
    (pick and team answers hold no computed numbers nor copied names), decoded accuracy and the profile for all,
    each at the family's gen length (``gen_for``)."""
    report, probe, gen = {}, split[:profile_items], gen_for(family)
    if family in tasks.NUMBER_FAMILIES:
        report[f"teacher_forced_{family}"] = round(teacher_forced(predictor, split, gen), 4)
        report[f"number_accuracy_{family}"] = round(masked_alone_accuracy(predictor, probe, gen_length=gen), 4)
        report[f"computed_result_accuracy_{family}"] = round(masked_alone_accuracy(
            predictor, probe, after="=", with_later=True, gen_length=gen), 4)
    if family == "word":
        # every other held-out word problem uses held-out words (names, objects never in training)
        seen = [i for i in split if not i.held_out][:profile_items]
        unseen = [i for i in split if i.held_out][:profile_items]
        report["name_object_accuracy_word"] = round(masked_alone_accuracy(predictor, seen, "entities"), 4)
        report["name_object_first_mention_accuracy_word"] = round(
            masked_alone_accuracy(predictor, seen, "entities", with_later=True), 4)
        report["name_object_heldout_accuracy_word"] = round(
            masked_alone_accuracy(predictor, unseen, "entities"), 4)
        report["name_object_heldout_first_mention_accuracy_word"] = round(
            masked_alone_accuracy(predictor, unseen, "entities", with_later=True), 4)
    if decode_items:
        run = decoded(predictor, split[:decode_items], gen_length=gen)
        if "stutter_rate" in run:
            report[f"stutter_rate_{family}"] = run["stutter_rate"]
        report[f"decoded_{family}"] = run
    report[f"profile_{family}"] = first_step_profile(predictor, probe, gen)
    if family in tasks.NUMBER_FAMILIES:
        report[f"editing_{family}"] = editing(predictor, probe, gen_length=gen)
    return report


EDIT_SHARE = 0.1


def editing(predictor, items, share: float = EDIT_SHARE, gen_length=GEN_LENGTH, seed: int = 0) -> dict:
    """What LLaDA 2.1's token editing reads at written positions: each held-out worked answer written out
    whole (its end-of-text padding too) with ``share`` of its answer tokens replaced by random ordinary tokens, one
    pass. ``repaired``: the share of replaced positions whose top prediction is the original token; ``kept``: the
    share of untouched answer positions whose top prediction is the token already there; ``confident_wrong``: the
    share of untouched positions predicted as another token with probability above 0.5 (what an edit threshold of
    0.5 would change wrongly). A model trained on masked positions only was never taught either."""
    import random

    tok = predictor.tokenizer
    specials = set(tok.all_special_ids)
    ordinary = [i for i in range(len(tok)) if i not in specials]
    rng = random.Random(seed)
    replaced = repaired = untouched = kept = confident_wrong = 0
    for item in items:
        prompt, answer, response = _layout(predictor, item, gen_length)
        count = max(1, round(share * len(answer)))
        where = rng.sample(range(len(answer)), count)
        noisy = list(response)
        for i in where:
            noisy[i] = _other(rng, ordinary, answer[i])
        logits, _ = predictor.forward(torch.tensor([prompt + noisy]))
        probs = logits[0, len(prompt):len(prompt) + len(answer)].float().softmax(-1)
        top = probs.argmax(-1)
        chosen = set(where)
        for i in range(len(answer)):
            if i in chosen:
                replaced += 1
                repaired += int(top[i]) == answer[i]
            else:
                untouched += 1
                kept += int(top[i]) == answer[i]
                confident_wrong += int(top[i]) != answer[i] and float(probs[i, top[i]]) > 0.5
    return {"repaired": round(repaired / max(replaced, 1), 4), "kept": round(kept / max(untouched, 1), 4),
            "confident_wrong": round(confident_wrong / max(untouched, 1), 4), "replaced": replaced,
            "untouched": untouched, "share": share, "items": len(items)}


def _other(rng, ordinary: list[int], token: int) -> int:
    """A random ordinary token other than ``token``."""
    while True:
        pick = ordinary[rng.randrange(len(ordinary))]
        if pick != token:
            return pick


def trained_wording(model) -> str:
    """The wording a model's worked answers were trained in (dico.embedded.wordings; "free" for logs from before
    the choice existed, and for models trained elsewhere)."""
    from dico.models import train_log
    return train_log(model).get("args", {}).get("wording", "free")


def measure(model=None, items=500, profile_items=200, decode_items=200, prompts=True) -> dict:
    """Every measure of the card for one model folder (None: the embedded model)."""
    from dico.models import load_model

    start = time.perf_counter()
    predictor = load_model(model)
    load_s = time.perf_counter() - start
    wording = trained_wording(model)
    report = {"model": predictor.name, "load_s": round(load_s, 2), "wording": wording}
    item = tasks.make_split("word")[0]
    ids = torch.tensor([predictor.encode_prompt(item.prompt) + [predictor.mask_id] * GEN_LENGTH])
    for _ in range(3):
        predictor.forward(ids)
    t = time.perf_counter()
    for _ in range(20):
        predictor.forward(ids)
    report[f"forward_ms_gen{GEN_LENGTH}"] = round((time.perf_counter() - t) / 20 * 1000, 2)
    ids = torch.tensor([predictor.encode_prompt(item.prompt) + [predictor.mask_id] * 256])
    t = time.perf_counter()
    for _ in range(10):
        predictor.forward(ids)
    report["forward_ms_gen256"] = round((time.perf_counter() - t) / 10 * 1000, 2)
    for family in tasks.FAMILIES:
        split = tasks.make_split(family, "test", items, wording=wording)
        report |= family_measures(predictor, family, split, profile_items, decode_items)
    if prompts:
        rows = issue_prompts(predictor)
        report["issue_prompts"] = {"right": sum(r["right"] for r in rows), "copied": sum(r["copied"] for r in rows),
                                   "runs": len(rows), "runs_detail": rows}
    report["items"] = {"teacher_forced": items, "probes": profile_items, "decoded": decode_items}
    return report


CURVE_KEYS = ["computed_result_accuracy_word", "name_object_accuracy_word", "name_object_heldout_accuracy_word",
              "name_object_first_mention_accuracy_word", "teacher_forced_word", "teacher_forced_list",
              "stutter_rate_word"]
# DiCo's accuracy on each family's held-out items, the pick and team families' progress included
DECODED_KEYS = [f"decoded_{family}_dico" for family in tasks.FAMILIES]


def curve(run: str, items: int, prompts: bool = False, decode_items: int = 0, only=None) -> list[dict]:
    """Measure every snapshot of a training run (RUN/snapshots/step-N, and RUN itself when its log says final)
    not yet in RUN/curve.json; write curve.json and curve.md (measures against training minutes)."""
    from pathlib import Path

    from dico.models import train_log

    run = Path(run)
    path = run / "curve.json"
    points = json.loads(path.read_text()) if path.exists() else []
    done = {p["folder"] for p in points}
    folders = sorted((run / "snapshots").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    if train_log(run).get("tag") == "final":
        folders.append(run)
    for folder in folders:
        if str(folder) in done or (only and folder.name not in only):
            continue
        log = train_log(folder)
        report = measure(str(folder), items, items, decode_items, prompts)
        points.append({"folder": str(folder), "step": log["step"], "minutes": log["minutes"],
                       "loss_ema": log["loss_ema"], "items": items, "decode_items": decode_items,
                       **{k: report.get(k) for k in CURVE_KEYS},
                       **{f"decoded_{f}_dico": report.get(f"decoded_{f}", {}).get("accuracy") for f in tasks.FAMILIES}})
        points.sort(key=lambda p: p["step"])
        path.write_text(json.dumps(points, indent=1))
        print(json.dumps(points[-1]), flush=True)
    keys = ["step", "minutes", "loss_ema"] + CURVE_KEYS + DECODED_KEYS
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(p.get(k)) for k in keys) + " |" for p in points]
    (run / "curve.md").write_text("\n".join(lines) + "\n")
    return points


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dico.embedded.card", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--profile-items", type=int, default=200,
                        help="items per family for the masked-alone measures and the confidence profile "
                             "(names and objects: this many seen and this many held-out word problems)")
    parser.add_argument("--decode-items", type=int, default=200,
                        help="items per family decoded with DiCo non-AR for accuracy and, on word and list, the "
                             "stutter rate (0: skip)")
    parser.add_argument("--no-prompts", action="store_true", help="skip decoding the issue-16 prompts")
    parser.add_argument("--curve", metavar="RUN", help="measure every unmeasured snapshot of a training run with "
                                                       "--items items for every one-pass measure and "
                                                       "--decode-items decoded items (the issue prompts skipped)")
    parser.add_argument("--snapshots", help="with --curve: only these folders, e.g. step-1583,bpe1")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--by-operation", action="store_true",
                        help="only the computed results of --items word problems by operation and number size")
    parser.add_argument("--editing", action="store_true",
                        help="only the editing probe (what a written position predicts, see ``editing``) on --items "
                             "held-out items of each number family")
    args = parser.parse_args(argv)
    if args.editing:
        from dico.models import load_model
        predictor = load_model(args.model, attention=False)
        report = {"model": args.model or predictor.name, "command": "python -m dico.embedded.card " + " ".join(
            argv if argv is not None else sys.argv[1:])}
        for family in tasks.NUMBER_FAMILIES:
            split = tasks.make_split(family, "test", args.items, wording=trained_wording(args.model))
            report[family] = editing(predictor, split, gen_length=gen_for(family))
        print(json.dumps(report, indent=1))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(report, fh, indent=1)
        return 0
    if args.by_operation:
        from dico.models import load_model
        table = computed_by_operation(load_model(args.model), tasks.make_split("word", "test", args.items,
                                                                               wording=trained_wording(args.model)))
        print(json.dumps(table, indent=1))
        return 0
    if args.curve:
        curve(args.curve, args.items, decode_items=args.decode_items,
              only=args.snapshots.split(",") if args.snapshots else None)
        return 0
    report = measure(args.model, args.items, args.profile_items, args.decode_items, not args.no_prompts)
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
