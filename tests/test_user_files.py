"""No command writes over a file it reads, nor over a file of a run it did not start, whatever the
spelling of the path (a symbolic link, `..`), and no run directory goes inside a corpus folder:
each is one `error:` line, exit 2, and every file of the user's byte for byte as it was.

Most are refused while the command line is checked (`nas.common.cli`); the plot-cell cases are
refused by the write itself (`nas.common.guard` through `nas.common.files.atomic_open`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nas.common import guard
from nas.common.errors import InputError
from nas.common.files import atomic_write_text, read_json
from conftest import write_lm_corpus
from tagger_data import write_conll03
from test_bad_inputs import COMMANDS, REPO, _args, _assert_refused, _tree

LM = "--data {fx}/lm --emsize 8 --nhid 8 --batch-size 4 --bptt 5"
TAGGER = "--corpus conll03 --data {fx}/tagdata --embeddings glove:{fx}/vectors.txt"
CASES = [
    # over a file the command reads, however spelled
    (
        "search-lm",
        f"{LM} --out {{fx}}/lm/ptb.train.txt",
        "--out: {fx}/lm/ptb.train.txt: a file in --data, a folder this command reads",
    ),
    ("search-lm", f"{LM} --out {{fx}}/lm/../lm/ptb.valid.txt", "a file in --data, a folder this command reads"),
    ("search-lm", f"{LM} --out {{fx}}/link.txt", "--out: {fx}/link.txt: a file in --data"),
    (
        "search-lm",
        "--train {fx}/lm/ptb.train.txt --valid {fx}/lm/ptb.valid.txt --test {fx}/lm/ptb.test.txt "
        "--out {fx}/lm/ptb.test.txt",
        "an input of this command (--test)",
    ),
    (
        "search-lm",
        f"{LM} --config {{fx}}/searchrun/config.json --out {{fx}}/searchrun/config.json",
        "an input of this command (--config)",
    ),
    (
        "train-wordvec",
        "--data {fx}/text.txt --out {fx}/text.txt",
        "--out: {fx}/text.txt: an input of this command (--data)",
    ),
    ("train-wordvec", "--data {fx}/link.txt --out {fx}/lm/ptb.train.txt", "an input of this command (--data)"),
    (
        "train-wordvec",
        "--data {fx}/text.txt --out {fx}/hardlink.txt",
        "--out: {fx}/hardlink.txt: an input of this command (--data)",
    ),
    (
        "tag",
        "{fx}/text.txt --model {fx}/nope.pt --out {fx}/text.txt",
        "--out: {fx}/text.txt: an input of this command (INPUTS)",
    ),
    ("export", "{fx}/searchrun --out {fx}/searchrun/metrics.json", "a file in MODEL, a folder this command reads"),
    # over a file of a run the command did not start
    (
        "search-lm",
        f"{LM} --out {{fx}}/searchrun/config.json",
        "a file of the run in {fx}/searchrun, which this command did not start",
    ),
    ("search-lm", f"{LM} --out {{fx}}/searchrun/../searchrun/metrics.json", "a file of the run in {fx}/searchrun"),
    ("train-wordvec", "--data {fx}/text.txt --out {fx}/searchrun/metrics.json", "a file of the run in {fx}/searchrun"),
    (
        "evaluate",
        "--model {fx}/nope.pt --corpus conll03 --data {fx}/tagdata --out {fx}/searchrun",
        "--out: {fx}/searchrun: holds another run (its config.json), which this command did not start",
    ),
    ("sample-cells", "--n 2 --out {fx}/searchrun", "--out: {fx}/searchrun: holds another run"),
    ("plot-run", "{fx}/searchrun --out {fx}/searchrun", "holds another run"),
    ("plot-cell", "{fx}/searchrun/genotype.json", "{fx}/searchrun/genotype.png: a file of the run in {fx}/searchrun"),
    ("plot-cell", "{fx}/lm/../searchrun/genotype.json --out {fx}/searchrun", "holds another run"),
    (
        "search-lm",
        f"{LM} --run-dir {{fx}}/out/run --out {{fx}}/out/run/config.json",
        "--out: {fx}/out/run/config.json: the run's own config.json; choose another path",
    ),
    (
        "train-charlm",
        "--data {fx}/text.txt --direction forward --epochs 1 --run-dir {fx}/searchrun",
        "{fx}/searchrun: already holds a run; choose another folder",
    ),
    # a run directory inside a corpus folder
    (
        "search-lm",
        f"{LM} --run-dir {{fx}}/lm/run",
        "--run-dir: {fx}/lm/run: inside --data, a folder this command reads",
    ),
    ("train-lm", f"{LM} --run-dir {{fx}}/lm", "--run-dir: {fx}/lm: inside --data"),
    ("train-tagger", f"{TAGGER} --run-dir {{fx}}/tagdata/runs/ner", "--run-dir: {fx}/tagdata/runs/ner: inside --data"),
    ("train-charlm", "--data {fx}/lm --direction forward --epochs 1 --run-dir {fx}/lm/charlm", "inside --data"),
]


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user-files")
    write_lm_corpus(root / "lm", train_lines=40, other_lines=10)
    write_conll03(root / "tagdata")
    (root / "vectors.txt").write_text("a 0.1 0.2\n", encoding="utf-8")
    (root / "text.txt").write_text("George Washington went to Washington .\n", encoding="utf-8")
    (root / "link.txt").symlink_to(root / "lm" / "ptb.train.txt")
    os.link(root / "text.txt", root / "hardlink.txt")  # the same file under another name
    run = root / "searchrun"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"method": "darts", "epochs": 1}), encoding="utf-8")
    (run / "metrics.json").write_text("{}\n", encoding="utf-8")
    (run / "genotype.json").write_text(
        json.dumps(
            {
                "format": "nas-rnn-genotype",
                "version": 1,
                "name": "g",
                "nodes": [[["tanh", 0]], [["relu", 1]]],
                "concat": [1, 2],
            }
        ),
        encoding="utf-8",
    )
    (run / "genotype.png").write_bytes(b"a picture the user keeps")
    return root


@pytest.mark.parametrize("command, args, expected", CASES)
def test_no_command_writes_over_a_users_file(fx, tmp_path, monkeypatch, command, args, expected):
    monkeypatch.chdir(tmp_path)
    before = _tree(fx)
    result = CliRunner().invoke(COMMANDS[command], _args(args, fx, tmp_path / "out"))
    _assert_refused(result.exit_code, result.stdout, result.stderr, expected.format(fx=fx))
    assert _tree(fx) == before and not any(tmp_path.iterdir())


def test_the_cases_cover_every_command_that_writes_a_file_or_a_run():
    writers = {
        "search-lm",
        "train-lm",
        "train-tagger",
        "train-charlm",
        "train-wordvec",
        "tag",
        "evaluate",
        "export",
        "sample-cells",
        "plot-run",
        "plot-cell",
    }
    assert {case[0] for case in CASES} == writers


def test_a_real_process_refuses_to_write_a_genotype_over_the_training_corpus(fx, tmp_path):
    train = fx / "lm" / "ptb.train.txt"
    before = train.read_bytes()
    proc = subprocess.run(
        [sys.executable, str(REPO / "bin" / "search-lm"), *_args(f"{LM} --out {{fx}}/link.txt", fx, tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    _assert_refused(proc.returncode, proc.stdout, proc.stderr, f"--out: {fx}/link.txt: a file in --data")
    assert train.read_bytes() == before and not any(tmp_path.iterdir())


def test_the_guard_refuses_a_write_over_a_file_read_by_any_spelling_and_allows_its_own_run(tmp_path):
    data, run = tmp_path / "data.json", tmp_path / "run"
    data.write_text("{}\n", encoding="utf-8")
    (tmp_path / "alias.json").symlink_to(data)
    with guard.guarding():
        read_json(tmp_path / "alias.json")
        for spelling in (data, tmp_path / "alias.json", tmp_path / "run" / ".." / "data.json"):
            with pytest.raises(InputError, match="an input of this command"):
                atomic_write_text(spelling, "overwritten")
        atomic_write_text(run / "config.json", "{}\n")  # a run this command starts: its own to rewrite
        read_json(run / "config.json")
        atomic_write_text(run / "config.json", '{"epochs": 2}\n')
    assert data.read_text(encoding="utf-8") == "{}\n"
    atomic_write_text(data, "a library caller is not a command\n")  # outside a command nothing is refused
