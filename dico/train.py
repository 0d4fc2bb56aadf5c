"""Train the embedded dLLM: a small BERT-style masked LM with the LLaDA / MDLM objective.

    python -m dico.train --out assets/dico-tiny --minutes 75

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
import math
import random
import sys
import time
from pathlib import Path

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<|eot|>"]
MAX_PROMPT_TOKENS = 64


def build_tokenizer(texts, max_number: int = 200):
    """A word-level tokenizer (Hugging Face format) over the task vocabulary and the numbers 0..max_number."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Whitespace()
    words = {str(n) for n in range(max_number + 1)}
    for text in texts:
        words.update(piece for piece, _ in pre.pre_tokenize_str(text))
    vocab = {token: i for i, token in enumerate(SPECIALS + sorted(words - set(SPECIALS)))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", eos_token="<|eot|>", clean_up_tokenization_spaces=True,
        model_max_length=384)


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


def make_batch(items, tokenizer, rng: random.Random, max_gen: int, long_share: float = 0.15):
    """Token ids, attention mask and the response mask of one batch, response padded with <|eot|>.

    Most batches pad the response only a little past the longest answer (the end-of-text tail is easy
    to learn and costs compute); a ``long_share`` of batches pads far, so every position up to
    ``max_gen`` is trained and any gen_length a user picks is in distribution.
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
    for row, (p, a) in enumerate(zip(prompts, answers)):
        seq = p + a + [tokenizer.eos_token_id] * (gen - len(a))
        ids[row, :len(seq)] = torch.tensor(seq)
        response[row, len(p):len(seq)] = True
    return ids, (ids != tokenizer.pad_token_id).long(), response


def occurrence_mask(ids, candidates, answer, share: float, generator=None):
    """For a ``share`` of rows, one random ``candidates`` token and every later occurrence of it in ``answer``.

    Random masking usually leaves some re-mention of a value visible ("13 - 9 = [M]. Taking away 1 leaves
    4 - 1 ..."), so a small model leans on reading it back rather than computing it, or on copying a name from
    the answer rather than the prompt; measured here: every masked number right when its re-mentions showed,
    0.24-0.40 confident and often wrong ("34 + 2 = 44") when they were masked too, which is the state
    confidence-ordered decoding reaches. Masking all later occurrences leaves only the prompt and the earlier
    working to read from. Any mask pattern trains the same conditionals p(masked | visible); this only gives
    more weight to the patterns decoding meets.
    """
    import torch

    b, l = ids.shape
    pick = torch.rand(b, l, generator=generator).masked_fill(~candidates, -1.0).argmax(dim=1)  # b: one candidate
    chosen = ids.gather(1, pick[:, None])                                                    # b, 1
    later = torch.arange(l)[None, :] >= pick[:, None]
    use = (torch.rand(b, 1, generator=generator) < share) & candidates.any(dim=1, keepdim=True)
    return (ids == chosen) & later & answer & use


def content_positions(ids, answer, response, attention, number, word):
    """Answer positions worth hiding with their later mentions: numbers, and words that also stand in the prompt
    (names, objects, operands' wording). ``number`` and ``word`` are per-vocabulary boolean tables."""
    prompt = ids.masked_fill(response | (attention == 0), -1)                                # b, l
    in_prompt = (ids[:, :, None] == prompt[:, None, :]).any(-1)                              # b, l
    return answer & (number[ids] | (word[ids] & in_prompt))


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dico.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder to write the model, tokenizer and train log")
    parser.add_argument("--minutes", type=float, default=75.0, help="time budget; the lr schedule follows it")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: time only)")
    # Small batches, many updates: at equal time, batches of 16 learned to copy numbers from the prompt within
    # 3,000 steps where batches of 48 had not after 2,300 (measured for the shipped model; see its card).
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max-positions", type=int, default=384)
    parser.add_argument("--position", choices=("relative_key", "relative_key_query", "absolute"),
                        default="relative_key", help="BERT position encoding")
    parser.add_argument("--max-gen", type=int, default=256, help="longest response region drawn in training")
    parser.add_argument("--long-share", type=float, default=0.15, help="share of batches padded up to --max-gen")
    parser.add_argument("--occurrence-share", type=float, default=0.5,
                        help="share of examples that also mask one number or prompt word of the answer and all "
                             "its later occurrences (teaches computing and copying from the prompt; 0: plain "
                             "LLaDA masking)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--checkpoint-every", type=int, default=500)
    parser.add_argument("--init-from", metavar="FOLDER", help="continue from a saved model and its tokenizer "
                                                              "(fresh optimizer, warm-up and schedule)")
    args = parser.parse_args(argv)

    import torch
    from tqdm import tqdm

    from dico import tasks

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if args.init_from:
        from transformers import AutoModelForMaskedLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(args.init_from)
        model = AutoModelForMaskedLM.from_pretrained(args.init_from)
    else:
        vocab_rng = random.Random(12345)
        sample = [tasks.make_item(f, vocab_rng) for f in tasks.FAMILIES for _ in range(20_000)]
        tokenizer = build_tokenizer([s.prompt + " " + s.answer for s in sample])
        model = build_model(len(tokenizer), args.hidden, args.layers, args.heads, args.max_positions, args.position)
    n_params = sum(p.numel() for p in model.parameters())
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    number = torch.tensor([token.isdigit() for token in vocab])
    word = torch.tensor([token.isalpha() for token in vocab])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    stream = tasks.train_stream(args.seed)
    budget = args.minutes * 60
    generator = torch.Generator().manual_seed(args.seed)

    previous = None
    if args.init_from and (Path(args.init_from) / "train_log.json").exists():
        previous = json.loads((Path(args.init_from) / "train_log.json").read_text())

    def save(tag: str, step: int, loss: float, elapsed: float):
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        log = {"step": step, "loss_ema": round(loss, 4), "minutes": round(elapsed / 60, 2), "params": n_params,
               "command": "python -m dico.train " + " ".join(argv if argv is not None else sys.argv[1:]),
               "args": vars(args), "tag": tag, "previous_stage": previous}
        (out / "train_log.json").write_text(json.dumps(log, indent=2))

    start, step, ema = time.time(), 0, None
    bar = tqdm(total=int(budget), unit="s", desc="training", dynamic_ncols=True, mininterval=5)
    model.train()
    while True:
        elapsed = time.time() - start
        if elapsed >= budget or (args.max_steps and step >= args.max_steps):
            break
        progress = elapsed / budget if not args.max_steps else step / args.max_steps
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        for group in optimizer.param_groups:
            group["lr"] = max(lr, args.lr * 0.02)
        ids, attention, response = make_batch([next(stream) for _ in range(args.batch_size)], tokenizer, rng,
                                              min(args.max_gen, args.max_positions - MAX_PROMPT_TOKENS),
                                              args.long_share)
        extra = None
        if args.occurrence_share > 0:
            answer = response & (ids != tokenizer.eos_token_id)
            candidates = content_positions(ids, answer, response, attention, number, word)
            extra = occurrence_mask(ids, candidates, answer, args.occurrence_share, generator)
        loss = diffusion_loss(model, ids, attention, response, tokenizer.mask_token_id, generator, extra=extra)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        bar.n = int(time.time() - start)
        bar.set_postfix(step=step, loss=f"{ema:.3f}", lr=f"{lr:.2e}", refresh=False)
        bar.update(0)
        if step % args.checkpoint_every == 0:
            save("checkpoint", step, ema, time.time() - start)
    bar.close()
    save("final", step, ema or float("nan"), time.time() - start)
    print(f"saved {out} after {step} steps, {(time.time() - start) / 60:.1f} min, loss {ema:.3f}, {n_params:,} params")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
