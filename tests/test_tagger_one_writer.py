"""The tagger commands as train-lm and search-lm: one writer per run, and `--gemm`'s rule fixed for a run.

`bin/train-tagger --resume` and `bin/search-tagger --resume` take the run's lock (`nas.common.locks`)
before they write anything, so a second resume, refused by the lock, leaves every file of the run
as it was (train-tagger used to rewrite config.json with a raised --max-epochs first). `--gemm`:
config.json keeps the rule `auto` resolved to, a resume runs with it and refuses another, and a run
stored before the setting existed resumes with `auto`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import tagger_data as td
from killing import _env, run, run_killed
from nas.common import locks
from nas.fast import gemm
from tagger.cli import search_tagger, train_tagger
from test_bad_inputs import _tree

HOST = gemm.host_backend()
OTHER = "onednn" if HOST == "mkl" else "mkl"  # a rule auto does not give here, so a run that keeps it shows
TAGGER = ["--hidden-size", "8", "--batch-size", "8", "--seed", "1", "--threads", "1"]

# Runs a command that holds before its first checkpoint write until the file argv[1] exists (it makes argv[1] +
# ".waiting" then).
_HELD = """
import importlib, os, sys, time
from nas.common.runs import RunDir
gate, module = sys.argv[1], sys.argv[2]
real = RunDir.save_checkpoint

def save_when_let(self, *args, **kwargs):
    open(gate + ".waiting", "w").close()
    while not os.path.exists(gate):
        time.sleep(0.05)
    real(self, *args, **kwargs)

RunDir.save_checkpoint = save_when_let
sys.argv = [module, *sys.argv[3:]]
importlib.import_module(module).main()
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("tagger-one-writer")
    td.write_conll03(root / "data")
    vectors = td.write_vectors(root / "vectors.txt")
    return ["--corpus", "conll03", "--data", str(root / "data"), "--embeddings", f"glove:{vectors}"]


@pytest.fixture(scope="module")
def interrupted(corpus, tmp_path_factory) -> Path:
    """A train-tagger run of 2 epochs with --gemm OTHER, killed right after epoch 1's checkpoint."""
    run_dir = tmp_path_factory.mktemp("interrupted") / "run"
    run_killed(
        "tagger.cli.train_tagger",
        [*corpus, *TAGGER, "--max-epochs", "2", "--gemm", OTHER, "--run-dir", str(run_dir)],
        at=1,
    )
    (run_dir / locks.LOCK_FILE).unlink()  # the killed writer's (a resume would say so and take it over)
    return run_dir


@pytest.fixture
def kept_rule(monkeypatch):
    """The GEMM rules of the backends the in-process commands build their runs' models on (`nas.speed.of`)."""
    from nas import speed

    seen, real = [], speed.of

    def of(config):
        chosen = real(config)
        seen.append(chosen.gemm.rule)
        return chosen

    monkeypatch.setattr(speed, "of", of)
    return seen


def _copy(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to)
    return to


def _lock_message(run_dir: Path, pid: int) -> str:
    return (
        f"error: {run_dir}: another command is writing this run (pid {pid}, which holds "
        f"{run_dir / locks.LOCK_FILE}); wait for it to end, or stop it, and run again"
    )


def test_two_train_tagger_resumes_at_once_one_is_refused_and_leaves_the_run_as_it_was(interrupted, tmp_path):
    run_dir = _copy(interrupted, tmp_path / "run")
    gate = tmp_path / "gate"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _HELD,
            str(gate),
            "tagger.cli.train_tagger",
            "--resume",
            str(run_dir),
            "--max-epochs",
            "3",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        deadline = time.monotonic() + 300
        while not Path(f"{gate}.waiting").exists():  # the holder has trained epoch 2, and waits to checkpoint it
            assert holder.poll() is None, holder.stderr.read()[-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.1)
        before = _tree(run_dir)  # its new limit is written with the resume's first checkpoint (nas.common.runs)
        assert json.loads((run_dir / "config.json").read_text())["max_epochs"] == 2
        second = run("tagger.cli.train_tagger", ["--resume", str(run_dir), "--max-epochs", "5"])
        after = _tree(run_dir)
    finally:
        gate.touch()
        _, err = holder.communicate(timeout=300)
    assert after == before, second.stderr[-2000:]  # config.json (not max_epochs 5) and every other file
    assert second.returncode == 2, second.stderr[-2000:]
    assert second.stderr.splitlines() == [_lock_message(run_dir, holder.pid)], second.stderr
    assert holder.returncode == 0, err[-2000:]
    assert json.loads((run_dir / "config.json").read_text())["max_epochs"] == 3
    assert json.loads((run_dir / "metrics.json").read_text())["epochs"] == 3
    assert not (run_dir / locks.LOCK_FILE).exists()


