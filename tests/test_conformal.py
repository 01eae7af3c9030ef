"""How far past validations' misses reach: bounds counted in validations, not plans."""

import numpy as np
import pytest

from hsd_planner.solving import MIN_RESIDUALS, past_plans, widened
from hsd_planner.stats import group_bounds, group_level


def _clustered(rng: np.random.Generator, groups: int, size: int) -> tuple[list[list[float]], float]:
    """Misses of ``groups`` validations of ``size`` plans each, sharing a validation's effect (its
    prompts), and one plan of the next validation."""
    effect = rng.standard_normal(groups + 1)
    past = [list(effect[v] + 0.3 * rng.standard_normal(size)) for v in range(groups)]
    return past, float(effect[groups] + 0.3 * rng.standard_normal())


@pytest.mark.parametrize("groups", [12, 39])
def test_bounds_counted_in_validations_hold_the_next_validations_plan_where_percentiles_over_plans_do_not(groups):
    rng = np.random.default_rng(0)
    trials, by_group, by_plan = 1500, 0, 0
    for _ in range(trials):
        past, new = _clustered(rng, groups, 8)
        lo, hi = group_bounds(past)
        by_group += lo <= new <= hi
        plo, phi = np.percentile(np.concatenate(past), (5, 95))
        by_plan += plo <= new <= phi
    assert by_group / trials >= 0.9  # 0.92-0.93 measured
    assert by_plan / trials < 0.89  # the 5th-95th percentile over 8 x V correlated plans: 0.84-0.88


def test_each_validation_weighs_alike_whatever_its_plans():
    # 40 validations: 39 of one plan at 0..38, and one of 30 plans far below; pooled by plans the
    # large one would set the lower bound, pooled by validations it is one validation of 40
    groups = [[float(i)] for i in range(39)] + [[-50.0] * 30]
    assert group_level(40) == pytest.approx(0.975)
    assert group_bounds(groups) == (0.0, 37.0)
    assert np.percentile(np.concatenate(groups), 5) == -50.0
    with pytest.raises(ValueError, match="no past score"):
        group_bounds([[], []])


def test_widening_waits_for_enough_past_plans_and_reaches_the_farthest_miss_of_few_validations():
    band, speedup = (1.8, 2.2), 2.0
    few = [[-3.0, 0.1]] * ((MIN_RESIDUALS - 1) // 2)
    assert past_plans(few) == 0 and widened(band, speedup, few) == band
    # 5 validations: split conformal gives no finite bound below 19, so each side's farthest miss
    past = [[0.2, -0.5], [1.5, 0.0], [-2.5, 0.3], [0.1, 0.1], [-0.2, 0.4]]
    lo, hi = widened(band, speedup, past)
    assert lo == pytest.approx(speedup * (1.8 / 2.0) ** 2.5) and hi == pytest.approx(speedup * (2.2 / 2.0) ** 1.5)
