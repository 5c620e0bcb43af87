"""bin/compare-words on retrained models (bin/train-lm runs and model files) beside search runs (ESS Table 3)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import write_lm_corpus
from nas.cli.compare_words import main as compare_words
from nas.cli.search_lm import main as search_lm
from nas.cli.train_lm import main as train_lm

SIZES = ["--emsize", "8", "--batch-size", "4", "--bptt", "6", "--eval-batch-size", "2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny bin/train-lm run (one epoch) and a tiny bin/search-lm run on the same corpus."""
    root = tmp_path_factory.mktemp("compare")
    corpus = write_lm_corpus(root / "corpus", train_lines=120, other_lines=30)
    result = CliRunner().invoke(
        train_lm,
        [
            "--cell",
            "darts_v2",
            "--data",
            str(corpus),
            "--run-dir",
            str(root / "lm"),
            "--epochs",
            "1",
            "--max-batches-per-epoch",
            "3",
            *SIZES,
        ],
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        search_lm,
        [
            "--data",
            str(corpus),
            "--run-dir",
            str(root / "search"),
            "--nhid",
            "8",
            "--nodes",
            "2",
            "--epochs",
            "1",
            "--max-batches-per-epoch",
            "2",
            *SIZES,
        ],
    )
    assert result.exit_code == 0, result.output
    return root


def _shown_ppl(stdout: str, tag: str) -> float:
    header = stdout.splitlines()[0]
    return float(header.split(f"{tag} ")[1].split("(ppl ")[1].split(")")[0])


def test_a_retrained_model_compares_with_a_search_model(runs):
    """Evaluated as each run validated (batch 2, bptt 6), the models give their runs' validation perplexity."""
    result = CliRunner().invoke(
        compare_words,
        [
            str(runs / "lm"),
            str(runs / "search"),
            "--data",
            str(runs / "corpus"),
            "--batch-size",
            "2",
            "--min-count",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    retrained = json.loads((runs / "lm" / "metrics.json").read_text())["best_valid_ppl"]
    searched = json.loads((runs / "search" / "log.jsonl").read_text().splitlines()[-1])["valid_ppl"]
    assert _shown_ppl(result.stdout, "A") == pytest.approx(retrained, abs=0.05)
    assert _shown_ppl(result.stdout, "B") == pytest.approx(searched, abs=0.05)
    assert f"# A = {runs / 'lm' / 'best.pt'}" in result.stdout
    largest = result.stdout.split("\n## ")[1].strip().splitlines()[2:]
    assert len(largest) == 8 and all(int(line.split("\t")[2]) > 0 for line in largest)  # counts in the run's train file


def test_a_model_file_and_a_run_without_best_pt_load_the_retrained_model(runs, tmp_path):
    """best.pt given as a file, and checkpoint.pt when best.pt is missing (one epoch: both hold the same model)."""
    early = tmp_path / "early"
    shutil.copytree(runs / "lm", early)
    (early / "best.pt").unlink()
    result = CliRunner().invoke(
        compare_words, [str(runs / "lm" / "best.pt"), str(early), "--data", str(runs / "corpus"), "--batch-size", "2"]
    )
    assert result.exit_code == 0, result.output
    retrained = json.loads((runs / "lm" / "metrics.json").read_text())["best_valid_ppl"]
    assert _shown_ppl(result.stdout, "A") == pytest.approx(retrained, abs=0.05)
    assert _shown_ppl(result.stdout, "B") == pytest.approx(retrained, abs=0.05)
    assert f"# B = {early / 'checkpoint.pt'}" in result.stdout


def test_a_directory_without_a_model_is_one_error_line(runs, tmp_path):
    result = CliRunner().invoke(compare_words, [str(runs / "lm"), str(tmp_path), "--data", str(runs / "corpus")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {tmp_path}: not a language model (expected a bin/train-lm run directory")
