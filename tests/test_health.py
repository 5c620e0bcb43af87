"""Search health (nas.runs.health): the Hessian eigenvalue, DARTS-ES, op shares and the convergence rule."""

import json
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from torch.func import functional_call

from nas.cells.search_cell import SearchRNN
from nas.cli.search_lm import main as search_lm
from nas.fast import gemm
from nas.lm.model import RNNModel, lm_loss
from nas.cells.mixing import SoftmaxPerEdge
from nas.methods.darts import Darts
from nas.runs import health

SIZES = [
    "--emsize",
    "12",
    "--nhid",
    "12",
    "--nodes",
    "3",
    "--batch-size",
    "4",
    "--bptt",
    "8",
    "--eval-batch-size",
    "2",
    "--lr",
    "2",
]
TINY = [*SIZES, "--max-batches-per-epoch", "6"]


def _tiny_model() -> tuple[RNNModel, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    rnn = SearchRNN(5, 5, steps=2, rule=Darts.rule)
    model = RNNModel(11, 5, rnn, dropout=0.0, dropouti=0.0).double().eval()
    with torch.no_grad():  # larger than the DARTS initialisation, so that the Hessian is far from zero
        for p in model.parameters():
            p.normal_(0, 1)
    words, targets = torch.randint(11, (6, 3)), torch.randint(11, (6, 3))
    return model, words, targets


def test_dominant_eigenvalue_matches_the_exact_hessian():
    model, words, targets = _tiny_model()
    alpha = model.rnn.alpha

    def loss_of(a: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, {"rnn.alpha": a}, (words, None))[0]
        return lm_loss(logits, targets)

    exact = torch.autograd.functional.hessian(loss_of, alpha.detach()).reshape(alpha.numel(), alpha.numel())
    eigenvalues = torch.linalg.eigvalsh(exact)
    expected = float(eigenvalues[eigenvalues.abs().argmax()])
    found, iterations = health.dominant_eigenvalue(lambda: loss_of(alpha), [alpha], iterations=2000, tolerance=1e-13)
    assert abs(expected) > 1e-3  # not vacuous
    assert found == pytest.approx(expected, rel=1e-6)
    assert iterations > 1


def test_hessian_vector_product_through_onednn_linear_equals_plain_linear():
    """The decoder's oneDNN linear records plain products under create_graph, so second derivatives stay exact."""
    torch.manual_seed(1)
    x = torch.randn(7, 6, requires_grad=True)
    weight = torch.randn(9, 6)
    v = [torch.randn(7, 6)]
    linear = gemm.Gemm("onednn").linear
    ours = health.hessian_vector_product(linear(torch.tanh(x), weight).pow(2).sum(), [x], v)
    plain = health.hessian_vector_product(F.linear(torch.tanh(x), weight).pow(2).sum(), [x], v)
    torch.testing.assert_close(ours[0], plain[0], rtol=1e-4, atol=1e-4)


def test_early_stop_rule_fires_when_the_window_mean_grows_by_a_third():
    stop = health.EarlyStop(window=2, ratio=0.75)
    alphas = [{"a": torch.full((1,), float(e))} for e in range(1, 7)]
    fired = [stop.update(lam, a) for lam, a in zip([1.0, 1.1, 1.2, 1.3, 2.0, 3.0], alphas)]
    # epoch 4: mean(1, 1.1) / mean(1.2, 1.3) = 0.84 ≥ 0.75; epoch 5: mean(1.1, 1.2) / mean(1.3, 2) = 0.70 < 0.75
    assert fired == [False, False, False, False, True, True]
    assert stop.stopped_at == 5 and stop.derive_epoch == 3
    assert float(stop.window_start_alpha()["a"]) == 3.0  # α of epoch 3, kept although epoch 6 came after
    again = health.EarlyStop(window=2, ratio=0.75)
    again.load_state(stop.state())
    assert again.stopped_at == 5 and float(again.window_start_alpha()["a"]) == 3.0


def test_a_flat_eigenvalue_never_stops():
    stop = health.EarlyStop(window=2, ratio=0.75)
    assert not any(stop.update(1.0, {"a": torch.zeros(1)}) for _ in range(20))


def _log(epochs, genotype=lambda e: [[["tanh", 0]]], mad=lambda e: 0.1, ppl=lambda e: 300.0):
    return [{"epoch": e, "genotype": genotype(e), "mad": mad(e), "valid_ppl": ppl(e)} for e in range(1, epochs + 1)]


def test_convergence_rule():
    assert health.convergence(_log(8))["converged"]
    assert not health.convergence(_log(5))["converged"]  # too short to judge
    changed = health.convergence(_log(8, genotype=lambda e: [[["tanh" if e < 8 else "relu", 0]]]))
    assert not changed["converged"] and not changed["genotype_unchanged"]
    moving = health.convergence(_log(8, mad=lambda e: 0.1 * (1.02**e)))  # 1.02^5 − 1 = 10% over the window
    assert not moving["converged"] and moving["mad_change"] == pytest.approx(1.02**5 - 1)
    improving = health.convergence(_log(8, ppl=lambda e: 300 * 0.98**e))  # 2% an epoch
    assert not improving["converged"] and improving["largest_ppl_gain"] == pytest.approx(0.02)
    assert health.convergence(_log(8, ppl=lambda e: 300 * 0.995**e))["converged"]  # 0.5% an epoch


def test_convergence_of_a_search_without_alpha_follows_its_best_candidates_score():
    log = [
        {
            "epoch": e,
            "genotype": [[["relu", e % 2]]],
            "valid_ppl": 900.0 - 50 * e,
            "best_candidate": [[["tanh", e % 2]]],
            "best_candidate_ppl": 300.0 + 0.5 * (e % 2),
        }
        for e in range(1, 8)
    ]
    verdict = health.convergence(log)  # the best of near-ties flips, its score holds within 0.2%
    assert verdict["converged"] and verdict["largest_ppl_change"] == pytest.approx(0.5 / 300)
    log[-1]["best_candidate_ppl"] = 305.0  # 1.7% worse: not stable either
    assert not health.convergence(log)["converged"]
    enas = [{"epoch": e, "genotype": [[["relu", 0]]], "valid_ppl": 300.0 * 0.98**e} for e in range(1, 8)]
    assert health.convergence(enas)["largest_ppl_change"] == pytest.approx(0.02)  # ENAS: its cell's validation


def test_op_shares_and_identity_warning():
    weights = torch.tensor([[0.5, 0.5, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0]])
    assert health.op_shares(weights) == {"none": 0.25, "identity": 0.75, "tanh": 0.0, "relu": 0.0, "sigmoid": 0.0}
    collapsed = [[("identity", 0)], [("identity", 1)], [("tanh", 0)]]
    assert health.cell_shares(collapsed)["identity"] == pytest.approx(2 / 3)
    assert "67% of the derived cell's edges are identity" in health.identity_warning(collapsed)
    assert health.identity_warning([[("identity", 0)], [("tanh", 1)]]) is None
    assert "Hessian" not in health.identity_warning(collapsed, has_alpha=False)  # random search, ENAS: no α


def _alpha_log(moves: list[float], start: float = 0.0) -> list[dict]:
    """A log of one node with one edge (α 1 × 5 ops, DARTS's softmax) whose mixing weight of the
    first op changes by moves[i] between epochs i + 1 and i + 2, from `start` at epoch 1 (α = 0, all
    weights 0.2, before it), with α's values shifted by one per epoch, which a softmax ignores."""
    log, weight = [], 0.2 + start
    for epoch, move in enumerate([0.0] + moves, start=1):
        weight += move
        rest = (1 - weight) / 4
        alpha = torch.tensor([[weight, rest, rest, rest, rest]]).log() + epoch  # softmax(alpha) = the weights
        log.append({"epoch": epoch, "alpha": alpha.tolist()})
    return log


def _darts_weights(alpha: torch.Tensor) -> torch.Tensor:
    return SoftmaxPerEdge().normalise(alpha, 1)


def test_alpha_that_stopped_moving_is_called_a_stall():
    # the I-DARTS search of the study: about 0.3 an epoch until epoch 6, then 0.055 shrinking to 0.005
    moves = [0.114, 0.284, 0.296, 0.185, 0.317, 0.055, 0.028, 0.011, 0.011, 0.010, 0.009, 0.007, 0.005]
    moves = [m / 2 for m in moves]  # mixing weights stay in (0, 1)
    stalled = health.alpha_stall(_alpha_log(moves), _darts_weights)
    assert stalled["stalled"] and stalled["earlier_epoch"] == 6
    assert stalled["recent"] == pytest.approx(0.0055, rel=1e-4) and stalled["earlier"] == pytest.approx(
        0.1585, rel=1e-4
    )
    warning = health.alpha_stall_warning(stalled)
    assert warning.startswith("warning: α has nearly stopped moving") and "0.0055, against 0.16 in epoch 6" in warning
    # DARTS decayed to epoch 50 moved its weights by 70% of their earlier largest: still searching
    settling = health.alpha_stall(_alpha_log([0.1, 0.105, -0.075, 0.07, -0.06, 0.065, -0.069]), _darts_weights)
    assert not settling["stalled"] and health.alpha_stall_warning(settling) is None
    assert health.alpha_stall(_alpha_log([0.05] * 4), _darts_weights) is None  # too few epochs to tell
    no_alpha = [{"epoch": e, "valid_ppl": 300.0} for e in range(1, 9)]  # ENAS
    assert health.alpha_stall(no_alpha, _darts_weights) is None


def test_mixing_weights_that_moved_only_in_the_first_epoch_are_called_a_stall():
    """The first epoch's change counts from α = 0, where α starts, and α's shifts that leave the
    mixing weights alone count for nothing: an ESS search of 2026-11-26 moved its weights by 0.05 in its
    first round and by 0.001 at most a round in its last five, while α itself moved 0.03 a round."""
    log = _alpha_log([0.003, 0.001, 0.0008, 0.001, 0.0009, 0.0007, 0.0005], start=0.05)
    stalled = health.alpha_stall(log, _darts_weights)
    assert stalled["stalled"] and stalled["earlier_epoch"] == 1
    assert stalled["earlier"] == pytest.approx(0.05, rel=1e-4) and stalled["recent"] == pytest.approx(0.001, rel=1e-3)
    raw = [torch.tensor(r["alpha"]) for r in log]
    assert max(float((b - a).abs().max()) for a, b in zip(raw, raw[1:])) > 0.99  # α shifted by 1 an epoch


def _search(args):
    return CliRunner().invoke(search_lm, args, catch_exceptions=False)


def test_search_logs_health_and_metrics(lm_corpus, tmp_path):
    result = _search(["--data", str(lm_corpus), "--epochs", "2", "--run-dir", str(tmp_path / "run"), *TINY])
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    for record in log:
        assert record["eigenvalue"] == record["eigenvalue"] and record["eigen_iterations"] >= 1  # finite, not NaN
        assert sum(record["alpha_share"].values()) == pytest.approx(1.0)
        assert sum(record["cell_share"].values()) == pytest.approx(1.0)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["health"]["convergence"]["converged"] is False  # two epochs cannot show it
    assert metrics["health"]["eigenvalue_last"] == log[-1]["eigenvalue"]
    assert "converged by the rule: no" in result.output


EPOCHS = {
    "darts": ["--epochs", "6", *TINY],
    "idarts": ["--method", "idarts", "--epochs", "6", *TINY],
    "ess": ["--method", "ess", "--rounds", "6", "--intra-steps", "2", "--inter-steps", "2", *SIZES],
}


@pytest.mark.parametrize("method", ["darts", "idarts", "ess"])
def test_early_stop_derives_from_alpha_of_the_window_start(lm_corpus, tmp_path, method):
    growing = iter([(1.0, 3), (2.0, 3), (4.0, 3), (8.0, 3), (16.0, 3), (32.0, 3)])
    with mock.patch("nas.runs.bilevel.dominant_eigenvalue", lambda *a, **k: next(growing)):
        result = _search(
            [
                "--data",
                str(lm_corpus),
                "--early-stop",
                "hessian",
                "--early-stop-window",
                "2",
                "--run-dir",
                str(tmp_path / "run"),
                "--out",
                str(tmp_path / "cell.json"),
                *EPOCHS[method],
            ]
        )
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    # epoch 4: mean(1, 2) / mean(4, 8) = 0.25 < 0.75, so the search stops there and derives from epoch 2
    assert len(log) == 4 and log[-1]["early_stop"] == {"stopped_at": 4, "derive_epoch": 2}
    assert log[1]["alpha"] != log[3]["alpha"]  # α moved after the window's start
    cell = json.loads((tmp_path / "cell.json").read_text())
    assert cell["nodes"] == log[1]["genotype"]
    if method == "ess":
        assert cell["inter"]["f"] == log[1]["inter"]["f"] and cell["inter"]["g"] == log[1]["inter"]["g"]
    assert cell["provenance"]["search_valid_ppl"] == pytest.approx(log[1]["valid_ppl"])
    assert cell["provenance"]["health"]["early_stop"]["derive_epoch"] == 2
    assert "early stop (DARTS-ES)" in result.output


def test_early_stop_converged_stops_at_the_first_epoch_the_rule_holds_and_derives_from_alpha_then(lm_corpus, tmp_path):
    """The rule (mocked here: it holds from the third epoch on; the rule itself is tested above) ends the search at
    that epoch of 6, with the cell of the last epoch's α, and every record of the stop says so."""
    seen = []

    def rule(log, *args, **kwargs):
        seen.append(len(log))
        return {"converged": len(log) >= 3, "rule": "the test's"}

    with mock.patch("nas.runs.bilevel.convergence", rule):
        result = _search(
            [
                "--data",
                str(lm_corpus),
                "--early-stop",
                "converged",
                "--run-dir",
                str(tmp_path / "run"),
                "--out",
                str(tmp_path / "cell.json"),
                *EPOCHS["darts"],
            ]
        )
    assert result.exit_code == 0, result.output
    assert seen[:3] == [1, 2, 3]  # each epoch's record judged with the epochs logged before it
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert len(log) == 3 and log[-1]["early_stop"] == {"stopped_at": 3, "rule": "converged"}
    assert all("early_stop" not in r for r in log[:2])
    cell = json.loads((tmp_path / "cell.json").read_text())
    assert cell["nodes"] == log[-1]["genotype"]
    assert cell["provenance"]["search_valid_ppl"] == pytest.approx(log[-1]["valid_ppl"])
    assert cell["provenance"]["health"]["early_stop"] == {"stopped_at": 3, "rule": "converged"}
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["health"]["early_stop"] == {"stopped_at": 3, "rule": "converged"}
    assert "stopped at epoch 3: the convergence rule held" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--method", "random", "--early-stop", "hessian"], "--early-stop: this method has no α"),
        (["--early-stop", "hessian", "--hessian-iterations", "0"], "--early-stop hessian: needs the eigenvalue"),
        (["--early-stop-ratio", "1.5"], "--early-stop-ratio"),
    ],
)
def test_bad_health_flags_name_the_flag(lm_corpus, tmp_path, args, message):
    result = _search(["--data", str(lm_corpus), "--run-dir", str(tmp_path / "run"), *TINY, *args])
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "run").exists()


