"""The paired bootstrap over test sentences (tagger.significance): span counts against seqeval, and
answers known by hand."""
import numpy as np
import pytest

from nas.common.errors import InputError
from tagger import significance
from tagger.evaluation import score, write_conll

GOLD = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG"], ["B-MISC", "O", "O"]]
PRED = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "O"], ["B-MISC", "B-LOC", "O"]]


def test_span_counts_give_seqeval_strict_f1():
    counts = significance.sentence_counts(GOLD, PRED)
    assert counts.tolist() == [[1, 2, 2], [0, 0, 1], [1, 2, 1]]  # correct, predicted, gold spans
    assert significance.f1(counts.sum(0)) == pytest.approx(score(GOLD, PRED)["f1"])
    assert significance.f1(counts.sum(0)) == 2 * 2 / (4 + 4)


def test_identical_predictions_give_p_one():
    counts = significance.sentence_counts(GOLD, PRED)[None]
    result = significance.paired_bootstrap(counts, [counts.copy()], samples=500)
    assert (result.difference, result.low, result.high, result.p) == (0.0, 0.0, 0.0, 1.0)


def test_two_sentences_against_their_enumerated_bootstrap():
    """Sentence 0: A finds its span, B misses it; sentence 1: both find theirs. δ = 1 − 0.5. The four
    equally likely resamples give δ* = 1, 0.5, 0.5, 0, so P(|δ* − δ| ≥ δ) = 1/2 and the interval is [0, 1]."""
    a = np.array([[[1, 1, 1], [1, 1, 1]]])
    b = np.array([[[0, 1, 1], [1, 1, 1]]])
    result = significance.paired_bootstrap(a, [b], samples=20_000, seed=3)
    assert result.difference == pytest.approx(0.5)
    assert result.p == pytest.approx(0.5, abs=0.015)
    assert (result.low, result.high) == (0.0, 1.0)


def test_a_clear_improvement_has_a_small_p_and_an_interval_above_zero():
    rng = np.random.default_rng(0)
    gold = np.ones((300, 3), dtype=np.int64)  # one span per sentence, predicted once
    better = gold.copy()
    better[:, 0] = rng.random(300) < 0.9  # right 90% of the time
    worse = gold.copy()
    worse[:, 0] = rng.random(300) < 0.6
    result = significance.paired_bootstrap(better[None], [worse[None]], samples=2000)
    assert result.difference == pytest.approx((better[:, 0].sum() - worse[:, 0].sum()) / 300)
    assert result.p < 0.001 and 0 < result.low < result.difference < result.high


def test_seeds_pool_sentence_by_sentence_and_several_models_by_their_mean_f1():
    rng = np.random.default_rng(1)
    runs = [np.column_stack([rng.integers(0, 2, 50), np.ones(50, int), np.ones(50, int)]) for _ in range(4)]
    pooled = significance.paired_bootstrap(np.stack(runs[:2]), [np.stack(runs[2:])], samples=300, seed=5)
    summed = significance.paired_bootstrap((runs[0] + runs[1])[None], [(runs[2] + runs[3])[None]], samples=300, seed=5)
    assert pooled == summed
    f1 = [significance.f1(r.sum(0)) for r in runs]
    against_two = significance.paired_bootstrap(runs[0][None], [runs[1][None], runs[2][None]], samples=100)
    assert against_two.difference == pytest.approx(f1[0] - (f1[1] + f1[2]) / 2)


def test_predictions_file_round_trips_and_a_bad_line_is_named(tmp_path):
    path = tmp_path / "test.conll"
    tokens = [["John", "Smith", "in", "Paris"], ["at", "IBM"], ["German", "wine", "."]]
    write_conll(path, tokens, GOLD, PRED)
    assert significance.read_predictions(path) == (tokens, GOLD, PRED)
    path.write_text("John B-PER B-PER\nSmith I-PER\n")
    with pytest.raises(InputError, match=f"^{path}, line 2: expected `token gold predicted`, got 'Smith I-PER'$"):
        significance.read_predictions(path)
