"""Train the embedded dLLM: a small BERT-style masked LM with the LLaDA / MDLM objective.

    python -m dico.embedded.train --out assets/dico-tiny --minutes 75

The objective, and what a batch masks, is ``dico.embedded.objective``; this is the command: where a run starts,
the schedule, the loop and its checkpoints. The architecture is transformers' own ``BertForMaskedLM``, so the
result loads with ``AutoModelForMaskedLM.from_pretrained`` offline, like any hub model, and supports
``attn_implementation="eager"`` for attention maps.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dico.embedded.objective import MAX_PROMPT_TOKENS, Editing, diffusion_loss, make_batch
from dico.embedded.tokenizer import SPECIALS, build_tokenizer, token_tables
from dico.embedded.wordings import WORDINGS


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


def export(run: Path, out: Path) -> int:
    """Ship a run in float16: half the disk, and the loader upcasts it to float32 on a CPU (bf16 on CUDA)."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    AutoModelForMaskedLM.from_pretrained(run, dtype=torch.float32).half().save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(run).save_pretrained(out)
    (out / "train_log.json").write_text((run / "train_log.json").read_text())
    print(f"exported {run} to {out} in float16", flush=True)
    return 0


def parse_mix(text: str) -> tuple[tuple[str, int], ...]:
    """'word=2,list=1' -> (("word", 2), ("list", 1)): known families, positive whole weights, each named once."""
    from dico.embedded.tasks import FAMILIES

    mix = []
    for part in text.split(","):
        family, _, weight = part.strip().partition("=")
        if family not in FAMILIES:
            raise argparse.ArgumentTypeError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
        if not weight.isdigit() or int(weight) < 1:
            raise argparse.ArgumentTypeError(f"{family}: the weight must be a whole number >= 1, not {weight!r}")
        if family in dict(mix):
            raise argparse.ArgumentTypeError(f"{family} is named twice")
        mix.append((family, int(weight)))
    return tuple(mix)


def build_parser() -> argparse.ArgumentParser:
    """The command line: the model's shape, the data's mix, the schedule, and where a run starts from."""
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
                        help="the worked answers' wording (dico.embedded.wordings): 'free' varies their length, "
                             "'equal' does not, 'shifted' does not but moves the positions inside the answer, 'usual' "
                             "moves them less often, 'plain' is 'usual' with lists that mostly say '='")
    parser.add_argument("--tail-share", type=float, default=0.0,
                        help="share of examples that mask the whole answer and the first end-of-text tokens after "
                             "it, the rest of the tail visible: the state Vanilla non-AR reaches (see tail_length)")
    parser.add_argument("--prefix-share", type=float, default=0.0,
                        help="share of examples that mask everything after a random point of the response: the "
                             "state semi-AR decoding reaches, which random masking rarely shows (0: none, as the "
                             "chain-1 stage was trained; see assets/dico-tiny-long)")
    parser.add_argument("--occurrence-share", type=float, default=0.5,
                        help="share of examples that also mask one number or name/object mention of the answer "
                             "and all its later mentions (teaches computing and copying from the prompt; 0: "
                             "plain LLaDA masking)")
    parser.add_argument("--mix", type=parse_mix, default=None, metavar="FAMILY=WEIGHT,...",
                        help="the families' shares in training, e.g. word=2,list=1,pick=3,team=3 (default: "
                             "dico.embedded.tasks.TRAIN_MIX)")
    parser.add_argument("--edit-share", type=float, default=0.0,
                        help="share of rows that also train token-to-token editing (LLaDA 2.1): written response "
                             "tokens replaced by random ones, the loss on every written position of the row "
                             "(dico.embedded.objective.Editing; 0: masked positions only, the plain masked-diffusion "
                             "loss)")
    parser.add_argument("--edit-rate", type=float, default=0.2,
                        help="an editing row replaces each written token with probability U(0, this)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="auto",
                        help="cpu, cuda, cuda:N or auto (cuda when there is one); on cuda the forward runs in "
                             "bfloat16 autocast and the weights stay float32")
    parser.add_argument("--workers", type=int, default=0,
                        help="processes that draw and tokenize batches beside the training loop (0: in the loop; a "
                             "GPU step is faster than one core draws a batch of 64)")
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
    return parser


