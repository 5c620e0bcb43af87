"""A full disk is one `error:` line naming the path, the space free and the space the file needs,
exit 2, and the output location as it was before the write: no half-written file, no empty
folder, no run directory that cannot be resumed, and a finished checkpoint still usable.

The disk is a small tmpfs mounted for each test (as root, where the system allows it); where it
cannot be mounted the tests are skipped.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from nas.common.errors import InputError
from nas.common.files import atomic_write_bytes
from nas.common.runs import RunDir
from conftest import write_lm_corpus
from test_bad_inputs import COMMANDS, _tree

LM = [
    "--emsize",
    "8",
    "--nhid",
    "8",
    "--batch-size",
    "4",
    "--bptt",
    "5",
    "--nodes",
    "2",
    "--max-batches-per-epoch",
    "2",
    "--eval-batches",
    "1",
    "--epochs",
    "1",
    "--threads",
    "1",
]


@pytest.fixture
def disk(tmp_path):
    """A 1 MB file system of its own at tmp_path/disk; `fill(disk, free)` leaves about `free` bytes."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", f"tmpfs-{uuid.uuid4().hex[:8]}", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, free: int) -> None:
    """Leave about `free` bytes on `disk` (tmpfs counts whole 4 KiB pages)."""
    stats = os.statvfs(disk)
    with open(disk / "filler", "wb") as handle:
        handle.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - free))


def refused(result, disk: Path) -> str:
    """The error line of a command that ran out of space; nothing else on stderr is an error."""
    assert result.exit_code == 2, result.stderr
    assert "Traceback" not in result.stderr and "Errno" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.splitlines()[-1] == errors[0], result.stderr
    assert "no space left on the device" in errors[0] and str(disk) in errors[0], errors[0]
    return errors[0]


def test_a_write_that_fills_the_disk_leaves_the_old_file_and_no_temp_file(disk):
    target = disk / "sub" / "data.bin"
    fill(disk, 64 * 1024)
    with pytest.raises(InputError, match=r"data\.bin: no space left on the device: .* free, the file needs 1\.0 MB"):
        atomic_write_bytes(target, b"x" * 1_000_000)
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no temp file, and no folder made for it
    atomic_write_bytes(disk / "old.bin", b"old")
    with pytest.raises(InputError, match="no space left"):
        atomic_write_bytes(disk / "old.bin", b"y" * 1_000_000)
    assert (disk / "old.bin").read_bytes() == b"old"


def test_a_log_line_that_does_not_fit_leaves_the_log_as_it_was(disk):
    run = RunDir(disk / "run")
    run.path.mkdir()
    run.log({"epoch": 1})
    fill(disk, 0)
    with pytest.raises(InputError, match="log.jsonl: no space left"):
        run.log({"epoch": 2, "text": "x" * 10_000})
    assert run.read_log() == [{"epoch": 1}]


def test_search_lm_on_a_full_disk_leaves_no_run_directory(disk, tmp_path, monkeypatch):
    data = write_lm_corpus(tmp_path / "lm", train_lines=40, other_lines=10)
    monkeypatch.chdir(tmp_path)
    fill(disk, 8 * 1024)  # config.json fits, the first checkpoint does not
    result = CliRunner().invoke(COMMANDS["search-lm"], ["--data", str(data), *LM, "--run-dir", str(disk / "run")])
    assert "checkpoint.pt: no space left on the device" in refused(result, disk)
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_resume_on_a_full_disk_keeps_the_finished_checkpoint_usable(disk, tmp_path, monkeypatch):
    data = write_lm_corpus(tmp_path / "lm", train_lines=40, other_lines=10)
    monkeypatch.chdir(tmp_path)
    run = disk / "run"
    first = CliRunner().invoke(COMMANDS["search-lm"], ["--data", str(data), *LM, "--run-dir", str(run)])
    assert first.exit_code == 0, first.stderr
    before = _tree(run)
    fill(disk, 0)
    result = CliRunner().invoke(COMMANDS["search-lm"], ["--resume", str(run), "--epochs", "2"])
    assert str(run) in refused(result, disk)
    after = _tree(run)
    assert after[str(run / "checkpoint.pt")] == before[str(run / "checkpoint.pt")]
    assert set(after) == set(before)  # nothing half-written beside it
    (disk / "filler").unlink()
    again = CliRunner().invoke(COMMANDS["search-lm"], ["--resume", str(run), "--epochs", "2"])
    assert again.exit_code == 0, again.stderr


def test_sample_cells_on_a_full_disk_leaves_no_cell_files(disk, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    fill(disk, 12 * 1024)  # a few cells fit (each takes a page), not 50
    result = CliRunner().invoke(COMMANDS["sample-cells"], ["--n", "50", "--out", str(disk / "cells")])
    assert "random_1_" in refused(result, disk)
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_train_wordvec_on_a_full_disk_leaves_no_vectors(disk, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"w{i} w{i + 1} w{i + 2} w{i + 3}" for i in range(300)) + "\n", encoding="utf-8")
    fill(disk, 4 * 1024)
    result = CliRunner().invoke(
        COMMANDS["train-wordvec"],
        ["--data", str(text), "--out", str(disk / "out" / "v.txt"), "--dim", "20", "--epochs", "1"],
    )
    assert "v.txt: no space left on the device" in refused(result, disk)
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


@pytest.mark.parametrize("free, full", [(0, "test.conll"), (8192, "metrics.json")])
def test_evaluate_on_a_full_disk_leaves_no_folder_and_no_half_of_its_output(
    disk, tiny_tagger, restore_flair_logging, free, full
):
    run, data = tiny_tagger
    fill(disk, free)  # nothing fits, or the predictions (two pages) but not the metrics beside them
    result = CliRunner().invoke(
        COMMANDS["evaluate"],
        ["--model", str(run), "--corpus", "conll03", "--data", str(data / "conll03"), "--out", str(disk / "eval")],
    )
    assert f"{full}: no space left on the device" in refused(result, disk)
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_tag_on_a_full_disk_leaves_no_output_folder(disk, tiny_tagger, restore_flair_logging, tmp_path):
    run, data = tiny_tagger
    fill(disk, 0)
    result = CliRunner().invoke(
        COMMANDS["tag"], ["--model", str(run), str(data / "raw.txt"), "--out", str(disk / "tagged") + "/"]
    )
    assert "raw.conll: no space left on the device" in refused(result, disk)
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]
