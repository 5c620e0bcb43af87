"""The tagging search on the bilevel loop of the LM search (nas.runs.bilevel): its Hessian eigenvalue
against the exact Hessian, DARTS-ES, the flags' errors, and the call order both tasks share."""

import json
from unittest import mock

import pytest
import torch
import torch.nn as nn
from click.testing import CliRunner
from torch.func import functional_call

import tagger_data as td
from nas.common.runs import RunDir
from nas.runs.config import SearchConfig
from nas.runs.search import Searcher
from tagger.cli.search_tagger import main as search_tagger
from tagger.corpora import load_corpus
from tagger.embeddings import build_embeddings
from tagger.tagging_search import TaggingSearch
from tagger.tagging_search_config import TaggingSearchConfig

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tagging-health")
    td.write_conll03(root / "data")
    return root / "data", td.write_vectors(root / "vectors.txt")


def flags(data, run, *more) -> list[str]:
    folder, vectors = data
    return [
        "--corpus",
        "conll03",
        "--data",
        str(folder),
        "--embeddings",
        f"glove:{vectors}",
        "--hidden-size",
        "8",
        "--nodes",
        "3",
        "--batch-size",
        "8",
        "--max-batches-per-epoch",
        "3",
        "--seed",
        "4",
        "--run-dir",
        str(run),
        *more,
    ]


def read_log(run) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


class CrfLossPerToken(nn.Module):
    """flair's own `forward_loss` of the tagger, per token: the loss the health check is said to take."""

    def __init__(self, tagger: nn.Module):
        super().__init__()
        self.tagger = tagger

    def forward(self, sentences: list) -> torch.Tensor:
        loss, count = self.tagger.forward_loss(sentences)
        return loss / count


def test_eigenvalue_each_epoch_is_the_exact_hessians_dominant_one(data, tmp_path, restore_flair_logging):
    run = tmp_path / "run"
    result = CliRunner().invoke(
        search_tagger, flags(data, run, "--epochs", "2", "--arch-lr", "0.1", "--hessian-iterations", "300")
    )
    assert result.exit_code == 0, result.output
    log = read_log(run)
    assert [r["epoch"] for r in log] == [1, 2] and all(1 <= r["eigen_iterations"] <= 300 for r in log)
    assert "λmax" in result.output and "converged by the rule: no" in result.output
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["health"]["eigenvalue_last"] == log[-1]["eigenvalue"]
    assert metrics["health"]["convergence"]["converged"] is False and metrics["epochs_run"] == 2
    assert all(sum(r["alpha_share"].values()) == pytest.approx(1.0) for r in log)

    # the model as the last epoch left it (its checkpoint), and the exact Hessian in α of the CRF loss per
    # token of the first --batch-size held-apart sentences, in eval mode
    config = TaggingSearchConfig.from_dict(json.loads((run / "config.json").read_text()))
    search = TaggingSearch(config, RunDir(run), load_corpus("conll03", data[0]), build_embeddings(config.embeddings))
    search.resume()
    search.model.eval()
    alpha = search.layer.cell.alpha
    name = next(n for n, p in search.model.named_parameters() if p is alpha)
    sentences = search.alpha_sentences[: config.batch_size]
    loss = CrfLossPerToken(search.model)
    hessian = torch.autograd.functional.hessian(
        lambda a: functional_call(loss, {f"tagger.{name}": a}, (sentences,)), alpha.detach().clone()
    )
    eigenvalues = torch.linalg.eigvalsh(hessian.reshape(alpha.numel(), alpha.numel()).double())
    expected = float(eigenvalues[eigenvalues.abs().argmax()])
    assert abs(expected) > 1e-6
    assert log[-1]["eigenvalue"] == pytest.approx(expected, rel=1e-2)


