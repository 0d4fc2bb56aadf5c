"""DiCo Explorer's figures: pure functions from a trace (or traces) to a plotly Figure.

Nothing here runs a model or imports torch or gradio; a trace loaded from JSON draws the same figures.

    from visuals import trajectory_figure
    trajectory_figure(Trace.load("run.json")).show()
"""
from visuals._common import METHOD_COLORS, OKABE_ITO, PHASE_COLORS
from visuals.summary import accuracy_nfe_figure, attention_figure, comparison_figure, comparison_table, phase_figure
from visuals.trajectory import cluster_figure, step_text, step_view_figure, trajectories_side_by_side, trajectory_figure

__all__ = ["METHOD_COLORS", "OKABE_ITO", "PHASE_COLORS", "accuracy_nfe_figure", "attention_figure", "cluster_figure",
           "comparison_figure", "comparison_table", "phase_figure", "step_text", "step_view_figure",
           "trajectories_side_by_side", "trajectory_figure"]
