"""Run directories: nothing half-written, logs read tolerantly, tagger resume, reruns from config.json."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import nas.runs.loop
import tagger_data as td
from nas.common.errors import InputError
from nas.common.runs import Interrupted, RunDir
from conftest import write_lm_corpus
from nas.cli.search_lm import main as search_lm
from nas.cli.train_lm import main as train_lm

TINY_SEARCH = [
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
    "--max-batches-per-epoch",
    "3",
    "--lr",
    "2",
    "--epochs",
    "1",
]
TINY_LM = [
    "--emsize",
    "12",
    "--batch-size",
    "4",
    "--bptt",
    "8",
    "--eval-batch-size",
    "2",
    "--max-batches-per-epoch",
    "3",
    "--epochs",
    "1",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_lm_corpus(tmp_path_factory.mktemp("lm") / "corpus", train_lines=100, other_lines=30)


# -- the log ------------------------------------------------------------------------------------


def test_a_torn_last_log_line_is_left_out_with_a_warning_and_trimmed_away(tmp_path, caplog):
    run = RunDir(tmp_path)
    for epoch in (1, 2):
        run.log({"epoch": epoch, "valid_ppl": 10.0 / epoch})
    with open(tmp_path / "log.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"epoch": 3, "vali')
    with caplog.at_level(logging.WARNING):
        assert run.read_log() == [{"epoch": 1, "valid_ppl": 10.0}, {"epoch": 2, "valid_ppl": 5.0}]
    assert [r.getMessage() for r in caplog.records] == [
        f"warning: {tmp_path / 'log.jsonl'}: line 3 is torn (the run was killed while writing it); left out"
    ]
    run.trim_log(1)  # a resume from the checkpoint of epoch 1: the torn line is cut at once
    assert run.read_log() == [{"epoch": 1, "valid_ppl": 10.0}]
    assert (tmp_path / "log.jsonl").read_text() == '{"epoch": 1, "valid_ppl": 10.0}\n{"epoch": 2, "valid_ppl": 5.0}\n'
    run.log({"epoch": 2, "valid_ppl": 4.0})  # the epoch again
    run.save_checkpoint({"epoch": 2})  # the resume's first checkpoint writes the trimmed log with it
    assert (tmp_path / "log.jsonl").read_text() == '{"epoch": 1, "valid_ppl": 10.0}\n{"epoch": 2, "valid_ppl": 4.0}\n'


def test_a_broken_line_before_the_last_is_an_error_naming_it(tmp_path):
    (tmp_path / "log.jsonl").write_text('{"epoch": 1}\n{"epo\n{"epoch": 3}\n')
    with pytest.raises(InputError, match=r"log.jsonl: line 2: not a JSON record"):
        RunDir(tmp_path).read_log()


def test_plot_search_draws_a_run_whose_last_log_line_is_torn(corpus, tmp_path):
    from nas.cli.plot_search import main as plot_search

    run_dir = tmp_path / "run"
    assert (
        CliRunner().invoke(search_lm, ["--data", str(corpus), "--run-dir", str(run_dir), *TINY_SEARCH]).exit_code == 0
    )
    with open(run_dir / "log.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"epoch": 2, "al')
    result = CliRunner().invoke(plot_search, [str(run_dir), "--out", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    assert any(p.suffix == ".png" for p in (tmp_path / "plots").iterdir())


# -- nothing half-written -----------------------------------------------------------------------


def test_discard_removes_the_folders_start_made_and_only_what_it_added_to_an_existing_one(tmp_path):
    run = RunDir(tmp_path / "a" / "b" / "run")
    run.start({"k": 1})
    (run.path / "log.jsonl").write_text("{}\n")
    run.discard()
    assert not (tmp_path / "a").exists()

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    run = RunDir(mine)
    run.start({"k": 1})
    (mine / "checkpoint.pt").write_bytes(b"x")
    run.discard()
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_a_search_whose_training_blows_up_stops_with_one_line(corpus, tmp_path):
    """A search at a huge lr: its NLL passes 2 ln V with every number finite, and it stops there."""
    run_dir = tmp_path / "run"
    args = ["--data", str(corpus), "--run-dir", str(run_dir), *TINY_SEARCH, "--lr", "1e9"]
    failed = CliRunner().invoke(search_lm, args)
    assert failed.exit_code == 2 and "Traceback" not in failed.stderr, failed.stderr
    error = failed.stderr.strip().splitlines()[-1]
    assert error.startswith("error: the training diverged in epoch 1, batch "), error
    assert error.endswith(f"nothing was kept: no epoch had finished, and {run_dir} is removed (try a lower --lr)")
    assert not run_dir.exists()


def test_a_search_that_fails_before_its_first_checkpoint_leaves_no_directory(corpus, tmp_path, monkeypatch):
    real = nas.runs.loop.regularised_loss
    monkeypatch.setattr(nas.runs.loop, "regularised_loss", lambda *a: tuple(x * float("nan") for x in real(*a)))
    run_dir = tmp_path / "run"
    args = ["--data", str(corpus), "--run-dir", str(run_dir), *TINY_SEARCH]
    failed = CliRunner().invoke(search_lm, args)
    assert failed.exit_code == 2
    assert "loss became nan in epoch 1, batch 1; nothing was kept" in failed.stderr and "is kept" not in failed.stderr
    assert not run_dir.exists()

    monkeypatch.setattr(nas.runs.loop, "regularised_loss", real)
    again = CliRunner().invoke(search_lm, args)  # the same command, the same directory
    assert again.exit_code == 0, again.output
    assert json.loads((run_dir / "log.jsonl").read_text())["epoch"] == 1


def test_resume_of_a_run_killed_before_any_checkpoint_starts_it_afresh(corpus, tmp_path):
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    assert CliRunner().invoke(train_lm, ["--data", str(corpus), "--run-dir", str(straight), *TINY_LM]).exit_code == 0
    cut.mkdir()
    shutil.copy(straight / "config.json", cut / "config.json")  # all a kill before the first checkpoint leaves
    (cut / ".checkpoint.pt.x1y2.tmp").write_bytes(b"torn")
    result = CliRunner().invoke(train_lm, ["--resume", str(cut)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in cut.iterdir()) == sorted(p.name for p in straight.iterdir())
    cut_ppl, straight_ppl = (json.loads((d / "metrics.json").read_text())["test_ppl"] for d in (cut, straight))
    assert cut_ppl == straight_ppl


# -- reruns from config.json --------------------------------------------------------------------


def test_config_json_names_absolute_paths_and_reruns_with_flags_given_winning(corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(corpus.parent)
    first = tmp_path / "first"
    assert CliRunner().invoke(train_lm, ["--data", corpus.name, "--run-dir", str(first), *TINY_LM]).exit_code == 0
    stored = json.loads((first / "config.json").read_text())
    assert stored["train"] == str(corpus / "ptb.train.txt")

    monkeypatch.chdir(tmp_path)
    again = tmp_path / "again"
    result = CliRunner().invoke(
        train_lm, ["--config", str(first / "config.json"), "--run-dir", str(again), "--bptt", "6"]
    )
    assert result.exit_code == 0, result.output
    rerun = json.loads((again / "config.json").read_text())
    assert {k for k in stored if stored[k] != rerun[k]} - {"command"} == {"bptt"} and rerun["bptt"] == 6


def test_a_search_reruns_from_its_config_with_another_method(corpus, tmp_path):
    first = tmp_path / "first"
    assert CliRunner().invoke(search_lm, ["--data", str(corpus), "--run-dir", str(first), *TINY_SEARCH]).exit_code == 0
    result = CliRunner().invoke(
        search_lm, ["--config", str(first / "config.json"), "--method", "idarts", "--run-dir", str(tmp_path / "idarts")]
    )
    assert result.exit_code == 0, result.output
    rerun = json.loads((tmp_path / "idarts" / "config.json").read_text())
    assert rerun["method"] == "idarts" and rerun["nodes"] == 3 and rerun["train"] == str(corpus / "ptb.train.txt")


def test_a_config_that_is_not_json_is_refused_naming_the_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"lr": 1,\n')
    result = CliRunner().invoke(train_lm, ["--config", str(bad)])
    assert result.exit_code == 2 and f"{bad}: line 2: invalid JSON" in result.output
    assert not (tmp_path / "runs").exists()


# -- the tagger ---------------------------------------------------------------------------------

# cell_init darts: at these tiny sizes and seed, its dev F1 falls at epoch 3, which the resume tests need
TAGGER = dict(
    corpus="conll03",
    hidden_size=8,
    batch_size=8,
    lr=0.5,
    patience=0,
    anneal_factor=0.5,
    seed=1,
    max_epochs=3,
    cell_init="darts",
    save_final_model=True,
)


@pytest.fixture(scope="module")
def tagging(tmp_path_factory):
    """(root, corpus, embeddings, genotype, straight run's folder): a tagger trained 3 epochs without a stop.

    Its dev F1 peaks at epoch 2, so a resume after epoch 2 must keep epoch 2's model as the best."""
    from nas.cells.genotype import load
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings
    from tagger.synthetic import generate
    from tagger.train import train_runs

    root = tmp_path_factory.mktemp("tagging")
    data = generate(root / "data", seed=0, train=80, dev=30, test=30, lm_lines=50, raw_paragraphs=2)
    vectors = td.label_vectors(data / "iob2" / "train.txt", root / "vectors.txt")
    config = TaggerConfig(data=str(data / "conll03"), embeddings=f"glove:{vectors}", **TAGGER)
    corpus, embeddings, genotype = (
        load_corpus("conll03", data / "conll03"),
        build_embeddings(config.embeddings),
        load("darts_v2"),
    )
    train_runs(config, corpus, embeddings, genotype, root / "straight")
    return root, config, corpus, embeddings, genotype


def _loss_rows(folder: Path) -> list[list[str]]:
    return [line.split("\t")[:1] + line.split("\t")[2:] for line in (folder / "loss.tsv").read_text().splitlines()]


def _weights(path: Path) -> dict:
    from tagger import model_file

    return model_file.load(path)["state_dict"]


def test_tagger_stopped_after_epoch_2_resumes_to_the_same_models_and_is_marked_unfinished_meanwhile(
    tagging, restore_flair_logging
):
    from tagger.cli.evaluate import main as evaluate
    from tagger.cli.tag import main as tag
    from tagger.train import train_runs

    root, config, corpus, embeddings, genotype = tagging
    straight, cut = root / "straight", root / "cut"
    dev_f1 = [float(row[-2]) for row in _loss_rows(straight)[1:]]
    assert dev_f1[1] == max(dev_f1) and dev_f1[2] < dev_f1[1]  # the premise: epoch 3 is worse than epoch 2

    def stop_after_epoch_2(state):
        if state.epoch == 2:
            state.stop.request()

    with pytest.raises(Interrupted, match="stopped after epoch 2"):
        train_runs(config, corpus, embeddings, genotype, cut, on_epoch=stop_after_epoch_2)
    assert not (cut / "metrics.json").exists() and not (cut / "final-model.pt").exists()
    text = root / "text.txt"
    text.write_text("Anna visited Paris .\n")
    tagged = CliRunner().invoke(tag, ["--model", str(cut), str(text)])
    assert tagged.exit_code == 0, tagged.output
    assert f"warning: {cut}: saved after epoch 2 by a training that has not finished" in tagged.stderr
    scored = CliRunner().invoke(
        evaluate, ["--model", str(cut), "--corpus", "conll03", "--data", config.data, "--out", str(root / "eval")]
    )
    assert scored.exit_code == 0 and "by a training that has not finished" in scored.stderr

    train_runs(config, corpus, embeddings, genotype, cut, resume=True)
    assert "training continues with epoch 3" in (cut / "training.log").read_text()
    assert _loss_rows(cut) == _loss_rows(straight)
    for name in ("best-model.pt", "final-model.pt"):
        assert all(torch.equal(a, b) for a, b in zip(_weights(cut / name).values(), _weights(straight / name).values()))
    assert (
        json.loads((cut / "metrics.json").read_text())["test"]
        == json.loads((straight / "metrics.json").read_text())["test"]
    )
    tagged = CliRunner().invoke(tag, ["--model", str(cut), str(text)])
    assert tagged.exit_code == 0 and "warning" not in tagged.stderr


def test_tagger_resume_without_a_checkpoint_starts_afresh(tagging, restore_flair_logging):
    from tagger.cli.train_tagger import main as train_tagger

    root, config, *_ = tagging
    straight, cut = root / "straight", root / "afresh"
    cut.mkdir()
    shutil.copy(straight / "config.json", cut / "config.json")
    (cut / "loss.tsv").write_text(_header(straight) + "1\t00:00:00\t0.5\n")  # what a kill in epoch 1 or 2 leaves
    (cut / "training.log").write_text("an earlier attempt\n")
    result = CliRunner().invoke(train_tagger, ["--resume", str(cut)])
    assert result.exit_code == 0, result.output
    assert _loss_rows(cut) == _loss_rows(straight) and "earlier attempt" not in (cut / "training.log").read_text()
    assert (
        json.loads((cut / "metrics.json").read_text())["test"]
        == json.loads((straight / "metrics.json").read_text())["test"]
    )
    finished = CliRunner().invoke(train_tagger, ["--resume", str(cut)])
    assert finished.exit_code == 2 and "the training is finished (metrics.json); nothing to resume" in finished.stderr


def test_a_tagger_resumed_with_a_larger_max_epochs_trains_on_to_it_and_says_so(tagging, restore_flair_logging):
    from tagger.cli.train_tagger import main as train_tagger

    root, config, *_ = tagging
    straight, raised = root / "straight", root / "raised"
    raised.mkdir()
    stored = json.loads((straight / "config.json").read_text())
    (raised / "config.json").write_text(json.dumps({**stored, "max_epochs": 1}))  # as a run killed in epoch 1 leaves it
    refused = CliRunner().invoke(train_tagger, ["--resume", str(raised), "--max-epochs", "3", "--lr", "0.01"])
    assert refused.exit_code == 2 and refused.stderr.startswith("error: --lr: not with --resume")
    result = CliRunner().invoke(train_tagger, ["--resume", str(raised), "--max-epochs", str(stored["max_epochs"])])
    assert result.exit_code == 0, result.output
    assert f"--max-epochs {stored['max_epochs']}: the run goes on to it (it had 1)" in result.stderr.splitlines()
    assert _loss_rows(raised) == _loss_rows(straight)
    assert json.loads((raised / "config.json").read_text())["max_epochs"] == stored["max_epochs"]


def _header(folder: Path) -> str:
    return (folder / "loss.tsv").read_text().splitlines()[0] + "\n"


def test_a_tagger_run_that_fails_before_its_first_checkpoint_leaves_no_directory(
    tagging, monkeypatch, restore_flair_logging
):
    from nas.fast import gemm
    from tagger.cli.train_tagger import main as train_tagger
    from tagger.model import CellTagger

    root, config, *_ = tagging
    args = ["--config", str(root / "straight" / "config.json"), "--max-epochs", "1", "--run-dir", str(root / "failing")]

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(CellTagger, "forward_loss", boom)
    failed = CliRunner().invoke(train_tagger, args)
    assert isinstance(failed.exception, RuntimeError) and not (root / "failing").exists()
    monkeypatch.undo()
    again = CliRunner().invoke(train_tagger, args)  # the same command, the same directory
    assert again.exit_code == 0, again.output
    stored = json.loads((root / "failing" / "config.json").read_text())
    assert {k: v for k, v in stored.items() if k not in ("command", "max_epochs", "gemm", "backend")} == {
        k: v
        for k, v in json.loads((root / "straight" / "config.json").read_text()).items()
        if k not in ("command", "max_epochs", "gemm", "backend")
    }
    assert stored["gemm"] == gemm.host_backend()  # the straight run's auto (tagger.train, as a library), resolved
    assert stored["backend"] == "cpu-fused"  # the same: auto on a CPU
    assert Path(stored["data"]).is_absolute() and Path(stored["embeddings"].split(":")[1]).is_absolute()


# -- the character LM ---------------------------------------------------------------------------


def test_train_charlm_failing_before_its_first_model_leaves_nothing_and_reruns_from_its_config(
    tmp_path, monkeypatch, restore_flair_logging
):
    import tagger.charlm
    from tagger.cli.train_charlm import main as train_charlm
    from tagger.synthetic import generate

    text = (
        generate(tmp_path / "syn", seed=3, train=5, dev=5, test=5, lm_lines=300, raw_paragraphs=1) / "lm" / "train.txt"
    )
    small = [
        "--data",
        str(text),
        "--direction",
        "forward",
        "--hidden",
        "8",
        "--embedding",
        "4",
        "--batch-size",
        "8",
        "--seq-len",
        "30",
    ]

    def crash(self, base_path, **kwargs):
        (Path(base_path) / "training.log").write_text("started")
        raise RuntimeError("the machine went away")

    with monkeypatch.context() as patch:
        patch.setattr(tagger.charlm.LanguageModelTrainer, "train", crash)
        failed = CliRunner().invoke(train_charlm, [*small, "--epochs", "1", "--run-dir", str(tmp_path / "cut")])
    assert isinstance(failed.exception, RuntimeError) and not (tmp_path / "cut").exists()

    ok = CliRunner().invoke(train_charlm, [*small, "--epochs", "1", "--run-dir", str(tmp_path / "a")])
    assert ok.exit_code == 0, ok.output
    again = CliRunner().invoke(
        train_charlm,
        ["--config", str(tmp_path / "a" / "config.json"), "--run-dir", str(tmp_path / "b"), "--direction", "backward"],
    )
    assert again.exit_code == 0, again.output
    a, b = (json.loads((tmp_path / d / "config.json").read_text()) for d in ("a", "b"))
    assert {k for k in a if a[k] != b[k]} - {"command"} == {"direction"} and a["data"] == str(text)
