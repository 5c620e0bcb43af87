"""Equal-parameter taggers: counts against the formulas, the closest size, and train-tagger --match-params."""

import json
from pathlib import Path

import pytest
import torch

import tagger_data as td
from nas.common.parameters import closest_size, count_parameters
from nas.cells.genotype import load
from tagger.model import recurrent_layer
from tagger.sizing import match_layer, rnn_parameters

ESS_CELL = (
    Path(__file__).resolve().parent.parent / "docs" / "experiments" / "ess_ptb_joint_seed3.json"
)  # a cell with gates


def lstm_formula(ninp: int, h: int) -> int:
    """Bidirectional nn.LSTM: per direction W_ih 4h×ninp, W_hh 4h×h and two 4h biases."""
    return 2 * (4 * h * ninp + 4 * h * h + 8 * h)


def darts_formula(ninp: int, h: int, nodes: int = 8) -> int:
    """Frozen cell, no biases (docs/concepts/cell.md): per direction W0 (ninp+h)×2h and one h×2h matrix per node."""
    return 2 * (2 * h * (ninp + h) + nodes * 2 * h * h)


def test_closest_size_finds_the_nearest_count_and_ties_go_to_the_smaller_size():
    assert closest_size(lambda h: h * h, 50) == 7  # 49 against 64
    assert closest_size(lambda h: h * h, 57) == 8  # 49 is 8 away, 64 is 7
    assert closest_size(lambda h: 10 * h, 15) == 1  # 10 and 20 are both 5 away: the smaller size
    assert closest_size(lambda h: 10 * h, 3, smallest=4) == 4
    assert closest_size(lambda h: 10 * h if h != 9 else 3, 3, smallest=4, also=(9,)) == 9
    assert closest_size(lambda h: h, 1_000_003) == 1_000_003


@pytest.mark.parametrize("ninp, h", [(100, 256), (16, 7), (50, 1)])
def test_the_counts_are_the_built_layers_and_the_formulas(ninp, h):
    darts = load("darts_v2")
    assert rnn_parameters(None, ninp, h) == lstm_formula(ninp, h) == count_parameters(recurrent_layer(None, ninp, h))
    assert rnn_parameters(darts, ninp, h) == darts_formula(ninp, h) == count_parameters(recurrent_layer(darts, ninp, h))


def test_the_issues_example_an_lstm_and_darts_v2_matched_both_ways():
    darts = load("darts_v2")
    assert rnn_parameters(darts, 100, 256) / rnn_parameters(None, 100, 256) == pytest.approx(3.36, abs=0.01)
    # 4h² + 408h = 2,461,696 / 2  →  h ≈ 506.1; 18h² + 200h = 733,184 / 2  →  h ≈ 137.2
    lstm = match_layer(None, "darts_v2", darts, 256, 100)
    assert lstm.hidden_size == 506 and lstm.rnn_parameters == lstm_formula(100, 506)
    assert lstm.reference == {"cell": "darts_v2", "hidden_size": 256, "rnn_parameters": darts_formula(100, 256)}
    cell = match_layer(darts, "lstm", None, 256, 100)
    assert cell.hidden_size == 137 and cell.reference["rnn_parameters"] == lstm_formula(100, 256)
    for found, formula, target in (
        (506, lstm_formula, darts_formula(100, 256)),
        (137, darts_formula, lstm_formula(100, 256)),
    ):
        assert all(
            abs(formula(100, found) - target) < abs(formula(100, other) - target) for other in (found - 1, found + 1)
        )


def test_a_cell_with_gates_is_matched_by_its_own_count():
    ess = load(ESS_CELL)  # inter-cell gates: more parameters than its plain cell
    match = match_layer(ess, "lstm", None, 64, 16)
    assert match.rnn_parameters == count_parameters(recurrent_layer(load(ESS_CELL), 16, match.hidden_size))
    assert abs(match.rnn_parameters - lstm_formula(16, 64)) <= abs(
        rnn_parameters(ess, 16, match.hidden_size + 1) - lstm_formula(16, 64)
    )