@pytest.mark.parametrize("method", ["darts", "beta-darts"])
def test_early_stop_derives_from_alpha_of_the_window_start(data, tmp_path, method, restore_flair_logging):
    run = tmp_path / "run"
    growing = iter([(1.0, 3), (2.0, 3), (4.0, 3), (8.0, 3), (16.0, 3), (32.0, 3)])
    with mock.patch("nas.runs.bilevel.dominant_eigenvalue", lambda *a, **k: next(growing)):
        result = CliRunner().invoke(
            search_tagger,
            flags(
                data,
                run,
                "--method",
                method,
                "--epochs",
                "6",
                "--arch-lr",
                "0.1",
                "--early-stop",
                "hessian",
                "--early-stop-window",
                "2",
                "--out",
                str(tmp_path / "cell.json"),
            ),
        )
    assert result.exit_code == 0, result.output
    log = read_log(run)
    # epoch 4: mean(1, 2) / mean(4, 8) = 0.25 < 0.75, so the search stops there and derives from epoch 2
    assert len(log) == 4 and log[-1]["early_stop"] == {"stopped_at": 4, "derive_epoch": 2}
    assert log[1]["alpha"] != log[3]["alpha"]  # α moved after the window's start
    cell = json.loads((tmp_path / "cell.json").read_text())
    assert cell["nodes"] == log[1]["genotype"]
    assert cell["provenance"]["search_dev_f1"] == log[1]["dev_f1"]
    assert cell["provenance"]["health"]["early_stop"]["derive_epoch"] == 2
    assert json.loads((run / "metrics.json").read_text())["epochs_run"] == 4
    assert "early stop (DARTS-ES)" in result.output


@pytest.mark.parametrize(
    "more, says",
    [
        (["--method", "random", "--early-stop", "hessian"], "--early-stop: this method has no α"),
        (["--early-stop", "hessian", "--hessian-iterations", "0"], "--early-stop hessian: needs the eigenvalue"),
        (["--early-stop", "hessian", "--early-stop-ratio", "1.5"], "--early-stop-ratio"),
        (["--early-stop-window", "3"], "--early-stop-window: only with --early-stop hessian"),
    ],
)
def test_bad_health_flags_name_the_flag(data, tmp_path, more, says, restore_flair_logging):
    result = CliRunner().invoke(search_tagger, flags(data, tmp_path / "run", *more))
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and says in result.stderr
    assert not (tmp_path / "run").exists()


def test_without_hessian_iterations_no_eigenvalue_is_logged(data, tmp_path, restore_flair_logging):
    run = tmp_path / "run"
    result = CliRunner().invoke(search_tagger, flags(data, run, "--epochs", "1", "--hessian-iterations", "0"))
    assert result.exit_code == 0, result.output
    assert "eigenvalue" not in read_log(run)[0] and "cell_share" in read_log(run)[0]


def calls_of(search, seen: list) -> None:
    """Record, on `search`, the calls the methods rely on the order of."""

    def spy(owner, name, tag):
        real = getattr(owner, name)
        setattr(owner, name, lambda *a, **k: seen.append(tag) or real(*a, **k))

    spy(search.method, "step_alpha", "alpha")
    spy(search, "take_weight_step", "weights")
    spy(search.method, "after_batches", "after_batches")
    spy(search, "validation_score", "validation")
    spy(search.run_dir, "log", "log")
    spy(search, "save_checkpoint", "checkpoint")


def test_both_tasks_run_the_method_in_one_order(data, tmp_path, lm_corpus):
    """α step then weight step on every batch; after_batches once per epoch before validation, the log
    line and the checkpoint; --epochs in all: the order the regularised methods rely on."""
    folder, vectors = data
    tagging = TaggingSearch(
        TaggingSearchConfig(
            corpus="conll03",
            data=str(folder),
            embeddings=f"glove:{vectors}",
            hidden_size=8,
            nodes=3,
            batch_size=8,
            epochs=2,
            max_batches_per_epoch=3,
            seed=4,
            method="beta-darts",
            hessian_iterations=2,
        ),
        RunDir(tmp_path / "tagging"),
        load_corpus("conll03", folder),
        build_embeddings(f"glove:{vectors}"),
    )
    tagging.start()
    lm = Searcher.open(
        SearchConfig(
            train=str(lm_corpus / "ptb.train.txt"),
            valid=str(lm_corpus / "ptb.valid.txt"),
            test=str(lm_corpus / "ptb.test.txt"),
            emsize=12,
            nhid=12,
            nodes=3,
            batch_size=4,
            bptt=8,
            eval_batch_size=2,
            lr=2,
            epochs=2,
            max_batches_per_epoch=3,
            method="beta-darts",
            hessian_iterations=2,
        ),
        RunDir(tmp_path / "lm"),
        False,
    )
    epoch = ["alpha", "weights"] * 3 + ["after_batches", "validation", "log", "checkpoint"]
    for search in (tagging, lm):
        seen = []
        calls_of(search, seen)
        search.run()
        assert seen == epoch * 2
        log = read_log(search.run_dir.path)
        assert [r["epoch"] for r in log] == [1, 2] and all("eigenvalue" in r for r in log)
