"""Spread over seeds, and the paired t-test that says whether one model beats another, without scipy.

Runs of two models with the same seeds are pairs (same seed: same data order and dev split); the
test asks whether the mean of the per-seed differences is zero. Its two-sided p-value is the
Student t tail, P(|T| ≥ t) = I_{df/(df+t²)}(df/2, 1/2), with I the regularised incomplete beta
function, computed here by its continued fraction (Lentz's method; Press et al., Numerical
Recipes §6.4), which converges fast for x < (a+1)/(a+b+2) and is used through the symmetry
I_x(a, b) = 1 − I_{1−x}(b, a) elsewhere.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

_TINY = 1e-300
_EPS = 1e-15


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for a, b > 0 and 0 ≤ x ≤ 1."""
    if not (a > 0 and b > 0 and 0 <= x <= 1):
        raise ValueError(f"incomplete beta needs a, b > 0 and 0 ≤ x ≤ 1, got a={a}, b={b}, x={x}")
    if x in (0.0, 1.0):
        return x
    if x > (a + 1) / (a + b + 2):
        return 1.0 - regularized_incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # the even step d_2m
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):  # the odd step d_2m+1
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            fraction *= c * d
        if abs(c * d - 1.0) < _EPS:
            break
    return front * fraction


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with `df` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return regularized_incomplete_beta(df / 2, 0.5, df / (df + t * t))


def mean_std(values: list[float]) -> dict:
    """{"mean", "std" (sample; 0 for one value), "runs" (the values)}."""
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "runs": list(values),
    }


@dataclass(frozen=True)
class PairedT:
    mean_difference: float  # mean of a_i − b_i
    t: float
    df: int
    p: float  # two-sided


def paired_t_test(a: list[float], b: list[float]) -> PairedT | None:
    """Paired t-test of a against b (same length, paired by position); None with fewer than 2 pairs.

    Identical differences have no spread: t is ±inf (p = 0) unless they are all zero (t = 0, p = 1).
    """
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} and {len(b)}")
    if len(a) < 2:
        return None
    diffs = [x - y for x, y in zip(a, b)]
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    if sd == 0:
        t = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    else:
        t = mean / (sd / math.sqrt(len(diffs)))
    return PairedT(mean, t, len(diffs) - 1, t_two_sided_p(t, len(diffs) - 1))


def ppl(nll: float) -> float:
    """Perplexity of a mean NLL in nats (capped where exp would overflow)."""
    return math.exp(min(nll, 700.0))
