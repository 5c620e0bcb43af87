"""`tagger.train_tagger(config, run_dir)`, bin/train-tagger from Python: one path, the same run directory;
and what the command shows around a training (the test report's heading, no progress bars in a file,
the time left after each epoch, --dry-run's JSON line)."""

import json
import logging
import shlex
import subprocess
import sys
import warnings

import pytest
from click.testing import CliRunner

import tagger
import tagger_data as td
from tagger.cli.train_tagger import main


@pytest.fixture
def data(tmp_path):
    td.write_conll03(tmp_path / "data")
    return tmp_path, td.write_vectors(tmp_path / "vectors.txt")


def test_the_python_call_makes_the_run_directory_the_command_makes(data, restore_flair_logging):
    root, vectors = data
    config = tagger.TaggerConfig(
        corpus="conll03",
        data=str(root / "data"),
        embeddings=f"glove:{vectors}",
        hidden_size=8,
        batch_size=4,
        lr=0.5,
        max_epochs=2,
        seed=3,
        threads=1,
    )
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        metrics = tagger.train_tagger(config, root / "python")
    assert not [w for w in warned if "GradScaler" in str(w.message)]  # flair's FutureWarning, as the command
    assert config.command == ""  # the caller's settings are left as they were
    stored = json.loads((root / "python" / "config.json").read_text())
    command = stored["command"]
    assert (
        command.startswith("bin/train-tagger --corpus conll03 ") and "# run as tagger.train_tagger(config, " in command
    )
    # the card's "How it was made": that command, its paths by their names (a card says nothing of the machine)
    card = (root / "python" / "README.md").read_text()
    assert str(root) not in card
    assert (
        "bin/train-tagger --corpus conll03 --data data --embeddings glove:vectors.txt --hidden-size 8 --lr 0.5 "
        "--batch-size 4 --max-epochs 2 --seed 3 --threads 1 --run-dir python  # run as tagger.train_tagger(config, "
        "'python')" in card
    )
    # the command line recorded is the command's own run of these settings
    args = shlex.split(command, comments=True)[1:]
    args[args.index("--run-dir") + 1] = str(root / "cli")
    with warnings.catch_warnings(record=True) as warned:  # tagger.train's own filter, set on import, is gone now
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    assert not [w for w in warned if "GradScaler" in str(w.message)]
    assert json.loads((root / "python" / "metrics.json").read_text())["test"] == metrics["test"]
    assert json.loads((root / "cli" / "metrics.json").read_text())["test"] == metrics["test"]
    assert sorted(p.name for p in (root / "python").iterdir()) == sorted(p.name for p in (root / "cli").iterdir())
    assert {"README.md", "best-model.pt", "config.json", "metrics.json", "test.conll", "training.log"} <= {
        p.name for p in (root / "python").iterdir()
    }
    by_cli = json.loads((root / "cli" / "config.json").read_text())
    assert {k for k in stored if stored[k] != by_cli[k]} == {"command"}
    assert (root / "python" / "test.conll").read_text() == (root / "cli" / "test.conll").read_text()
    # the report on stdout says what it scores
    heading, header = result.stdout.splitlines()[:2]
    assert heading == "test split (eng.testb, 12 sentences), best-model.pt, seqeval strict IOB2:"
    assert header.startswith("type")
    # flair's dev-evaluation progress bars stay out of a stderr that is no terminal, and out of training.log
    log = (root / "cli" / "training.log").read_text()
    for text in (result.stderr, log):
        assert "it/s]" not in text and "%|" not in text and "\r" not in text
    # flair's line at the end of each epoch says the time left
    epochs = [line for line in log.splitlines() if " EPOCH " in line]
    assert len(epochs) == 2 and "- time left at most ~" in epochs[0] and "(1 epoch of ~" in epochs[0]
    assert epochs[1].endswith("- last epoch")


def test_a_python_run_stopped_by_ctrl_c_continues_with_the_commands_resume(data, restore_flair_logging, monkeypatch):
    from nas.common import runs

    root, vectors = data
    config = tagger.TaggerConfig(
        corpus="conll03",
        data=str(root / "data"),
        embeddings=f"glove:{vectors}",
        hidden_size=8,
        batch_size=4,
        lr=0.5,
        max_epochs=2,
        seed=3,
        threads=1,
    )
    straight = tagger.train_tagger(config, root / "straight")
    asked = runs.StopFlag.__init__

    def ctrl_c_at_once(self):  # Ctrl-C in epoch 1: the run stops after its checkpoint
        asked(self)
        self.requested = True

    monkeypatch.setattr(runs.StopFlag, "__init__", ctrl_c_at_once)
    with pytest.raises(runs.Interrupted, match="stopped after epoch 1"):
        tagger.train_tagger(config, root / "cut")
    monkeypatch.undo()
    assert (root / "cut" / "checkpoint.pt").is_file() and not (root / "cut" / "metrics.json").exists()
    result = CliRunner().invoke(main, ["--resume", str(root / "cut")])
    assert result.exit_code == 0, result.stderr
    assert json.loads((root / "cut" / "metrics.json").read_text())["test"] == straight["test"]


