"""DiCo Explorer's figures: pure functions from a trace (or traces) to a plotly Figure.

Nothing here runs a model or imports torch or gradio; a trace loaded from JSON draws the same figures. Every
figure tells answer commits (filled vermillion) from end-of-text padding commits (hollow grey or hatched), and
marks block boundaries in semi-AR runs.

    from visuals import trajectory_figure
    trajectory_figure(Trace.load("run.json"), confidence="guided").show()
"""
from visuals._common import METHOD_COLORS, OKABE_ITO, PHASE_COLORS, lane_colors, method_id, run_colors
from visuals.attention import attention_figure
from visuals.bench import accuracy_nfe_figure, frontier_figure
from visuals.observe import clash_figure, dependency_figure
from visuals.order import decode_order_figure
from visuals.step_view import step_text, step_view_figure, stream_figure
from visuals.summary import comparison_figure, comparison_table, phase_figure, reference
from visuals.trajectory import cluster_figure, trajectories_side_by_side, trajectory_figure

__all__ = ["METHOD_COLORS", "OKABE_ITO", "PHASE_COLORS", "accuracy_nfe_figure", "attention_figure", "clash_figure",
           "cluster_figure", "comparison_figure", "comparison_table", "decode_order_figure", "dependency_figure",
           "frontier_figure", "lane_colors", "method_id", "phase_figure",
           "reference", "run_colors", "step_text", "step_view_figure", "stream_figure", "trajectories_side_by_side",
           "trajectory_figure"]