def test_train_tagger_keeps_its_gemm_rule_resumes_with_it_and_refuses_another(
    corpus, interrupted, tmp_path, kept_rule, restore_flair_logging
):
    fresh = tmp_path / "fresh"
    result = CliRunner().invoke(train_tagger.main, [*corpus, *TAGGER, "--max-epochs", "1", "--run-dir", str(fresh)])
    assert result.exit_code == 0, result.stderr
    assert json.loads((fresh / "config.json").read_text())["gemm"] == HOST  # what auto resolved to

    run_dir = _copy(interrupted, tmp_path / "run")
    assert json.loads((run_dir / "config.json").read_text())["gemm"] == OTHER
    before = _tree(run_dir)
    refused = CliRunner().invoke(train_tagger.main, ["--resume", str(run_dir), "--max-epochs", "3", "--gemm", HOST])
    assert refused.exit_code == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        f"error: --gemm: not with --resume (the run has {OTHER!r}): a resumed run keeps the settings it started "
        f"with; to change them, start a new run with --config {run_dir / 'config.json'} --gemm ..."
    ]
    assert _tree(run_dir) == before

    kept_rule.clear()
    resumed = CliRunner().invoke(train_tagger.main, ["--resume", str(run_dir), "--gemm", OTHER])
    assert resumed.exit_code == 0, resumed.stderr
    assert (
        kept_rule and set(kept_rule) == {OTHER} and json.loads((run_dir / "config.json").read_text())["gemm"] == OTHER
    )

    older = _copy(interrupted, tmp_path / "older")  # a run stored before --gemm existed: auto
    stored = json.loads((older / "config.json").read_text())
    del stored["gemm"]
    (older / "config.json").write_text(json.dumps(stored))
    kept_rule.clear()
    resumed = CliRunner().invoke(train_tagger.main, ["--resume", str(older), "--gemm", "auto"])
    assert resumed.exit_code == 0, resumed.stderr
    assert kept_rule and set(kept_rule) == {HOST}


def test_search_tagger_locks_before_a_resume_reads_or_writes_and_keeps_its_gemm_rule(
    corpus, tmp_path, kept_rule, restore_flair_logging
):
    run_dir = tmp_path / "search"
    args = [
        *corpus,
        *TAGGER,
        "--nodes",
        "3",
        "--max-batches-per-epoch",
        "2",
        "--epochs",
        "1",
        "--hessian-iterations",
        "2",
    ]
    first = CliRunner().invoke(search_tagger.main, [*args, "--gemm", OTHER, "--run-dir", str(run_dir)])
    assert first.exit_code == 0, first.stderr
    assert json.loads((run_dir / "config.json").read_text())["gemm"] == OTHER

    with locks.holding():  # another command writes the run (here, this process)
        locks.lock(run_dir)
        before = _tree(run_dir)
        refused = CliRunner().invoke(search_tagger.main, ["--resume", str(run_dir), "--epochs", "2"])
        assert refused.exit_code == 2 and refused.stderr.splitlines() == [_lock_message(run_dir, os.getpid())], (
            refused.stderr
        )
        assert _tree(run_dir) == before
    before = _tree(run_dir)
    refused = CliRunner().invoke(search_tagger.main, ["--resume", str(run_dir), "--epochs", "2", "--gemm", HOST])
    assert refused.exit_code == 2 and f"--gemm: not with --resume (the run has {OTHER!r})" in refused.stderr
    assert _tree(run_dir) == before
