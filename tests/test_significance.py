"""tagger.significance: the test over training runs (ASO, deepsig's) on small tables worked by hand,
and the paired bootstrap over test sentences: span counts against seqeval, and answers known by hand."""

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


# -- over training runs: Almost Stochastic Order ------------------------------------------------


@pytest.fixture
def few_aso_iterations(monkeypatch):
    """ASO on 50 bootstrap iterations, not 1000 (seconds each), for figures the scores fix (where every resample
    has the scores' violation ratio, ε_min is exact at any count) or that lie far from the bound asserted. The
    cache of figures is emptied before and after, so none computed here reaches another test."""
    monkeypatch.setattr(significance, "ASO_ITERATIONS", 50)
    significance._aso.cache_clear()
    yield
    significance._aso.cache_clear()


def test_runs_all_above_the_others_dominate_them_and_all_below_are_dominated(few_aso_iterations):
    """A's scores all above B's: every quantile of A is above B's, in the scores as in each bootstrap
    resample of them, so every violation ratio is 0, their spread is 0, and ε_min = 0 exactly. The
    other way round every quantile is below: ε_min near 1. Δ is the mean of the per-seed
    differences, (0.03 + 0.04 + 0.03) / 3."""
    a, b = [0.82, 0.85, 0.83], [0.79, 0.81, 0.80]
    test = significance.seed_level_test(a, b)
    assert (test.seeds, test.epsilon_min, test.verdict) == (3, 0.0, "better")
    assert test.epsilon_min_reverse > 0.99
    assert test.mean_difference == pytest.approx(0.10 / 3, abs=1e-15)
    back = significance.seed_level_test(b, a)
    assert back.epsilon_min > 0.99 and back.epsilon_min_reverse < 0.2
    assert back.verdict == "worse" and back.mean_difference == pytest.approx(-0.10 / 3, abs=1e-15)


def test_constant_runs_below_give_deepsigs_grid_value_exactly(few_aso_iterations):
    """Each model's runs all score the same, B's above A's: the quantile functions differ by 0.1 at
    every t of deepsig's grid (t = 0.005, ..., 0.995: 199 points), all of it violation, but the
    violated part leaves out the first point, so the ratio is 198/199 in the scores and in every
    resample: no spread, ε_min = 198/199; the reverse is 1/199."""
    test = significance.seed_level_test([0.7, 0.7], [0.8, 0.8])
    assert test.epsilon_min == pytest.approx(198 / 199, abs=1e-12)
    assert test.epsilon_min_reverse == pytest.approx(1 / 199, abs=1e-12) and test.verdict == "worse"


def test_equal_runs_are_undecided(few_aso_iterations):
    """Runs that all score the same in both models: no distance between the quantile functions, a
    violation ratio of 1/2 (deepsig's convention) in the scores and in every resample, so ε_min = 1/2
    both ways. The same scores in another seed order: the violation ratio is 1/2 again, and the
    resamples' spread lifts both ε_min alike."""
    test = significance.seed_level_test([0.6, 0.6], [0.6, 0.6])
    assert (test.epsilon_min, test.epsilon_min_reverse, test.verdict) == (0.5, 0.5, "undecided")
    assert test.mean_difference == 0.0
    swapped = significance.seed_level_test([0.5, 0.7], [0.7, 0.5])
    assert swapped.epsilon_min == pytest.approx(swapped.epsilon_min_reverse, abs=1e-12) and swapped.epsilon_min > 0.5
    assert swapped.verdict == "undecided" and swapped.mean_difference == 0.0


def test_the_forward_figure_is_deepsigs_aso_and_the_same_each_time():
    """ε_min of A over B is deepsig's `aso` at the same confidence, iterations and seed; the test
    leaves numpy's global generator as it found it (deepsig seeds it)."""
    from deepsig import aso

    a, b = [0.85, 0.86, 0.87, 0.855, 0.865], [0.84, 0.85, 0.86, 0.845, 0.85]
    np.random.seed(7)
    before = np.random.random()
    np.random.seed(7)
    test = significance.seed_level_test(a, b)
    assert np.random.random() == before
    significance._aso.cache_clear()
    assert significance.seed_level_test(a, b) == test
    expected = aso(a, b, confidence_level=0.95, num_bootstrap_iterations=1000, seed=0, show_progress=False)
    assert test.epsilon_min == pytest.approx(expected, abs=1e-12) and 0 < test.epsilon_min < 0.2


def test_unpaired_runs_of_unequal_number_are_deepsigs_aso_against_all_of_them(few_aso_iterations):
    """A cell's 3 runs against 6 runs of two random cells, unpaired: ε_min is deepsig's `aso` of the
    two sets as they are (at the same settings; the defaults' figure is tested above); Δ is the difference
    of the two means, by hand; paired, the same call is refused."""
    from deepsig import aso

    a, b = [0.86, 0.87, 0.865], [0.85, 0.86, 0.84, 0.87, 0.845, 0.855]
    test = significance.seed_level_test(a, b, paired=False)
    iterations = significance.ASO_ITERATIONS
    expected = aso(a, b, confidence_level=0.95, num_bootstrap_iterations=iterations, seed=0, show_progress=False)
    assert test.epsilon_min == pytest.approx(expected, abs=1e-12)
    assert test.seeds == 3 and test.mean_difference == pytest.approx((2.595 / 3) - (5.12 / 6), abs=1e-15)
    assert significance.seed_level_test([0.9], [0.5, 0.6], paired=False).verdict == "1 seed"
    with pytest.raises(ValueError, match="pair them by seed"):
        significance.seed_level_test(a, b)


def test_the_issues_conll03_seeds_are_undecided():
    """The per-seed differences of DARTS_V2 against the LSTM on held-out CoNLL-2003 (−2.77, +0.49,
    +0.30 F1) that a bootstrap over pooled sentences called significant (p = 0.002): over training
    runs neither model dominates, as the t-test's p = 0.60 says. The figures come at the settings the report
    names: deepsig's defaults."""
    lstm = [0.8900, 0.8920, 0.8890]
    darts = [x + d for x, d in zip(lstm, (-0.0277, 0.0049, 0.0030))]
    test = significance.seed_level_test(darts, lstm)
    assert test.verdict == "undecided" and test.epsilon_min > 0.5 and test.epsilon_min_reverse > 0.2
    assert test.mean_difference == pytest.approx((-0.0277 + 0.0049 + 0.0030) / 3)
    assert (test.confidence, test.threshold, test.iterations, test.seed) == (0.95, 0.2, 1000, 0)


def test_one_seed_gives_no_test_over_runs():
    test = significance.seed_level_test([0.8], [0.7])
    assert (test.seeds, test.epsilon_min, test.epsilon_min_reverse, test.verdict) == (1, None, None, "1 seed")
    assert test.mean_difference == pytest.approx(0.1)
    assert significance.seed_level_test([], []).verdict == "no seed"
    with pytest.raises(ValueError, match="pair them by seed"):
        significance.seed_level_test([0.8, 0.7], [0.7])
