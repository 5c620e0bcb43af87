"""More of the bad-input matrix (tests/test_bad_inputs.py): every line of a file is checked, not its
first; every flag and named file before any work; one true line where there was a traceback or a
misleading message. Same rule: exit 2, one `error:` line naming the file (and line) or the flag, no
traceback, nothing on stdout, nothing written.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import write_lm_corpus
from test_bad_inputs import COMMANDS, _args, _assert_refused, _tree
from tagger_data import write_conll03, write_wnut
from tagger.cli import search_tagger, transfer

COMMANDS = {**COMMANDS, "transfer": transfer.main, "search-tagger": search_tagger.main}
GLOVE = "--embeddings glove:{fx}/vectors.txt --run-dir {out}"
CASES = [
    # every line of a corpus is checked, against the format, not against the file's first line
    ("train-tagger", f"--corpus conll03 --data {{fx}}/wide {GLOVE}",
     "{fx}/wide/eng.train: line 3: 5 columns, but this corpus format has 4 (text pos chunk ner); read another "
     "layout with --columns"),
    ("evaluate", "--model {fx}/nope.pt --corpus conll03 --data {fx}/wide --out {out}",
     "{fx}/wide/eng.train: line 3: 5 columns, but this corpus format has 4"),
    ("train-tagger", f"--corpus conll2000 --data {{fx}}/wide2000 {GLOVE}",
     "{fx}/wide2000/train.txt: line 1: 4 columns, but this corpus format has 3 (text pos chunk)"),
    ("train-tagger", f"--corpus conll03 --data {{fx}}/hugeline {GLOVE}",
     "{fx}/hugeline/eng.train: line 1: 100000 columns; a column file has at most 64 (one token and its tags per line)"),
    ("train-tagger", f"--corpus column --columns 0:text,1:ner --data {{fx}}/hugecol {GLOVE}",
     "{fx}/hugecol/train.txt: line 2: 100000 columns; a column file has at most 64"),
    ("train-tagger", f"--corpus conll03 --data {{fx}}/docstart {GLOVE}",
     "{fx}/docstart/eng.train: line 5: -DOCSTART- inside a sentence (a document starts after a blank line; line 3 "
     "begins this sentence)"),
    ("train-tagger", f"--corpus wnut17 --data {{fx}}/wnutempty {GLOVE}",
     "{fx}/wnutempty/wnut17train.conll: line 2: an empty token (column 0)"),
    ("train-tagger", f"--corpus wnut17 --data {{fx}}/wnutspace {GLOVE}",
     "{fx}/wnutspace/wnut17train.conll: line 3: an empty token (column 0)"),
    ("train-tagger", f"--corpus column --data {{fx}}/twotrain {GLOVE}",
     "{fx}/twotrain: 2 files for the train split (a.train.txt, b.train.txt): keep one of them in the folder"),
    ("train-tagger", f"--corpus column --data {{fx}}/twotest {GLOVE}",
     "{fx}/twotest: 2 files for the test split (test.txt, test2.txt): keep one of them in the folder"),
    ("train-tagger", f"--corpus column --data {{fx}}/twodev {GLOVE}",
     "{fx}/twodev: 2 files for the dev split (dev.txt, testa.txt): keep one of them in the folder"),
    ("search-lm", "--data {fx}/ptbwiki --run-dir {out}",
     "{fx}/ptbwiki: 2 train splits (ptb.train.txt, wiki.train.tokens): keep one in the folder, or pass --train FILE"),
    ("train-lm", "--data {fx}/ptbwiki --run-dir {out}", "{fx}/ptbwiki: 2 train splits (ptb.train.txt, wiki.train.tokens)"),
    ("search-lm", "--data {fx}/ptbwiki --train {fx}/lm/ptb.train.txt --run-dir {out}",
     "{fx}/ptbwiki: 2 valid splits (ptb.valid.txt, wiki.valid.tokens)"),
    ("plot-cell", "{fx}/noformat.json --out {out}",
     "{fx}/noformat.json: field 'format': missing: a genotype file starts with \"format\": \"nas-rnn-genotype\", "
     "\"version\": 1"),
    ("train-lm", "--data {fx}/lm --emsize 8 --batch-size 4 --bptt 5 --cell {fx}/noformat.json --run-dir {out}",
     "{fx}/noformat.json: field 'format': missing"),
    ("train-tagger", f"--corpus conll03 --data {{fx}}/tagdata --cell {{fx}}/noformat.json {GLOVE}",
     "{fx}/noformat.json: field 'format': missing"),
]


def _edit(text: str, edit) -> str:
    return "\n".join(edit(number, line) for number, line in enumerate(text.split("\n"), start=1))


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    write_lm_corpus(root / "lm", train_lines=40, other_lines=10)
    write_conll03(root / "tagdata")
    (root / "vectors.txt").write_text("a 0.1 0.2\n", encoding="utf-8")
    conll03 = {name: (root / "tagdata" / name).read_text(encoding="utf-8") for name in ("eng.train", "eng.testa", "eng.testb")}

    def corpus(name: str, files: dict[str, str]) -> None:
        (root / name).mkdir()
        for file, text in files.items():
            (root / name / file).write_text(text, encoding="utf-8")

    corpus("wide", {n: _edit(t, lambda _, line: line + " X" if line else line) for n, t in conll03.items()})
    c2000 = "He PRP B-NP\nsaw VBD B-VP\n\nit PRP B-NP\n"
    corpus("wide2000", {"train.txt": _edit(c2000, lambda _, line: line + " X" if line else line), "test.txt": c2000})
    corpus("hugeline", {**conll03, "eng.train": "a " * 100_000 + "\n"})
    corpus("hugecol", {"train.txt": "Anna B-PER\n" + "a " * 100_000 + "\n", "test.txt": "Anna B-PER\n"})
    docstart = "-DOCSTART- -X- -X- O\n\nAnna NNP I-NP I-PER\nmet VBD I-VP O\n-DOCSTART- -X- -X- O\nBoris NNP I-NP I-PER\n"
    corpus("docstart", {**conll03, "eng.train": docstart})
    write_wnut(root / "wnutempty")
    write_wnut(root / "wnutspace")
    for name, edit in (("wnutempty", lambda n, line: "\tO" if n == 2 else line),
                       ("wnutspace", lambda n, line: " \tO" if n == 3 else line)):
        path = root / name / "wnut17train.conll"
        path.write_text(_edit(path.read_text(encoding="utf-8"), edit), encoding="utf-8")
    column = "Anna B-PER\nmet O\n"
    corpus("twotrain", {"a.train.txt": column, "b.train.txt": column, "test.txt": column})
    corpus("twotest", {"train.txt": column, "test.txt": column, "test2.txt": column})
    corpus("twodev", {"train.txt": column, "dev.txt": column, "testa.txt": column, "testb.txt": column})
    lm = {f"ptb.{s}.txt": (root / "lm" / f"ptb.{s}.txt").read_text(encoding="utf-8") for s in ("train", "valid", "test")}
    corpus("ptbwiki", {**lm, **{f"wiki.{s}.tokens": lm[f"ptb.{s}.txt"] for s in ("train", "valid", "test")}})
    (root / "noformat.json").write_text(json.dumps({"version": 1, "nodes": [[["tanh", 0]]], "concat": [1]}),
                                        encoding="utf-8")
    return root


@pytest.mark.parametrize("command, args, expected", CASES)
def test_bad_input_is_one_error_line_exit_2_and_leaves_nothing(fx, tmp_path, monkeypatch, command, args, expected):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    out = tmp_path / "out" / "result"
    before = _tree(fx)
    result = CliRunner().invoke(COMMANDS[command], _args(args, fx, out))
    _assert_refused(result.exit_code, result.stdout, result.stderr, expected.format(fx=fx))
    assert not (tmp_path / "out").exists() and not any(work.iterdir())
    assert _tree(fx) == before
