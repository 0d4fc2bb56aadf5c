"""Take a race away: an animated GIF of the race, sized for a slide, and one self-contained HTML
file that replays it and shows its figures with no server and no network (plotly's script inlined).

    python -m visuals.takeaway run.json --gif race.gif --html race.html [--lanes Vanilla,DiCo]

The GIF shows every lane step by step as the page's race does: committed tokens coloured by the confidence they were
committed at (viridis, the page's colours), masks as grey boxes, this step's commits outlined and the tokens of a step
whose clash is above ``CLASH_MARK`` underlined in red, with the lane's nats in its header. Its frames: one after each
round (frame r shows every lane after its step r, a finished lane as it ended) and a last frame with the answers, so
the longest lane's steps plus one. Both are pure functions of traces; only ``write_takeaway`` touches files.
"""
from __future__ import annotations

import argparse
import html
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from dico.trace import CLASH_MARK, END_TEXTS, Trace, read_traces
from visuals._common import run_colors

# Viridis stops, as the page's race colours a token (dico_ui.render reads them from here).
VIRIDIS = ((0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)), (0.75, (94, 201, 98)),
           (1.0, (253, 231, 37)))
SLIDE = (1280, 720)                 # 16:9, a slide's size
CLASH_RED = "#d62728"
FONTS = Path("/usr/share/fonts/truetype/dejavu")


def conf_color(conf: float) -> tuple[str, str]:
    """Background and text colour of a token committed at confidence ``conf`` (viridis)."""
    conf = min(max(float(conf), 0.0), 1.0)
    for (a, ca), (b, cb) in zip(VIRIDIS, VIRIDIS[1:]):
        if conf <= b:
            t = (conf - a) / (b - a)
            rgb = [round(x + (y - x) * t) for x, y in zip(ca, cb)]
            return "#{:02x}{:02x}{:02x}".format(*rgb), ("#000" if conf > 0.55 else "#fff")
    return "#fde725", "#000"


def marked(trace: Trace) -> dict[int, float]:
    """The steps whose measured clash is above ``CLASH_MARK`` (``dico.observe.marked_steps``, without torch)."""
    values = (trace.clash or {}).get("values") or []
    return {k: v for k, v in enumerate(values) if v is not None and v > CLASH_MARK}


@dataclass
class Cell:
    """A response position after a step: its text (None while masked), the confidence it was committed at (or its
    current one while masked), the step that wrote it, whether it lies in the end-of-text padding, and whether the
    step that wrote it clashed above the mark."""
    text: str | None
    conf: float | None
    step: int | None
    padding: bool
    clash: bool


def frame_cells(trace: Trace, k: int) -> list[Cell]:
    """The response of ``trace`` after its step index ``k`` (commits, edits, take-backs and tokens fixed by hand)."""
    token: dict[int, int] = {}
    conf: dict[int, float] = {}
    when: dict[int, int] = {}
    for step in trace.steps[:k + 1]:
        written, taken = trace.edits_at(step.index)
        for p, t in written.items():
            token[p], conf[p], when[p] = t, 1.0, step.index - 1
        for p in taken:
            token.pop(p, None), conf.pop(p, None), when.pop(p, None)
        for p, t in zip(step.committed, step.tokens):
            token[p], conf[p], when[p] = t, step.confidence[p], step.index
        for p, _, new in step.edited:
            token[p], when[p] = new, step.index
        for p in step.remasked:
            token.pop(p, None), conf.pop(p, None), when.pop(p, None)
    current = trace.steps[k].confidence if 0 <= k < len(trace.steps) else [None] * trace.gen_length
    texts = {p: trace.token_text(t) for p, t in token.items()}
    end = min((p for p, s in texts.items() if s.strip() in END_TEXTS), default=trace.gen_length)
    clashed = marked(trace)
    return [Cell(texts.get(p), conf.get(p, current[p]), when.get(p), p >= end, when.get(p) in clashed)
            for p in range(trace.gen_length)]


# ============================================================================ checks (one line naming the field)