@dataclass
class Run:
    """One session of a run: its model and optimizer, and where the run stands across sessions (``save`` writes it)."""
    args: argparse.Namespace
    out: Path
    command: str
    model: Any
    tokenizer: Any
    optimizer: Any
    step: int = 0
    elapsed_before: float = 0.0      # seconds trained in earlier sessions
    ema: float | None = None         # the loss, smoothed
    history: list = field(default_factory=list)     # every command of the run, with the step it began at
    warm_from: int = 0               # the step this optimizer began at: its lr warms up from there
    previous: dict | None = None     # an --init-from source's train_log.json
    params: int = 0


def starting_model(args, parser, out: Path):
    """The model and tokenizer a run starts from (resumed, saved, or new), and the trainer state if resumed."""
    import torch

    state = None
    if args.resume:
        if not (out / "trainer_state.pt").exists():
            parser.error(f"--resume: {out / 'trainer_state.pt'} does not exist")
        from transformers import AutoModelForMaskedLM, AutoTokenizer
        state = torch.load(out / "trainer_state.pt", weights_only=False, map_location="cpu")
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
    return model, tokenizer, state


def start_run(args, parser, out: Path, command: str) -> Run:
    """The run with a new or resumed optimizer; step, minutes and commands carry on from the trainer state
    (--resume) or the source's train_log.json (--continue-from)."""
    import torch

    from dico.models import train_log

    model, tokenizer, state = starting_model(args, parser, out)
    model.to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    run = Run(args, out, command, model, tokenizer, optimizer, params=sum(p.numel() for p in model.parameters()))
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        run.step, run.elapsed_before, run.ema, run.history = (state["step"], state["elapsed_s"], state["loss_ema"],
                                                              state["history"])
    elif args.continue_from:
        log = train_log(args.continue_from)
        if not log:
            parser.error(f"--continue-from: {args.continue_from} has no train_log.json (--init-from starts anew)")
        run.step, run.elapsed_before, run.ema, run.history = (log["step"], log["minutes"] * 60, log["loss_ema"],
                                                              log["commands"])
    # A resumed optimizer keeps the step it warmed up from; a new one warms up from here.
    run.warm_from = state.get("warm_from", 0) if state is not None else run.step
    run.history.append({"command": command, "from_step": run.step})
    run.previous = (train_log(args.init_from) or None) if args.init_from else None
    return run


def save(run: Run, tag: str, elapsed: float) -> None:
    """Model, tokenizer, train_log.json, trainer_state.pt; a checkpoint's model also in OUT/snapshots/step-N."""
    import torch

    out, step, ema = run.out, run.step, run.ema
    run.model.save_pretrained(out, safe_serialization=True)
    run.tokenizer.save_pretrained(out)
    log = {"step": step, "loss_ema": round(ema, 4) if ema is not None else None,
           "minutes": round(elapsed / 60, 2), "params": run.params, "command": run.command, "commands": run.history,
           "args": vars(run.args), "tag": tag, "previous_stage": run.previous}
    (out / "train_log.json").write_text(json.dumps(log, indent=2))
    torch.save({"optimizer": run.optimizer.state_dict(), "step": step, "elapsed_s": elapsed, "loss_ema": ema,
                "history": run.history, "warm_from": run.warm_from}, out / "trainer_state.pt")
    if tag == "checkpoint":
        snap = out / "snapshots" / f"step-{step}"
        run.model.save_pretrained(snap, safe_serialization=True)
        run.tokenizer.save_pretrained(snap)
        (snap / "train_log.json").write_text(json.dumps(log, indent=2))
    print(f"saved {tag} at step {step}, {elapsed / 60:.1f} min", flush=True)


def learning_rate(args, step: int, warm_from: int, elapsed: float) -> float:
    """Warm-up over --warmup steps from ``warm_from``, constant, then down to 10% over --decay-share of --minutes."""
    budget = args.minutes * 60
    decay_from = budget * (1 - args.decay_share)
    decay = 1.0 if elapsed < decay_from else 1 - 0.9 * (elapsed - decay_from) / max(budget - decay_from, 1e-9)
    return args.lr * min(1.0, (step - warm_from + 1) / args.warmup) * decay


