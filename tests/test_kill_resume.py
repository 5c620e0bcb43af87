"""Kill -9 at a checkpoint, then --resume: search-lm, train-lm and train-tagger end exactly where an uninterrupted run
ends.

Each command runs in a real subprocess that SIGKILLs itself at a chosen checkpoint write
(`killing`): before the first one (the run must start afresh on --resume), between an epoch's
log line and its checkpoint (the log must not keep that epoch twice), or after one. The straight
run, in this process, is the reference. Stray temp
files of an interrupted atomic write and a torn last log line are added on the way, as a kill
leaves them. The final weights, genotypes and logs are compared with a straight run's, exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from conftest import write_lm_corpus
from killing import run, run_killed
from tagger import model_file

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
    "5",
    "--lr",
    "2",
    "--epochs",
    "3",
    "--hessian-iterations",
    "2",
]
TINY_LM = [
    "--cell",
    "darts_v2",
    "--emsize",
    "12",
    "--batch-size",
    "4",
    "--bptt",
    "8",
    "--eval-batch-size",
    "2",
    "--max-batches-per-epoch",
    "4",
    "--epochs",
    "3",
    "--nonmono",
    "1",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_lm_corpus(tmp_path_factory.mktemp("lm") / "corpus", train_lines=120, other_lines=40)


def epochs_logged(run_dir: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (run_dir / "log.jsonl").read_text().splitlines()]


def straight_run(module: str, args: list[str]) -> None:
    """The uninterrupted run, in this process (one thread, as the subprocesses run)."""
    import importlib

    result = CliRunner().invoke(importlib.import_module(module).main, args)
    assert result.exit_code == 0, result.output


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def stray_temp_file(run_dir: Path) -> Path:
    """What a kill during an atomic write of checkpoint.pt leaves beside it."""
    stray = run_dir / ".checkpoint.pt.k1ll3d.tmp"
    stray.write_bytes(b"half a checkpoint")
    return stray


def tear_last_line(run_dir: Path) -> None:
    """What a kill while appending a log line leaves: the start of a record, no newline."""
    with open(run_dir / "log.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"epoch": 9, "train_p')


def test_search_killed_before_its_first_checkpoint_and_between_a_log_line_and_a_checkpoint(corpus, tmp_path):
    module, straight, cut = "nas.cli.search_lm", tmp_path / "straight", tmp_path / "cut"
    straight_run(module, ["--data", str(corpus), "--run-dir", str(straight), *TINY_SEARCH])

    run_killed(module, ["--data", str(corpus), "--run-dir", str(cut), *TINY_SEARCH], at=1, when="before")
    # killed before any checkpoint; its lock file stays, for the resume to take over
    assert sorted(p.name for p in cut.iterdir()) == [".lock", "config.json"]
    stray = stray_temp_file(cut)
    run_killed(module, ["--resume", str(cut)], at=3, when="before")  # starts afresh; killed before epoch 2's checkpoint
    assert not stray.exists()
    assert epochs_logged(cut) == [1, 2] and torch.load(cut / "checkpoint.pt", weights_only=True)["epoch"] == 1
    tear_last_line(cut)

    resumed = run(module, ["--resume", str(cut)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "log.jsonl: line 3 is torn" in resumed.stderr
    assert epochs_logged(cut) == [1, 2, 3]
    log = [json.loads(line) for line in (cut / "log.jsonl").read_text().splitlines()]
    assert log == [
        json.loads(line) | {k: r[k] for k in ("tokens_per_s", "seconds")}
        for line, r in zip((straight / "log.jsonl").read_text().splitlines(), log)
    ]
    assert (
        json.loads((cut / "genotype.json").read_text())["nodes"]
        == json.loads((straight / "genotype.json").read_text())["nodes"]
    )
    assert same_tensors(
        torch.load(cut / "checkpoint.pt", weights_only=True)["model"],
        torch.load(straight / "checkpoint.pt", weights_only=True)["model"],
    )


def test_train_lm_killed_after_a_checkpoint_resumes_from_another_folder(corpus, tmp_path):
    module, straight, cut = "nas.cli.train_lm", tmp_path / "straight", tmp_path / "cut"
    straight_run(module, ["--data", str(corpus), "--run-dir", str(straight), *TINY_LM])

    run_killed(module, ["--data", str(corpus), "--run-dir", str(cut), *TINY_LM], at=2)  # after epoch 1's checkpoint
    assert epochs_logged(cut) == [1] and not (cut / "metrics.json").exists()
    stray_temp_file(cut)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = run(module, ["--resume", str(cut)], cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert epochs_logged(cut) == [1, 2, 3] and not list(cut.glob(".*.tmp"))
    full, again = (json.loads((d / "metrics.json").read_text()) for d in (straight, cut))
    assert again["test_ppl"] == full["test_ppl"] and again["best_epoch"] == full["best_epoch"]
    for name in ("best.pt", "checkpoint.pt"):
        assert same_tensors(
            torch.load(cut / name, weights_only=True)["state_dict"],
            torch.load(straight / name, weights_only=True)["state_dict"],
        ), name


def test_train_tagger_killed_between_a_loss_row_and_a_checkpoint(tmp_path, restore_flair_logging):
    import tagger_data as td
    from tagger.synthetic import generate

    data = generate(tmp_path / "data", seed=0, train=80, dev=30, test=30, lm_lines=50, raw_paragraphs=2)
    vectors = td.label_vectors(data / "iob2" / "train.txt", tmp_path / "vectors.txt")
    # lr 0.5, patience 0, DARTS's init: epoch 3 is worse on dev, so epoch 4 trains at the annealed lr
    args = [
        "--corpus",
        "conll03",
        "--data",
        str(data / "conll03"),
        "--embeddings",
        f"glove:{vectors}",
        "--hidden-size",
        "8",
        "--batch-size",
        "8",
        "--max-epochs",
        "4",
        "--lr",
        "0.5",
        "--patience",
        "0",
        "--anneal-factor",
        "0.5",
        "--seed",
        "1",
        "--threads",
        "1",
        "--cell-init",
        "darts",
        "--save-final-model",
    ]
    module, straight, cut = "tagger.cli.train_tagger", tmp_path / "straight", tmp_path / "cut"
    straight_run(module, [*args, "--run-dir", str(straight)])

    run_killed(module, [*args, "--run-dir", str(cut)], at=3, when="before")  # epoch 3's row written, not its checkpoint
    assert torch.load(cut / "checkpoint.pt", weights_only=True)["epoch"] == 2
    stray = stray_temp_file(cut)
    with open(cut / "loss.tsv", "a", encoding="utf-8") as handle:
        handle.write("4\t12:00")  # a torn row

    resumed = run(module, ["--resume", str(cut)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "training continues with epoch 3" in resumed.stderr and "GradScaler" not in resumed.stderr
    assert not stray.exists()
    rows = [line.split("\t") for line in (cut / "loss.tsv").read_text().splitlines()]
    expected = [line.split("\t") for line in (straight / "loss.tsv").read_text().splitlines()]
    assert [r[0] for r in rows] == ["EPOCH", "1", "2", "3", "4"]
    assert [r[2:] for r in rows] == [r[2:] for r in expected]  # all but the time of day
    assert float(rows[4][2]) == 0.25  # the annealed lr survived the kill
    for name in ("best-model.pt", "final-model.pt"):
        a, b = (model_file.load(d / name) for d in (cut, straight))
        assert same_tensors(a["state_dict"], b["state_dict"]), name
        assert a["model_card"]["training_complete"] is True
    full, again = (json.loads((d / "metrics.json").read_text()) for d in (straight, cut))
    assert again["test"] == full["test"] and again["dev"] == full["dev"] and again["epochs"] == 4


def test_search_tagger_killed_around_an_epoch_end_loses_no_epoch(tmp_path, restore_flair_logging):
    """Killed after epoch 1's checkpoint (with the checkpoint written before the log line, as the
    tagging search once did, epoch 1's record would be lost for good), then killed between epoch
    2's log line and its checkpoint: each resume ends with the uninterrupted search's log and cell."""
    import tagger_data as td

    td.write_conll03(tmp_path / "data")
    vectors = td.write_vectors(tmp_path / "vectors.txt")
    args = [
        "--corpus",
        "conll03",
        "--data",
        str(tmp_path / "data"),
        "--embeddings",
        f"glove:{vectors}",
        "--hidden-size",
        "8",
        "--nodes",
        "3",
        "--batch-size",
        "8",
        "--epochs",
        "3",
        "--seed",
        "4",
        "--threads",
        "1",
        "--hessian-iterations",
        "2",
    ]
    module, straight, cut = "tagger.cli.search_tagger", tmp_path / "straight", tmp_path / "cut"
    straight_run(module, [*args, "--run-dir", str(straight)])

    run_killed(module, [*args, "--run-dir", str(cut)], at=2, when="after")  # right after epoch 1's checkpoint
    assert epochs_logged(cut) == [1]
    run_killed(module, ["--resume", str(cut)], at=1, when="before")  # epoch 2's log line written, not its checkpoint
    assert epochs_logged(cut) == [1, 2] and torch.load(cut / "checkpoint.pt", weights_only=True)["epoch"] == 1

    resumed = run(module, ["--resume", str(cut)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = [json.loads(line) for line in (cut / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2, 3]
    assert log == [
        json.loads(line) | {k: r[k] for k in ("tokens_per_s", "seconds")}
        for line, r in zip((straight / "log.jsonl").read_text().splitlines(), log)
    ]
    assert (
        json.loads((cut / "genotype.json").read_text())["nodes"]
        == json.loads((straight / "genotype.json").read_text())["nodes"]
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("module, args", [("nas.cli.search_lm", TINY_SEARCH), ("nas.cli.train_lm", TINY_LM)])
def test_a_run_on_the_gpu_killed_after_a_checkpoint_resumes_where_the_straight_run_ends(module, args, corpus, tmp_path):
    """The checkpoint loads onto the GPU, generator states too (torch takes those back on the CPU only), and the
    GPU's generator, which draws the dropout masks there, goes on where it was. Equal up to the GPU's
    non-deterministic sums: masks drawn afresh would move the perplexities far more."""
    straight, cut, args = tmp_path / "straight", tmp_path / "cut", [*args, "--device", "cuda"]
    straight_run(module, ["--data", str(corpus), "--run-dir", str(straight), *args])
    run_killed(module, ["--data", str(corpus), "--run-dir", str(cut), *args], at=2, when="after")
    resumed = run(module, ["--resume", str(cut)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    ours, theirs = ([json.loads(line) for line in (d / "log.jsonl").read_text().splitlines()] for d in (cut, straight))
    assert [r["epoch"] for r in ours] == [r["epoch"] for r in theirs] == [1, 2, 3]
    assert [r["valid_ppl"] for r in ours] == pytest.approx([r["valid_ppl"] for r in theirs], rel=1e-4)
