"""The paired t-test against closed forms and printed t tables."""

import math

import pytest

from nas.common.stats import paired_t_test, regularized_incomplete_beta, t_two_sided_p


@pytest.mark.parametrize("a, b, x", [(1, 1, 0.3), (2.5, 1, 0.7), (1, 3, 0.2), (0.5, 0.5, 0.25)])
def test_incomplete_beta_closed_forms(a, b, x):
    closed = {
        (1, 1): x,
        (2.5, 1): x**2.5,
        (1, 3): 1 - (1 - x) ** 3,  # I_x(a,1) = x^a, I_x(1,b) = 1-(1-x)^b
        (0.5, 0.5): 2 / math.pi * math.asin(math.sqrt(x)),
    }[(a, b)]
    assert regularized_incomplete_beta(a, b, x) == pytest.approx(closed, rel=1e-12)


@pytest.mark.parametrize("t", [0.3, 1.0, 2.5, 12.706, 80.0])
def test_t_tails_with_one_and_two_degrees_of_freedom(t):
    assert t_two_sided_p(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(t), rel=1e-10)  # Cauchy
    assert t_two_sided_p(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-10)


@pytest.mark.parametrize(
    "df, t, p",
    [  # two-sided critical values as printed in t tables (3 decimals)
        (1, 12.706, 0.05),
        (2, 4.303, 0.05),
        (4, 2.776, 0.05),
        (10, 2.228, 0.05),
        (30, 2.042, 0.05),
        (5, 4.032, 0.01),
        (9, 3.250, 0.01),
        (20, 2.845, 0.01),
        (3, 2.353, 0.10),
        (60, 1.671, 0.10),
    ],
)
def test_t_table_values(df, t, p):
    assert t_two_sided_p(t, df) == pytest.approx(p, abs=2e-4)


def test_paired_test_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, t = 2 / (1/√3) = 3.4641, df 2: p = 1 - t/√(2+t²) = 0.0742
    result = paired_t_test([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    assert result.mean_difference == 2 and result.df == 2 and result.t == pytest.approx(math.sqrt(12))
    assert result.p == pytest.approx(1 - math.sqrt(12) / math.sqrt(14), rel=1e-10)
    assert paired_t_test([1.0, 2.0], [2.0, 3.0]).p == 0.0  # the same difference every seed
    assert paired_t_test([1.0, 2.0], [1.0, 2.0]).p == 1.0
    assert paired_t_test([1.0], [2.0]) is None
