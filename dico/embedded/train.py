"""Train the embedded dLLM: a small BERT-style masked LM with the LLaDA / MDLM objective.

    python -m dico.embedded.train --out assets/dico-tiny --minutes 75

Objective (LLaDA eq. 3): draw t ~ U(eps, 1) per example, mask every response token (answer and its
end-of-text padding) with probability t, never the prompt; cross-entropy on the masked tokens
weighted 1/t, normalised by the response length. Half the examples (``--occurrence-share``) also mask
one number or prompt word of the answer with all its later occurrences, so that results are computed
and names copied from the prompt rather than read back from a later mention (see ``occurrence_mask``).
The architecture is transformers' own ``BertForMaskedLM``, so the result loads with
``AutoModelForMaskedLM.from_pretrained`` offline, like any hub model, and supports
``attn_implementation="eager"`` for attention maps.

Layout of a sequence (training and decoding alike): ``[CLS] prompt [SEP] response <|eot|>...``,
the response region padded with end-of-text to a length drawn per batch, so that any
gen_length the user picks is in distribution.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from dico.embedded.tokenizer import SPECIALS, build_tokenizer, entity_spans, token_tables
from dico.embedded.wordings import WORDINGS

MAX_PROMPT_TOKENS = 96


def build_model(vocab_size: int, hidden: int, layers: int, heads: int, max_positions: int,
                position: str = "relative_key"):
    """BERT with relative position scores by default: "the number two to my left" is then one rule for
    every position, where learned absolute positions must learn it again at each offset of the answer
    (a measured failure here: after 2,000 steps the absolute model still copied neighbours, not numbers)."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden,
                        max_position_embeddings=max_positions, type_vocab_size=1, pad_token_id=0,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        position_embedding_type=position)
    return BertForMaskedLM(config)


def make_batch(items, tokenizer, rng: random.Random, max_gen: int, long_share: float = 0.15,
               occurrence_share: float = 0.0, number=None, tail_share: float = 0.0):
    """Token ids, attention mask, response mask and the extra (occurrence or tail) mask of one batch.

    The response is padded with <|eot|>: most batches only a little past the longest answer (the end-of-text tail
    is easy to learn and costs compute); a ``long_share`` of batches pads far, so every position up to ``max_gen``
    is trained and any gen_length a user picks is in distribution. ``tail_share`` of the rows mask the whole answer
    and the first few end-of-text tokens after it (see ``tail_length``); of the others, ``occurrence_share``
    also mask one number or one name/object mention with all its later mentions (see ``occurrence_positions``).
    """
    import torch

    prompts = [tokenizer(item.prompt)["input_ids"][:MAX_PROMPT_TOKENS] for item in items]
    answers = [tokenizer(item.answer, add_special_tokens=False)["input_ids"] for item in items]
    longest = max(len(a) for a in answers) + 1
    if rng.random() >= long_share:
        gen = longest + rng.randint(0, 16)
    else:
        gen = rng.randint(longest, max(longest, max_gen))
    width = max(len(p) for p in prompts) + gen
    ids = torch.full((len(items), width), tokenizer.pad_token_id, dtype=torch.long)
    response = torch.zeros_like(ids, dtype=torch.bool)
    extra = torch.zeros_like(ids, dtype=torch.bool)
    for row, (item, p, a) in enumerate(zip(items, prompts, answers)):
        seq = p + a + [tokenizer.eos_token_id] * (gen - len(a))
        ids[row, :len(seq)] = torch.tensor(seq)
        response[row, len(p):len(seq)] = True
        if tail_share > 0 and rng.random() < tail_share:
            extra[row, len(p):len(p) + tail_length(len(a), gen, rng)] = True
        elif occurrence_share > 0 and rng.random() < occurrence_share:
            spans = entity_spans(tokenizer, item.answer, item.entities) if item.entities else []
            for i in occurrence_positions(a, spans, number, rng):
                extra[row, len(p) + i] = True
    return ids, (ids != tokenizer.pad_token_id).long(), response, extra


def tail_length(answer_length: int, gen: int, rng: random.Random, reach: int = 12) -> int:
    """How many response positions a tail row masks: the whole answer and 0 to ``reach`` end-of-text tokens after it.

    Vanilla non-AR commits end-of-text from the far right inward before any word of the answer, and stops where
    the model first doubts that a position is end-of-text: that decides how long the answer may be. Random
    masking almost never shows an end-of-text tail with the whole answer hidden, so the model had not learned
    where an answer of this prompt must end (measured on the step-15,946 model: 33% of word problems right non-AR,
    most of the misses one or two steps short). A tail row is that state: the model must tell from the prompt
    alone where the answer ends, and fill an answer of that length."""
    return answer_length + rng.randint(0, min(reach, gen - answer_length))


