"""More of the bad-input matrix (tests/test_bad_inputs.py): every line of a file is checked, not its
first; every flag and named file before any work, and a flag without effect refused by name; one
true line where there was a traceback or a misleading message. Same rule: exit 2, one `error:` line
naming the file (and line) or the flag, no traceback, nothing on stdout, nothing written. Then the
faults and long work around them: closed standard streams, a corpus changed under a resume, a full
disk after a checkpoint, and the progress of work that can take minutes.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import write_lm_corpus
from test_bad_inputs import COMMANDS, REPO, _args, _assert_refused, _tree, assert_refused_leaving_nothing
from test_full_disk import disk, fill, refused  # noqa: F401 - disk is a fixture
from test_pooled_memory import pooled_run  # noqa: F401 - a fixture
from tagger_data import tiny_char_lm, write_conll03, write_wnut
from tagger.cli import search_tagger, transfer

COMMANDS = {**COMMANDS, "transfer": transfer.main, "search-tagger": search_tagger.main}
# commands run in-process set flair's log level and stream; each test leaves them as it found them
pytestmark = pytest.mark.usefixtures("restore_flair_logging")
GLOVE = "--embeddings glove:{fx}/vectors.txt --run-dir {out}"
LM = "--data {fx}/lm --emsize 8 --nhid 8 --batch-size 4 --bptt 5"
TAGGER = "--corpus conll03 --data {fx}/tagdata --embeddings glove:{fx}/vectors.txt"
TRANSFER = "--corpora conll03:{fx}/tagdata --seeds 1 --run-dir {out}"
CASES = [
    # every line of a corpus is checked, against the format, not against the file's first line
    (
        "train-tagger",
        f"--corpus conll03 --data {{fx}}/wide {GLOVE}",
        "{fx}/wide/eng.train: line 3: 5 columns, but this corpus format has 4 (text pos chunk ner); read another "
        "layout with --columns",
    ),
    (
        "evaluate",
        "--model {fx}/nope.pt --corpus conll03 --data {fx}/wide --out {out}",
        "{fx}/wide/eng.train: line 3: 5 columns, but this corpus format has 4",
    ),
    (
        "train-tagger",
        f"--corpus conll2000 --data {{fx}}/wide2000 {GLOVE}",
        "{fx}/wide2000/train.txt: line 1: 4 columns, but this corpus format has 3 (text pos chunk)",
    ),
    (
        "train-tagger",
        f"--corpus conll03 --data {{fx}}/hugeline {GLOVE}",
        "{fx}/hugeline/eng.train: line 1: 100000 columns; a column file has at most 64 (one token and its tags per "
        "line)",
    ),
    (
        "train-tagger",
        f"--corpus column --columns 0:text,1:ner --data {{fx}}/hugecol {GLOVE}",
        "{fx}/hugecol/train.txt: line 2: 100000 columns; a column file has at most 64",
    ),
    (
        "train-tagger",
        f"--corpus conll03 --data {{fx}}/docstart {GLOVE}",
        "{fx}/docstart/eng.train: line 5: -DOCSTART- inside a sentence (a document starts after a blank line; line 3 "
        "begins this sentence)",
    ),
    (
        "tag",
        "--columns {fx}/docstart/eng.train --model {fx}/nope.pt --out {out}",
        "{fx}/docstart/eng.train: line 5: -DOCSTART- inside a sentence (a document starts after a blank line; line 3 "
        "begins this sentence)",
    ),
    (
        "train-tagger",
        f"--corpus wnut17 --data {{fx}}/wnutempty {GLOVE}",
        "{fx}/wnutempty/wnut17train.conll: line 2: an empty token (column 0)",
    ),
    (
        "train-tagger",
        f"--corpus wnut17 --data {{fx}}/wnutspace {GLOVE}",
        "{fx}/wnutspace/wnut17train.conll: line 3: an empty token (column 0)",
    ),
    (
        "train-tagger",
        f"--corpus column --data {{fx}}/twotrain {GLOVE}",
        "{fx}/twotrain: 2 files for the train split (a.train.txt, b.train.txt): keep one of them in the folder",
    ),
    (
        "train-tagger",
        f"--corpus column --data {{fx}}/twotest {GLOVE}",
        "{fx}/twotest: 2 files for the test split (test.txt, test2.txt): keep one of them in the folder",
    ),
    (
        "train-tagger",
        f"--corpus column --data {{fx}}/twodev {GLOVE}",
        "{fx}/twodev: 2 files for the dev split (dev.txt, testa.txt): keep one of them in the folder",
    ),
    (
        "train-tagger",
        "--corpus conll03 --data {fx}/tagdata --embeddings glove:{fx}/shortvec.txt --run-dir {out}",
        "{fx}/shortvec.txt: line 3: 1 number where the vectors have 2 (a truncated file?)",
    ),
    (
        "train-tagger",
        "--corpus conll03 --data {fx}/tagdata --embeddings glove:{fx}/countvec.txt --run-dir {out}",
        "{fx}/countvec.txt: line 1: the header says 3 vectors, the file holds 2 (a truncated file?)",
    ),
    (
        "search-lm",
        "--data {fx}/ptbwiki --run-dir {out}",
        "{fx}/ptbwiki: 2 train splits (ptb.train.txt, wiki.train.tokens): keep one in the folder, or pass --train FILE",
    ),
    (
        "train-lm",
        "--data {fx}/ptbwiki --run-dir {out}",
        "{fx}/ptbwiki: 2 train splits (ptb.train.txt, wiki.train.tokens)",
    ),
    (
        "search-lm",
        "--data {fx}/ptbwiki --train {fx}/lm/ptb.train.txt --run-dir {out}",
        "{fx}/ptbwiki: 2 valid splits (ptb.valid.txt, wiki.valid.tokens)",
    ),
    (
        "plot-cell",
        "{fx}/noformat.json --out {out}",
        "{fx}/noformat.json: field 'format': missing: a genotype file starts with \"format\": \"nas-rnn-genotype\", "
        "\"version\": 1",
    ),
    (
        "train-lm",
        "--data {fx}/lm --emsize 8 --batch-size 4 --bptt 5 --cell {fx}/noformat.json --run-dir {out}",
        "{fx}/noformat.json: field 'format': missing",
    ),
    (
        "train-tagger",
        f"--corpus conll03 --data {{fx}}/tagdata --cell {{fx}}/noformat.json {GLOVE}",
        "{fx}/noformat.json: field 'format': missing",
    ),
    # every flag and every named file is checked before any work; a flag without effect is refused by name
    ("search-lm", f"{LM} --seeds 1,-2 --run-dir {{out}}", "--seeds 1,-2: seed -2: must be in [0, 4294967295], got -2"),
    ("search-lm", f"{LM} --seeds 1,4294967296 --run-dir {{out}}", "--seeds 1,4294967296: seed 4294967296: must be in"),
    ("search-lm", f"{LM} --seeds '' --run-dir {{out}}", "--seeds '': no seed given (e.g. --seeds 1,2,3,4)"),
    ("search-lm", f"{LM} --seeds , --run-dir {{out}}", "--seeds ',': no seed given"),
    (
        "search-lm",
        f"{LM} --seeds 1,2 --select-args --bogus --run-dir {{out}}",
        "--select-args: bin/train-lm No such option '--bogus'",
    ),
    (
        "search-lm",
        f"{LM} --seeds 1,2 --select-args '--emsize 0' --run-dir {{out}}",
        "--select-args: bin/train-lm --emsize: must be in [1, 8192], got 0",
    ),
    (
        "search-lm",
        f"{LM} --seeds 1,2 --select-args '--run-dir x' --run-dir {{out}}",
        "--select-args: --run-dir is set by the selection itself for each seed's retraining",
    ),
    (
        "search-lm",
        f"{LM} --seeds 1,2 --select-args \"--emsize '8\" --run-dir {{out}}",
        "--select-args --emsize '8: No closing quotation",
    ),
    (
        "search-lm",
        f"{LM} --select-args '--emsize 8' --run-dir {{out}}",
        "--select-args: only with --seeds (it sets the retraining of each seed's cell); without --seeds it has no "
        "effect",
    ),
    ("search-lm", f"{LM} --select-budget 3 --run-dir {{out}}", "--select-budget: only with --seeds"),
    (
        "search-lm",
        f"{LM} --method darts --top-n 3 --run-dir {{out}}",
        "--top-n: only with --method idarts",
    ),
    (
        "search-lm",
        f"{LM} --early-stop-window 3 --run-dir {{out}}",
        "--early-stop-window: only with --early-stop hessian",
    ),
    (
        "search-lm",
        f"{LM} --early-stop none --early-stop-ratio 0.5 --run-dir {{out}}",
        "--early-stop-ratio: only with --early-stop hessian",
    ),
    (
        "search-lm",
        f"{LM} --attention-heads 2 --run-dir {{out}}",
        "--attention-heads: only with multi-head attention "
        "(--attention search or multihead); the attention "
        "here is none",
    ),
    (
        "train-lm",
        f"{LM} --cell lstm --nhid 8 --match-cell {{fx}}/nope.json --run-dir {{out}}",
        "--match-cell: only with --cell lstm and no --nhid (it sizes the LSTM); with --nhid 8 it has no effect",
    ),
    (
        "train-lm",
        "--data {fx}/lm --emsize 8 --batch-size 4 --bptt 5 --cell darts_v2 --match-cell enas --run-dir {out}",
        "--match-cell: only with --cell lstm and no --nhid (it sizes the LSTM); with --cell darts_v2 it has no effect",
    ),
    (
        "search-lm",
        f"{LM} --config {{fx}}/float.json --run-dir {{out}}",
        "--config: {fx}/float.json: setting 'emsize': must be an integer, got 16.5",
    ),
    (
        "train-lm",
        "--data {fx}/lm --config {fx}/true.json --run-dir {out}",
        "--config: {fx}/true.json: setting 'emsize': must be a number, got true",
    ),
    (
        "train-lm",
        f"{LM} --config {{fx}}/huge.json --run-dir {{out}}",
        "--config: {fx}/huge.json: setting 'epochs': must be an integer, got 1e+20",
    ),
    (
        "search-lm",
        f"{LM} --config {{fx}}/switch.json --run-dir {{out}}",
        "--config: {fx}/switch.json: setting 'compile': must be true or false, got 1",
    ),
    (
        "train-tagger",
        f"{TAGGER} --config {{fx}}/taggerfloat.json --run-dir {{out}}",
        "--config: {fx}/taggerfloat.json: setting 'hidden_size': must be an integer, got 16.5",
    ),
    (
        "eval-lm",
        "{fx}/nope.pt --file {fx}/text.txt --data {fx}/lm",
        "--data: not with --file (it picks a split of --data, which --file replaces)",
    ),
    ("eval-lm", "{fx}/nope.pt --file {fx}/text.txt --split valid", "--split: not with --file"),
    (
        "train-tagger",
        f"{TAGGER} --pooling max --run-dir {{out}}",
        "--pooling: only with pooled-flair embeddings; with --embeddings glove:{fx}/vectors.txt it has no effect",
    ),
    (
        "train-lm",
        f"{LM} --epochs 100000000000000000000 --run-dir {{out}}",
        "--epochs: must be in [1, 1000000], got 100000000000000000000",
    ),
    ("search-lm", f"{LM} --epochs 2000000 --run-dir {{out}}", "--epochs: must be in [1, 1000000], got 2000000"),
    ("train-tagger", f"{TAGGER} --max-epochs 2000000 --run-dir {{out}}", "--max-epochs: must be in [1, 1000000]"),
    ("train-wordvec", "--data {fx}/text.txt --out {out} --epochs 2000000", "--epochs: must be in [1, 1000000]"),
    (
        "transfer",
        f"--cells lstm,{{fx}}/badgeno.json {TRANSFER} -- --embeddings glove:{{fx}}/vectors.txt",
        "{fx}/badgeno.json: field 'nodes[0][0]'",
    ),
    (
        "transfer",
        f"--cells lstm,{{fx}}/nope.json {TRANSFER} -- --embeddings glove:{{fx}}/vectors.txt",
        "{fx}/nope.json: no such file",
    ),
    (
        "transfer",
        f"--cells lstm {TRANSFER} -- --embeddings glove:{{fx}}/vectors.txt --lr -1",
        "bin/transfer -- --embeddings glove:{fx}/vectors.txt --lr -1: "
        "bin/train-tagger --lr: must be positive, got -1.0",
    ),
    (
        "transfer",
        f"--cells lstm {TRANSFER} -- --embeddings glove:{{fx}}/vectors.txt --bogus",
        "bin/train-tagger No such option '--bogus'",
    ),
    (
        "transfer",
        f"--cells lstm {TRANSFER} -- --embeddings glove:{{fx}}/nope.txt",
        "{fx}/nope.txt: no such file (--embeddings glove:{fx}/nope.txt)",
    ),
    (
        "transfer",
        f"--cells lstm {TRANSFER} -- --embeddings transformer:{{fx}}/lm",
        "transformer:{fx}/lm: not a Hugging Face model directory (no config.json)",
    ),
    (
        "transfer",
        "--cells lstm --corpora conll03:{fx}/tagdata,conll03b=conll03:{fx}/wide --run-dir {out} -- "
        "--embeddings glove:{fx}/vectors.txt",
        "{fx}/wide/eng.train: line 3: 5 columns",
    ),
    (
        "demo",
        "--run-dir {out} --data {fx}/demodata --corpus conll2000 --embeddings glove:{fx}/nope.txt",
        "{fx}/nope.txt: no such file (--embeddings glove:{fx}/nope.txt)",
    ),
    (
        "demo",
        "--run-dir {out} --corpus wnut17",
        "--corpus: only with --data (it names a folder inside DATA); the default data has its own",
    ),
    ("demo", "--run-dir {out} --lm wikitext-2", "--lm: only with --data"),
    (
        "demo",
        "--run-dir {out} --data {fx}/demodata --corpus conll03",
        "{fx}/demodata/conll03/eng.train: line 3: 5 columns, but this corpus format has 4",
    ),
    # no traceback
    (
        "plot-run",
        "{fx}/strlog --out {out}",
        "{fx}/strlog/log.jsonl: line 1: field 'train_ppl': must be a number or null, got \"a\"",
    ),
    (
        "plot-search",
        "{fx}/strsearch --out {out}",
        "{fx}/strsearch/log.jsonl: line 1: field 'epoch': must be a count (an integer, 0 or more), got \"x\"",
    ),
    (
        "plot-search",
        "{fx}/nogeno --out {out}",
        "{fx}/nogeno/log.jsonl: its last record has no 'genotype' (the cell "
        "derived at that epoch), and there is no genotype.json",
    ),
    (
        "train-wordvec",
        "--data {fx}/text.txt --out {out} --min-count 5",
        "{fx}/text.txt: no word occurs --min-count 5 times (the most frequent, 'Washington', occurs 2); lower "
        "--min-count",
    ),
    (
        "train-tagger",
        "--corpus conll03 --data {fx}/tagdata --embeddings transformer:{fx}/badtf --run-dir {out}",
        "transformer:{fx}/badtf: the model in this directory does not load (Error while deserializing header",
    ),
    # messages that say what is wrong and what to do
    (
        "train-tagger",
        f"--corpus conll03 --data {{fx}}/utf16 {GLOVE}",
        "{fx}/utf16/eng.train: UTF-16 text, not UTF-8: convert it with iconv -f UTF-16 -t UTF-8 {fx}/utf16/eng.train > "
        "eng.train.utf8 and give that file",
    ),
    ("search-lm", "--data {fx}/utf16lm --run-dir {out}", "{fx}/utf16lm/ptb.train.txt: UTF-16 text, not UTF-8"),
    ("train-wordvec", "--data {fx}/utf16lm/ptb.train.txt --out {out}", "{fx}/utf16lm/ptb.train.txt: UTF-16 text"),
    (
        "tag",
        "{fx}/u16.txt --model {fx}/nope.pt --out {out}",
        "{fx}/u16.txt: UTF-16 text, not UTF-8: convert it with iconv",
    ),
    ("plot-cell", "{fx}/u16cell.json --out {out}", "{fx}/u16cell.json: UTF-16 text, not UTF-8: convert it with iconv"),
    (
        "train-wordvec",
        "--data {fx}/zeros.bin --out {out}",
        "{fx}/zeros.bin: line 1: a NUL byte (byte 0): a binary file",
    ),
    ("tag", "{fx}/zeros.bin --model {fx}/nope.pt --out {out}", "{fx}/zeros.bin: line 1: a NUL byte (byte 0): a binary"),
    (
        "train-tagger",
        f"--corpus conll03 --data {{fx}}/cronly {GLOVE}",
        "{fx}/cronly/eng.train: line 1: line breaks that are carriage returns alone (old Mac text), not line feeds: "
        "convert them with tr '\\r' '\\n' < {fx}/cronly/eng.train > eng.train.unix",
    ),
    ("search-lm", "--data {fx}/crlm --run-dir {out}", "{fx}/crlm/ptb.train.txt: line 1: line breaks that are carriage"),
    (
        "train-lm",
        "--resume {fx}/tagrun",
        "{fx}/tagrun/config.json: the config of a bin/train-tagger run, not of a "
        "bin/train-lm run (continue it with bin/train-tagger --resume {fx}/tagrun)",
    ),
    (
        "search-lm",
        "--resume {fx}/tagrun",
        "{fx}/tagrun/config.json: the config of a bin/train-tagger run, not of a bin/search-lm run",
    ),
    (
        "search-lm",
        "--resume {fx}/seedsrun",
        "{fx}/seedsrun/config.json: a multi-seed run (bin/search-lm --seeds), "
        "which does not resume as a whole: resume one seed's search with "
        "bin/search-lm --resume {fx}/seedsrun/seed-S/search, or its retraining "
        "with bin/train-lm --resume {fx}/seedsrun/seed-S/retrain",
    ),
    ("train-lm", "--resume {fx}/seedsrun", "{fx}/seedsrun/config.json: a multi-seed run (bin/search-lm --seeds)"),
    (
        "train-tagger",
        "--resume {fx}/lmrun",
        "{fx}/lmrun/config.json: not a run of bin/train-tagger (the config of a "
        "bin/train-lm run: continue it with bin/train-lm --resume {fx}/lmrun)",
    ),
    ("search-tagger", f"{TAGGER} --columns '' --run-dir {{out}}", "--columns '': no columns given"),
    ("search-tagger", f"{TAGGER} --method darts --top-n 3 --run-dir {{out}}", "--top-n: only with --method idarts"),
    (
        "search-tagger",
        f"{TAGGER} --pooling mean --run-dir {{out}}",
        "--pooling: only with pooled-flair embeddings; with --embeddings glove:{fx}/vectors.txt it has no effect",
    ),
    (
        "search-tagger",
        f"--corpus conll03 --data {{fx}}/wide {GLOVE}",
        "{fx}/wide/eng.train: line 3: 5 columns, but this corpus format has 4",
    ),
    (
        "train-tagger",
        f"{TAGGER} --columns '' --run-dir {{out}}",
        "--columns '': no columns given (INDEX:NAME items, e.g. 0:text,3:ner)",
    ),
    (
        "evaluate",
        "--model {fx}/nope.pt --corpus conll03 --data {fx}/tagdata --columns '' --out {out}",
        "--columns '': no columns given (INDEX:NAME items, e.g. 0:text,3:ner)",
    ),
    (
        "tag",
        "{fx}/text.txt --model {fx}/flair.pt --out {out}",
        "{fx}/flair.pt: a model saved by flair itself, which this toolkit's commands do not read: in Python, "
        "`import tagger` first, then flair's SequenceTagger.load reads it without running pickled code (or "
        "refuses it); or train one with this toolkit",
    ),
    (
        "evaluate",
        "--model {fx}/flair.pt --corpus conll03 --data {fx}/tagdata --out {out}",
        "{fx}/flair.pt: a model saved by flair itself",
    ),
    ("eval-lm", "{fx}/flair.pt --file {fx}/text.txt", "{fx}/flair.pt: a model saved by flair itself"),
    (
        "evaluate",
        "--model {fx}/evalrun",
        "{fx}/evalrun/eval-conll03-test: a file, not a folder (the default --out; give another)",
    ),
]


def _edit(text: str, edit) -> str:
    return "\n".join(edit(number, line) for number, line in enumerate(text.split("\n"), start=1))


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    write_lm_corpus(root / "lm", train_lines=40, other_lines=10)
    write_conll03(root / "tagdata")
    (root / "vectors.txt").write_text("a 0.1 0.2\n", encoding="utf-8")
    conll03 = {
        name: (root / "tagdata" / name).read_text(encoding="utf-8") for name in ("eng.train", "eng.testa", "eng.testb")
    }

    def corpus(name: str, files: dict[str, str]) -> None:
        (root / name).mkdir()
        for file, text in files.items():
            (root / name / file).write_text(text, encoding="utf-8")

    corpus("wide", {n: _edit(t, lambda _, line: line + " X" if line else line) for n, t in conll03.items()})
    c2000 = "He PRP B-NP\nsaw VBD B-VP\n\nit PRP B-NP\n"
    corpus("wide2000", {"train.txt": _edit(c2000, lambda _, line: line + " X" if line else line), "test.txt": c2000})
    corpus("hugeline", {**conll03, "eng.train": "a " * 100_000 + "\n"})
    corpus("hugecol", {"train.txt": "Anna B-PER\n" + "a " * 100_000 + "\n", "test.txt": "Anna B-PER\n"})
    docstart = (
        "-DOCSTART- -X- -X- O\n\nAnna NNP I-NP I-PER\nmet VBD I-VP O\n-DOCSTART- -X- -X- O\nBoris NNP I-NP I-PER\n"
    )
    corpus("docstart", {**conll03, "eng.train": docstart})
    write_wnut(root / "wnutempty")
    write_wnut(root / "wnutspace")
    for name, edit in (
        ("wnutempty", lambda n, line: "\tO" if n == 2 else line),
        ("wnutspace", lambda n, line: " \tO" if n == 3 else line),
    ):
        path = root / name / "wnut17train.conll"
        path.write_text(_edit(path.read_text(encoding="utf-8"), edit), encoding="utf-8")
    column = "Anna B-PER\nmet O\n"
    corpus("twotrain", {"a.train.txt": column, "b.train.txt": column, "test.txt": column})
    corpus("twotest", {"train.txt": column, "test.txt": column, "test2.txt": column})
    corpus("twodev", {"train.txt": column, "dev.txt": column, "testa.txt": column, "testb.txt": column})
    lm = {
        f"ptb.{s}.txt": (root / "lm" / f"ptb.{s}.txt").read_text(encoding="utf-8") for s in ("train", "valid", "test")
    }
    corpus("ptbwiki", {**lm, **{f"wiki.{s}.tokens": lm[f"ptb.{s}.txt"] for s in ("train", "valid", "test")}})
    (root / "text.txt").write_text("George Washington went to Washington .\n", encoding="utf-8")
    for name, config in (
        ("float", {"emsize": 16.5}),
        ("true", {"emsize": True}),
        ("huge", {"epochs": 1e20}),
        ("switch", {"compile": 1}),
        ("taggerfloat", {"hidden_size": 16.5}),
    ):
        (root / f"{name}.json").write_text(json.dumps(config), encoding="utf-8")
    (root / "badgeno.json").write_text(
        json.dumps({"format": "nas-rnn-genotype", "version": 1, "nodes": [[["relu", 3]]], "concat": [1]}),
        encoding="utf-8",
    )
    (root / "badtf").mkdir()
    (root / "badtf" / "config.json").write_text(
        json.dumps(
            {
                "model_type": "bert",
                "hidden_size": 8,
                "num_hidden_layers": 1,
                "num_attention_heads": 1,
                "intermediate_size": 8,
                "vocab_size": 7,
            }
        ),
        encoding="utf-8",
    )
    (root / "badtf" / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n", encoding="utf-8")
    (root / "badtf" / "model.safetensors").write_bytes(b"garbage")  # weights cut short
    corpus("utf16", {**conll03})
    (root / "utf16" / "eng.train").write_bytes(conll03["eng.train"].encode("utf-16"))
    corpus("utf16lm", lm)
    (root / "utf16lm" / "ptb.train.txt").write_bytes(lm["ptb.train.txt"].encode("utf-16-le"))  # no byte-order mark
    (root / "shortvec.txt").write_text("a 0.1 0.2\nb 0.3 0.1\nc 0.3\n", encoding="utf-8")  # gensim read c as [0.3, 0.3]
    (root / "countvec.txt").write_text("3 2\na 0.1 0.2\nb 0.3 0.1\n", encoding="utf-8")
    (root / "zeros.bin").write_bytes(b"\0" * 64)  # NUL bytes at every position: binary, not UTF-16
    (root / "u16cell.json").write_bytes(
        json.dumps({"format": "nas-rnn-genotype", "version": 1, "nodes": [[["tanh", 0]]], "concat": [1]}).encode(
            "utf-16"
        )
    )
    (root / "u16.txt").write_bytes("George Washington went to Washington .\n".encode("utf-16"))
    corpus("cronly", {**conll03, "eng.train": conll03["eng.train"].replace("\n", "\r")})
    corpus("crlm", {**lm, "ptb.train.txt": lm["ptb.train.txt"].replace("\n", "\r")})
    tiny_char_lm(root / "flair.pt", forward=True)
    (root / "evalrun").mkdir()
    (root / "evalrun" / "config.json").write_text(
        json.dumps(
            {
                "corpus": "conll03",
                "data": str(root / "tagdata"),
                "embeddings": f"glove:{root / 'vectors.txt'}",
                "command": "bin/train-tagger --corpus conll03",
            }
        ),
        encoding="utf-8",
    )
    (root / "evalrun" / "eval-conll03-test").write_text("a file where the default --out would go\n", encoding="utf-8")
    (root / "seedsrun").mkdir()
    (root / "seedsrun" / "config.json").write_text(
        json.dumps(
            {
                "seeds": [1, 2],
                "workers": 1,
                "search_args": ["--train", "x"],
                "device": "cpu",
                "select_budget": 10.0,
                "select_args": [],
                "command": "bin/search-lm --seeds 1,2 --data d",
            }
        ),
        encoding="utf-8",
    )
    for run, config, line in (
        (
            "strlog",
            {"cell": "darts_v2", "emsize": 8, "test_batch_size": 1},
            {"epoch": 1, "train_ppl": "a", "valid_ppl": 9.0},
        ),
        ("strsearch", {"method": "darts"}, {"epoch": "x", "valid_ppl": 3}),
        ("nogeno", {"method": "darts"}, {"epoch": 1, "valid_ppl": 3}),
    ):
        (root / run).mkdir()
        (root / run / "config.json").write_text(json.dumps(config), encoding="utf-8")
        (root / run / "log.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    (root / "demodata").mkdir()
    (root / "demodata" / "ptb").symlink_to(root / "lm")
    (root / "demodata" / "conll03").symlink_to(root / "wide")
    (root / "demodata" / "conll2000").symlink_to(root / "wide2000")
    (root / "lmrun").mkdir()
    (root / "lmrun" / "config.json").write_text(
        json.dumps({"cell": "darts_v2", "test_batch_size": 1, "command": "bin/train-lm --data d"}), encoding="utf-8"
    )
    (root / "tagrun").mkdir()
    (root / "tagrun" / "config.json").write_text(
        json.dumps(
            {
                "corpus": "conll03",
                "data": str(root / "tagdata"),
                "embeddings": f"glove:{root / 'vectors.txt'}",
                "lr": 0.1,
                "command": "bin/train-tagger --corpus conll03",
            }
        ),
        encoding="utf-8",
    )
    (root / "noformat.json").write_text(
        json.dumps({"version": 1, "nodes": [[["tanh", 0]]], "concat": [1]}), encoding="utf-8"
    )
    return root


@pytest.mark.parametrize("command, args, expected", CASES)
def test_bad_input_is_one_error_line_exit_2_and_leaves_nothing(fx, tmp_path, monkeypatch, command, args, expected):
    assert_refused_leaving_nothing(COMMANDS[command], fx, tmp_path, monkeypatch, args, expected)


@pytest.mark.parametrize(
    "command, args, closed, expected",
    [
        (
            "tag",
            "{fx}/text.txt --model {fx}/nope.pt",
            ">&-",
            "error: standard output is closed: give --out FILE, or send it to a file (> FILE)\n",
        ),
        (
            "tag",
            "- --out {out} --model {fx}/nope.pt",
            "<&-",
            "error: - (stdin): standard input is closed: give the input as a file, or send it in (< FILE)\n",
        ),
        (
            "eval-lm",
            "{fx}/nope.pt --file {fx}/text.txt",
            ">&-",
            "error: standard output is closed, where the perplexity is printed: send it to a file (> FILE)\n",
        ),
        (
            "compare-words",
            "{fx}/nope.pt {fx}/nope.pt --data {fx}/lm",
            ">&-",
            "error: standard output is closed, where the comparison is printed: send it to a file (> FILE)\n",
        ),
    ],
)
def test_a_standard_stream_closed_is_one_line(fx, tmp_path, command, args, closed, expected):
    """`bin/tag FILE >&-`, `bin/tag - <&-`, `bin/eval-lm ... >&-`: Python starts without sys.stdout or
    sys.stdin; refused before the model loads, no traceback (eval-lm's result was dropped without a word)."""
    out = tmp_path / "out" / "tagged"
    proc = subprocess.run(
        f"{shlex.quote(sys.executable)} {REPO / 'bin' / command} {args.format(fx=fx, out=out)} {closed}",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr == expected, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_corpus_changed_since_the_run_began_is_said_so(fx, tmp_path, monkeypatch):
    """A new word in train after a train-lm run began: the resume names the change, not a tensor size mismatch."""
    monkeypatch.chdir(tmp_path)
    data, run = tmp_path / "data", tmp_path / "run"
    write_lm_corpus(data, train_lines=40, other_lines=10)
    tiny = [
        "--data",
        str(data),
        "--emsize",
        "8",
        "--batch-size",
        "4",
        "--bptt",
        "5",
        "--max-batches-per-epoch",
        "2",
        "--eval-batches",
        "1",
        "--test-batch-size",
        "1",
        "--epochs",
        "1",
        "--run-dir",
        str(run),
    ]
    assert CliRunner().invoke(COMMANDS["train-lm"], tiny).exit_code == 0
    train = data / "ptb.train.txt"
    kept = train.read_text(encoding="utf-8")
    renamed = "".join(
        " ".join("w77" if word == "w7" else word for word in line.split()) + "\n" for line in kept.splitlines()
    )  # as many words as before: it trained on silently
    before = _tree(run)
    for edited, how in (
        (kept + "a brandnew word\n", "its vocabulary is now 45 words, the run's 42"),
        (renamed, "its vocabulary differs from the run's at word 28 ('w7' then, 'w77' now)"),
    ):
        train.write_text(edited, encoding="utf-8")
        result = CliRunner().invoke(COMMANDS["train-lm"], ["--resume", str(run), "--epochs", "2"])
        _assert_refused(
            result.exit_code,
            result.stdout,
            result.stderr.splitlines()[-1] + "\n",
            f"{run / 'checkpoint.pt'}: the corpus changed since the run began: {how} ({train}); resume "
            "with the files it started with, or start a new run",
        )
        assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1
        assert "Traceback" not in result.stderr and _tree(run) == before


def test_train_tagger_on_a_full_disk_after_a_checkpoint_says_how_to_resume_and_the_resume_runs(
    disk, tmp_path, restore_flair_logging
):
    """The disk fills after epoch 1's checkpoint (68 kB free: a checkpoint is 23 kB): the run is kept, the line
    says so and how to go on, not 'nothing was written'; its checkpoint given as a model says what it is. A
    resume on a corpus changed since (a new tag type) is one line, not torch's size mismatch, and changes
    nothing; on the corpus it began with, the resume finishes."""
    write_conll03(tmp_path / "data", sizes=(12, 4, 4))
    (tmp_path / "vectors.txt").write_text("Anna 0.1 0.2\nParis 0.3 0.1\n", encoding="utf-8")
    fill(disk, 68 << 10)
    run = disk / "run"
    result = CliRunner().invoke(
        COMMANDS["train-tagger"],
        [
            "--corpus",
            "conll03",
            "--data",
            str(tmp_path / "data"),
            "--embeddings",
            f"glove:{tmp_path / 'vectors.txt'}",
            "--hidden-size",
            "4",
            "--max-epochs",
            "3",
            "--run-dir",
            str(run),
        ],
    )
    line = refused(result, disk)
    assert line.endswith(
        f"nothing was written; the run is kept up to its last checkpoint: free some space and "
        f"continue it with bin/train-tagger --resume {run}"
    ), line
    for command, args, expected in (  # its checkpoint is not a model: said so, with what to give instead
        (
            "tag",
            [str(tmp_path / "vectors.txt"), "--model", str(run / "checkpoint.pt"), "--out", str(tmp_path / "t")],
            f"{run / 'checkpoint.pt'}: the training checkpoint of a bin/train-tagger run, not a saved model: give "
            f"the run directory ({run}) or its best-model.pt, or continue the run with bin/train-tagger --resume {run}",
        ),
        (
            "eval-lm",
            [str(run / "checkpoint.pt"), "--file", str(tmp_path / "vectors.txt")],
            f"{run / 'checkpoint.pt'}: a tagger's file (bin/train-tagger), not a language model",
        ),
    ):
        result = CliRunner().invoke(COMMANDS[command], args)
        _assert_refused(result.exit_code, result.stdout, result.stderr, expected)
    (disk / "filler").unlink()
    train = tmp_path / "data" / "eng.train"
    kept, before = train.read_text(encoding="utf-8"), _tree(run)
    train.write_text(kept.replace("I-PER", "I-MISC"), encoding="utf-8")  # the corpus changes: a new tag type
    changed = CliRunner().invoke(COMMANDS["train-tagger"], ["--resume", str(run)])
    errors = [line for line in changed.stderr.splitlines() if line.startswith("error:")]
    assert changed.exit_code == 2 and errors == [
        f"error: {tmp_path / 'data'}: the corpus changed since the run began: its tags no longer fit the model "
        f"checkpointed in {run}; resume with the files the run started with, or start a new run"
    ], changed.stderr
    after = _tree(run)  # loss.tsv loses the row of the epoch that was not checkpointed, as on any resume
    assert "Traceback" not in changed.stderr and {**after, str(run / "loss.tsv"): None} == {
        **before,
        str(run / "loss.tsv"): None,
    }
    train.write_text(kept, encoding="utf-8")
    resumed = CliRunner().invoke(COMMANDS["train-tagger"], ["--resume", str(run)])
    assert resumed.exit_code == 0, resumed.stderr
    assert (run / "metrics.json").is_file() and not (run / "checkpoint.pt").exists()


def test_eval_lm_and_compare_words_show_their_progress(fx, tmp_path, monkeypatch):
    """Progress lines on stderr while they work (here one per chunk), the result alone on stdout; a short
    evaluation at the usual interval prints none."""
    from nas.cli.terminal import TokenProgress

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert (
        CliRunner()
        .invoke(
            COMMANDS["train-lm"],
            [
                *_args(LM, fx, run),
                "--max-batches-per-epoch",
                "2",
                "--eval-batches",
                "1",
                "--test-batch-size",
                "1",
                "--epochs",
                "1",
                "--run-dir",
                str(run),
            ],
        )
        .exit_code
        == 0
    )
    text = tmp_path / "long.txt"
    text.write_text(" ".join(f"w{k % 40}" for k in range(400)) + "\n", encoding="utf-8")  # one long line
    args = [str(run), "--file", str(text), "--batch-size", "1", "--bptt", "50"]
    quiet = CliRunner().invoke(COMMANDS["eval-lm"], args)
    assert quiet.exit_code == 0 and "evaluating" not in quiet.stderr, quiet.stderr
    monkeypatch.setattr(TokenProgress, "EVERY", 0.0)
    shown = CliRunner().invoke(COMMANDS["eval-lm"], args)
    assert shown.exit_code == 0 and json.loads(shown.stdout)["tokens"] == 400
    lines = [line for line in shown.stderr.splitlines() if line.startswith(f"evaluating {text}: ")]
    assert len(lines) == 8 and lines[0].startswith(f"evaluating {text}: 50 of 400 tokens (12%), "), shown.stderr
    assert lines[-1].startswith(f"evaluating {text}: 400 of 400 tokens (100%), ") and lines[-1].endswith(" tok/s")
    compared = CliRunner().invoke(COMMANDS["compare-words"], [str(run), str(run), "--data", str(fx / "lm")])
    assert compared.exit_code == 0 and compared.stdout.startswith("# "), compared.stderr
    for model in ("A", "B"):
        lines = [
            line
            for line in compared.stderr.splitlines()
            if line.startswith(f"model {model} on {fx / 'lm' / 'ptb.valid.txt'}: ")
        ]
        assert lines and lines[-1].endswith(" tok/s") and "(100%)" in lines[-1], compared.stderr


def test_train_wordvec_shows_its_epochs(fx, tmp_path, monkeypatch):
    """An epoch line on stderr as each ends (every one at interval 0); none for a short run at the usual interval."""
    from nas.cli.terminal import StatusLine

    args = ["--data", str(fx / "lm" / "ptb.train.txt"), "--dim", "4", "--epochs", "3"]
    quiet = CliRunner().invoke(COMMANDS["train-wordvec"], [*args, "--out", str(tmp_path / "quiet.txt")])
    assert quiet.exit_code == 0 and "epoch" not in quiet.stderr, quiet.stderr
    monkeypatch.setattr(StatusLine, "EVERY", 0.0)
    shown = CliRunner().invoke(COMMANDS["train-wordvec"], [*args, "--out", str(tmp_path / "shown.txt")])
    assert shown.exit_code == 0, shown.stderr
    lines = [line for line in shown.stderr.splitlines() if line.startswith("word2vec: epoch ")]
    assert [line.split(" done")[0] for line in lines] == [f"word2vec: epoch {k} of 3" for k in (1, 2, 3)], shown.stderr


def test_a_byte_order_mark_is_not_read_as_text(fx, tmp_path):
    """A UTF-8 byte-order mark (as Windows editors write) before a corpus: its -DOCSTART- stays a document
    boundary, not a sentence of one token, and the first LM token is the word itself; before a genotype
    (any JSON file), it is not invalid JSON."""
    from nas.lm.corpus import read_tokens
    from tagger.corpora import load_corpus

    data = tmp_path / "conll03"
    write_conll03(data)
    plain = load_corpus("conll03", data).counts()
    train = data / "eng.train"
    train.write_bytes(b"\xef\xbb\xbf" + train.read_bytes())
    assert load_corpus("conll03", data).counts() == plain
    text = tmp_path / "bom.txt"
    text.write_bytes("\ufeffw1 w2\nw3\n".encode("utf-8"))
    assert read_tokens(text) == ["w1", "w2", "<eos>", "w3", "<eos>"]
    from nas.cells.genotype import load

    cell = tmp_path / "cell.json"
    cell.write_bytes(b"\xef\xbb\xbf" + (REPO / "resources" / "cells" / "darts_v2.json").read_bytes())
    assert load(cell) == load("darts_v2")  # not 'invalid JSON (Unexpected UTF-8 BOM)'


def test_a_model_of_the_other_kind_is_named_as_what_it_is(fx, tmp_path, monkeypatch, tiny_tagger):
    """A tagger given to the LM commands, a language model given to the tagger commands, a search's
    checkpoint given to eval-lm: one line that says what the file is and which command takes it, not
    'not tensors', 'no marker' or 'not a language model'."""
    monkeypatch.chdir(tmp_path)
    lm_run, out = tmp_path / "lm", tmp_path / "out"
    assert (
        CliRunner()
        .invoke(
            COMMANDS["train-lm"],
            [
                *_args(LM, fx, lm_run),
                "--max-batches-per-epoch",
                "2",
                "--eval-batches",
                "1",
                "--test-batch-size",
                "1",
                "--epochs",
                "1",
                "--run-dir",
                str(lm_run),
            ],
        )
        .exit_code
        == 0
    )
    search = tmp_path / "search"
    assert (
        CliRunner()
        .invoke(
            COMMANDS["search-lm"],
            [
                *_args(LM, fx, search),
                "--nodes",
                "2",
                "--epochs",
                "1",
                "--max-batches-per-epoch",
                "2",
                "--eval-batches",
                "1",
                "--run-dir",
                str(search),
            ],
        )
        .exit_code
        == 0
    )
    tagger_file = tiny_tagger[0] / "best-model.pt"
    before = _tree(tmp_path)
    for command, args, expected in (
        (
            "eval-lm",
            [str(tagger_file), "--file", str(fx / "text.txt")],
            f"{tagger_file}: a tagger's file (bin/train-tagger), not a language model: tag with its run's model with "
            "bin/tag, or score it with bin/evaluate",
        ),
        ("compare-words", [str(tagger_file), str(lm_run), "--data", str(fx / "lm")], f"{tagger_file}: a tagger's file"),
        (
            "tag",
            [str(fx / "text.txt"), "--model", str(lm_run / "best.pt"), "--out", str(out)],
            f"{lm_run / 'best.pt'}: a language model (bin/train-lm), not a tagger: evaluate it with bin/eval-lm",
        ),
        (
            "evaluate",
            [
                "--model",
                str(lm_run / "best.pt"),
                "--corpus",
                "conll03",
                "--data",
                str(fx / "tagdata"),
                "--out",
                str(out),
            ],
            f"{lm_run / 'best.pt'}: a language model (bin/train-lm), not a tagger",
        ),
    ):
        result = CliRunner().invoke(COMMANDS[command], args)
        _assert_refused(result.exit_code, result.stdout, result.stderr, expected)
    result = CliRunner().invoke(COMMANDS["eval-lm"], [str(search / "checkpoint.pt"), "--file", str(fx / "text.txt")])
    _assert_refused(
        result.exit_code,
        result.stdout,
        result.stderr,
        f"{search / 'checkpoint.pt'}: the checkpoint of a bin/search-lm run, not a language model: "
        f"bin/compare-words reads its run directory ({search}); to score its cell, retrain it with "
        f"bin/train-lm --cell {search}/genotype.json (written when the search ends)",
    )
    assert _tree(tmp_path) == before


def test_export_rebuilding_the_pooled_memory_shows_its_progress(
    pooled_run, tmp_path, monkeypatch, restore_flair_logging
):
    """--rebuild-memory pools every training and dev sentence (minutes with Flair embeddings on a large corpus):
    a line per sentence at interval 0, the count it ends with."""
    from nas.cli.terminal import StatusLine

    run, _ = pooled_run
    monkeypatch.setattr(StatusLine, "EVERY", 0.0)
    result = CliRunner().invoke(COMMANDS["export"], [str(run), "--rebuild-memory", "--out", str(tmp_path / "x.pt")])
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("pooling: ")]
    assert lines[0].startswith("pooling: 1 of 150 sentences, ") and lines[-1].startswith(
        "pooling: 150 of 150 sentences"
    )
