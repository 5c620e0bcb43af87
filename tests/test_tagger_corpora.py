"""Reading tagging corpora: counts through `--dry-run`, and one clear error per bad input."""

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tagger_data as td
from tagger.cli.train_tagger import main


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    return td.write_vectors(tmp_path_factory.mktemp("vec") / "vectors.txt")


def dry_run(args, vectors):
    result = CliRunner().invoke(main, [*args, "--embeddings", f"glove:{vectors}", "--dry-run"])
    return result


def test_conll03_counts_docstart_both_forms_and_iob1(tmp_path, vectors):
    expected = td.write_conll03(tmp_path)
    text = (tmp_path / "eng.train").read_text()
    assert "-DOCSTART- -X- O O" in text and "-DOCSTART- -X- -X- O" in text and "B-" in text  # the quirks are there
    result = dry_run(["--corpus", "conll03", "--data", str(tmp_path)], vectors)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == expected  # DOCSTART lines are no sentences; IOB1 B- splits adjacent entities


def test_wnut_tab_only_lines_end_sentences(tmp_path, vectors):
    expected = td.write_wnut(tmp_path)
    assert "\n\t\n" in (tmp_path / "wnut17train.conll").read_text()
    result = dry_run(["--corpus", "wnut17", "--data", str(tmp_path)], vectors)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == expected


def test_conll2000_dev_is_a_seeded_tenth_of_train(tmp_path, vectors):
    sents = td.sentences(50, 3)
    for name, part in (("train.txt", sents[:40]), ("test.txt", sents[40:])):
        lines = [line for s in part for line in [*(f"{w} NN {t}" for (w, _, _), t in zip(s, td.iob2(s))), ""]]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    counts = [
        json.loads(
            dry_run(
                ["--corpus", "conll2000", "--data", str(tmp_path), "--tag-column", "chunk", "--seed", str(seed)],
                vectors,
            ).stdout
        )
        for seed in (1, 1, 2)
    ]
    assert counts[0] == counts[1] and counts[0] != counts[2]
    assert counts[0]["dev"]["sentences"] == 4 and counts[0]["train"]["sentences"] == 36
    assert counts[0]["test"] == td.entity_counts(sents[40:])
    total = td.entity_counts(sents[:40])["entities"]
    assert {
        k: counts[0]["train"]["entities"].get(k, 0) + counts[0]["dev"]["entities"].get(k, 0) for k in total
    } == total


def test_generic_column_corpus(tmp_path, vectors):
    sents = td.sentences(12, 5)
    for name, part in (("my.train.txt", sents[:6]), ("my.dev.txt", sents[6:9]), ("my.test.txt", sents[9:])):
        lines = [line for s in part for line in [*(f"{w}\tX\tY\t{t}" for (w, _, _), t in zip(s, td.iob2(s))), ""]]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    result = dry_run(["--corpus", "column", "--data", str(tmp_path), "--columns", "0:text,3:ner"], vectors)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "train": td.entity_counts(sents[:6]),
        "dev": td.entity_counts(sents[6:9]),
        "test": td.entity_counts(sents[9:]),
    }


def _conll03_with(tmp_path, line_no: int, new: bytes | None) -> Path:
    """The generated eng.train with its line `line_no` (1-based) replaced by `new` (or emptied file)."""
    td.write_conll03(tmp_path)
    path = tmp_path / "eng.train"
    if new is None:
        path.write_bytes(b"")
    else:
        lines = path.read_bytes().split(b"\n")
        lines[line_no - 1] = new
        path.write_bytes(b"\n".join(lines))
    return path


@pytest.mark.parametrize(
    "new,problem",
    [
        (b"Paris NNP I-LOC", "line 4: 3 columns where this file has 4"),
        (b"Paris\tNNP I-NP I-LOC", "line 4: mixed separators"),
        (b"Paris NNP I-NP E-LOC", "line 4: tag 'E-LOC' is not IOB1"),
        (b"Paris NNP I-NP LOC", "line 4: tag 'LOC' is not IOB1"),
        (b"Par\xe9s NNP I-NP I-LOC", "line 4: bytes that are not UTF-8"),
        (None, "no sentences (empty train split)"),
    ],
)
def test_bad_corpus_lines(tmp_path, vectors, new, problem):
    path = _conll03_with(tmp_path, 4, new)
    result = dry_run(["--corpus", "conll03", "--data", str(tmp_path)], vectors)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}: {problem}")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_wnut_spaces_instead_of_tabs(tmp_path, vectors):
    td.write_wnut(tmp_path)
    path = tmp_path / "emerging.dev.conll"
    lines = path.read_text().split("\n")
    lines[2] = lines[2].replace("\t", " ")
    path.write_text("\n".join(lines))
    result = dry_run(["--corpus", "wnut17", "--data", str(tmp_path)], vectors)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}: line 3: mixed separators")


