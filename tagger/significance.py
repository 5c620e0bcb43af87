"""The paired bootstrap over test sentences: is one tagger's span F1 above another's beyond the luck of the test set?

Dror et al., "The Hitchhiker's Guide to Testing Statistical Significance in Natural Language
Processing" (ACL 2018), recommend the bootstrap for F1, which is not a mean over sentences and
has no known distribution. The test set's sentences are the sample: resampled with replacement
(the same resample for every model, so the models stay paired), each model's span F1 is computed
again from the resampled sentences' span counts, and the difference δ* is recorded. The 95%
interval is the 2.5th and 97.5th percentiles of δ*. The p-value asks how often a difference at
least as far from the observed δ as δ is from 0 arises by resampling alone (the shifted
bootstrap, as Berg-Kirkpatrick et al., "An Empirical Investigation of Statistical Significance in
NLP", EMNLP 2012, use it): p = P(|δ* − δ| ≥ |δ|), two-sided, so identical predictions give p = 1.

Several seeds of a model are pooled by summing their span counts sentence by sentence (micro F1
over seeds × sentences); the resample of sentences is the same for all of them. Against several
models (the random cells) the difference is from the mean of their F1s. The resampling is
scipy's (`scipy.stats.bootstrap`, percentile interval); the p-value is read off its resamples.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nas.common.errors import InputError

from .tag_schemes import spans

SAMPLES = 10_000
CONFIDENCE = 0.95


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


def paired_bootstrap(a: np.ndarray, b: list[np.ndarray], samples: int = SAMPLES, seed: int = 0,
                     batch: int = 250) -> Difference:
    """The F1 difference of `a` from the mean of `b`, each model's counts (seeds, sentences, 3) on the same sentences."""
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
        result = bootstrap((np.arange(sentences),), lambda index, axis: delta(index), vectorized=True,
                           n_resamples=samples, batch=batch, confidence_level=CONFIDENCE, method="percentile",
                           rng=np.random.default_rng(seed))
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
