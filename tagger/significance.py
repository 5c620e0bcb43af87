"""Significance at two levels: over training runs (the headline), and over test sentences (per seed).

Is cell A better than cell B? A trained tagger is one draw from A's distribution over training
runs (seed: initialisation, data order, dropout, dev split), so the question is about runs, and
`seed_level_test` answers it: Almost Stochastic Order (ASO; Dror, Shlomov and Reichart, "Deep
Dominance - How to Properly Compare Deep Neural Models", ACL 2019), as the `deepsig` package of
Ulmer, Hardmeier and Frellsen ("deep-significance", 2022) computes it, on one test F1 per run.
It returns ε_min, an upper bound (at confidence 1 − α, α = 0.05) on how far A's score
distribution violates stochastic dominance over B's: 0 when every quantile of A lies above B's,
1 when every quantile lies below; ε_min < 0.5 says A is better more often than not, and
`ASO_THRESHOLD` (0.2, deepsig's recommendation) is the verdict's bar. Both directions come from one
bootstrap (`multi_aso`; ε_min of B over A uses the same σ), with a fixed resampling seed, so the
same scores give the same figures. The effect size beside it is the mean over seeds of A − B.

The paired bootstrap over test sentences holds the trained models fixed: it says whether two
trained taggers differ beyond the luck of the test set, not whether another seed would give the
same ordering. It stays as the per-seed detail.

Dror et al., "The Hitchhiker's Guide to Testing Statistical Significance in Natural Language
Processing" (ACL 2018), recommend the bootstrap for F1, which is not a mean over sentences and
has no known distribution. The test set's sentences are the sample: resampled with replacement
(the same resample for every model, so the models stay paired), each model's span F1 is computed
again from the resampled sentences' span counts, and the difference δ* is recorded. The 95%
interval is the 2.5th and 97.5th percentiles of δ*. The p-value asks how often a difference at
least as far from the observed δ as δ is from 0 arises by resampling alone (the shifted
bootstrap, as Berg-Kirkpatrick et al., "An Empirical Investigation of Statistical Significance in
NLP", EMNLP 2012, use it): p = P(|δ* − δ| ≥ |δ|), two-sided, so identical predictions give p = 1.

Several seeds of a model may be pooled by summing their span counts sentence by sentence (micro F1
over seeds × sentences); the resample of sentences is the same for all of them. Pooled, the
bootstrap still sees only the test set's variance, not the seeds': it is no answer to "is A
better than B?". Against several models (the random cells) the difference is from the mean of
their F1s. The resampling is scipy's (`scipy.stats.bootstrap`, percentile interval); the p-value is
read off its resamples.
"""

from __future__ import annotations

import functools
import math
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nas.common.errors import InputError

from .tag_schemes import spans

SAMPLES = 10_000
CONFIDENCE = 0.95

ASO_CONFIDENCE = 0.95  # deepsig's default, for each comparison (no correction for a table's number of them)
ASO_ITERATIONS = 1000  # deepsig's default: the bootstrap iterations that estimate ε_min's spread
ASO_SEED = 0  # deepsig's resampling seed: the same scores give the same ε_min
ASO_THRESHOLD = 0.2  # ε_min below it: A is (almost stochastically) better; deepsig recommends 0.2, 0.5 is the loosest


@dataclass(frozen=True)
class SeedTest:
    """The test over training runs of `seed_level_test`: A's scores against B's."""

    seeds: int  # the runs of A it rests on (paired: of each model)
    mean_difference: float | None  # mean over the seeds of A − B (None with no seed)
    epsilon_min: float | None  # ASO's ε_min of "A is better than B" (None with fewer than 2 seeds)
    epsilon_min_reverse: float | None  # of "B is better than A"
    verdict: str  # "better" (A), "worse" (B better), "undecided", or "1 seed" / "no seed": no test
    confidence: float = ASO_CONFIDENCE
    threshold: float = ASO_THRESHOLD
    iterations: int = ASO_ITERATIONS
    seed: int = ASO_SEED


def seed_level_test(a: list[float], b: list[float], paired: bool = True) -> SeedTest:
    """Is A better than B over training runs? `a` and `b` hold one score per run: per seed, paired by
    position, or (`paired=False`) any number of runs each, e.g. a cell's seeds against every run of
    several random cells, which counts the spread between random cells as well as between seeds.

    ASO (deepsig's `multi_aso` on the two models, which gives ε_min both ways from one bootstrap)
    at `ASO_CONFIDENCE`, `ASO_ITERATIONS` and `ASO_SEED`; the verdict is "better" when ε_min of
    A over B is below `ASO_THRESHOLD`, "worse" when that of B over A is, else "undecided" (both
    cannot be: the two ε_min add up to at least 1). With fewer than 2 runs a side there is no test.
    The mean difference is mean(A) − mean(B), which for paired runs is the mean per-seed difference.
    """
    if paired and len(a) != len(b):
        raise ValueError(f"seed-level test: {len(a)} scores of A against {len(b)} of B; pair them by seed")
    for name, scores in (("A", a), ("B", b)):
        bad = next((k for k, x in enumerate(scores) if not math.isfinite(x)), None)
        if bad is not None:  # deepsig would answer "undecided" with ε_min NaN
            raise ValueError(f"seed-level test: score {bad + 1} of {name} is {scores[bad]}, not a finite number")
    if not (a and b):
        difference = None
    else:
        difference = (
            statistics.fmean(x - y for x, y in zip(a, b)) if paired else statistics.fmean(a) - statistics.fmean(b)
        )
    if min(len(a), len(b)) < 2:
        return SeedTest(len(a), difference, None, None, "1 seed" if a and b else "no seed")
    forward, reverse = _aso(tuple(map(float, a)), tuple(map(float, b)))
    verdict = "better" if forward < ASO_THRESHOLD else "worse" if reverse < ASO_THRESHOLD else "undecided"
    return SeedTest(len(a), difference, forward, reverse, verdict)


