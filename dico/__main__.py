"""Command line: ``python -m dico generate --prompt TEXT --method dico ...`` (``--help`` for every option).

Every method setting becomes an option generated from ``dico.settings`` (``--threshold 0.9``; switches as
``--x`` / ``--no-x``), so a new setting needs no change here.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap

from dico.settings import (
    DEFAULT_BLOCK_LENGTH,
    DEFAULT_GEN_LENGTH,
    METHODS,
    MODES,
    NON_AR,
    SEMI_AR,
    SETTINGS,
    method_id,
    specs,
)

LAST_LINE = ("nfe=<int> answer_nfe=<int> answer_tokens=<int> padding_tokens=<int> tokens_per_s=<float> "
             "wall_s=<float>")


class _Help(argparse.HelpFormatter):
    """argparse's wrapping, but never inside a hyphenated name (Fast-dLLM, non-AR), so help reads as declared."""

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message):            # argparse's own errors: same exit code 2, one clear line
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _gen_length(text: str):
    """--gen-length: a whole number or "auto" (checked again, naming the field, by the library)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number or auto, got {text!r}") from None


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    """One option per method setting, grouped by method; a name shared by methods is one option. Defaults stay
    unset here, so the settings' own defaults apply and only what the user typed reaches validation."""
    seen: set[str] = set()
    for method, cls in SETTINGS.items():
        fresh = [s for s in specs(cls) if s.name not in seen]
        if not fresh:
            continue
        group = parser.add_argument_group(f"{method} settings (paper defaults unless given)")
        for spec in fresh:
            seen.add(spec.name)
            text = _shared_help(spec)
            if spec.type is bool:
                group.add_argument(_option(spec.name), action=argparse.BooleanOptionalAction, default=None,
                                   help=text)
            elif spec.choices:                  # every method's choices for a shared name; its settings check which
                choices = dict.fromkeys(c for other_cls in SETTINGS.values() for other in specs(other_cls)
                                        if other.name == spec.name for c in other.choices or ())
                group.add_argument(_option(spec.name), choices=list(choices), default=None, help=text)
            else:
                group.add_argument(_option(spec.name), type=spec.type, default=None, metavar=spec.type.__name__.upper(),
                                   help=f"{text}, in {spec.interval()}")


def _shared_help(spec) -> str:
    """An option's help: its setting's, or where methods share a name with other meanings, each method's."""
    meanings = {}
    for method, cls in SETTINGS.items():
        for other in specs(cls):
            if other.name == spec.name:
                origin = "; ".join(f"{k}: {v}" for k, v in (("paper", other.paper), ("code", other.code))
                                   if v is not None)
                meanings.setdefault(f"{other.help} (default {other.default}" + (f"; {origin})" if origin else ")"),
                                    []).append(method)
    if len(meanings) == 1:
        return next(iter(meanings))
    return "; ".join(f"{', '.join(methods)}: {text}" for text, methods in meanings.items())


