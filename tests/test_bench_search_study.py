"""bench/search_study.py's records: the machine's folders made generic, nothing else of the text touched
(a run given relative to the working directory once turned every "." of its log into "runs"); a shipped
cell's command is the one that reproduces its run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from search_study import portable, replay_command  # noqa: E402

LOG = '{"epoch": 1, "valid_ppl": 1171.6057928323685, "lr": 5.0}'


def test_a_run_named_relative_to_the_working_directory_keeps_its_numbers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert portable(LOG, Path("gdas-s1")) == LOG


def test_the_run_folder_and_the_corpus_folder_become_runs_and_data(tmp_path):
    run = tmp_path / "study" / "gdas-s1"
    command = f"bin/search-lm --data /x/shared/data/ptb --lr 5.0 --run-dir {run}"
    assert portable(command, run) == "bin/search-lm --data data/ptb --lr 5.0 --run-dir runs/gdas-s1"
    assert portable(f'"train": "/x/shared/data/ptb/ptb.train.txt", "run_dir": "{run}"', run) == (
        '"train": "data/ptb/ptb.train.txt", "run_dir": "runs/gdas-s1"'
    )


START = "bin/search-lm --data data/ptb --method beta-darts --epochs 50 --early-stop converged --run-dir runs/b"


def test_a_run_stopped_by_its_rule_before_its_budget_is_reproduced_by_its_start():
    assert replay_command(START, {}, 31, "b") == START


def test_a_run_resumed_with_a_larger_budget_names_the_resume_that_ran_the_rest():
    start = START.replace("--epochs 50", "--epochs 10")
    assert replay_command(start, {}, 30, "b") == f"{start} && bin/search-lm --resume runs/b --epochs 30"
    decayed = replay_command(start, {"lr_decay": 0.75, "lr_decay_start": 25, "max_rollbacks": 3}, 40, "b")
    assert decayed == (
        f"{start}; bin/search-lm --resume runs/b --epochs 40 --max-rollbacks 3 --lr-decay 0.75 --lr-decay-start 25"
    )