# -- bin/train-tagger --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sizing")
    td.write_conll03(root / "data", sizes=(16, 8, 8))
    return root, [
        "--corpus",
        "conll03",
        "--data",
        str(root / "data"),
        "--embeddings",
        f"glove:{td.write_vectors(root / 'vectors.txt')}",
        "--max-epochs",
        "1",
        "--batch-size",
        "8",
    ]


def invoke(args):
    from click.testing import CliRunner

    from tagger.cli.train_tagger import main

    return CliRunner().invoke(main, args)


def test_an_lstm_matched_to_a_cell_prints_and_keeps_both_counts(data, restore_flair_logging):
    root, common = data
    out = root / "lstm-matched"
    torch.set_num_threads(1)
    result = invoke(
        ["--cell", "lstm", "--match-params", "darts_v2", "--hidden-size", "8", *common, "--run-dir", str(out)]
    )
    assert result.exit_code == 0, result.stderr
    hidden = match_layer(None, "darts_v2", load("darts_v2"), 8, 16).hidden_size
    assert hidden == 12  # 2·(4h·16 + 4h² + 8h) = 2,880 at 12 against the cell's 2·(2·8·24 + 16·64) = 2,816
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["hidden_size"] == hidden and metrics["rnn_parameters"] == lstm_formula(16, 12) == 2880
    assert metrics["matched_to"] == {"cell": "darts_v2", "hidden_size": 8, "rnn_parameters": darts_formula(16, 8)}
    assert json.loads((out / "config.json").read_text())["hidden_size"] == hidden
    assert "hidden 12, 2,880 parameters" in result.stderr and "matched to darts_v2 at hidden 8: 2,816" in result.stderr
    assert len(metrics["dev_f1_by_epoch"]) == metrics["epochs"] == 1


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["--cell", "darts_v2", "--match-params", "darts_v1"],
            "--match-params darts_v1: give a cell to size flair's LSTM",
        ),
        (["--cell", "lstm", "--match-params", "lstm:8"], "--match-params lstm:8: sizes a cell like an LSTM"),
        (["--cell", "darts_v2", "--match-params", "lstm:x"], "--match-params lstm:x: expected lstm:H"),
        (
            ["--cell", "darts_v2", "--match-params", "lstm:8", "--hidden-size", "4"],
            "--hidden-size: not with --match-params",
        ),
        (["--cell", "lstm", "--match-params", "no_such_cell"], "cell 'no_such_cell': no such file"),
    ],
)
def test_match_params_errors_name_the_problem(data, args, says):
    root, common = data
    result = invoke([*args, *common, "--run-dir", str(root / "never")])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {says}") and result.stderr.count("\n") == 1
    assert not (root / "never").exists()


def test_the_time_budget_stops_before_an_epoch_that_would_end_past_it(monkeypatch):
    from flair.trainers.plugins.base import TrainingInterrupt

    from tagger import train

    clock = iter([0.0, 30.0, 40.0, 40.0, 70.0, 80.0, 80.0])  # epoch 1: 0–40 s, epoch 2: 40–80 s
    monkeypatch.setattr(train.time, "perf_counter", lambda: next(clock))
    plugin = train._epoch_plugin([], True, time_budget=1.9)  # 114 s
    plugin.before_training_epoch(epoch=1)
    plugin.after_training_epoch()
    plugin.after_evaluation(validation_scores=(0.5, 1.0))
    plugin.before_training_epoch(epoch=2)  # 40 s spent + 40 s an epoch = 80 ≤ 114
    plugin.after_training_epoch()
    plugin.after_evaluation(validation_scores=(0.75, 0.9))
    with pytest.raises(TrainingInterrupt):
        plugin.before_training_epoch(epoch=3)  # 80 s spent + 40 s = 120 > 114
    assert plugin.train_seconds == [30.0, 30.0] and plugin.epoch_seconds == [40.0, 40.0]
    assert plugin.dev_f1 == [0.5, 0.75] and "time budget of 1.9 minutes" in plugin.stopped
