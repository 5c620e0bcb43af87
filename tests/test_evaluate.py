"""bin/evaluate: a saved model scores what training recorded, and bad input is one line."""

import json
import re

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
    result = run_evaluate(
        "--model", run / "best-model.pt", "--corpus", "conll03", "--data", data / "conll03", "--out", tmp_path / "eval"
    )
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
        (
            ["--model", tmp_path / "other.pt", "--corpus", "conll03", "--data", data / "conll03"],
            "not a model file of this toolkit",
        ),
        (["--model", run, "--corpus", "conll03", "--data", tmp_path / "none"], "no such directory"),
        (
            ["--model", run, "--corpus", "column", "--data", chunks],
            "the model predicts LOC, MISC, ORG, PER, but the test split",
        ),
    ):
        result = run_evaluate(*args)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
        assert result.stderr.startswith("error: ") and result.stdout == ""


# A hand-counted fixture for conlleval's report (IOB2 gold and predicted tags of three sentences):
#   s1  John/B-PER Smith/I-PER lives in New/B-LOC York/I-LOC .   pred: New York cut to New/B-LOC York/O
#   s2  Acme/B-ORG hired Anna/B-PER today                      pred: Acme/B-LOC (wrong type), today/B-MISC
#   s3  Paris/B-LOC and Oslo/B-LOC                             pred: and/B-ORG, Oslo/O (missed)
# tokens 7 + 4 + 3 = 14; tags equal: 6 (s1, all but York) + 2 (s2: hired, Anna) + 1 (s3: Paris) = 9
# gold phrases 6 (PER 2, LOC 3, ORG 1); found 7 (PER 2, LOC 3: New, Acme, Paris; MISC 1; ORG 1: and)
# correct 3 (John Smith, Anna, Paris): PER 2, LOC 1
# accuracy 9/14 = 64.29%; precision 3/7 = 42.86%; recall 3/6 = 50.00%; FB1 2PR/(P+R) = 46.15
# LOC 1/3, 1/3 -> 33.33 33.33 33.33, found 3; MISC and ORG 0 correct -> zeros, found 1 each;
# PER 2/2, 2/2 -> 100.00, found 2. conlleval ends each type line with the number of phrases *found*.
GOLD = [["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O"], ["B-ORG", "O", "B-PER", "O"], ["B-LOC", "O", "B-LOC"]]
PRED = [["B-PER", "I-PER", "O", "O", "B-LOC", "O", "O"], ["B-LOC", "O", "B-PER", "B-MISC"], ["B-LOC", "B-ORG", "O"]]
REPORT = """\
processed 14 tokens with 6 phrases; found: 7 phrases; correct: 3.
accuracy:  64.29%; precision:  42.86%; recall:  50.00%; FB1:  46.15
              LOC: precision:  33.33%; recall:  33.33%; FB1:  33.33  3
             MISC: precision:   0.00%; recall:   0.00%; FB1:   0.00  1
              ORG: precision:   0.00%; recall:   0.00%; FB1:   0.00  1
              PER: precision: 100.00%; recall: 100.00%; FB1: 100.00  2"""


def test_conlleval_report_matches_the_hand_count():
    assert evaluation.conlleval(GOLD, PRED) == REPORT


def test_conlleval_figures_agree_with_seqevals_conlleval_mode():
    from seqeval.metrics import classification_report

    lenient = classification_report(GOLD, PRED, output_dict=True, zero_division=0)
    lines = evaluation.conlleval(GOLD, PRED).splitlines()
    figures = {line.split(":")[0].strip(): [float(x) for x in re.findall(r"\d+\.\d\d", line)] for line in lines[2:]}
    figures["micro avg"] = [float(x) for x in re.findall(r"\d+\.\d\d", lines[1])[1:]]  # after accuracy
    for name, row in figures.items():
        expected = lenient[name]
        assert row[:3] == [round(100 * expected[k], 2) for k in ("precision", "recall", "f1-score")], name


def test_evaluate_takes_the_corpus_from_the_run_and_prints_conlleval(tiny_tagger, tmp_path, monkeypatch):
    run, data = tiny_tagger
    monkeypatch.chdir(tmp_path)  # the run's config.json holds an absolute data path
    result = run_evaluate("--model", run, "--format", "conlleval", "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.stderr
    blocks = [b.splitlines() for b in (run / "test.conll").read_text().strip().split("\n\n")]
    gold = [[line.split()[1] for line in b] for b in blocks]
    pred = [[line.split()[2] for line in b] for b in blocks]
    assert result.stdout == evaluation.conlleval(gold, pred) + "\n"
    assert result.stdout.startswith(f"processed {sum(map(len, gold))} tokens with ")
    lenient = json.loads((run / "metrics.json").read_text())["test"]["lenient"]["micro avg"]
    assert f"precision: {100 * lenient['precision']:6.2f}%; recall: {100 * lenient['recall']:6.2f}%" in result.stdout


def test_explicit_flags_win_over_the_runs_config(tiny_tagger, tmp_path):
    import shutil

    run, data = tiny_tagger
    fewer = tmp_path / "fewer"
    shutil.copytree(data / "conll03", fewer)
    blocks = (fewer / "eng.testb").read_text().split("\n\n")
    (fewer / "eng.testb").write_text("\n\n".join(blocks[:10]) + "\n")
    result = run_evaluate("--model", run, "--data", fewer, "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.stderr
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["data"] == str(fewer) and metrics["sentences"] < 40  # the run's test split has 40


def test_a_model_outside_a_run_needs_the_corpus_flags(tiny_tagger, tmp_path):
    import shutil

    run, _ = tiny_tagger
    shutil.copy(run / "best-model.pt", tmp_path / "model.pt")
    result = run_evaluate("--model", tmp_path / "model.pt")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: --corpus: not given, and {tmp_path / 'model.pt'} has no run config.json "
        f"(of this corpus format) to take it from\n"
    )
