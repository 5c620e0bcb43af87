"""GDAS and DrNAS (nas/methods/gdas.py, drnas.py, on drawn.py): their draws against their distributions
and by hand, what eval mode mixes under, GDAS's batch-statistics BatchNorm, and each method through
bin/search-lm and bin/search-tagger at tiny sizes, resumed exactly."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

import tagger_data as td
from test_regularised_methods import tiny_tagging_search
from nas.cells import genotype
from nas.cells.ops import OPS
from nas.cells.search_cell import SearchRNN
from nas.cli.search_lm import main as search_lm
from nas.common.runs import Interrupted, RunDir
from nas.common.splits import find_splits
from nas.lm.corpus import Corpus
from nas.methods.drawn import DrawnRNN
from nas.methods.drnas import DirichletPerEdge, anchor_kl
from nas.methods.gdas import GumbelHard, batch_norms
from nas.cells.mixing import MixingRule
from nas.runs.config import SearchConfig
from nas.runs.search import Searcher

METHODS = ("gdas", "drnas")
TINY = ["--emsize", "12", "--nhid", "12", "--nodes", "3", "--batch-size", "4", "--bptt", "8"]
TINY += ["--eval-batch-size", "2", "--max-batches-per-epoch", "6", "--lr", "2", "--hessian-iterations", "2"]


def searcher(lm_corpus, run_dir, method, epochs=3, seed=2, **settings):
    paths = find_splits(lm_corpus)
    config = SearchConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        method=method,
        emsize=12,
        nhid=12,
        nodes=3,
        batch_size=4,
        bptt=8,
        eval_batch_size=2,
        max_batches_per_epoch=6,
        lr=2.0,
        epochs=epochs,
        arch_lr=0.1,
        seed=seed,
        hessian_iterations=2,
        method_settings=settings,
    )
    config.validate()
    run = RunDir(run_dir)
    run.start({})
    return Searcher(config, run, Corpus.load(paths))


# -- the rules ------------------------------------------------------------------------------


def test_gdas_draws_one_op_per_edge_as_often_as_softmax_alpha_says_with_the_gumbel_softmax_gradient():
    torch.manual_seed(0)
    alpha = torch.tensor([[0.0, 1.0, -1.0, 0.5, 2.0]])
    rule = GumbelHard(tau=0.7)
    draws = torch.cat([rule.draw(alpha, [1]) for _ in range(20000)])
    assert torch.equal(draws.sum(-1), torch.ones(20000))  # one-hot in value
    assert torch.allclose(draws.mean(0), F.softmax(alpha, -1)[0], atol=0.015)  # the Gumbel-max trick
    # the gradient is the Gumbel-softmax's at τ: same noise, softmax((log_softmax(α) + g) / τ)
    alpha.requires_grad_()
    torch.manual_seed(1)
    (rule.draw(alpha, [1]) * torch.arange(5.0)).sum().backward()
    torch.manual_seed(1)
    noise = -torch.empty_like(alpha).exponential_().log()
    soft = alpha.detach().requires_grad_()
    (F.softmax((F.log_softmax(soft, -1) + noise) / 0.7, -1) * torch.arange(5.0)).sum().backward()
    assert torch.allclose(alpha.grad, soft.grad) and alpha.grad.abs().sum() > 0


def test_gdas_settles_on_each_edges_most_likely_op_and_derives_from_softmax():
    alpha = torch.tensor([[0.0, 0.1, 0.3, 0.2, 0.0], [2.0, 0.0, 0.0, 0.1, 0.0]])
    rule = GumbelHard(tau=5.0)
    assert torch.equal(rule.settled(alpha, [2]), F.one_hot(torch.tensor([2, 0]), 5).float())
    assert torch.equal(rule.normalise(alpha, [2]), F.softmax(alpha, -1))
    assert rule.derive(rule.normalise(alpha, [2]), [2]) == [[(OPS[2], 0)]]  # edge 1's `none` is never kept


def test_drnas_weights_by_hand_and_its_draws_average_to_them_with_pathwise_gradients():
    alpha = torch.tensor([[0.0, -1.0, 1.0]])  # β = ELU(α) + 1 = (1, e^-1, 2)
    beta = torch.tensor([1.0, math.exp(-1.0), 2.0])
    rule = DirichletPerEdge()
    assert torch.allclose(rule.normalise(alpha, [1])[0], beta / beta.sum())
    assert torch.equal(rule.settled(alpha, [1]), rule.normalise(alpha, [1]))
    torch.manual_seed(0)
    alpha.requires_grad_()
    draws = rule.draw(alpha.expand(40000, 3), [1])
    assert torch.allclose(draws.sum(-1), torch.ones(40000))
    assert torch.allclose(draws.mean(0), beta / beta.sum(), atol=0.01)
    draws[:, 2].mean().backward()  # ∂E[θ_2]/∂α by the pathwise derivative, against the mean's by hand
    total = beta.sum()
    dbeta = torch.tensor([1.0, math.exp(-1.0), 1.0])  # ELU'(α) = e^α below 0, 1 above
    by_hand = torch.tensor([-beta[2] / total**2, -beta[2] / total**2, 1 / total - beta[2] / total**2]) * dbeta
    assert torch.allclose(alpha.grad[0], by_hand, atol=0.01)


def test_drnas_anchor_kl_is_zero_at_the_flat_dirichlet_and_the_beta_kl_by_hand():
    assert anchor_kl(torch.zeros(3, 5)).item() == pytest.approx(0.0, abs=1e-6)
    a, b = 3.0, 1.5  # α = (2, 0.5): β = (3, 1.5); KL(Beta(a, b) ‖ Beta(1, 1)) by its closed form
    dg = lambda x: torch.special.digamma(torch.tensor(x)).item()  # noqa: E731
    log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    expected = -log_beta + (a - 1) * dg(a) + (b - 1) * dg(b) - (a + b - 2) * dg(a + b)
    assert anchor_kl(torch.tensor([[2.0, 0.5]])).item() == pytest.approx(expected, rel=1e-5)


class Fixed(MixingRule):
    def __init__(self, weights):
        self.weights = weights

    def normalise(self, alpha, layout):
        return self.weights


def test_gdas_eval_mode_is_the_one_hot_cell_of_alphas_argmax_normalised_by_its_own_batch():
    """What validation computes: the cell of every edge's most likely op, each state normalised
    with the statistics of the batch in front of it (the DARTS search cell in training mode under
    those one-hot weights), whatever the training forwards before it ran."""
    torch.manual_seed(0)
    layer = DrawnRNN(4, 4, 3, GumbelHard(tau=1.0))
    layer.bn = batch_norms(4, 3)
    with torch.no_grad():
        layer.alpha.normal_()
    x = torch.randn(5, 3, 4)
    for _ in range(3):  # training forwards on drawn cells leave nothing behind
        layer(torch.randn(5, 3, 4) * 10)
    layer.eval()
    with torch.no_grad():
        out, _ = layer(x)
        reference = SearchRNN(4, 4, 3, Fixed(layer.rule.settled(layer.alpha, 3)))
        reference.load_state_dict(layer.state_dict(), strict=False)
        expected, _ = reference.train()(x)  # training mode: batch statistics
    assert torch.allclose(out, expected, atol=1e-6)
    assert torch.equal(layer.mixing_weights(), F.softmax(layer.alpha, -1))  # outside a forward: the distribution


def test_gdas_validation_stays_finite_where_running_statistics_diverged(lm_corpus, tmp_path):
    """Seed 1 of this tiny search went NaN in its first validation when GDAS's cell kept the DARTS search
    cell's running statistics (docs/concepts/search-methods.md, GDAS)."""
    s = searcher(lm_corpus, tmp_path, "gdas", epochs=1, seed=1)
    s.run()
    assert all(math.isfinite(r["valid_ppl"]) and r["valid_ppl"] < 100 for r in s.run_dir.read_log())