def select_lanes(traces: list[Trace], lanes: str | list[str] | None = None) -> list[Trace]:
    """The runs to take away: all, or those named by ``lanes`` (comma-separated or a list), in that order; a race
    needs at least one step in each."""
    if not traces:
        raise ValueError("traces: there is no run to take away; run or replay a race first")
    if lanes:
        names = [n.strip() for n in (lanes.split(",") if isinstance(lanes, str) else lanes) if n.strip()]
        by_name = {t.name: t for t in traces}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise ValueError(f"lanes: no run named {missing[0]!r}; the runs are {', '.join(by_name)}")
        traces = [by_name[n] for n in names]
    empty = [t.name for t in traces if not t.steps]
    if empty:
        raise ValueError(f"trace.steps: {empty[0]!r} has no steps; a race needs at least one step to replay")
    return traces


def frame_count(traces: list[Trace]) -> int:
    """Frames of the race: one after each round of the longest lane, then the last frame."""
    return max(len(t.steps) for t in traces) + 1


# ============================================================================ the GIF

def _font(size: int, bold: bool = False):
    from PIL import ImageFont
    path = FONTS / ("DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf")
    return ImageFont.truetype(str(path), size) if path.exists() else ImageFont.load_default(size)


def _clash_words(trace: Trace, k: int) -> str:
    found = {s: v for s, v in marked(trace).items() if s <= k}
    if trace.clash is None:
        return ""
    if not found:
        return ""
    worst = max(found, key=found.get)
    return f"clash {found[worst]:+.1f} nats at step {worst}" + (f" (+{len(found) - 1} more)" if len(found) > 1 else "")


def race_gif(traces: list[Trace], size: tuple[int, int] = SLIDE, seconds: float = 12.0, hold_ms: int = 3000) -> bytes:
    """The race as an animated GIF (``frame_count`` frames, looping): about ``seconds`` for the steps, then the last
    frame held ``hold_ms``."""
    traces = select_lanes(traces)
    n = frame_count(traces)
    step_ms = int(min(max(seconds * 1000 / max(n - 1, 1), 80), 600))
    frames = [_gif_frame(traces, r, n, size) for r in range(n)]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], loop=0, optimize=False,
                   duration=[step_ms] * (n - 1) + [hold_ms], disposal=1)
    return out.getvalue()


def _gif_frame(traces: list[Trace], r: int, n: int, size: tuple[int, int]):
    from PIL import Image, ImageDraw
    w, h = size
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    title, small, token_font = _font(22, bold=True), _font(15), _font(17)
    last = r == n - 1
    prompt = traces[0].prompt if len(traces[0].prompt) <= 95 else traces[0].prompt[:94] + "…"
    draw.text((20, 12), prompt, fill="#222", font=title)
    status = "final answers" if last else f"round {r + 1} of {n - 1}"
    draw.text((w - 20, 16), status, fill="#555", font=small, anchor="ra")
    top, bottom = 52, h - 40
    lane_h = (bottom - top) // len(traces)
    for i, (trace, color) in enumerate(zip(traces, run_colors(traces))):
        k = min(r, len(trace.steps) - 1)
        _gif_lane(draw, trace, k, color, (20, top + i * lane_h, w - 20, top + (i + 1) * lane_h - 8),
                  last or k == len(trace.steps) - 1, k == r, (small, token_font))
    _gif_legend(draw, w, h, small)
    return img.convert("P", palette=Image.Palette.ADAPTIVE, colors=255)