@functools.lru_cache(maxsize=None)  # a report rewritten as each run finishes tests the same scores again
def _aso(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, float]:
    """(ε_min of A over B, ε_min of B over A), deepsig's; numpy's global random state left as it was."""
    from deepsig import multi_aso

    state = np.random.get_state()  # deepsig seeds numpy's global generator (np.random.seed) in each iteration
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # equal score distributions: "division by zero", ε_min 0.5 each way
            # use_bonferroni=False: with two models deepsig's correction sets the confidence to 1 (ε_min NaN)
            eps = multi_aso(
                {"a": np.asarray(a), "b": np.asarray(b)},
                confidence_level=ASO_CONFIDENCE,
                use_bonferroni=False,
                num_bootstrap_iterations=ASO_ITERATIONS,
                num_jobs=1,
                show_progress=False,
                seed=ASO_SEED,
            )
    finally:
        np.random.set_state(state)
    return float(eps[0, 1]), float(eps[1, 0])


def sentence_counts(gold: list[list[str]], pred: list[list[str]]) -> np.ndarray:
    """(sentences, 3): per sentence the correct, predicted and gold spans (strict IOB2: same start, end, type)."""
    counts = np.zeros((len(gold), 3), dtype=np.int64)
    for k, (g, p) in enumerate(zip(gold, pred, strict=True)):
        gold_spans, pred_spans = set(spans(g)), set(spans(p))
        counts[k] = len(gold_spans & pred_spans), len(pred_spans), len(gold_spans)
    return counts


def f1(counts: np.ndarray) -> np.ndarray:
    """Span F1 of counts (..., 3) summed over sentences already: 2·correct / (predicted + gold); 0 with no spans."""
    denominator = counts[..., 1] + counts[..., 2]
    return np.divide(2.0 * counts[..., 0], denominator, out=np.zeros(denominator.shape), where=denominator > 0)


@dataclass(frozen=True)
class Difference:
    difference: float  # F1 of a minus the mean F1 of b, on the test set as it is
    low: float  # the 95% interval of the bootstrap differences
    high: float
    p: float  # two-sided: P(|δ* − δ| ≥ |δ|), as (resamples that far + 1) / (resamples + 1)
    samples: int


def paired_bootstrap(
    a: np.ndarray, b: list[np.ndarray], samples: int = SAMPLES, seed: int = 0, batch: int = 250
) -> Difference:
    """The F1 difference of `a` from the mean of `b`, each model's counts (seeds, sentences, 3) on the same sentences"""
    sentences = a.shape[1]
    if any(m.shape[1] != sentences for m in b):
        raise ValueError("paired bootstrap: the models were scored on different numbers of sentences")
    models = [m.sum(axis=0) for m in (a, *b)]  # seeds pooled sentence by sentence: (sentences, 3) each

    def delta(index: np.ndarray) -> np.ndarray:  # index (resamples, sentences) → δ per resample
        scores = [f1(m[index].sum(axis=1)) for m in models]
        return scores[0] - np.mean(scores[1:], axis=0)

    from scipy.stats import bootstrap

    observed = float(delta(np.arange(sentences)[None])[0])
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # identical predictions: a degenerate distribution, which is the answer
        result = bootstrap(
            (np.arange(sentences),),
            lambda index, axis: delta(index),
            vectorized=True,
            n_resamples=samples,
            batch=batch,
            confidence_level=CONFIDENCE,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    deltas = result.bootstrap_distribution
    low, high = result.confidence_interval
    if not np.isfinite(low):  # scipy gives no interval for a distribution of one value: that value
        low = high = float(deltas[0])
    extreme = int(np.sum(np.abs(deltas - observed) >= abs(observed) - 1e-12))
    p = (extreme + 1) / (samples + 1)  # never 0: one more than the resamples seen, over one more than drawn
    return Difference(observed, float(low), float(high), p, samples)


def read_predictions(path: Path) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    """(tokens, gold, predicted) per sentence of a `token gold predicted` file (train-tagger's test.conll)."""
    tokens, gold, pred = [[]], [[]], [[]]
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read the predictions ({error})") from None
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            if tokens[-1]:
                tokens.append([]), gold.append([]), pred.append([])
            continue
        if len(fields) < 3:
            raise InputError(f"{path}, line {number}: expected `token gold predicted`, got {line!r}")
        tokens[-1].append(" ".join(fields[:-2]))
        gold[-1].append(fields[-2])
        pred[-1].append(fields[-1])
    if not tokens[-1]:
        tokens.pop(), gold.pop(), pred.pop()
    return tokens, gold, pred