def given_settings(args: argparse.Namespace) -> dict:
    """The settings the user typed, checked against the chosen method (another method's option is an error)."""
    mine = {s.name for s in specs(SETTINGS[args.method])}
    out = {}
    for spec in {s.name: s for cls in SETTINGS.values() for s in specs(cls)}.values():
        value = getattr(args, spec.name, None)
        if value is None:
            continue
        if spec.name not in mine:
            raise ValueError(f"{spec.name}: not a setting of method {args.method!r} ({_option(spec.name)})")
        out[spec.name] = value
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m dico", description="Decode with a diffusion LM (Vanilla, naive top-k, Fast-dLLM, "
                                                        "DiCo, EB-Sampler, KLASS, WINO, Saber) "
                                                        "and record every step.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = sub.add_parser("generate", help="decode one prompt and print the answer",
                         description=f"Decode one prompt. The last line printed is '{LAST_LINE}': the answer is the "
                                     "response up to its first end-of-text token, the rest is padding, and answer_nfe "
                                     "counts the forward passes until the answer was complete.")
    gen.add_argument("--prompt", action="append", help="the question or instruction; repeat it to decode several "
                     "prompts (each answer is followed by its own nfe=... line)")
    gen.add_argument("--prompts-file", metavar="PATH", help="decode every non-empty line of this file as a prompt")
    gen.add_argument("--batch-size", type=int, default=1,
                     help="decode this many prompts per forward pass (default 1); every answer is the same as "
                          "decoding its prompt alone")
    gen.add_argument("--method", type=method_id, choices=METHODS, default="dico",
                     help="vanilla: one token a step; topk: naive top-k, --k tokens a step; fast: Fast-dLLM "
                          "threshold; fast-factor: Fast-dLLM factor; dico: divide, conquer, finalize (default); eb: "
                          "EB-Sampler; klass: KLASS; wino: WINO (takes tokens back); saber: Saber (takes tokens back)")
    gen.add_argument("--mode", choices=MODES, default=NON_AR,
                     help="non-ar: the whole answer is one window; semi-ar: blocks of --block-length left to right")
    gen.add_argument("--gen-length", type=_gen_length, default=DEFAULT_GEN_LENGTH,
                     help=f"number of answer positions (default {DEFAULT_GEN_LENGTH}), or auto: the model chooses it "
                          "before decoding, as DAEDAL's initial-length phase does")
    gen.add_argument("--block-length", type=int, default=DEFAULT_BLOCK_LENGTH,
                     help=f"block size in semi-ar mode (default {DEFAULT_BLOCK_LENGTH})")
    gen.add_argument("--model", default=None,
                     help="an embedded model (dico-tiny, the default; dico-tiny-long for long worked answers at "
                          "gen 256), a hub id or a local folder")
    gen.add_argument("--trust-remote-code", action="store_true",
                     help="allow a model's own code for ids outside the known LLaDA/Dream list")
    gen.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    gen.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: bf16 on cuda, fp32 on cpu)")
    gen.add_argument("--no-chat", action="store_true",
                     help="feed the prompt as it is, even when the tokenizer has a chat template")
    gen.add_argument("--json", metavar="PATH", help="write the full step trace as JSON here (several prompts: a "
                                                    "bundle of traces, readable by the app's replay)")
    gen.add_argument("--gif", metavar="PATH", help="write the run as an animated GIF of its steps, sized for a slide "
                     "(python -m visuals.takeaway; on an embedded model the clash is measured first and marked)")
    gen.add_argument("--html", metavar="PATH", help="write the run as one self-contained HTML file that replays it and "
                     "shows its figures offline (plotly's script inlined)")
    gen.add_argument("--capture-attention", action="store_true",
                     help="record stage-averaged attention maps in the trace (every model kind)")
    gen.add_argument("--constrain", metavar="OFFSET:WORD,...", default=None,
                     help="words fixed at response offsets before decoding, as LLaDA's demo takes them: "
                          "\"0:The,5:leader\" "
                          "(a word of several tokens fills the positions after its offset)")
    fork = gen.add_argument_group("forks (rewind a saved run to a step, edit it, decode on)")
    fork.add_argument("--fork", metavar="TRACE.json", help="fork this trace (written by --json or the app) instead of "
                      "decoding a prompt; the method, mode, lengths and settings are the trace's unless given")
    fork.add_argument("--lane", default=None, help="the lane to fork when the file holds several (the app's download)")
    fork.add_argument("--at", type=int, default=None, help="the step to fork before (the fork keeps the trace's "
                      "steps 0..at-1); default: the last step")
    fork.add_argument("--force", metavar="POS=WORD,...", default=None,
                      help="write these tokens before the fork's first step (a word, or #id for a token id): 7=Gill")
    fork.add_argument("--remask", metavar="POS,...", default=None, help="take these decoded positions back to the mask")
    add_settings_options(gen)
    table = sub.add_parser("settings", help="print every method's settings as Markdown tables (docs/settings.md)",
                           description="Print every method's settings (default, range, the paper's and the authors' "
                                       "values, what each does) as Markdown, from the one place they are declared.")
    table.add_argument("--method", type=method_id, choices=METHODS, action="append",
                       help="only these methods (repeatable)")
    return parser