def _gif_lane(draw, trace: Trace, k: int, color: str, box: tuple[int, int, int, int], done: bool, fresh: bool,
              fonts) -> None:
    """One lane after its step ``k``; ``fresh``: the step was taken this round (its commits are outlined)."""
    small, token_font = fonts
    x0, y0, x1, y1 = box
    draw.rectangle((x0, y0, x1, y1), outline="#dddddd", fill="#fafafa")
    draw.rectangle((x0, y0, x0 + 6, y1), fill=color)
    head = f"{trace.name} · step {k + 1}" + (f" of {len(trace.steps)} · finished" if done else "")
    draw.text((x0 + 14, y0 + 5), head, fill="#111", font=small)
    clash = _clash_words(trace, k)
    if clash:
        draw.text((x1 - 8, y0 + 5), clash, fill=CLASH_RED, font=small, anchor="ra")
    x, y, line = x0 + 14, y0 + 28, 26
    for cell in frame_cells(trace, k):
        if cell.text is None:               # a mask, shaded by its current confidence
            shade = 235 - int(120 * (cell.conf or 0.0))
            width = 9 if cell.padding else 14
            box = (x, y + 4, x + width, y + 20)
            fill = (shade, shade, shade)
            outline = "#999"
        elif cell.padding:                  # end-of-text padding: a small grey mark
            width = 6
            box, fill, outline = (x, y + 8, x + width, y + 16), "#bbbbbb", None
        else:
            text = cell.text.strip() or "␣"
            width = int(draw.textlength(text, font=token_font)) + 8
            bg, fg = conf_color(cell.conf if cell.conf is not None else 1.0)
            box, fill, outline = (x, y + 1, x + width, y + 23), bg, None
        if x + width > x1 - 8:              # wrap
            x, y = x0 + 14, y + line
            if y + line > y1:
                return
            box = (x, box[1] + line, x + width, box[3] + line)
        draw.rectangle(box, fill=fill, outline=outline)
        if cell.text is not None and not cell.padding:
            draw.text((x + 4, y + 2), cell.text.strip() or "␣", fill=conf_color(cell.conf or 1.0)[1], font=token_font)
            if cell.clash:
                draw.rectangle((x, y + 23, x + width, y + 26), fill=CLASH_RED)
        if fresh and cell.step == k and cell.text is not None:
            draw.rectangle(box, outline="#000000", width=2)
        x += width + (4 if cell.text is not None and not cell.padding else 2)


def _gif_legend(draw, w: int, h: int, font) -> None:
    x, y = 20, h - 30
    draw.text((x, y), "confidence", fill="#333", font=font)
    x += 90
    for i in range(160):
        draw.line((x + i, y + 2, x + i, y + 16), fill=conf_color(i / 159)[0])
    draw.text((x - 4, y), "0", fill="#fff", font=font)
    draw.text((x + 150, y), "1", fill="#000", font=font)
    x += 180
    draw.rectangle((x, y + 2, x + 14, y + 16), fill=(200, 200, 200), outline="#999")
    draw.text((x + 20, y), "masked", fill="#333", font=font)
    x += 100
    draw.rectangle((x, y + 12, x + 40, y + 15), fill=CLASH_RED)
    draw.text((x + 48, y), f"a step whose clash is above {CLASH_MARK:g} nat (its tokens clash: each likely alone, "
                           "unlikely together)", fill="#333", font=font)


# ============================================================================ the HTML

def lane_data(trace: Trace, color: str) -> dict:
    """What the HTML player needs of a lane, step by step: each step's commits (position, text, colours), edits,
    take-backs, tokens fixed by hand before it, the masks' confidence after it, and its clash when marked."""
    steps = []
    clashes = (trace.clash or {}).get("values") or [None] * len(trace.steps)
    for step in trace.steps:
        written, taken = trace.edits_at(step.index)
        steps.append({
            "h": [[p, trace.token_text(t)] for p, t in written.items()], "t": taken,
            "c": [[p, trace.token_text(t), *conf_color(step.confidence[p] or 0.0)]
                  for p, t in zip(step.committed, step.tokens)],
            "e": [[p, trace.token_text(new)] for p, _, new in step.edited], "r": list(step.remasked),
            "q": [None if v is None else round(v, 2) for v in step.confidence],
            "x": clashes[step.index] if clashes[step.index] is not None and clashes[step.index] > CLASH_MARK else None})
    return {"label": trace.name, "color": color, "n": trace.gen_length, "steps": steps}


def comparison_rows(traces: list[Trace]) -> list[list[str]]:
    """Each lane's steps, the step its answer was complete, its total clash and worst step (as the page's table)."""
    rows = []
    for t in traces:
        values = [(k, v) for k, v in enumerate((t.clash or {}).get("values") or []) if v is not None]
        total = "not measured" if t.clash is None else f"{sum(v for _, v in values if v > 0):.2f} nats"
        top = max(values, key=lambda kv: (kv[1], -kv[0])) if values else None
        worst = "not measured" if t.clash is None else "no step of two tokens" if top is None else \
            f"{top[1] if abs(top[1]) >= 0.005 else 0.0:+.2f} nats at step {top[0]}"
        rows.append([t.name, str(t.nfe), str(t.answer_nfe), total, worst, t.text.strip()])
    return rows


