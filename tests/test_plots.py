"""bin/plot-search, bin/plot-cell and bin/compare-words on tiny search runs."""

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from conftest import write_lm_corpus
from nas.cli.compare_words import main as compare_words
from nas.cli.plot_cell import main as plot_cell
from nas.cli.plot_search import main as plot_search
from nas.cli.search_lm import main as search_lm

TINY = [
    "--emsize",
    "8",
    "--nhid",
    "8",
    "--nodes",
    "2",
    "--batch-size",
    "4",
    "--bptt",
    "6",
    "--eval-batch-size",
    "2",
    "--lr",
    "2",
    "--rounds",
    "2",
    "--intra-steps",
    "2",
    "--inter-steps",
    "1",
]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A joint ESS run with attention search and an intra-only run of the same budget."""
    root = tmp_path_factory.mktemp("plots")
    corpus = write_lm_corpus(root / "corpus")
    for space in ("joint", "intra"):
        extra = ["--attention", "search"] if space == "joint" else []
        result = CliRunner().invoke(
            search_lm,
            [
                "--data",
                str(corpus),
                "--method",
                "ess",
                "--search-space",
                space,
                "--run-dir",
                str(root / space),
                *extra,
                *TINY,
            ],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
    return root


def test_plot_search_writes_every_picture_as_png_and_svg(runs, tmp_path):
    result = CliRunner().invoke(
        plot_search, [str(runs / "joint"), "--compare", str(runs / "intra"), "--out", str(tmp_path / "plots")]
    )
    assert result.exit_code == 0, result.output
    stems = ["cell", "alpha_intra", "alpha_inter", "attention", "mad", "eigenvalue", "op_share", "valid_ppl"]
    assert result.stdout.split() == [str(tmp_path / "plots" / f"{s}.{e}") for s in stems for e in ("png", "svg")]
    for stem in stems:
        assert (tmp_path / "plots" / f"{stem}.png").read_bytes()[:8] == PNG
        assert (tmp_path / "plots" / f"{stem}.png").stat().st_size > 5000
        assert "<svg" in (tmp_path / "plots" / f"{stem}.svg").read_text()
    mad = (tmp_path / "plots" / "mad.svg").read_text()
    assert "joint: intra-cell" in mad and "joint: inter-cell" in mad and "intra: intra-cell" in mad
    assert "intra: inter-cell" not in mad  # the intra-only run has no inter-cell weights
    eigenvalue = (tmp_path / "plots" / "eigenvalue.svg").read_text()
    assert ">joint<" in eigenvalue and ">intra<" in eigenvalue  # both runs' Hessian eigenvalue curves
    shares = (tmp_path / "plots" / "op_share.svg").read_text()
    assert "share of α's mixing mass" in shares and "share of the derived cell's edges" in shares
    cell = (tmp_path / "plots" / "cell.svg").read_text()
    assert "f′: gate on" in cell and "attention after the layer" in cell


def test_plot_search_of_an_intra_only_run_has_no_inter_pictures(runs):
    result = CliRunner().invoke(plot_search, [str(runs / "intra")])
    assert result.exit_code == 0, result.output
    names = {p.rsplit("/", 1)[-1] for p in result.stdout.split()}
    assert "alpha_intra.png" in names and "mad.png" in names and "alpha_inter.png" not in names
    assert (runs / "intra" / "plots" / "cell.png").read_bytes()[:8] == PNG


def test_plot_cell_writes_beside_the_genotype_or_where_asked(runs, tmp_path):
    cell = tmp_path / "cell.json"
    shutil.copy(runs / "joint" / "genotype.json", cell)
    assert CliRunner().invoke(plot_cell, [str(cell)]).exit_code == 0
    assert (tmp_path / "cell.png").read_bytes()[:8] == PNG and (tmp_path / "cell.svg").is_file()
    assert CliRunner().invoke(plot_cell, ["darts_v2", "--out", str(tmp_path / "v2")]).exit_code == 0
    assert (tmp_path / "v2" / "darts_v2.png").read_bytes()[:8] == PNG


def test_plot_search_on_a_directory_that_is_not_a_run(tmp_path):
    result = CliRunner().invoke(plot_search, [str(tmp_path)])
    assert result.exit_code == 2 and result.stderr == f"error: {tmp_path}: not a run directory (no config.json)\n"


def _tables(stdout: str) -> list[list[list[str]]]:
    tables = []
    for block in stdout.split("\n## ")[1:]:
        lines = block.strip().splitlines()
        tables.append([line.split("\t") for line in lines[2:]])
    return tables


def test_compare_words_restores_both_models_and_lists_per_word_differences(runs):
    result = CliRunner().invoke(
        compare_words,
        [
            str(runs / "intra"),
            str(runs / "joint"),
            "--data",
            str(runs / "corpus"),
            "--top",
            "5",
            "--min-count",
            "3",
            "--batch-size",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0]
    # evaluated as the search evaluated (batch 2, bptt 6), the loaded models give the searches' last validation ppl
    for tag, run in (("A", "intra"), ("B", "joint")):
        logged = json.loads((runs / run / "log.jsonl").read_text().splitlines()[-1])["valid_ppl"]
        shown = float(header.split(f"{tag} ")[1].split("(ppl ")[1].split(")")[0])
        assert shown == pytest.approx(logged, abs=0.05)
    largest, frequent = _tables(result.stdout)
    assert len(largest) == len(frequent) == 5
    for word, count, train_count, loss_a, loss_b, delta in largest + frequent:
        assert float(delta) == pytest.approx(float(loss_b) - float(loss_a), abs=2e-3)
        assert int(train_count) > 0
    deltas = [abs(float(row[5])) for row in largest]
    assert deltas == sorted(deltas, reverse=True) and all(int(row[1]) >= 3 for row in largest)
    counts = [int(row[1]) for row in frequent]
    assert counts == sorted(counts, reverse=True) and frequent[0][0] == "<eos>"


def test_compare_words_refuses_models_with_different_vocabularies(runs, tmp_path):
    other = tmp_path / "renamed"
    shutil.copytree(runs / "intra", other)
    train = tmp_path / "train.txt"
    train.write_text(re.sub(r"\bw1\b", "v1", (runs / "corpus" / "ptb.train.txt").read_text()))  # same size, other words
    config = json.loads((other / "config.json").read_text())
    config["train"] = str(train)
    (other / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(compare_words, [str(runs / "intra"), str(other), "--data", str(runs / "corpus")])
    assert result.exit_code == 2 and "different vocabularies" in result.stderr and result.stderr.count("\n") == 1
