"""bin/evaluate: a saved model scores what training recorded, and bad input is one line."""
import json

import pytest
from click.testing import CliRunner

from tagger import evaluation
from tagger.cli.evaluate import main

pytestmark = pytest.mark.usefixtures("restore_flair_logging")


def run_evaluate(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_evaluate_reproduces_the_test_f1_recorded_at_training(tiny_tagger, tmp_path):
    run, data = tiny_tagger
    trained = json.loads((run / "metrics.json").read_text())
    result = run_evaluate("--model", run / "best-model.pt", "--corpus", "conll03", "--data", data / "conll03",
                          "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.stderr
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert 0.3 < trained["test"]["f1"] < 1  # a model that learned something, so the match means something
    assert metrics["test"] == trained["test"]  # strict and lenient, every type, the same numbers
    assert metrics["split"] == "test" and metrics["sentences"] == 40
    assert (tmp_path / "eval" / "test.conll").read_text() == (run / "test.conll").read_text()
    assert result.stdout == evaluation.table(trained["test"]) + "\n"


def test_default_output_beside_the_model_and_the_dev_split(tiny_tagger):
    run, data = tiny_tagger
    result = run_evaluate("--model", run, "--corpus", "conll03", "--data", data / "conll03", "--split", "dev")
    assert result.exit_code == 0, result.stderr
    metrics = json.loads((run / "eval-conll03-dev" / "metrics.json").read_text())
    assert metrics["dev"]["f1"] == json.loads((run / "metrics.json").read_text())["dev"]["f1"]
    lines = (run / "eval-conll03-dev" / "dev.conll").read_text().split("\n\n")
    assert len([b for b in lines if b.strip()]) == metrics["sentences"] == 40


def test_bad_model_and_corpus_are_one_line(tiny_tagger, tmp_path):
    run, data = tiny_tagger
    (tmp_path / "other.pt").write_bytes(b"not a model")
    chunks = tmp_path / "chunks"
    chunks.mkdir()
    for name in ("train.txt", "dev.txt", "test.txt"):
        (chunks / name).write_text("He B-NP\nran B-VP\n.  O\n", encoding="utf-8")
    for args, message in (
        (["--model", tmp_path / "other.pt", "--corpus", "conll03", "--data", data / "conll03"], "not a model file of this toolkit"),
        (["--model", run, "--corpus", "conll03", "--data", tmp_path / "none"], "no such directory"),
        (["--model", run, "--corpus", "column", "--data", chunks],
         "the model predicts LOC, MISC, ORG, PER, but the test split"),
    ):
        result = run_evaluate(*args)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
        assert result.stderr.startswith("error: ") and result.stdout == ""