def race_html(traces: list[Trace], figures=None) -> str:
    """One HTML file replaying the race (Play, a step slider) with the page's colours and clash marks, the comparison
    and the figures (``figures``: plotly figures; by default the trajectories side by side, the clash of each step
    and the decode order), plotly's script inlined: it opens from a file with no network."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    from visuals.observe import clash_figure
    from visuals.order import decode_order_figure
    from visuals.trajectory import trajectories_side_by_side

    traces = select_lanes(traces)
    figures = figures if figures is not None else [trajectories_side_by_side(traces), clash_figure(traces),
                                                   decode_order_figure(traces)]
    data = {"frames": frame_count(traces), "ends": sorted(END_TEXTS),
            "lanes": [lane_data(t, c) for t, c in zip(traces, run_colors(traces))]}
    plots = "\n".join(f'<div class="figure">{pio.to_html(f, include_plotlyjs=False, full_html=False)}</div>'
                      for f in figures)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in comparison_rows(traces))
    page = (Path(__file__).with_name("takeaway.html")).read_text(encoding="utf-8")
    return (page.replace("{{title}}", html.escape(traces[0].prompt[:120]))
            .replace("{{prompt}}", html.escape(traces[0].prompt))
            .replace("{{model}}", html.escape(f"{traces[0].model}, {traces[0].mode}, {traces[0].gen_length} positions"))
            .replace("{{mark}}", f"{CLASH_MARK:g}")
            .replace("{{rows}}", rows)
            .replace("{{figures}}", plots)
            .replace("{{data}}", json.dumps(data, ensure_ascii=False).replace("</", "<\\/"))
            .replace("{{plotly}}", get_plotlyjs()))


# ============================================================================ files

def write_takeaway(traces: list[Trace], gif=None, html_path=None, lanes=None) -> list[str]:
    """Write the GIF and/or the HTML of a race; every check (the lanes, the steps, each path writable) is made
    before anything is written, so bad input changes nothing. Returns the paths written."""
    traces = select_lanes(traces, lanes)
    targets = [(field, Path(path)) for field, path in (("gif", gif), ("html", html_path)) if path]
    if not targets:
        raise ValueError("out: give a path for the GIF (--gif) or the HTML (--html)")
    for field, path in targets:
        suffix = ".gif" if field == "gif" else ".html"
        if path.suffix.lower() != suffix:
            raise ValueError(f"{field}: {str(path)!r} must end in {suffix}")
        if path.is_dir() or not path.parent.is_dir() or not os.access(path.parent, os.W_OK) or \
                (path.exists() and not os.access(path, os.W_OK)):
            why = "is a folder" if path.is_dir() else "its folder does not exist" if not path.parent.is_dir() else \
                "permission denied"
            raise ValueError(f"{field}: cannot write {str(path)!r} ({why})")
    made = {"gif": lambda: race_gif(traces), "html": lambda: race_html(traces).encode("utf-8")}
    contents = [(path, made[field]()) for field, path in targets]
    for path, content in contents:
        partial = path.with_name(path.name + ".part")
        partial.write_bytes(content)
        os.replace(partial, path)
    return [str(path) for path, _ in contents]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m visuals.takeaway", description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", help="a trace or a bundle of traces (the app's download, python -m dico generate "
                        "--json)")
    parser.add_argument("--gif", help="write the race as an animated GIF here")
    parser.add_argument("--html", help="write the race as one self-contained HTML file here")
    parser.add_argument("--lanes", help="the runs to take away, by name, comma-separated (default all)")
    args = parser.parse_args(argv)
    try:
        try:
            raw = Path(args.traces).read_bytes()
        except OSError as exc:
            raise ValueError(f"traces: cannot read {args.traces} ({exc.strerror or exc})") from None
        written = write_takeaway(read_traces(raw), args.gif, args.html, args.lanes)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
