"""bin/train-lm and bin/eval-lm: perplexity, the DARTS/AWD protocol (ASGD switch, NaN rollback), resume, errors."""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import nas.runs.loop
import nas.runs.train
from nas.cli.eval_lm import main as eval_lm
from nas.cli.train_lm import main as train_lm
from nas.common.splits import find_splits
from nas.lm.corpus import Corpus
from nas.cells.genotype import load
from nas.common.parameters import count_parameters
from nas.lm.model_file import LMSpec, build_lm, model_file, rnn_parameters
from nas.lm.lstm import lstm_parameters, matching_nhid
from nas.common.runs import Interrupted, RunDir
from nas.runs.config import RetrainConfig
from nas.lm.evaluation import evaluate
from nas.runs.train import Trainer, load_for_evaluation

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
SMALL = [
    "--emsize",
    "16",
    "--batch-size",
    "8",
    "--bptt",
    "10",
    "--eval-batch-size",
    "4",
    "--dropout",
    "0.1",
    "--dropout-h",
    "0.1",
    "--dropout-x",
    "0.1",
    "--dropout-i",
    "0.1",
    "--dropout-e",
    "0",
]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and the test machine's cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    """A Markov-chain language over 30 words: each word has 3 likely successors, so a model can learn it."""
    root = tmp_path_factory.mktemp("lm")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(30)]
    successors = {w: rng.sample(words, 3) for w in words}

    def sentence() -> str:
        w = rng.choice(words)
        out = [w]
        for _ in range(rng.randint(4, 10)):
            w = rng.choice(successors[w]) if rng.random() < 0.9 else rng.choice(words)
            out.append(w)
        return " ".join(out)

    for split, lines in (("train", 260), ("valid", 40), ("test", 30)):
        (root / f"{split}.txt").write_text("\n".join(sentence() for _ in range(lines)) + "\n", encoding="utf-8")
    return root


def small_config(corpus_dir: Path, **kw) -> RetrainConfig:
    paths = find_splits(corpus_dir)
    c = RetrainConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        emsize=16,
        nhid=16,
        batch_size=8,
        bptt=10,
        eval_batch_size=4,
        dropout=0.1,
        dropouth=0.1,
        dropoutx=0.1,
        dropouti=0.1,
        dropoute=0.0,
        genotype=load("darts_v2").to_dict(),
    )
    return replace(c, **kw)


def trainer(config: RetrainConfig, run: Path) -> Trainer:
    corpus = Corpus.load({k: Path(getattr(config, k)) for k in ("train", "valid", "test")})
    t = Trainer(config, RunDir(run), corpus)
    t.start()
    return t


def log_of(run: Path) -> list[dict]:
    return RunDir(run).read_log()