def test_missing_embedding_file_and_bad_genotype(tmp_path, vectors):
    td.write_conll03(tmp_path)
    result = CliRunner().invoke(
        main,
        ["--corpus", "conll03", "--data", str(tmp_path), "--embeddings", f"glove:{tmp_path}/nope.txt", "--dry-run"],
    )
    assert (
        result.exit_code == 2
        and result.stderr == f"error: {tmp_path}/nope.txt: no such file (--embeddings glove:{tmp_path}/nope.txt)\n"
    )
    bad = tmp_path / "cell.json"
    bad.write_text(json.dumps({"format": "nas-rnn-genotype", "version": 1, "nodes": [[["relu", 3]]], "concat": [1]}))
    result = dry_run(["--cell", str(bad), "--corpus", "conll03", "--data", str(tmp_path)], vectors)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {bad}: field 'nodes[0][0]': predecessor 3 of node 1")


def test_names_that_need_a_download_offline_are_one_line_naming_the_local_way(tmp_path, vectors):
    """The suite runs offline (conftest): a name flair or Hugging Face would download, and that no cache
    holds, is one line at once that says how to give the files instead."""
    td.write_conll03(tmp_path)
    for spec, hint in [
        ("glove:glove", "glove:/path/glove.6B.100d.txt"),
        ("flair:news-forward:news-backward", "fwd.pt:bwd.pt"),
        ("transformer:bert-base-cased", "local model directory"),
    ]:
        result = CliRunner().invoke(
            main, ["--corpus", "conll03", "--data", str(tmp_path), "--embeddings", spec, "--dry-run"]
        )
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and hint in lines[0], result.stderr


def test_the_launcher_prints_one_line_and_exits_2(tmp_path):
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [
            sys.executable,
            str(repo / "bin" / "train-tagger"),
            "--corpus",
            "conll03",
            "--data",
            str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stderr == f"error: {tmp_path / 'missing'}: no such directory (--data)\n"
    assert proc.stdout == ""


def assert_one_error_line(result, line: str, run_dir: Path) -> None:
    assert result.exit_code == 2 and result.stdout == "" and result.stderr == line + "\n", result.stderr
    assert "Traceback" not in result.output and not run_dir.exists()


def test_a_tag_column_that_is_not_there_is_one_line(tmp_path, vectors):
    td.write_conll03(tmp_path / "data")
    result = CliRunner().invoke(
        main,
        [
            "--corpus",
            "conll03",
            "--data",
            str(tmp_path / "data"),
            "--tag-column",
            "ne",
            "--embeddings",
            f"glove:{vectors}",
            "--run-dir",
            str(tmp_path / "run"),
        ],
    )
    assert_one_error_line(
        result, "error: --tag-column ne: not one of the columns (text, pos, chunk, ner)", tmp_path / "run"
    )


def test_a_train_split_too_small_to_sample_dev_from_is_one_line(tmp_path, vectors):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("He PRP B-NP\n", encoding="utf-8")  # one sentence of one token
    (data / "test.txt").write_text("He PRP B-NP\nran VBD B-VP\n", encoding="utf-8")
    result = CliRunner().invoke(
        main,
        [
            "--corpus",
            "conll2000",
            "--data",
            str(data),
            "--embeddings",
            f"glove:{vectors}",
            "--run-dir",
            str(tmp_path / "run"),
        ],
    )
    assert_one_error_line(
        result,
        f"error: {data / 'train.txt'}: 1 sentence in the train split, but conll2000 has no "
        f"dev split and one is sampled from train (10%), so train needs at least 2",
        tmp_path / "run",
    )


def test_a_truncated_vector_file_names_its_last_line(tmp_path):
    td.write_conll03(tmp_path / "data")
    path = td.write_vectors(tmp_path / "vectors.txt")
    text = path.read_text()
    path.write_text(text[: text.rindex(" ", 0, len(text) - 30)])  # cut inside the last vector
    count = text.count("\n")
    result = CliRunner().invoke(
        main,
        [
            "--corpus",
            "conll03",
            "--data",
            str(tmp_path / "data"),
            "--embeddings",
            f"glove:{path}",
            "--run-dir",
            str(tmp_path / "run"),
        ],
    )
    kept = len(path.read_text().splitlines()[-1].split()) - 1
    assert_one_error_line(
        result,
        f"error: {path}: line {count}: {kept} numbers where the vectors have 16 (a truncated file?)",
        tmp_path / "run",
    )


def test_inside_tags_of_a_type_never_begun_in_iob2_are_warned_once_with_their_line(tmp_path, vectors):
    td.write_wnut(tmp_path)
    path = tmp_path / "wnut17train.conll"
    lines = path.read_text().split("\n")
    first, second = [i for i, line in enumerate(lines) if line.endswith("\tO")][:2]
    for i in (first, second):
        lines[i] = lines[i].replace("\tO", "\tI-FOO")
    path.write_text("\n".join(lines))
    result = dry_run(["--corpus", "wnut17", "--data", str(tmp_path)], vectors)
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {path}: line {first + 1}: I-FOO, and no B-FOO anywhere in the file: read as "
        f"entities of a type FOO of their own (a typo, or IOB1 data?)"
    ]
    assert json.loads(result.stdout)["train"]["entities"]["FOO"] == (1 if second == first + 1 else 2)
