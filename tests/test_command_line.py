"""One command line: the same flag means the same thing in every command, and help keeps its examples' lines."""

from __future__ import annotations

import sys

import click
import pytest
from click.testing import CliRunner

from nas.common.cli import OutputPath
from test_bad_inputs import COMMANDS

COMPUTING = {
    "search-lm",
    "train-lm",
    "eval-lm",
    "compare-words",
    "train-tagger",
    "tag",
    "evaluate",
    "train-charlm",
    "train-wordvec",
    "demo",
}
SEVERAL_FILES = {"sample-cells", "plot-search", "plot-cell", "plot-run", "evaluate"}
RANDOM = {"search-lm", "train-lm", "sample-cells", "train-tagger", "evaluate", "train-charlm", "train-wordvec", "demo"}
TRAINING = {"search-lm", "train-lm", "train-tagger"}  # start and resume runs: --gemm's rule is kept in config.json


def _options(command: click.Command) -> dict[str, click.Option]:
    return {opt: param for param in command.params if isinstance(param, click.Option) for opt in param.opts}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_flag_means_the_same_everywhere(name):
    options = _options(COMMANDS[name])
    if "--out" in options:  # an output file, or a folder where a command writes several files
        kind = "folder" if name in SEVERAL_FILES else "file or folder" if name == "tag" else "file"
        assert isinstance(options["--out"].type, OutputPath) and options["--out"].type.kind == kind
    if "--run-dir" in options:
        assert isinstance(options["--run-dir"].type, OutputPath) and options["--run-dir"].type.kind == "folder"
    if "--corpus" in options:  # a format; the path is --data
        assert isinstance(options["--corpus"].type, click.Choice)
    if "--data" in options:
        assert isinstance(options["--data"].type, click.Path)
    assert not {"--dropouth", "--dropoutx", "--dropouti", "--dropoute"} & set(options)  # one spelling: --dropout-h
    assert "--workers" not in options or name in (
        "search-lm",
        "transfer",
    )  # there, runs at a time; threads are --threads
    assert ("--ray-address" in options) == ("--workers" in options)
    assert ("--threads" in options) == (name in COMPUTING)
    assert ("--seed" in options) == (name in RANDOM)
    assert ("--gemm" in options) == (name in TRAINING)
    assert ("--backend" in options) == (name in TRAINING)  # nas.fast.backends, kept in config.json as --gemm is
    if "--seed" in options and name != "evaluate":  # evaluate takes the run's seed
        assert options["--seed"].default == 1


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_keeps_the_lines_of_its_examples(name):
    command = COMMANDS[name]
    examples = [line.strip() for line in command.help.splitlines() if line.strip().startswith(f"bin/{name}")]
    shown = [line.strip() for line in CliRunner().invoke(command, ["--help"], terminal_width=80).stdout.splitlines()]
    assert all(example in shown for example in examples), (examples, shown)


@pytest.mark.parametrize("missing,one_line", [("torch", True), ("flair.models", True), ("somethingelse", False)])
def test_a_python_without_the_toolkits_packages_is_one_line(missing, one_line, capsys):
    from nas.common.cli import command

    @command()
    def needs():
        raise ModuleNotFoundError(f"No module named '{missing}'", name=missing)

    if not one_line:  # not a package the toolkit requires: a bug, shown as one
        with pytest.raises(ModuleNotFoundError):
            needs.main([], prog_name="needs")
        return
    with pytest.raises(SystemExit) as stop:
        needs.main([], prog_name="needs")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {missing} is not installed in this Python ({sys.executable}): run the commands")
