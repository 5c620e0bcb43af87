"""A search method added in one file, as docs/layout.md's recipe says: its class, its settings
dataclass and its registry entry, here registered at run time. Its flag comes from its settings,
another method refuses it, config.json stores it, and bin/search-lm runs it through the unchanged
flag, config and loop code."""

import importlib
import json
from dataclasses import dataclass

import pytest
import torch
from click.testing import CliRunner

import nas.cli.search_lm
from nas.common.ranges import Range
from nas.methods import METHODS, Entry
from nas.methods.darts import Darts
from nas.methods.settings import MethodSettings, setting

TINY = [
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
    "4",
    "--lr",
    "2",
    "--hessian-iterations",
    "0",
]


@dataclass(frozen=True)
class ShrinkSettings(MethodSettings):
    shrink: float = setting(0.5, Range(0, 1), "shrink: factor α is multiplied by after each α step")


class Shrink(Darts):
    """DARTS whose α is scaled by --shrink after every α step."""

    settings: ShrinkSettings  # handed in: its registry entry's settings, from the flags or config.json

    def step_alpha(self, batch, train, train_hidden, valid, valid_hidden, eta):
        valid_hidden = super().step_alpha(batch, train, train_hidden, valid, valid_hidden, eta)
        with torch.no_grad():
            for architect in self.architects.values():
                for alpha in architect.arch.values():
                    alpha.mul_(self.settings.shrink)
        return valid_hidden


@pytest.fixture
def search_lm():
    """bin/search-lm as it is built with the method registered (its flags are made when the command
    module loads), and as it was once the test is done."""
    METHODS["shrink"] = Entry(lambda: Shrink, "DARTS with α shrunk after each step", settings=ShrinkSettings)
    try:
        yield importlib.reload(nas.cli.search_lm).main
    finally:
        del METHODS["shrink"]
        importlib.reload(nas.cli.search_lm)


def test_a_method_added_in_one_file_takes_its_flag_and_searches(search_lm, lm_corpus, tmp_path):
    help_text = CliRunner().invoke(search_lm, ["--help"]).output
    assert "--shrink" in help_text and "shrink: factor α" in help_text

    def last_alpha(method, *flags):  # Adam's α steps of 1e-12 leave α as it started, but for the shrinking
        run = tmp_path / method
        result = CliRunner().invoke(
            search_lm,
            [
                "--data",
                str(lm_corpus),
                "--method",
                method,
                *flags,
                "--epochs",
                "1",
                "--arch-lr",
                "1e-12",
                "--run-dir",
                str(run),
                "--seed",
                "4",
                *TINY,
            ],
        )
        assert result.exit_code == 0, result.output
        return json.loads((run / "config.json").read_text()), torch.tensor(
            json.loads((run / "log.jsonl").read_text().splitlines()[-1])["alpha"]
        )

    config, shrunk = last_alpha("shrink", "--shrink", "0.25")
    assert config["method_settings"] == {"shrink": 0.25}
    _, plain = last_alpha("darts")
    assert torch.allclose(shrunk, plain * 0.25**4, rtol=1e-5, atol=0)  # four α steps, each shrinking α


def test_another_method_refuses_its_flag_in_one_line(search_lm, lm_corpus, tmp_path):
    result = CliRunner().invoke(
        search_lm,
        ["--data", str(lm_corpus), "--method", "darts", "--shrink", "0.3", "--run-dir", str(tmp_path / "run")],
    )
    assert result.exit_code == 2 and result.stderr == "error: --shrink: only with --method shrink\n"
    assert not (tmp_path / "run").exists()
