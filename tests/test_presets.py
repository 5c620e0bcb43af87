"""--preset: the papers' values on search-lm, train-lm and train-tagger; a flag given still wins."""

import json

import pytest
from click.testing import CliRunner

import tagger_data as td
from nas.common.presets import PRESETS, preset_values
from nas.cli.search_lm import main as search_lm
from nas.cli.train_lm import main as train_lm
from nas.runs.config import RetrainConfig, SearchConfig
from nas.methods import check_method_flags
from tagger.cli.train_tagger import main as train_tagger
from tagger.config import TaggerConfig

COMMANDS = {"search-lm": search_lm, "train-lm": train_lm, "train-tagger": train_tagger}


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_sets_flags_of_its_command_to_values_its_checks_accept(name):
    preset = PRESETS[name]
    options = {p.name for p in COMMANDS[preset.command].params}
    assert set(preset.values) <= options, sorted(set(preset.values) - options)
    values = dict(preset.values)
    if preset.command == "search-lm":
        check_method_flags(values["method"], values)
        SearchConfig(**{**values, "order": int(values.get("order", 1))}).validate()
    elif preset.command == "train-lm":
        RetrainConfig(**values).validate()
    else:
        TaggerConfig(**values).check()


def test_the_papers_numbers():
    wt103 = preset_values("ess-wt103", "search-lm")
    assert {k: wt103[k] for k in ("nodes", "inter_nodes", "batch_size", "bptt", "arch_lr_intra", "arch_lr_inter")} == {
        "nodes": 12,
        "inter_nodes": 5,
        "batch_size": 128,
        "bptt": 70,
        "arch_lr_intra": 1e-3,
        "arch_lr_inter": 1e-4,
    }
    ner = preset_values("flair-ner", "train-tagger")
    assert (
        ner["hidden_size"],
        ner["batch_size"],
        ner["lr"],
        ner["clip"],
        ner["anneal_factor"],
        ner["patience"],
        ner["max_epochs"],
        ner["runs"],
    ) == (512, 24, 0.1, 5.0, 0.25, 2, 150, 5)
    assert preset_values("flair-ner-train-dev", "train-tagger") == {**ner, "train_with_dev": True}
    assert preset_values("idarts-ptb", "search-lm")["epochs"] == 40  # Jiang et al. 2019: 40 search epochs
    wt2 = preset_values("darts-retrain-wt2", "train-lm")
    assert (wt2["emsize"], wt2["dropouth"], wt2["wdecay"]) == (700, 0.15, 5e-7)


@pytest.mark.parametrize(
    "command, preset, owner",
    [
        (search_lm, "flair-ner", "train-tagger"),
        (train_tagger, "darts-ptb", "search-lm"),
        (train_lm, "ess-ptb", "search-lm"),
    ],
)
def test_a_preset_of_another_command_is_one_error_line(command, preset, owner, tmp_path):
    result = CliRunner().invoke(command, ["--preset", preset, "--data", str(tmp_path)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: --preset {preset}: a preset of bin/{owner}, not of bin/")


def test_an_unknown_preset_names_the_commands_own(tmp_path):
    result = CliRunner().invoke(train_lm, ["--preset", "darts-ptb-retrain", "--data", str(tmp_path)])
    assert result.exit_code == 2 and result.stderr == (
        "error: --preset darts-ptb-retrain: no such preset (bin/train-lm has: darts-retrain-ptb, darts-retrain-wt2)\n"
    )


def test_train_tagger_preset_records_resolved_values_and_a_given_flag_wins(tmp_path, restore_flair_logging):
    td.write_conll03(tmp_path / "data", sizes=(12, 6, 6))
    out = tmp_path / "run"
    args = [
        "--preset",
        "flair-ner",
        "--batch-size",
        "6",
        "--runs",
        "1",
        "--hidden-size",
        "4",
        "--max-epochs",
        "1",
        "--corpus",
        "conll03",
        "--data",
        str(tmp_path / "data"),
        "--run-dir",
        str(out),
        "--embeddings",
        f"glove:{td.write_vectors(tmp_path / 'vectors.txt')}",
    ]
    result = CliRunner().invoke(train_tagger, args)
    assert result.exit_code == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert (config["batch_size"], config["runs"], config["hidden_size"], config["max_epochs"]) == (6, 1, 4, 1)  # given
    assert (config["lr"], config["clip"], config["anneal_factor"], config["patience"]) == (0.1, 5.0, 0.25, 2)  # preset
    assert config["preset"] == "flair-ner" and config["locked_dropout"] == 0.5


def test_the_ess_wt103_preset_makes_the_cell_train_tagger_asks_for(tmp_path, lm_corpus, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(train_tagger, ["--cell", "ess_wt103.json", "--corpus", "conll03", "--data", "x"])
    assert result.exit_code == 2 and result.stderr.endswith(
        ". Make it with `bin/search-lm --preset ess-wt103 --data WT103_DIR --out ess_wt103.json` and pass that file\n"
    )
    small = [
        "--emsize",
        "8",
        "--nhid",
        "8",
        "--bptt",
        "6",
        "--batch-size",
        "4",
        "--eval-batch-size",
        "2",
        "--rounds",
        "1",
        "--intra-steps",
        "2",
        "--inter-steps",
        "2",
        "--eval-batches",
        "1",
        "--run-dir",
        "search",
    ]
    result = CliRunner().invoke(
        search_lm, ["--preset", "ess-wt103", "--data", str(lm_corpus), "--out", "ess_wt103.json", *small]
    )
    assert result.exit_code == 0, result.stderr
    config = json.loads((tmp_path / "search" / "config.json").read_text())
    assert (config["preset"], config["method"], config["nodes"], config["inter_nodes"], config["history"]) == (
        "ess-wt103",
        "ess",
        12,
        5,
        5,
    )
    assert (config["arch_lr_intra"], config["arch_lr_inter"], config["bptt"], config["batch_size"]) == (
        1e-3,
        1e-4,
        6,
        4,
    )  # the preset's learning rates; bptt and batch as given
    genotype = json.loads((tmp_path / "ess_wt103.json").read_text())
    assert len(genotype["nodes"]) == 12 and len(genotype["inter"]["f"]) == 5


def test_train_lm_preset_records_resolved_values(tmp_path, lm_corpus):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        train_lm,
        [
            "--preset",
            "darts-retrain-wt2",
            "--cell",
            "darts_v2",
            "--data",
            str(lm_corpus),
            "--run-dir",
            str(out),
            "--emsize",
            "8",
            "--batch-size",
            "8",
            "--bptt",
            "6",
            "--epochs",
            "1",
            "--max-batches-per-epoch",
            "2",
            "--eval-batches",
            "1",
        ],
    )
    assert result.exit_code == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert (config["emsize"], config["nhid"], config["epochs"]) == (8, 8, 1)  # given
    assert (config["dropouth"], config["wdecay"], config["lr"], config["preset"]) == (
        0.15,
        5e-7,
        20.0,
        "darts-retrain-wt2",
    )