def settings_markdown(methods=None) -> str:
    """The settings tables of docs/settings.md's block: the shared sampling options once, then each method's own."""
    from dico.settings import METHOD_LABELS, SamplingSettings, own_specs, settings_table
    parts = ["**Shared by every method** (the official samplers' options, greedy by default; the KV cache, none by "
             "default)\n\n"
             + settings_table(SamplingSettings)]
    for method in methods or METHODS:
        if own_specs(SETTINGS[method]):
            parts.append(f"**{METHOD_LABELS[method]}** (`{method}`)\n\n" + settings_table(own_specs(SETTINGS[method])))
    return "\n\n".join(parts) + "\n"


def _prompts(args) -> list[str]:
    prompts = list(args.prompt or [])
    if args.prompts_file:
        try:
            with open(args.prompts_file, encoding="utf-8") as source:
                text = source.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"prompts_file: cannot read {args.prompts_file} ({exc})") from None
        prompts += [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ValueError("prompt: give --prompt TEXT (repeatable) or --prompts-file PATH")
    return prompts


def _edits(args) -> tuple[dict, list[int]]:
    """--force 7=Gill,9=#123 and --remask 8,10 as the fork's edits (ValueError naming the option)."""
    force = {}
    for part in filter(None, (p.strip() for p in (args.force or "").split(","))):
        pos, sep, word = part.partition("=")
        if not sep or not pos.strip().isdigit() or not word.strip():
            raise ValueError(f"force: {part!r} is not position=word (e.g. 7=Gill, or 7=#123 for a token id)")
        word = word.strip()
        force[int(pos)] = int(word[1:]) if word.startswith("#") and word[1:].isdigit() else word
    try:
        remask = [int(p) for p in (args.remask or "").split(",") if p.strip()]
    except ValueError:
        raise ValueError(f"remask: {args.remask!r} is not a list of positions (e.g. 8,10)") from None
    return force, remask


def _parent(args):
    """The trace to fork: the file's one trace, or the lane named by --lane in a bundle the app downloaded."""
    from dico.trace import read_traces
    try:
        with open(args.fork, "rb") as source:
            traces = read_traces(source.read())
    except OSError as exc:
        raise ValueError(f"fork: cannot read {args.fork} ({exc.strerror or exc})") from None
    if args.lane is not None:
        named = [t for t in traces if t.name == args.lane]
        if not named:
            held = ", ".join(t.name for t in traces)
            raise ValueError(f"lane: no lane {args.lane!r} in {args.fork}; it holds {held}")
        return named[0]
    if len(traces) > 1:
        raise ValueError(f"lane: {args.fork} holds {len(traces)} lanes ({', '.join(t.name for t in traces)}); name "
                         "one with --lane")
    return traces[0]


def _fork_main(args) -> int:
    """``generate --fork run.json``: rewind the saved run, apply the edits, decode on, print as generate does."""
    from dico.forking import fork
    from dico.methods import admit
    from dico.models import load_model
    from dico.trace import TraceError
    try:
        force, remask = _edits(args)
        parent = _parent(args)
        at = parent.nfe if args.at is None else args.at
        method = args.method if args.method_given else None
        settings = admit(method, parent.mode, given_settings(args), parent.gen_length,
                         parent.block_length).settings if method else None
        predictor = load_model(args.model, trust_remote_code=args.trust_remote_code, device=args.device,
                               dtype=args.dtype, chat=False if args.no_chat else None)
        trace = fork(predictor, parent, at, force=force, remask=remask, method=method, settings=settings)
    except (ValueError, TraceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _report([trace], args, predictor)


def main(argv=None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(raw)
    if args.command == "settings":
        print(settings_markdown(args.method), end="")
        return 0
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    if args.fork:
        args.method_given = "--method" in raw or any(a.startswith("--method=") for a in raw)
        return _fork_main(args)
    if args.at is not None or args.force or args.remask:
        print("error: at: --at, --force and --remask edit a fork; give --fork TRACE.json", file=sys.stderr)
        return 2
    from dico.batch import generate_batch
    from dico.constraints import parse_constraints
    from dico.length import AUTO
    from dico.loop import check_inputs
    from dico.methods import admit
    from dico.models import load_model
    block_length = args.block_length if args.mode == SEMI_AR else None
    try:
        # refuse bad input before loading the model: a hub model can take minutes to download and load
        prompts = _prompts(args)
        _take_away_paths(args)
        if (args.gif or args.html) and len(prompts) != 1:
            raise ValueError(f"{'gif' if args.gif else 'html'}: a take-away is one race of one prompt; got "
                             f"{len(prompts)} prompts")
        for prompt in prompts:
            check_inputs(prompt, args.method, args.mode, args.gen_length, block_length)
        settings = admit(args.method, args.mode, given_settings(args),
                         None if args.gen_length == AUTO else args.gen_length, block_length,
                         args.capture_attention).settings
        if args.batch_size < 1:
            raise ValueError(f"batch_size: must be a whole number >= 1, got {args.batch_size}")
        constraints = parse_constraints(args.constrain) if args.constrain else None
        predictor = load_model(args.model, trust_remote_code=args.trust_remote_code, device=args.device,
                               dtype=args.dtype, chat=False if args.no_chat else None)
        traces = generate_batch(predictor, prompts, args.method, batch_size=args.batch_size, mode=args.mode,
                                gen_length=args.gen_length, block_length=block_length, settings=settings,
                                capture_attention=args.capture_attention, constraints=constraints)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _report(traces, args, predictor)


def _take_away_paths(args) -> None:
    """--gif and --html: one prompt, and paths that can be written, checked before the model loads (one line naming
    the option; nothing is decoded or written)."""
    for name, suffix in (("gif", ".gif"), ("html", ".html")):
        path = getattr(args, name, None)
        if not path:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not path.lower().endswith(suffix):
            raise ValueError(f"{name}: {path!r} must end in {suffix}")
        if os.path.isdir(path) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            why = "is a folder" if os.path.isdir(path) else "its folder does not exist" if not os.path.isdir(folder) \
                else "permission denied"
            raise ValueError(f"{name}: cannot write {path!r} ({why})")


def _take_away(traces, args, predictor) -> str | None:
    """Write --gif / --html through ``python -m visuals.takeaway`` (the figures are not the library's to import): the
    run's clash measured first on an embedded model (``dico.observe``, passes apart from its NFE). Returns the error
    line, or None."""
    import subprocess
    import tempfile

    from dico.models import EMBEDDED_MODELS
    from dico.observe import CLASH_BUDGET, annotate_clash
    from dico.trace import bundle_json
    if len(traces) != 1:
        return f"gif: a take-away is one race of one prompt; got {len(traces)} prompts"
    if traces[0].model in EMBEDDED_MODELS and traces[0].clash is None:
        annotate_clash(predictor, traces[0], budget=CLASH_BUDGET)
    with tempfile.TemporaryDirectory() as folder:
        bundle = os.path.join(folder, "run.json")
        with open(bundle, "w", encoding="utf-8") as out:
            out.write(bundle_json(traces))
        command = [sys.executable, "-m", "visuals.takeaway", bundle]
        command += [f"--{name}={getattr(args, name)}" for name in ("gif", "html") if getattr(args, name, None)]
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        return (done.stderr.strip().splitlines() or ["error: the take-away failed"])[-1].removeprefix("error: ")
    print(done.stdout.strip())
    return None


def _report(traces, args, predictor=None) -> int:
    """Write --json if asked, and the take-aways (--gif, --html), and print each answer with its nfe=... line."""
    from dico.trace import bundle_json
    if getattr(args, "gif", None) or getattr(args, "html", None):
        failed = _take_away(traces, args, predictor)
        if failed:
            print(f"error: {failed}", file=sys.stderr)
            return 2
    if args.json:
        try:
            with open(args.json, "w", encoding="utf-8") as out:
                out.write(traces[0].to_json() if len(traces) == 1 else bundle_json(traces))
        except OSError as exc:
            print(f"error: json: cannot write {args.json} ({exc.strerror or exc})", file=sys.stderr)
            return 2
    for trace in traces:
        print(trace.text)
        print(f"nfe={trace.nfe} answer_nfe={trace.answer_nfe} answer_tokens={trace.answer_tokens} "
              f"padding_tokens={trace.padding_tokens} tokens_per_s={trace.tokens_per_s:.3f} wall_s={trace.wall_s:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