def occurrence_positions(answer: list[int], spans, number, rng: random.Random) -> list[int]:
    """One number or one name/object mention of ``answer``, with every later mention of it (answer indices).

    Random masking usually leaves some re-mention of a value visible ("13 - 9 = [M]. Taking away 1 leaves
    4 - 1 ..."), so a small model leans on reading it back rather than computing it, or on copying a name from
    the answer rather than the prompt (measured for the stage-4 model: every number right when its re-mentions
    showed, often wrong when they were masked too, which is the state confidence-ordered decoding reaches).
    Masking all later mentions leaves only the prompt and the earlier working to read from. Names and objects
    (``spans``: per entity, its mentions' token indices) are drawn half the time when the answer has any: copying
    them is what the earlier model failed at. Any mask pattern trains the same conditionals p(masked | visible);
    this gives more weight to the patterns decoding meets."""
    mentions = [(e, k) for e, ms in enumerate(spans) for k in range(len(ms))]
    numbers = [i for i, t in enumerate(answer) if number is not None and bool(number[t])]
    if mentions and (not numbers or rng.random() < 0.5):
        e, k = mentions[rng.randrange(len(mentions))]
        return [i for mention in spans[e][k:] for i in mention]
    if not numbers:
        return []
    start = numbers[rng.randrange(len(numbers))]
    return [i for i in range(start, len(answer)) if answer[i] == answer[start]]