class Batches:
    """The training batches of one session: an endless seeded stream, drawn in the loop or by ``workers`` processes
    (each its own seed), so a resumed run draws fresh data (the seed follows the step count)."""

    def __init__(self, args, tokenizer, step: int):
        self.args, self.tokenizer, self.seed = args, tokenizer, args.seed * 1_000_003 + step

    def __iter__(self):
        import torch

        from dico.embedded import tasks

        info = torch.utils.data.get_worker_info()
        seed = self.seed + (0 if info is None else 7_919 * (info.id + 1))
        args, tokenizer = self.args, self.tokenizer
        rng = random.Random(seed)
        stream = tasks.train_stream(seed, wording=args.wording, mix=args.mix or tasks.TRAIN_MIX)
        number, _ = token_tables(tokenizer)
        max_gen = min(args.max_gen, args.max_positions - MAX_PROMPT_TOKENS)
        while True:
            yield make_batch([next(stream) for _ in range(args.batch_size)], tokenizer, rng, max_gen, args.long_share,
                             args.occurrence_share, number, args.tail_share, args.prefix_share)

    def loader(self):
        import torch

        if not self.args.workers:
            return iter(self)
        # DataLoader takes an IterableDataset; this class stays importable without torch (the CLI's --help).
        dataset = type("BatchDataset", (torch.utils.data.IterableDataset,), {"__iter__": lambda _: iter(self)})()
        return iter(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=self.args.workers,
                                                prefetch_factor=4, persistent_workers=True))


def editing(args, tokenizer) -> Editing | None:
    """The token-to-token objective of --edit-share, replacing with any ordinary token or end-of-text."""
    if args.edit_share <= 0:
        return None
    specials = set(tokenizer.all_special_ids) - {tokenizer.eos_token_id}
    return Editing(args.edit_share, args.edit_rate, [i for i in range(len(tokenizer)) if i not in specials])


def train(run: Run) -> None:
    """Batches from the stream (seeded with the step count) until --minutes or --max-steps, saving on the way."""
    import torch

    args, model, optimizer, tokenizer = run.args, run.model, run.optimizer, run.tokenizer
    torch.manual_seed(args.seed + run.step)
    batches = Batches(args, tokenizer, run.step).loader()
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + run.step)
    edit = editing(args, tokenizer)
    masks_more = max(args.occurrence_share, args.tail_share, args.prefix_share) > 0
    device = torch.device(args.device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    budget = args.minutes * 60
    print(f"{run.params:,} params, vocabulary {len(tokenizer)}, starting at step {run.step}, "
          f"{run.elapsed_before / 60:.1f} of {args.minutes:.0f} min done, on {device}", flush=True)
    session_start, last_save, window = time.time(), time.time(), time.time()
    model.train()
    while True:
        elapsed = run.elapsed_before + time.time() - session_start
        if elapsed >= budget or (args.max_steps and run.step >= args.max_steps):
            break
        lr = learning_rate(args, run.step, run.warm_from, elapsed)
        for group in optimizer.param_groups:
            group["lr"] = lr
        ids, attention, response, extra = (t.to(device, non_blocking=True) for t in next(batches))
        with autocast:
            loss = diffusion_loss(model, ids, attention, response, tokenizer.mask_token_id, generator,
                                  extra=extra if masks_more else None, edit=edit)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        run.step += 1
        if run.step % 10 == 0 or run.ema is None:       # .item() waits for the device: not every step
            run.ema = loss.item() if run.ema is None else 0.82 * run.ema + 0.18 * loss.item()
        if run.step % args.log_every == 0:
            now = time.time()
            print(f"step {run.step} min {(run.elapsed_before + now - session_start) / 60:.1f} loss {run.ema:.4f} "
                  f"lr {lr:.2e} steps/s {args.log_every / (now - window):.2f}", flush=True)
            window = now
        if (args.checkpoint_every and run.step % args.checkpoint_every == 0) or \
                time.time() - last_save >= args.checkpoint_minutes * 60:
            save(run, "checkpoint", run.elapsed_before + time.time() - session_start)
            last_save = time.time()
    save(run, "final", run.elapsed_before + time.time() - session_start)
    print(f"saved {run.out} after {run.step} steps, {(run.elapsed_before + time.time() - session_start) / 60:.1f} "
          f"min, loss {run.ema if run.ema is not None else float('nan'):.3f}, {run.params:,} params", flush=True)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.export_from:
        return export(Path(args.export_from), Path(args.out))

    import torch

    torch.set_num_threads(args.threads)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m dico.embedded.train " + " ".join(argv if argv is not None else sys.argv[1:])
    train(start_run(args, parser, out, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
