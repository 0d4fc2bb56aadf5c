"""Command line: ``python -m dico generate --prompt TEXT --method dico ...`` (``--help`` for every option)."""
from __future__ import annotations

import argparse
import os
import sys

from dico.rules import METHODS, DiCoSettings

_DICO_HELP = {
    "alpha": "trajectory guidance slope: w_min = min(1, beta + alpha * unmasked fraction)",
    "beta": "trajectory guidance floor (see alpha)",
    "tau1": "Divide: a seed or cluster member needs guided confidence >= tau1",
    "tau2": "cluster confidence density that ends Divide; Conquer grows clusters above it and stops below it",
    "tau3": "Finalize: commit every masked position whose top1-top2 logit margin exceeds tau3",
    "r_gate": "after Conquer, go to Finalize once this fraction of the window is decoded",
    "seeds": "N, the most seeds per Divide step (default 8 non-AR, 4 semi-AR)",
    "t_max": "most Divide steps per round",
    "gap": "M, how many failing positions in a row a growing cluster may step over",
    "shortcut": "Conquer and Finalize commit any position above this confidence at once",
    "conquer_threshold": "Conquer's fixed threshold when --conquer threshold",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):            # argparse's own errors: same exit code 2, one clear line
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m dico", description="Decode with a diffusion LM (Vanilla, Fast-dLLM, DiCo) "
                                                        "and record every step.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = sub.add_parser("generate", help="decode one prompt and print the answer",
                         description="Decode one prompt. The last line printed is "
                                     "'nfe=<int> tokens_per_s=<float> wall_s=<float>'.")
    gen.add_argument("--prompt", required=True, help="the question or instruction")
    gen.add_argument("--method", choices=METHODS, default="dico",
                     help="vanilla: one token a step; fast: Fast-dLLM threshold; fast-factor: Fast-dLLM factor; "
                          "dico: divide, conquer, finalize (default)")
    gen.add_argument("--mode", choices=("non-ar", "semi-ar"), default="non-ar",
                     help="non-ar: the whole answer is one window; semi-ar: blocks of --block-length left to right")
    gen.add_argument("--gen-length", type=int, default=96, help="number of answer positions (default 96)")
    gen.add_argument("--block-length", type=int, default=32, help="block size in semi-ar mode (default 32)")
    gen.add_argument("--model", default=None,
                     help="hub id or local folder (default: the embedded model assets/dico-tiny)")
    gen.add_argument("--trust-remote-code", action="store_true",
                     help="allow a model's own code for ids outside the known LLaDA/Dream list")
    gen.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    gen.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: bf16 on cuda, fp32 on cpu)")
    gen.add_argument("--json", metavar="PATH", help="write the full step trace as JSON here")
    gen.add_argument("--capture-attention", action="store_true",
                     help="record stage-averaged attention maps in the trace (plain masked LMs only)")
    gen.add_argument("--threshold", type=float, help="fast: commit positions above this confidence (default 0.95)")
    gen.add_argument("--factor", type=float, help="fast-factor: f in (k+1)(1-c_k) < f (default 1)")
    dico = gen.add_argument_group("DiCo settings (paper defaults unless given)")
    for name, text in _DICO_HELP.items():
        kind = int if name in ("seeds", "t_max", "gap") else float
        dico.add_argument("--" + name.replace("_", "-"), type=kind, help=text)
    dico.add_argument("--no-guidance", action="store_true", help="turn trajectory guidance off")
    dico.add_argument("--guidance-origin", choices=("first-masked", "window-start"),
                      help="measure guidance from the first masked position (code) or the window start (paper)")
    dico.add_argument("--no-logit-margin", action="store_true", help="Finalize by top-1 confidence (and the --shortcut) instead of the logit margin")
    dico.add_argument("--conquer", choices=("factor", "threshold"), help="Conquer's rule (default factor)")
    return parser


def _settings(args) -> dict:
    if args.method == "fast":
        return {} if args.threshold is None else {"threshold": args.threshold}
    if args.method == "fast-factor":
        return {} if args.factor is None else {"factor": args.factor}
    if args.method != "dico":
        return {}
    out = {name: getattr(args, name) for name in DiCoSettings.__dataclass_fields__
           if getattr(args, name, None) is not None}
    if args.no_guidance:
        out["guidance"] = False
    if args.no_logit_margin:
        out["logit_margin"] = False
    return out


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    from dico.loop import check_inputs, generate
    from dico.models import load_model
    from dico.rules import make_rule
    block_length = args.block_length if args.mode == "semi-ar" else None
    try:
        # refuse bad input before loading the model: a hub model can take minutes to download and load
        check_inputs(args.prompt, args.method, args.mode, args.gen_length, block_length)
        make_rule(args.method, args.mode, **_settings(args))
        predictor = load_model(args.model, trust_remote_code=args.trust_remote_code, device=args.device,
                               dtype=args.dtype)
        trace = generate(predictor, args.prompt, args.method, mode=args.mode, gen_length=args.gen_length,
                         block_length=block_length, capture_attention=args.capture_attention, **_settings(args))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(trace.text)
    if args.json:
        try:
            trace.save(args.json)
        except OSError as exc:
            print(f"error: json: cannot write {args.json} ({exc.strerror or exc})", file=sys.stderr)
            return 2
    print(f"nfe={trace.nfe} tokens_per_s={trace.tokens_per_s:.3f} wall_s={trace.wall_s:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