def one_error_line(result, only: bool = True) -> str:
    """Exit 2 and one `error:` line, the last of stderr (`only`: nothing else, as the run never started)."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and [l for l in lines if l.startswith("error: ")] == lines[-1:], (
        result.stderr
    )
    assert len(lines) == 1 or not only, result.stderr
    return lines[-1]


# -- perplexity ---------------------------------------------------------------------------------


def test_perplexity_is_exp_of_mean_token_nll_checked_by_hand(tmp_path):
    """Zero embedding/decoder weights: every prediction is softmax(bias) = (1/2, 1/4, 1/8, 1/8)."""
    vocab = ["a", "b", "<eos>", "<unk>"]
    spec = LMSpec("cell", 4, 2, 2, load("darts_v2").to_dict())
    model = build_lm(spec)
    with torch.no_grad():
        model.encoder.weight.zero_()
        model.decoder.bias.copy_(torch.log(torch.tensor([0.5, 0.25, 0.125, 0.125])))
    path = tmp_path / "fixed.pt"
    torch.save(model_file(spec, vocab, model.state_dict()), path)
    text = tmp_path / "text.txt"
    text.write_text("a b c\na a\n", encoding="utf-8")  # a b <unk> <eos> a a <eos>: 6 predicted tokens
    result = CliRunner().invoke(eval_lm, [str(path), "--file", str(text), "--batch-size", "1", "--bptt", "4"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # targets b <unk> <eos> a a <eos> cost 2 + 3 + 3 + 1 + 1 + 3 = 13 bits over 6 tokens
    assert report["tokens"] == 6
    assert report["ppl"] == pytest.approx(2 ** (13 / 6), rel=1e-6)


def test_chunked_evaluation_weights_every_token_once():
    """Chunks of unequal length with the hidden state carried equal a token-by-token pass."""
    torch.manual_seed(0)
    model = build_lm(LMSpec("cell", 7, 5, 5, load("darts_v2").to_dict())).eval()
    data = torch.randint(0, 7, (11, 1))
    nll, hidden = 0.0, model.init_hidden(1)
    with torch.no_grad():
        for t in range(10):
            logits, hidden, _, _ = model(data[t : t + 1], hidden)
            nll -= torch.log_softmax(logits[0, 0], -1)[data[t + 1, 0]].item()
    assert math.exp(evaluate(model, data, 4)) == pytest.approx(math.exp(nll / 10), rel=1e-5)  # chunks 4, 4, 2


# -- model size ---------------------------------------------------------------------------------


def test_darts_v2_at_850_has_the_published_23m_parameters_and_the_lstm_matches_it():
    cell = rnn_parameters("cell", load("darts_v2"), 850, 850)
    assert cell + 10000 * 850 + 10000 == 22_960_000  # PTB vocabulary 10k, tied decoder with bias: "23M"
    nhid = matching_nhid(850, cell)
    assert abs(lstm_parameters(850, nhid) - cell) / cell < 1e-4
    assert abs(lstm_parameters(850, nhid + 1) - cell) > abs(lstm_parameters(850, nhid) - cell)


def test_lstm_is_tied_through_a_projection_when_nhid_differs():
    model = build_lm(LMSpec("lstm", 20, 8, 13))
    assert model.decoder.weight is model.encoder.weight
    logits, _, _, _ = model(torch.zeros(3, 2, dtype=torch.long), model.init_hidden(2))
    assert logits.shape == (3, 2, 20)
    # W_ih and W_hh (4 gates × 13 × 8 each, W_hh acting on the 8-wide projection), two biases, W_hr
    assert count_parameters(model.rnn) == lstm_parameters(8, 13) == 2 * 4 * 13 * 8 + 2 * 4 * 13 + 13 * 8


# -- training -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", ["darts_v2", "lstm"])
def test_darts_v2_and_lstm_reduce_validation_perplexity(corpus_dir, tmp_path, cell):
    config = small_config(corpus_dir, epochs=4)
    if cell == "lstm":
        config = replace(
            config, cell="lstm", genotype=None, nhid=matching_nhid(16, rnn_parameters("cell", load("darts_v2"), 16, 16))
        )
    t = trainer(config, tmp_path / "run")
    start = math.exp(evaluate(t.model, t.valid_data, config.bptt))
    metrics = t.run()
    assert start > 25  # untrained: about the vocabulary size (31 words)
    assert metrics["best_valid_ppl"] < 0.7 * start
    assert [r["epoch"] for r in log_of(tmp_path / "run")] == [1, 2, 3, 4]
    assert metrics["kind"] == ("lstm" if cell == "lstm" else "cell")


def test_bf16_training_steps_in_bf16_validates_in_fp32_and_still_learns(corpus_dir, tmp_path):
    config = replace(small_config(corpus_dir, epochs=4), precision="bf16")
    t = trainer(config, tmp_path / "run")
    seen = set()  # (dtype of the logits, grad enabled)
    t.model.decoder.register_forward_hook(lambda m, i, out: seen.add((out.dtype, torch.is_grad_enabled())))
    start = math.exp(evaluate(t.model, t.valid_data, config.bptt))
    metrics = t.run()
    assert seen == {(torch.bfloat16, True), (torch.float32, False)}
    assert all(p.dtype == torch.float32 for p in t.model.parameters())
    assert metrics["best_valid_ppl"] < 0.7 * start


def test_asgd_switch_when_validation_stalls_and_averaged_weights_are_evaluated(corpus_dir, tmp_path, monkeypatch):
    # AWD's trigger with nonmono = 2: switch once validation is worse than the best before the last 2 epochs.
    scripted = iter([3.0, 2.0, 2.5, 2.6, 2.7, 1.0, 1.1])
    real_evaluate = nas.runs.train.evaluate
    validated = []  # the weights each ASGD validation saw

    def fake_evaluate(model, data, bptt, max_batches=None, graphs=None):
        if data is not t.valid_data:
            return real_evaluate(model, data, bptt, max_batches)
        if isinstance(t.optimizer, torch.optim.ASGD):
            assert all(torch.equal(p, t.optimizer.state[p]["ax"]) for p in model.parameters())
            validated.append({n: p.detach().clone() for n, p in model.named_parameters()})
        return next(scripted)

    monkeypatch.setattr(nas.runs.train, "evaluate", fake_evaluate)
    t = trainer(small_config(corpus_dir, epochs=7, nonmono=2, max_batches_per_epoch=3), tmp_path / "run")
    t.run()
    assert [r["optimizer"] for r in log_of(tmp_path / "run")] == ["SGD"] * 5 + ["ASGD"] * 2
    group = t.optimizer.param_groups[0]
    assert isinstance(t.optimizer, torch.optim.ASGD) and group["t0"] == 0 and group["lambd"] == 0
    assert len(validated) == 2
    live = dict(t.model.named_parameters())
    assert not all(torch.equal(live[n], validated[1][n]) for n in live)  # live weights came back after validation
    # best.pt (epoch 6) holds the averages validated then; the last checkpoint evaluates with its averages too
    for name, expected in (("best.pt", validated[0]), ("checkpoint.pt", validated[1])):
        model, _ = load_for_evaluation(tmp_path / "run" / name)
        assert all(torch.equal(p, expected[n]) for n, p in model.named_parameters())


def test_nan_in_the_loss_rolls_back_to_the_last_checkpoint(corpus_dir, tmp_path, monkeypatch):
    real_loss = nas.runs.loop.regularised_loss
    calls = {"n": 0}
    batches = []

    def nan_once(*args):
        calls["n"] += 1
        loss, nll = real_loss(*args)
        return (loss * float("nan"), nll) if calls["n"] == 5 else (loss, nll)  # epoch 2, batch 2

    monkeypatch.setattr(nas.runs.loop, "regularised_loss", nan_once)
    t = trainer(small_config(corpus_dir, epochs=2, max_batches_per_epoch=3), tmp_path / "run")
    metrics = t.run(on_batch=lambda tr: batches.append((tr.epoch, tr.batch)))
    assert batches == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 1), (1, 2), (1, 3)]  # epoch 2 restarted from batch 1
    log = log_of(tmp_path / "run")
    assert [r["rollbacks"] for r in log] == [0, 1] and metrics["rollbacks"] == 1
    assert all(torch.isfinite(p).all() for p in t.model.parameters())


def test_a_training_that_blows_up_with_finite_numbers_stops_as_diverged(corpus_dir, tmp_path):
    """At a huge lr the weights blow up while log-softmax keeps every loss finite; the run stops once a
    batch's NLL passes 2 ln V (a model worse than guessing each word out of V² uniformly) instead of
    training on for its epochs, and keeps no model of the diverged weights."""
    run = tmp_path / "run"
    args = ["--cell", "darts_v2", "--data", str(corpus_dir), "--run-dir", str(run), "--epochs", "3"]
    huge = ["--max-batches-per-epoch", "5", "--lr", "1e6", "--clip", "1e6"]
    result = CliRunner().invoke(train_lm, [*args, *huge, *SMALL])
    line = one_error_line(result, only=False)
    vocab = len(Corpus.load(find_splits(corpus_dir)).vocab)
    match = re.search(r"the training diverged in epoch 1, batch \d: NLL ([\d.e+]+) nats a word", line)
    assert match and float(match[1]) > 2 * math.log(vocab), line  # a finite NLL, not a NaN
    assert f"beyond {2 * math.log(vocab):.2f} (twice a uniform guess's over the {vocab} words)" in line, line
    assert line.endswith("is removed (lower --lr or --clip)"), line
    assert not run.exists()  # no epoch had finished: nothing kept


def test_nan_that_persists_gives_up_and_leaves_the_checkpoint_intact(corpus_dir, tmp_path, monkeypatch):
    real_loss = nas.runs.loop.regularised_loss
    run = tmp_path / "run"
    snapshot = {}

    def nan_after_epoch_one(*args):
        loss, nll = real_loss(*args)
        if log_of(run):
            snapshot.setdefault("bytes", (run / "checkpoint.pt").read_bytes())
            return loss * float("nan"), nll
        return loss, nll

    monkeypatch.setattr(nas.runs.loop, "regularised_loss", nan_after_epoch_one)
    args = [
        "--cell",
        "darts_v2",
        "--data",
        str(corpus_dir),
        "--run-dir",
        str(run),
        "--epochs",
        "3",
        "--max-batches-per-epoch",
        "3",
        "--max-rollbacks",
        "2",
        *SMALL,
    ]
    result = CliRunner().invoke(train_lm, args)
    line = one_error_line(result, only=False)
    assert "loss became nan in epoch 2, batch 1" in line and "2 rollbacks did not help" in line
    assert result.stderr.count("rolled back to") == 2
    assert (run / "checkpoint.pt").read_bytes() == snapshot["bytes"]
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 1 and all(torch.isfinite(v).all() for v in state["state_dict"].values())
    assert not (run / "metrics.json").exists()


# -- resume, budget, eval-lm ----------------------------------------------------------------------


def test_resume_continues_from_the_saved_epoch_and_matches_an_uninterrupted_run(corpus_dir, tmp_path):
    base = ["--cell", "darts_v2", "--data", str(corpus_dir), "--max-batches-per-epoch", "4", *SMALL]
    runner = CliRunner()
    assert runner.invoke(train_lm, [*base, "--run-dir", str(tmp_path / "full"), "--epochs", "3"]).exit_code == 0
    assert runner.invoke(train_lm, [*base, "--run-dir", str(tmp_path / "split"), "--epochs", "1"]).exit_code == 0
    assert [r["epoch"] for r in log_of(tmp_path / "split")] == [1]
    result = runner.invoke(train_lm, ["--resume", str(tmp_path / "split"), "--epochs", "3"])
    assert result.exit_code == 0, result.output
    assert "epoch 1:" not in result.stderr and "epoch 2:" in result.stderr
    assert json.loads((tmp_path / "split" / "config.json").read_text())["epochs"] == 3
    full, split = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("full", "split"))
    assert [r["epoch"] for r in log_of(tmp_path / "split")] == [1, 2, 3]
    assert [r["valid_ppl"] for r in log_of(tmp_path / "split")] == [r["valid_ppl"] for r in log_of(tmp_path / "full")]
    assert split["test_ppl"] == full["test_ppl"]


def test_interrupt_mid_epoch_then_resume_ends_where_an_uninterrupted_run_does(corpus_dir, tmp_path):
    config = small_config(corpus_dir, epochs=2, max_batches_per_epoch=4, cell="lstm", genotype=None, nhid=24)
    full = trainer(config, tmp_path / "full").run()

    def stop_in_epoch_two(tr):
        if tr.epoch == 1 and tr.batch == 2:
            tr.stop.request()

    t = trainer(config, tmp_path / "cut")
    with pytest.raises(Interrupted):
        t.run(on_batch=stop_in_epoch_two)
    again = Trainer(config, RunDir(tmp_path / "cut"), t.corpus)
    again.resume()
    assert (again.epoch, again.batch) == (1, 2)
    assert again.run()["test_ppl"] == full["test_ppl"]


def test_time_budget_cuts_the_epoch_short_and_still_validates_it(corpus_dir, tmp_path):
    t = trainer(small_config(corpus_dir, epochs=50, time_budget=0.0005), tmp_path / "run")  # 30 ms
    metrics = t.run()
    log = log_of(tmp_path / "run")
    assert len(log) == 1 and 1 <= log[0]["batches"] < t.batches_per_epoch()
    assert metrics["epochs"] == 1 and math.isfinite(metrics["test_ppl"])


def test_eval_lm_reproduces_the_recorded_perplexities(corpus_dir, tmp_path):
    run = tmp_path / "run"
    result = CliRunner().invoke(
        train_lm,
        [
            "--cell",
            "lstm",
            "--data",
            str(corpus_dir),
            "--run-dir",
            str(run),
            "--epochs",
            "2",
            "--max-batches-per-epoch",
            "5",
            *SMALL,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "parameters (" in result.stderr and "matched to darts_v2's 5,120" in result.stderr
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["matched_to"] == {"cell": "darts_v2", "rnn_params": 5120}
    for split, key in (("test", "test_ppl"), ("valid", "best_valid_ppl")):
        out = CliRunner().invoke(eval_lm, [str(run), "--data", str(corpus_dir), "--split", split])
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["ppl"] == pytest.approx(metrics[key], rel=1e-9)
        assert "warning" not in out.stderr
    (run / "metrics.json").unlink()  # as a run killed before its end leaves it
    out = CliRunner().invoke(eval_lm, [str(run), "--data", str(corpus_dir)])
    assert out.exit_code == 0 and json.loads(out.stdout)["ppl"] > 0
    assert out.stderr.startswith(f"warning: {run}: its training has not finished (killed, or still running)")


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, problem",
    [
        (["--cell", "nosuch"], "cell 'nosuch': no such file, and not a shipped cell"),
        (["--nhid", "20"], "--nhid 20 and --emsize 16 must be equal"),
        (["--time-budget", "0"], "--time-budget: must be a positive number of minutes"),
        (["--dropout", "1"], "--dropout: must be in [0, 1)"),
        (["--bptt", "500"], "lower --batch-size or --bptt"),
        (["--epochs", "0"], "--epochs: must be in [1, 1000000], got 0"),
        pytest.param(
            ["--device", "cuda"],
            "CUDA is not available",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA"),
        ),
    ],
)
def test_train_lm_bad_input_is_one_line_and_exit_2_and_writes_nothing(corpus_dir, tmp_path, extra, problem):
    run = tmp_path / "run"
    result = CliRunner().invoke(train_lm, ["--data", str(corpus_dir), "--run-dir", str(run), *SMALL, *extra])
    assert problem in one_error_line(result)
    assert not run.exists()


def test_train_lm_refuses_missing_data_an_occupied_run_dir_and_a_bad_resume(corpus_dir, tmp_path):
    runner = CliRunner()
    assert "no such directory" in one_error_line(runner.invoke(train_lm, ["--data", str(tmp_path / "none")]))
    run = tmp_path / "run"
    ok = runner.invoke(
        train_lm,
        ["--data", str(corpus_dir), "--run-dir", str(run), "--epochs", "1", "--max-batches-per-epoch", "2", *SMALL],
    )
    assert ok.exit_code == 0, ok.output
    again = runner.invoke(train_lm, ["--data", str(corpus_dir), "--run-dir", str(run), *SMALL])
    assert "already holds a run; continue it with --resume" in one_error_line(again)
    assert "not a run directory" in one_error_line(runner.invoke(train_lm, ["--resume", str(tmp_path)]))


def test_eval_lm_bad_input(corpus_dir, tmp_path):
    runner = CliRunner()
    text = corpus_dir / "test.txt"
    assert "not a model file of this toolkit" in one_error_line(
        runner.invoke(eval_lm, [str(text), "--file", str(text)])
    )
    assert "no best.pt" in one_error_line(runner.invoke(eval_lm, [str(tmp_path), "--file", str(text)]))
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    assert "not a language model written by bin/train-lm" in one_error_line(
        runner.invoke(eval_lm, [str(foreign), "--file", str(text)])
    )


def test_bin_eval_lm_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bin" / "eval-lm"),
            str(tmp_path / "none.pt"),
            "--file",
            str(tmp_path / "none.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: {tmp_path / 'none.pt'}: no such file"]
