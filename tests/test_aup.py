"""AUP, accuracy under parallelism (d3LLM's leaderboard metric), for every row of Table 1."""
import math

import pytest

from dico.bench.core import aup, aup_of_rows


def test_aup_is_the_weighted_area_under_the_parallelism_accuracy_curve():
    """rho_1 y_1 + (rho_2 - rho_1)(y_2 W(y_2) + y_1 W(y_1)) / 2, W(y) = min(exp(-3 (1 - y / y_max)), 1)."""
    def w(y, y_max):
        return min(math.exp(-3 * (1 - y / y_max)), 1)
    expected = 1.0 * 74.0 + (5.14 - 1.0) * (72.63 * w(72.63, 74.98) + 74.0 * w(74.0, 74.98)) / 2
    assert aup([(5.14, 72.63), (1.0, 74.0)], 74.98) == pytest.approx(expected)
    assert aup([(1.0, 74.0)], 74.98) == pytest.approx(74.0)            # one token a pass: its accuracy


def test_a_point_more_than_five_points_below_the_least_parallel_one_is_left_out():
    assert aup([(1.0, 96.0), (4.0, 3.5)], 96.0) == pytest.approx(96.0)
    assert aup([(1.0, 96.0), (4.0, 91.0)], 96.0) > 96.0


def test_each_table_row_is_measured_from_vanillas_point_in_its_own_cell():
    rows = [dict(task="pick", mode="non-ar", gen_length=96, method="vanilla", settings={}, accuracy=0.96, nfe_mean=96),
            dict(task="pick", mode="non-ar", gen_length=96, method="fast", settings={}, accuracy=0.955, nfe_mean=6),
            dict(task="pick", mode="non-ar", gen_length=96, method="topk", settings={"k": 4}, accuracy=0.035,
                 nfe_mean=24),
            dict(task="team", mode="non-ar", gen_length=96, method="fast", settings={}, accuracy=0.9, nfe_mean=6)]
    found = aup_of_rows(rows)
    assert found[0] == pytest.approx(96.0)
    assert found[1] == pytest.approx(aup([(1, 96.0), (16, 95.5)], 96.0))
    assert found[2] == pytest.approx(96.0)                 # Top-4 broke the answers: only Vanilla's point is left
    assert 3 not in found                                   # no Vanilla in its cell