@pytest.mark.parametrize("method", METHODS)
def test_a_resumed_search_equals_an_uninterrupted_one(lm_corpus, tmp_path, method):
    """The draws come from the saved RNG, and GDAS's epoch (its τ) from the checkpoint."""
    whole = searcher(lm_corpus, tmp_path / "whole", method)
    whole.run()

    def stop_mid_second_epoch(s):
        if s.epoch == 1 and s.batch == 3:
            s.stop.request()

    cut = searcher(lm_corpus, tmp_path / "cut", method)
    with pytest.raises(Interrupted):
        cut.run(on_batch=stop_mid_second_epoch)
    resumed = Searcher(cut.config, RunDir(tmp_path / "cut"), Corpus.load(find_splits(lm_corpus)))
    resumed.load_state(RunDir(tmp_path / "cut").load_checkpoint())
    resumed.run()
    assert torch.equal(resumed.rnn.alpha, whole.rnn.alpha) and torch.equal(resumed.rnn.w0, whole.rnn.w0)


def test_gdas_tau_falls_from_its_max_to_its_min_over_the_epochs(lm_corpus, tmp_path):
    s = searcher(lm_corpus, tmp_path, "gdas", tau_max=4.0, tau_min=1.0)
    taus = []
    s.run(on_batch=lambda searcher: taus.append((searcher.epoch, searcher.rnn.rule.tau)))
    assert sorted(set(taus)) == [(0, 4.0), (1, 2.5), (2, 1.0)]