def warm_start(model, tokenizer, source: str) -> int:
    """Copy a trained model's layers into ``model`` and its embedding rows for tokens both vocabularies share
    (" 17" <- "17", " apples" <- "apples", "." <- "."): the earlier model's arithmetic and answer format carry
    over; the new tokens start fresh. Returns the number of rows copied."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    old = AutoModelForMaskedLM.from_pretrained(source)
    old_tok = AutoTokenizer.from_pretrained(source)
    state = {k: v for k, v in old.state_dict().items() if "word_embeddings" not in k and "decoder" not in k
             and k != "cls.predictions.bias"}
    missing = model.load_state_dict(state, strict=False)
    old_vocab = old_tok.get_vocab()
    old_emb = old.get_input_embeddings().weight.data
    old_bias = old.cls.predictions.bias.data
    emb = model.get_input_embeddings().weight.data
    bias = model.cls.predictions.bias.data
    bias.fill_(float(old_bias.mean()))
    copied = 0
    for token, new_id in tokenizer.get_vocab().items():
        text = token if token in SPECIALS else tokenizer.convert_tokens_to_string([token]).strip()
        old_id = old_vocab.get(text)
        if old_id is not None and old_id != old_tok.unk_token_id:
            emb[new_id] = old_emb[old_id]
            bias[new_id] = old_bias[old_id]
            copied += 1
    del missing
    return copied


def diffusion_loss(model, ids, attention, response, mask_id: int, generator=None, *, extra=None):
    """LLaDA's masked-diffusion loss: mask with prob t ~ U(eps, 1), CE on masked tokens weighted 1/t.

    ``extra`` (b, l bool) adds positions to mask beyond the random ones (see occurrence_mask); those count with
    weight 1, not 1/t: a row drawn with t = 0.001 would otherwise weigh them a thousandfold (measured: that
    made the first version of this run worse at arithmetic, not better).
    """
    import torch
    import torch.nn.functional as F

    b = ids.shape[0]
    t = torch.rand(b, 1, generator=generator) * (1 - 1e-3) + 1e-3                 # b, 1
    random_masked = (torch.rand(ids.shape, generator=generator) < t) & response   # b, l
    masked = random_masked | extra if extra is not None else random_masked
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    logits = model(input_ids=noisy, attention_mask=attention).logits               # b, l, v
    ce = F.cross_entropy(logits[masked], ids[masked], reduction="none")
    weights = torch.where(random_masked, 1.0 / t, torch.ones_like(t))[masked]
    return (ce * weights).sum() / response.sum().clamp(min=1)


def export(run: Path, out: Path) -> int:
    """Ship a run in float16: half the disk, and the loader upcasts it to float32 on a CPU (bf16 on CUDA)."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    AutoModelForMaskedLM.from_pretrained(run, dtype=torch.float32).half().save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(run).save_pretrained(out)
    (out / "train_log.json").write_text((run / "train_log.json").read_text())
    print(f"exported {run} to {out} in float16", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dico.embedded.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder to write the model, tokenizer, train log and "
                                                     "trainer_state.pt (what --resume reads)")
    parser.add_argument("--minutes", type=float, default=75.0,
                        help="total time budget, counted across resumed runs; the lr schedule follows it")
    parser.add_argument("--max-steps", type=int, default=0, help="stop at this step count (0: time only)")
    # Small batches, many updates: at equal time, batches of 16 learned to copy numbers from the prompt within
    # 3,000 steps where batches of 48 had not after 2,300 (measured for the stage-3 model; see its card).
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--decay-share", type=float, default=0.2,
                        help="lr is constant after warm-up, then falls linearly to 10%% over this last share of "
                             "--minutes (warmup-stable-decay: a resumed run with a longer budget continues "
                             "from the stable phase)")
    parser.add_argument("--vocab-size", type=int, default=1400, help="BPE size before the number tokens are added")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max-positions", type=int, default=384)
    parser.add_argument("--position", choices=("relative_key", "relative_key_query", "absolute"),
                        default="relative_key", help="BERT position encoding")
    parser.add_argument("--max-gen", type=int, default=256, help="longest response region drawn in training")
    parser.add_argument("--long-share", type=float, default=0.15, help="share of batches padded up to --max-gen")
    parser.add_argument("--wording", choices=WORDINGS, default="free",
                        help="the worked answers' wording (dico.embedded.wordings): 'free' varies their length, 'equal' "
                             "does not, 'shifted' does not but moves the positions inside the answer, 'usual' "
                             "moves them less often, 'plain' is 'usual' with lists that mostly say '='")
    parser.add_argument("--tail-share", type=float, default=0.0,
                        help="share of examples that mask the whole answer and the first end-of-text tokens after "
                             "it, the rest of the tail visible: the state Vanilla non-AR reaches (see tail_length)")
    parser.add_argument("--occurrence-share", type=float, default=0.5,
                        help="share of examples that also mask one number or name/object mention of the answer "
                             "and all its later mentions (teaches computing and copying from the prompt; 0: "
                             "plain LLaDA masking)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--checkpoint-every", type=int, default=0, help="also save every this many steps")
    parser.add_argument("--checkpoint-minutes", type=float, default=10.0,
                        help="save model, tokenizer and trainer state every this many minutes, and keep a copy "
                             "of the model under OUT/snapshots/step-N for measuring the curve")
    parser.add_argument("--log-every", type=int, default=100)
    start_from = parser.add_mutually_exclusive_group()
    start_from.add_argument("--init-from", metavar="FOLDER",
                            help="continue from a saved model and its tokenizer (fresh optimizer and schedule)")
    start_from.add_argument("--warm-start", metavar="FOLDER",
                            help="new tokenizer; copy layers and shared-token embeddings from this model")
    start_from.add_argument("--resume", action="store_true",
                            help="continue OUT from its trainer_state.pt: model, optimizer, step count and elapsed "
                                 "time (the data stream is reseeded with the step count)")
    start_from.add_argument("--continue-from", metavar="FOLDER",
                            help="continue a model that has no optimizer state (the float16 copy in assets/): its "
                                 "step count, minutes and commands (train_log.json) carry on, and a fresh optimizer "
                                 "warms up again over --warmup steps")
    start_from.add_argument("--export-from", metavar="RUN",
                            help="write RUN's weights to OUT in float16 with its tokenizer and train_log.json (what "
                                 "ships in assets/), then stop")
    args = parser.parse_args(argv)
    if args.export_from:
        return export(Path(args.export_from), Path(args.out))

    import torch

    from dico.embedded import tasks
    from dico.models import train_log

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m dico.embedded.train " + " ".join(argv if argv is not None else sys.argv[1:])
    state = None
    if args.resume:
        if not (out / "trainer_state.pt").exists():
            parser.error(f"--resume: {out / 'trainer_state.pt'} does not exist")
        from transformers import AutoModelForMaskedLM, AutoTokenizer
        state = torch.load(out / "trainer_state.pt", weights_only=False)
        tokenizer = AutoTokenizer.from_pretrained(out)
        model = AutoModelForMaskedLM.from_pretrained(out, dtype=torch.float32)
    elif args.init_from or args.continue_from:
        from transformers import AutoModelForMaskedLM, AutoTokenizer
        source = args.init_from or args.continue_from
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForMaskedLM.from_pretrained(source, dtype=torch.float32)
    else:
        tokenizer = build_tokenizer(args.vocab_size)
        model = build_model(len(tokenizer), args.hidden, args.layers, args.heads, args.max_positions, args.position)
        if args.warm_start:
            copied = warm_start(model, tokenizer, args.warm_start)
            print(f"warm start from {args.warm_start}: {copied} of {len(tokenizer)} embedding rows copied", flush=True)
    n_params = sum(p.numel() for p in model.parameters())
    number, _ = token_tables(tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    step, elapsed_before, ema, history = 0, 0.0, None, []
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed_before, ema, history = state["step"], state["elapsed_s"], state["loss_ema"], state["history"]
    elif args.continue_from:
        log = train_log(args.continue_from)
        if not log:
            parser.error(f"--continue-from: {args.continue_from} has no train_log.json (--init-from starts anew)")
        step, elapsed_before, ema, history = log["step"], log["minutes"] * 60, log["loss_ema"], log["commands"]
    # The step this optimizer began at: its lr warms up from there (a resumed optimizer keeps its own).
    warm_from = state.get("warm_from", 0) if state is not None else step
    history.append({"command": command, "from_step": step})
    torch.manual_seed(args.seed + step)
    rng = random.Random(args.seed * 1_000_003 + step)
    stream = tasks.train_stream(args.seed * 1_000_003 + step, wording=args.wording)
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    budget = args.minutes * 60
    previous = (train_log(args.init_from) or None) if args.init_from else None

    def save(tag: str, elapsed: float):
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        log = {"step": step, "loss_ema": round(ema, 4) if ema is not None else None,
               "minutes": round(elapsed / 60, 2), "params": n_params, "command": command, "commands": history,
               "args": vars(args), "tag": tag, "previous_stage": previous}
        (out / "train_log.json").write_text(json.dumps(log, indent=2))
        torch.save({"optimizer": optimizer.state_dict(), "step": step, "elapsed_s": elapsed, "loss_ema": ema,
                    "history": history, "warm_from": warm_from}, out / "trainer_state.pt")
        if tag == "checkpoint":
            snap = out / "snapshots" / f"step-{step}"
            model.save_pretrained(snap, safe_serialization=True)
            tokenizer.save_pretrained(snap)
            (snap / "train_log.json").write_text(json.dumps(log, indent=2))
        print(f"saved {tag} at step {step}, {elapsed / 60:.1f} min", flush=True)

    max_gen = min(args.max_gen, args.max_positions - MAX_PROMPT_TOKENS)
    print(f"{n_params:,} params, vocabulary {len(tokenizer)}, starting at step {step}, "
          f"{elapsed_before / 60:.1f} of {args.minutes:.0f} min done", flush=True)
    session_start, last_save, window = time.time(), time.time(), time.time()
    model.train()
    while True:
        elapsed = elapsed_before + time.time() - session_start
        if elapsed >= budget or (args.max_steps and step >= args.max_steps):
            break
        decay_from = budget * (1 - args.decay_share)
        decay = 1.0 if elapsed < decay_from else 1 - 0.9 * (elapsed - decay_from) / max(budget - decay_from, 1e-9)
        lr = args.lr * min(1.0, (step - warm_from + 1) / args.warmup) * decay
        for group in optimizer.param_groups:
            group["lr"] = lr
        ids, attention, response, extra = make_batch([next(stream) for _ in range(args.batch_size)], tokenizer, rng,
                                                     max_gen, args.long_share, args.occurrence_share, number,
                                                     args.tail_share)
        loss = diffusion_loss(model, ids, attention, response, tokenizer.mask_token_id, generator,
                              extra=extra if args.occurrence_share > 0 or args.tail_share > 0 else None)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % args.log_every == 0:
            now = time.time()
            print(f"step {step} min {(elapsed_before + now - session_start) / 60:.1f} loss {ema:.4f} lr {lr:.2e} "
                  f"steps/s {args.log_every / (now - window):.2f}", flush=True)
            window = now
        if (args.checkpoint_every and step % args.checkpoint_every == 0) or \
                time.time() - last_save >= args.checkpoint_minutes * 60:
            save("checkpoint", elapsed_before + time.time() - session_start)
            last_save = time.time()
    save("final", elapsed_before + time.time() - session_start)
    print(f"saved {out} after {step} steps, {(elapsed_before + time.time() - session_start) / 60:.1f} min, "
          f"loss {ema if ema is not None else float('nan'):.3f}, {n_params:,} params", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
