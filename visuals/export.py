"""A benchmark figure or a run's trajectories to a file, for README and docs: ``python -m visuals.export FILE OUT.png``
(or ``.svg``, ``.html``), FILE a ``python -m dico.bench`` result or a trace bundle.

    python -m visuals.export assets/bench/frontier_gen96.json assets/bench/frontier.png   # the frontier figure
    python -m visuals.export assets/bench/table1_gen96.json /tmp/table1.html             # Table 1's accuracy-NFE figure
    python -m visuals.export assets/ui/long_example_1.json docs/trajectory_long.png --lanes Vanilla,Fast-dLLM,DiCo
                                                        # the paper's trajectory figure: runs of one prompt side by side

An image needs an engine: kaleido when it is installed (plotly's ``write_image``), else a screenshot by the system
Chromium that the browser tests drive through Playwright (plotly.js inlined, nothing fetched; PNG only). With
neither, ask for ``.html``. The figures stay pure functions; reading files and starting a browser happen here.
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import plotly.graph_objects as go

from dico.trace import read_traces
from visuals.bench import accuracy_nfe_figure, frontier_figure
from visuals.trajectory import trajectories_side_by_side

CHROMIUM = "/usr/bin/chromium"
# A machine with no network: without the background-networking flags Chromium waits on connections that are refused
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
BROWSER_TIMEOUT_MS = 180_000    # a figure of a gen-256 race is megabytes of plotly data: slow on a loaded CPU
WIDTH = 1200


def rows_figure(path) -> go.Figure:
    """The figure of a ``python -m dico.bench`` result file: the frontier for frontier rows, else accuracy-NFE."""
    rows = json.loads(Path(path).read_text(encoding="utf-8")).get("rows") or []
    return frontier_figure(rows) if rows and "sweep" in rows[0] else accuracy_nfe_figure(rows)


def trajectories_figure(path, lanes: str | None = None) -> go.Figure:
    """The runs of a trace bundle side by side on one step axis, as the paper draws Vanilla, Fast-dLLM and DiCo on
    one prompt: passes down, positions across. ``lanes``: comma-separated run names to keep, in that order."""
    traces = read_traces(Path(path).read_bytes())
    if lanes:
        by_name = {t.name: t for t in traces}
        missing = [name for name in lanes.split(",") if name not in by_name]
        if missing:
            raise ValueError(f"lanes: no run named {missing[0]!r} in {Path(path).name}; it has "
                             f"{', '.join(by_name)}")
        traces = [by_name[name] for name in lanes.split(",")]
    return trajectories_side_by_side(traces, shared_steps=True)


def file_figure(path, lanes: str | None = None) -> go.Figure:
    """A trace bundle's trajectories (it has "traces" or "steps"), else a bench result's figure."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    is_trace = isinstance(raw, list) or (isinstance(raw, dict) and ("traces" in raw or "steps" in raw))
    if lanes and not is_trace:
        raise ValueError("lanes: only a trace bundle has lanes to choose")
    return trajectories_figure(path, lanes) if is_trace else rows_figure(path)


def save(fig: go.Figure, path, width: int = WIDTH) -> str:
    """Write ``fig`` to ``path`` by its suffix; returns the engine used ('html', 'kaleido' or 'chromium'), or raises
    ValueError saying what is missing."""
    path, height = Path(path), int(fig.layout.height or 600)
    if path.suffix == ".html":
        fig.write_html(path, include_plotlyjs="cdn", default_width=f"{width}px", default_height=f"{height}px")
        return "html"
    if path.suffix not in (".png", ".svg", ".pdf"):
        raise ValueError(f"out: write .png, .svg, .pdf or .html, got {path.name!r}")
    try:
        import kaleido  # noqa: F401  (plotly's image engine, when installed)
    except ImportError:
        if path.suffix != ".png":
            raise ValueError(f"out: {path.suffix} needs kaleido (pip install kaleido); .png or .html work without it") \
                from None
        return _screenshot(fig, path, width, height)
    fig.write_image(path, width=width, height=height)
    return "kaleido"


def _screenshot(fig: go.Figure, path: Path, width: int, height: int) -> str:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise ValueError("out: a .png needs kaleido or Playwright with a Chromium; write .html instead") from None
    if not Path(CHROMIUM).exists():
        raise ValueError(f"out: a .png needs kaleido or {CHROMIUM} (apt-get install chromium); write .html instead")
    html = fig.to_html(include_plotlyjs=True, config={"staticPlot": True}, default_width=f"{width}px",
                       default_height=f"{height}px")

    def shoot():
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": width + 40, "height": height + 40}, device_scale_factor=1)
            page.set_content(html, timeout=BROWSER_TIMEOUT_MS)
            page.wait_for_selector(".plotly-graph-div .main-svg", timeout=BROWSER_TIMEOUT_MS)
            page.locator(".plotly-graph-div").screenshot(path=str(path))
            browser.close()

    # Playwright's sync API refuses a thread with a running asyncio loop (a notebook, an async test run); a
    # thread of its own has none
    from playwright.sync_api import Error as BrowserError

    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            pool.submit(shoot).result()
        except BrowserError as exc:
            raise ValueError(f"out: Chromium could not draw the figure ({str(exc).splitlines()[0]}); write .html "
                             "instead") from None
    return "chromium"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m visuals.export", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("rows", help="a --json file of python -m dico.bench, or a trace bundle")
    parser.add_argument("out", help="the figure's file: .png, .svg, .pdf or .html")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"pixels (default {WIDTH})")
    parser.add_argument("--lanes", help="a trace bundle's runs to draw, by name, comma-separated (default all)")
    args = parser.parse_args(argv)
    try:
        fig = file_figure(args.rows, args.lanes)
        engine = save(fig, args.out, args.width)
    except (OSError, ValueError) as exc:          # json's decode error is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({engine})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