# -- the commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, flags, settings",
    [
        ("gdas", ["--tau-max", "5"], {"tau_max": 5.0, "tau_min": 0.1}),
        ("drnas", ["--dirichlet-kl", "0.001"], {"dirichlet_kl": 0.001}),
    ],
)
def test_search_lm_runs_each_method_and_stores_its_settings(lm_corpus, tmp_path, method, flags, settings):
    run = tmp_path / "run"
    args = ["--data", str(lm_corpus), "--method", method, "--epochs", "2", "--arch-lr", "0.1", "--run-dir", str(run)]
    result = CliRunner().invoke(search_lm, [*args, "--out", str(tmp_path / "cell.json"), *TINY, *flags])
    assert result.exit_code == 0, result.output
    stored = json.loads((run / "config.json").read_text())["method_settings"]
    assert stored == settings
    cell = genotype.load(tmp_path / "cell.json")
    assert cell.provenance["method"] == method and cell.provenance["settings"]["method_settings"] == stored
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2] and log[0]["alpha"] != log[1]["alpha"]
    assert all(math.isfinite(r["valid_ppl"]) and math.isfinite(r["eigenvalue"]) for r in log)


def test_search_tagger_runs_each_method(tmp_path, restore_flair_logging):
    td.write_conll03(tmp_path / "data")
    vectors = td.write_vectors(tmp_path / "vectors.txt")
    for method in METHODS:
        run = tmp_path / method
        result = tiny_tagging_search(tmp_path / "data", vectors, method, run)
        assert result.exit_code == 0, (method, result.output)
        log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in log] == [1, 2] and log[0]["alpha"] != log[1]["alpha"]
        assert all(math.isfinite(r["valid_ppl"]) for r in log)
        assert genotype.load(run / "genotype.json").provenance["method"] == method


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--method", "darts", "--tau-max", "5"], "--tau-max: only with --method gdas"),
        (["--method", "gdas", "--dirichlet-kl", "1"], "--dirichlet-kl: only with --method drnas"),
        (["--method", "gdas", "--tau-min", "0"], "--tau-min: must be positive, got 0.0"),
        (["--method", "gdas", "--eval-batch-size", "1"], "--eval-batch-size 1: --method gdas normalises with each"),
    ],
)
def test_a_flag_that_does_not_fit_is_one_line(lm_corpus, tmp_path, flags, says):
    run = ["--data", str(lm_corpus), "--run-dir", str(tmp_path / "run")]
    result = CliRunner().invoke(search_lm, [*run, *TINY, *flags])  # flags last: a repeated flag takes the last value
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and says in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "run").exists()
