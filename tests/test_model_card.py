"""Every saved tagger has a model card in the Hugging Face shape whose figures are metrics.json's."""

import json
import re

import pytest
from click.testing import CliRunner

pytestmark = pytest.mark.usefixtures("restore_flair_logging")


def card_rows(card: str) -> dict[str, list[str]]:
    """The results table: type -> its cells (dev F1, test F1, test support)."""
    table = card.split("## Results")[1].split("## Use it")[0]
    return {
        cells[0]: cells[1:]
        for line in table.splitlines()
        if line.startswith("| ") and "---" not in line
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
        if cells[0] != "type"
    }


def test_a_trained_tagger_has_a_card_whose_figures_are_its_metrics(tiny_tagger):
    run, _ = tiny_tagger
    metrics = json.loads((run / "metrics.json").read_text())
    card = (run / "README.md").read_text()
    front = card.split("---\n")[1]
    assert "library_name: flair" in front and "datasets: [conll2003]" in front
    assert re.search(r"value: ([0-9.]+)", front).group(1) == f"{100 * metrics['test']['f1']:.2f}"
    rows = card_rows(card)
    expected = {
        kind: [
            f"{100 * metrics['dev']['strict'][kind]['f1-score']:.2f}",
            f"{100 * row['f1-score']:.2f}",
            f"{row['support']:,}",
        ]
        for kind, row in metrics["test"]["strict"].items()
        if kind != "weighted avg"
    }
    assert rows == expected and {"LOC", "PER", "micro avg"} <= set(rows)
    train = metrics["corpus"]["train"]
    assert f"| train | {train['sentences']:,} | {train['tokens']:,} |" in card
    assert f"{metrics['rnn_parameters']:,} recurrent parameters" in card and "DARTS_V2" in card
    assert (
        'SequenceTagger.load("best-model.pt")' in card
        and "import tagger  # flair's loaders then run no pickled code, and know the searched cell" in card
    )


def test_export_writes_the_card_beside_the_model_and_never_over_a_users_file(tiny_tagger, tmp_path):
    from tagger.cli.export import main

    run, _ = tiny_tagger
    result = CliRunner().invoke(main, [str(run), "--out", str(tmp_path / "ner.pt")])
    assert result.exit_code == 0, result.stderr
    card = (tmp_path / "ner.md").read_text()
    assert card_rows(card) == card_rows((run / "README.md").read_text())
    assert 'SequenceTagger.load("ner.pt")' in card
    assert CliRunner().invoke(main, [str(run), "--out", str(tmp_path / "ner.pt")]).exit_code == 0  # ours: rewritten

    (tmp_path / "mine.md").write_text("my notes\n")
    result = CliRunner().invoke(main, [str(run), "--out", str(tmp_path / "mine.pt")])
    assert result.exit_code == 2 and result.stderr == (
        f"error: {tmp_path / 'mine.md'}: exists and is not a model card of this toolkit; not overwritten\n"
    )
    assert (tmp_path / "mine.md").read_text() == "my notes\n" and not (tmp_path / "mine.pt").exists()


def test_the_card_has_the_hubs_front_matter_and_no_path_of_the_machine(tiny_tagger, tmp_path):
    from tagger import model_card

    run, _ = tiny_tagger
    metrics = json.loads((run / "metrics.json").read_text())
    config = json.loads((run / "config.json").read_text())
    card = (run / "README.md").read_text()
    front = card.split("---\n")[1]
    assert "pipeline_tag: token-classification" in front and "language: [en]" in front
    assert "license:" not in front  # CoNLL-2003's terms name no license a card can give
    assert str(run.parent) not in card and "glove:vectors.txt" in card
    # a WNUT-2017 run whose files lie anywhere: its license, its files by name or inside the run
    home = tmp_path / "home" / "someone"
    moved = {
        **config,
        "corpus": "wnut17",
        "data": str(home / "wnut"),
        "embeddings": f"glove:{home / 'glove.txt'},pooled-flair:{run / 'lm' / 'f.pt'}:{run / 'lm' / 'b.pt'}",
        "command": f"bin/train-tagger --corpus wnut17 --data {home / 'wnut'} --run-dir {run}",
    }
    card = model_card.render(moved, metrics, "best-model.pt", run)
    assert "license: cc-by-4.0" in card and "datasets: [wnut_17]" in card
    assert "`glove:glove.txt,pooled-flair:lm/f.pt:lm/b.pt`" in card and "(`wnut`)" in card
    assert f"bin/train-tagger --corpus wnut17 --data wnut --run-dir {run.name}" in card
    assert str(tmp_path) not in card and str(run) not in card
