"""One writer per run: a command that starts or resumes a run holds its lock until it ends
(`nas.common.locks`), a second is refused in one line naming the first's pid, a lock left by a killed
writer is said and taken over, and a resume refused or failed leaves every file of the run as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import write_lm_corpus
from killing import _env, run, run_killed
from nas.common import locks
from nas.common.errors import InputError
from test_bad_inputs import COMMANDS, _tree
from test_full_disk import disk, fill, refused  # noqa: F401 - disk is a fixture

LM = [
    "--cell",
    "darts_v2",
    "--emsize",
    "8",
    "--nhid",
    "8",
    "--batch-size",
    "4",
    "--bptt",
    "5",
    "--max-batches-per-epoch",
    "3",
    "--eval-batches",
    "1",
    "--threads",
    "1",
]

# Runs a command that holds at its first log line until the file argv[1] exists (it makes argv[1] + ".waiting" then).
_HELD = """
import importlib, os, sys, time
from nas.common.runs import RunDir
gate, module = sys.argv[1], sys.argv[2]
real = RunDir.log

def log_when_let(self, record):
    open(gate + ".waiting", "w").close()
    while not os.path.exists(gate):
        time.sleep(0.05)
    real(self, record)

RunDir.log = log_when_let
sys.argv = [module, *sys.argv[3:]]
importlib.import_module(module).main()
"""


def _epochs(run_dir: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (run_dir / "log.jsonl").read_text().splitlines()]


def test_a_second_lock_on_a_folder_is_refused_naming_the_holder_and_released_with_the_command(tmp_path: Path):
    with locks.holding():
        locks.lock(tmp_path)
        locks.lock(tmp_path)  # the same command again: held once
        assert (tmp_path / locks.LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with locks.holding():  # another command (here, in the same process)
            with pytest.raises(InputError, match=f"another command is writing this run \\(pid {os.getpid()}"):
                locks.lock(tmp_path)
    assert not (tmp_path / locks.LOCK_FILE).exists()
    locks.lock(tmp_path)  # outside a command: nothing is locked
    assert not (tmp_path / locks.LOCK_FILE).exists()


def test_two_resumes_of_one_run_at_once_one_is_refused_and_the_run_is_intact(tmp_path: Path):
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=40, other_lines=10)
    run_dir = tmp_path / "run"
    first = run("nas.cli.train_lm", ["--data", str(corpus), "--run-dir", str(run_dir), *LM, "--epochs", "2"])
    assert first.returncode == 0, first.stderr[-2000:]
    gate = tmp_path / "gate"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HELD, str(gate), "nas.cli.train_lm", "--resume", str(run_dir), "--epochs", "5"],
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        deadline = time.monotonic() + 300
        while not Path(f"{gate}.waiting").exists():
            assert holder.poll() is None, holder.stderr.read()[-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.1)
        second = run("nas.cli.train_lm", ["--resume", str(run_dir), "--epochs", "5"])
    finally:
        gate.touch()
        _, err = holder.communicate(timeout=300)
    assert second.returncode == 2, second.stderr[-2000:]
    assert second.stderr.splitlines() == [
        f"error: {run_dir}: another command is writing this run (pid {holder.pid}, which holds "
        f"{run_dir / locks.LOCK_FILE}); wait for it to end, or stop it, and run again"
    ], second.stderr
    assert holder.returncode == 0, err[-2000:]
    assert _epochs(run_dir) == [1, 2, 3, 4, 5]
    assert json.loads((run_dir / "config.json").read_text())["epochs"] == 5
    assert not (run_dir / locks.LOCK_FILE).exists()


def test_a_lock_left_by_a_killed_writer_is_said_and_taken_over(tmp_path: Path):
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=40, other_lines=10)
    run_dir = tmp_path / "run"
    killed = run_killed(
        "nas.cli.train_lm", ["--data", str(corpus), "--run-dir", str(run_dir), *LM, "--epochs", "2"], at=2
    )
    left = int((run_dir / locks.LOCK_FILE).read_text())
    resumed = run("nas.cli.train_lm", ["--resume", str(run_dir)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (
        f"note: {run_dir / locks.LOCK_FILE}: left by pid {left}, which ended without releasing it (killed?); taken over"
    ) in resumed.stderr.splitlines(), (killed.returncode, resumed.stderr)
    assert _epochs(run_dir) == [1, 2] and not (run_dir / locks.LOCK_FILE).exists()


def test_a_refused_resume_leaves_every_file_as_it_was(tmp_path: Path, monkeypatch):
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=40, other_lines=10)
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    first = CliRunner().invoke(
        COMMANDS["train-lm"], ["--data", str(corpus), "--run-dir", str(run_dir), *LM, "--epochs", "1"]
    )
    assert first.exit_code == 0, first.stderr
    before = _tree(run_dir)
    for flags in (
        ["--lr", "3"],
        ["--gemm", "onednn" if json.loads((run_dir / "config.json").read_text())["gemm"] == "mkl" else "mkl"],
    ):
        result = CliRunner().invoke(COMMANDS["train-lm"], ["--resume", str(run_dir), "--epochs", "2", *flags])
        assert result.exit_code == 2 and "not with --resume" in result.stderr, result.stderr
        assert _tree(run_dir) == before


def test_a_resume_on_a_full_disk_leaves_every_file_as_it_was(disk, tmp_path: Path, monkeypatch):  # noqa: F811
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=40, other_lines=10)
    monkeypatch.chdir(tmp_path)
    run_dir = disk / "run"
    first = CliRunner().invoke(
        COMMANDS["train-lm"], ["--data", str(corpus), "--run-dir", str(run_dir), *LM, "--epochs", "1"]
    )
    assert first.exit_code == 0, first.stderr
    before = _tree(run_dir)
    fill(disk, 0)
    result = CliRunner().invoke(COMMANDS["train-lm"], ["--resume", str(run_dir), "--epochs", "2"])
    assert str(run_dir) in refused(result, disk)
    assert _tree(run_dir) == before


def test_a_resume_that_starts_afresh_on_a_full_disk_leaves_its_config_as_it_was(disk, tmp_path: Path):  # noqa: F811
    """A run killed before its first checkpoint starts over on --resume: there a checkpoint that does not fit
    must not leave a config.json rewritten (here with the raised --epochs)."""
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=40, other_lines=10)
    run_dir = disk / "run"
    run_killed(
        "nas.cli.train_lm",
        ["--data", str(corpus), "--run-dir", str(run_dir), *LM, "--epochs", "1"],
        at=1,
        when="before",
    )
    (run_dir / locks.LOCK_FILE).unlink(
        missing_ok=True
    )  # the killed writer's, which the resume would take over and remove
    before = _tree(run_dir)
    assert str(run_dir / "config.json") in before and str(run_dir / "checkpoint.pt") not in before
    fill(disk, 8 * 1024)  # config.json fits, the checkpoint does not
    result = run("nas.cli.train_lm", ["--resume", str(run_dir), "--epochs", "3"])
    assert result.returncode == 2 and "no space left on the device" in result.stderr, result.stderr
    assert _tree(run_dir) == before