def test_importing_tagger_and_its_config_loads_neither_flair_nor_torch():
    code = "import sys, tagger; tagger.TaggerConfig(); print('flair' in sys.modules, 'torch' in sys.modules)"
    light = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert light.stdout == "False False\n"


def test_the_dry_run_json_ends_with_a_newline(data, restore_flair_logging):
    root, vectors = data
    result = CliRunner().invoke(
        main,
        [
            "--corpus",
            "conll03",
            "--data",
            str(root / "data"),
            "--embeddings",
            f"glove:{vectors}",
            "--hidden-size",
            "4",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.endswith("}\n") and result.stdout.count("\n") == 1
    assert json.loads(result.stdout)["test"]["sentences"] == 12


def test_the_time_left_after_each_epoch(monkeypatch):
    from tagger import train

    clock = iter([0.0, 30.0, 30.0, 40.0, 40.0, 80.0, 80.0, 100.0, 120.0])
    monkeypatch.setattr(train.time, "perf_counter", lambda: next(clock))
    plugin = train._epoch_plugin([], True, time_budget=None, max_epochs=5)

    def epoch_line(epoch: int) -> str:
        record = logging.makeLogRecord({"msg": f"EPOCH {epoch} done: loss 1.0000 - lr: 0.100000"})
        plugin.time_left(record)
        return record.getMessage()

    plugin.before_training_epoch(epoch=1)  # 0 s
    # training took 30 s, no dev evaluation timed yet: 4 epochs of 30 s
    assert epoch_line(1) == "EPOCH 1 done: loss 1.0000 - lr: 0.100000 - time left at most ~2 min (4 epochs of ~30 s)"
    plugin.after_training_epoch()  # 30 s
    plugin.after_evaluation(validation_scores=(0.5, 1.0))  # 40 s: 10 s of dev evaluation
    plugin.before_training_epoch(epoch=2)  # 40 s
    # 3 epochs of 35 s training + 10 s dev, and this epoch's dev evaluation
    assert epoch_line(2).endswith(" - time left at most ~2 min (3 epochs of ~45 s)")
    assert epoch_line(3).endswith(" - time left at most ~2 min (2 epochs of ~45 s)")
    other = logging.makeLogRecord({"msg": "EPOCH 1 done: %s", "args": ("x",)})
    budget = train._epoch_plugin([], True, time_budget=1.0, max_epochs=100)
    budget.before_training_epoch(epoch=1)  # 100 s
    assert budget.estimate(1) == "time left at most ~40 s (the time budget)"  # 20 s of 60 spent
    assert (
        train._epoch_plugin([], True, None, max_epochs=None).time_left(other)
        and other.getMessage() == "EPOCH 1 done: x"
    )


def test_the_command_line_a_python_run_records_is_the_commands_own():
    from pathlib import Path

    from tagger.training import equivalent_command

    config = tagger.TaggerConfig(
        corpus="wnut17",
        data="my data",
        hidden_size=64,
        reproject=False,
        save_final_model=True,
        time_budget=2.5,
        match_params="lstm:32",
    )
    command = equivalent_command(config, Path("runs/x"))
    # the defaults left out, flags as the command spells them, --hidden-size not with --match-params lstm:H
    assert command == (
        "bin/train-tagger --corpus wnut17 --data 'my data' --match-params lstm:32 --no-reproject "
        "--save-final-model --time-budget 2.5 --run-dir runs/x  # run as tagger.train_tagger(config, 'runs/x')"
    )
    parsed = main.make_context("bin/train-tagger", shlex.split(command, comments=True)[1:]).params
    assert {
        k: parsed[k] for k in ("corpus", "data", "reproject", "save_final_model", "time_budget", "match_params")
    } == {
        "corpus": "wnut17",
        "data": "my data",
        "reproject": False,
        "save_final_model": True,
        "time_budget": 2.5,
        "match_params": "lstm:32",
    }


def test_every_setting_the_python_call_records_is_spelt_as_the_commands_flag():
    """tagger.training writes a setting's flag from its field's name (the library does not import the command): a
    flag spelt otherwise, or a switch on by default without its --no- form, fails here."""
    from dataclasses import fields

    from tagger.training import NOT_FLAGS

    options = {opt: param for param in main.params for opt in [*param.opts, *param.secondary_opts]}
    for field in fields(tagger.TaggerConfig):
        if field.name in NOT_FLAGS:
            continue
        flag = "--" + field.name.replace("_", "-")
        assert flag in options and options[flag].name == field.name, flag
        if field.default is True:
            assert f"--no-{flag[2:]}" in options[flag].secondary_opts, flag
