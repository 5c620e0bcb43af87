"""The Python examples of docs/api.md run as written, on small stand-ins for the files they name: a
renamed function or a changed signature fails here, and the docs cannot promise an API that is gone."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import tagger_data as td

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("restore_flair_logging")


def examples(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text(encoding="utf-8"), re.S)


def run_example(code: str, replacements: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    for old, new in replacements.items():
        assert old in code, f"docs/api.md no longer says {old!r}: update this test with the page"
        code = code.replace(old, new)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def printed(result: subprocess.CompletedProcess) -> list[str]:
    """What the example printed, without flair's log lines (flair logs to stdout)."""
    return [line for line in result.stdout.splitlines() if not re.match(r"\d{4}-\d\d-\d\d \d\d:", line)]


def test_the_api_page_trains_a_tagger_into_the_run_directory_bin_train_tagger_makes(tmp_path):
    train = examples("api.md")[0]
    td.write_conll03(tmp_path / "conll2003")
    vectors = td.write_vectors(tmp_path / "vectors.txt")
    result = run_example(
        train,
        {
            '"glove:glove-6b-50d,pooled-flair:wt2-forward:wt2-backward"': repr(f"glove:{vectors}"),
            "hidden_size=256": "hidden_size=8",
            "max_epochs=10": "max_epochs=1",
        },
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.fullmatch(r"test F1 \d+\.\d\d\n", result.stdout)  # flair's log went to stderr, as the command's
    run = tmp_path / "runs" / "ner-python"
    assert {"README.md", "config.json", "metrics.json", "test.conll", "training.log"} <= {p.name for p in run.iterdir()}
    assert "bin/train-tagger --corpus conll03 --data conll2003 " in (run / "config.json").read_text()
    assert "GradScaler" not in result.stderr


def test_the_api_page_tags_a_sentence_with_a_saved_model(tiny_tagger, tmp_path):
    _, tag, _ = examples("api.md")[:3]
    # a sentence of the generated data the tiny tagger learned from, with names it tags
    result = run_example(
        tag,
        {
            '"runs/ner"': repr(str(tiny_tagger[0])),
            '"George Washington went to Washington."': '"Dorva visited Baposa on Monday with Kelo Vanor ."',
        },
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    spans = [line.split() for line in printed(result)]
    assert spans and all(len(s) >= 5 and s[-2] in {"PER", "LOC", "ORG", "MISC"} for s in spans)


def test_the_api_page_trains_a_shipped_cell_with_flairs_model_trainer(tmp_path):
    train = examples("api.md")[2]
    td.write_conll03(tmp_path / "conll2003")
    vectors = td.write_vectors(tmp_path / "vectors.txt")
    result = run_example(
        train,
        {
            '"glove:glove-6b-50d,pooled-flair:wt2-forward:wt2-backward"': repr(f"glove:{vectors}"),
            "hidden_size=256": "hidden_size=8",
            "max_epochs=10": "max_epochs=1",
        },
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "runs" / "ner-flair" / "final-model.pt").is_file()

    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tagger; from flair.data import Sentence\n"
            "m = tagger.load_tagger('runs/ner-flair/final-model.pt'); s = Sentence('Kelo Vanor .')\n"
            "m.predict(s); print(type(m).__name__, m.genotype.name)",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert printed(loaded) == ["CellTagger DARTS_V2"]