def test_random_search_logs_its_panels_best(lm_corpus, tmp_path):
    result = _search(
        [
            "--data",
            str(lm_corpus),
            "--method",
            "random",
            "--epochs",
            "2",
            "--candidates",
            "3",
            "--track-candidates",
            "4",
            "--run-dir",
            str(tmp_path / "run"),
            *TINY,
        ]
    )
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    for record in log:
        assert record["best_candidate_ppl"] <= record["panel_median_ppl"]
        assert record["genotype"] == record["best_candidate"]  # the epoch's validation runs the panel's best
        assert "eigenvalue" not in record and "alpha_share" not in record


def test_a_time_budget_ends_the_search_and_it_still_writes_its_genotype(lm_corpus, tmp_path):
    # 1e-9 minutes (60 ns): spent by any batch (0.0001, 6 ms, was not, by a tiny batch on a fast host)
    result = _search(
        ["--data", str(lm_corpus), "--epochs", "5", "--time-budget", "1e-9", "--run-dir", str(tmp_path / "run"), *TINY]
    )
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert len(log) == 1 and log[0]["step"] == 1  # the budget ran out after the first batch
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs_run"] == 1 and metrics["genotype"]["nodes"] == log[0]["genotype"]


def test_max_rollbacks_lets_a_search_go_on_after_a_non_finite_batch(lm_corpus, tmp_path):
    from nas.runs.loop import Diverged
    from nas.runs.search import Searcher

    step, failed = Searcher.weight_step, []

    def fails_once_in_epoch_two(self, *args):
        if self.epoch == 1 and not failed:
            failed.append(self.batch)
            raise Diverged("gradient norm became inf in epoch 2, batch 1")
        return step(self, *args)

    with mock.patch.object(Searcher, "weight_step", fails_once_in_epoch_two):
        refused = _search(["--data", str(lm_corpus), "--epochs", "2", "--run-dir", str(tmp_path / "none"), *TINY])
        failed.clear()
        result = _search(
            [
                "--data",
                str(lm_corpus),
                "--epochs",
                "2",
                "--max-rollbacks",
                "1",
                "--run-dir",
                str(tmp_path / "run"),
                *TINY,
            ]
        )
    assert refused.exit_code == 2 and "gradient norm became inf" in refused.output  # the default: no rollback
    assert result.exit_code == 0, result.output
    assert "rollback 1 of at most 1" in result.output
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2]
