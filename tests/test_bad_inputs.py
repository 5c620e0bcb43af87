"""Every command refuses bad input the same way: exit 2, one `error:` line on stderr naming the flag
or the file (and its line where there is one), no traceback, nothing on stdout, and nothing
written, neither in the output location nor anywhere else.

The matrix runs in process through click's test runner (through the same `nas.common.cli.Command`
that `bin/` and the console scripts run); a few cases run as real processes too.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from nas.common.ranges import CORES
from conftest import write_lm_corpus
from nas.cli import compare_words, eval_lm, plot_cell, plot_run, plot_search, sample_cells, search_lm, train_lm
from tagger.cli import demo
from tagger.cli import evaluate, export, tag, train_charlm, train_tagger, train_wordvec
from tagger_data import write_conll03

# commands run in-process set flair's log level and stream; each test leaves them as it found them
pytestmark = pytest.mark.usefixtures("restore_flair_logging")
REPO = Path(__file__).resolve().parent.parent
COMMANDS = {
    "search-lm": search_lm.main,
    "train-lm": train_lm.main,
    "eval-lm": eval_lm.main,
    "compare-words": compare_words.main,
    "plot-search": plot_search.main,
    "plot-cell": plot_cell.main,
    "plot-run": plot_run.main,
    "sample-cells": sample_cells.main,
    "train-tagger": train_tagger.main,
    "tag": tag.main,
    "evaluate": evaluate.main,
    "export": export.main,
    "train-charlm": train_charlm.main,
    "train-wordvec": train_wordvec.main,
    "demo": demo.main,
}
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")

# {fx}: the fixtures below; {out}: a path in an empty folder, the output of the case.
LM = "--data {fx}/lm --emsize 8 --nhid 8 --batch-size 4 --bptt 5"
TAGGER = "--corpus conll03 --data {fx}/tagdata --embeddings glove:{fx}/vectors.txt"
TAG = "{fx}/text.txt --model {fx}/nope.pt"
EVALUATE = "--model {fx}/nope.pt --corpus conll03 --data {fx}/tagdata"
CHARLM = "--data {fx}/text.txt --direction forward --epochs 1"
CASES = [
    # search-lm: numbers, devices, output paths, corpora, genotypes, method flags, runs of another command
    ("search-lm", f"{LM} --lr -1", "--lr: must be positive, got -1.0"),
    ("search-lm", f"{LM} --lr nan", "--lr: must be a finite number, got nan"),
    ("search-lm", f"{LM} --lr inf", "--lr: must be a finite number, got inf"),
    ("search-lm", f"{LM} --clip -1", "--clip: must be positive, got -1.0"),
    ("search-lm", f"{LM} --max-batches-per-epoch 0", "--max-batches-per-epoch: must be at least 1, got 0"),
    ("search-lm", f"{LM} --epochs 0", "--epochs: must be in [1, 1000000], got 0"),
    ("search-lm", f"{LM} --epochs 1.5", "--epochs: '1.5' is not a valid integer"),
    ("search-lm", f"{LM} --dropout 1", "--dropout: must be in [0, 1), got 1.0"),
    ("search-lm", f"{LM} --dropout-h -0.1", "--dropout-h: must be in [0, 1), got -0.1"),
    ("search-lm", f"{LM} --arch-lr 0", "--arch-lr: must be positive, got 0.0"),
    ("search-lm", f"{LM} --wdecay -1e-3", "--wdecay: must be non-negative, got -0.001"),
    ("search-lm", f"{LM} --device tpu", "--device: unknown device 'tpu' (use cpu, cuda or cuda:N)"),
    ("search-lm", f"{LM} --device bogus", "--device: unknown device 'bogus'"),
    pytest.param("search-lm", f"{LM} --device cuda", "--device: CUDA is not available on this machine", marks=NO_CUDA),
    ("search-lm", f"{LM} --threads 0", f"--threads: must be in [1, {CORES}], the cores of this machine, got 0"),
    (
        "search-lm",
        f"{LM} --out {{fx}}/afile/cell.json",
        "--out: {fx}/afile/cell.json: cannot be made: {fx}/afile is a file",
    ),
    ("search-lm", f"{LM} --out /proc/cell.json", "--out: /proc/cell.json: cannot make a file in /proc"),
    ("search-lm", f"{LM} --out {{fx}}", "--out: {fx}: a folder, not a file"),
    ("search-lm", f"{LM} --run-dir {{fx}}/afile", "--run-dir: {fx}/afile: a file, not a folder"),
    ("search-lm", f"{LM} --run-dir /proc/run", "--run-dir: /proc/run: cannot make a file in /proc"),
    ("search-lm", f"{LM} --method nosuch", "--method: 'nosuch' is not one of"),
    ("search-lm", f"{LM} --bogus", "No such option '--bogus'"),
    ("search-lm", "--data {fx}/lm --emsize 8 --nhid 9", "--emsize 8 and --nhid 9 must be equal"),
    ("search-lm", "--data {fx}/nope", "{fx}/nope: no such directory"),
    (
        "search-lm",
        "--data {fx}/nul --run-dir {out}",
        "{fx}/nul/ptb.train.txt: line 2: a NUL byte (byte 8): a binary file",
    ),
    ("search-lm", "--data {fx}/latin1 --run-dir {out}", "{fx}/latin1/ptb.train.txt: line 2: bytes that are not UTF-8"),
    ("search-lm", "--data {fx}/blank --run-dir {out}", "{fx}/blank/ptb.train.txt: empty corpus"),
    ("search-lm", f"{LM} --method ess --max-batches-per-epoch 3", "--max-batches-per-epoch: with --method ess"),
    ("search-lm", f"{LM} --method ess --history 4", "--history 4: needs at least as many --inter-nodes"),
    (
        "search-lm",
        f"{LM} --method ess --search-space inter --cell {{fx}}/badgeno.json",
        "{fx}/badgeno.json: field 'nodes[0][0]'",
    ),
    (
        "search-lm",
        f"{LM} --seeds 1,2 --select-budget 0",
        "--select-budget: must be a positive number of minutes, got 0.0",
    ),
    ("search-lm", "--resume {fx}/trainrun", "{fx}/trainrun/config.json: the config of a bin/train-lm run"),
    # train-lm
    ("train-lm", f"{LM} --lr -1", "--lr: must be positive, got -1.0"),
    ("train-lm", f"{LM} --clip 0", "--clip: must be positive, got 0.0"),
    ("train-lm", f"{LM} --time-budget 0", "--time-budget: must be a positive number of minutes, got 0.0"),
    ("train-lm", f"{LM} --seq-len-std nan", "--seq-len-std: must be a finite number, got nan"),
    ("train-lm", f"{LM} --max-rollbacks -1", "--max-rollbacks: must be non-negative, got -1"),
    ("train-lm", f"{LM} --dropout-e 1.5", "--dropout-e: must be in [0, 1), got 1.5"),
    ("train-lm", f"{LM} --device cuda:x", "--device: unknown device 'cuda:x'"),
    ("train-lm", f"{LM} --run-dir {{fx}}/afile/run", "--run-dir: {fx}/afile/run: cannot be made: {fx}/afile is a file"),
    ("train-lm", f"{LM} --run-dir /proc/run", "--run-dir: /proc/run: cannot make a file in /proc"),
    ("train-lm", f"{LM} --out {{out}}", "No such option '--out'"),
    ("train-lm", f"{LM} --cell nosuch", "cell 'nosuch': no such file, and not a shipped cell"),
    ("train-lm", f"{LM} --cell {{fx}}/badjson.json", "{fx}/badjson.json: line 1: invalid JSON"),
    (
        "train-lm",
        "--data {fx}/nul --emsize 8 --batch-size 4 --bptt 5 --run-dir {out}",
        "{fx}/nul/ptb.train.txt: line 2: a NUL byte",
    ),
    (
        "train-lm",
        "--resume {fx}/searchrun",
        "{fx}/searchrun/config.json: the config of a bin/search-lm run, not of a "
        "bin/train-lm run (continue it with bin/search-lm --resume {fx}/searchrun)",
    ),
    ("train-lm", "--resume {fx}/tagdata", "{fx}/tagdata: not a run directory (no config.json)"),
    # eval-lm, compare-words
    ("eval-lm", "{fx}/nope.pt --file {fx}/text.txt", "{fx}/nope.pt: no such file"),
    ("eval-lm", "{fx}/text.txt --file {fx}/text.txt", "{fx}/text.txt: not a model file of this toolkit"),
    ("eval-lm", "{fx} --file {fx}/text.txt", "{fx}: no best.pt"),
    ("eval-lm", "{fx}/nope.pt --batch-size 0", "--batch-size: must be in [1, 65536], got 0"),
    ("eval-lm", "{fx}/nope.pt --device tpu", "--device: unknown device 'tpu'"),
    ("compare-words", "{fx}/nope {fx}/nope --data {fx}/lm", "{fx}/nope: not a language model"),
    ("compare-words", "{fx}/nope {fx}/nope --data {fx}/lm --top 0", "--top: must be at least 1, got 0"),
    ("compare-words", "{fx}/nope {fx}/nope --data {fx}/lm --threads -2", "--threads: must be in [1, "),
    ("compare-words", "{fx}/nope --data {fx}/lm", "Missing argument 'MODEL_B'"),
    # pictures, random cells
    ("plot-search", "{fx}/tagdata", "{fx}/tagdata: not a run directory (no config.json)"),
    ("plot-search", "{fx}/searchrun --out {fx}/afile", "--out: {fx}/afile: a file, not a folder"),
    ("plot-run", "{fx}/searchrun --out {fx}/afile", "--out: {fx}/afile: a file, not a folder"),
    ("plot-run", "{fx}/searchrun --out /proc/curves", "--out: /proc/curves: cannot make a file in /proc"),
    ("plot-run", "{fx}/tagdata", "{fx}/tagdata: not a run directory"),
    (
        "plot-cell",
        "darts_v2 --out {fx}/afile/pictures",
        "--out: {fx}/afile/pictures: cannot be made: {fx}/afile is a file",
    ),
    ("plot-cell", "darts_v2 --out /proc/pictures", "--out: /proc/pictures: cannot make a file in /proc"),
    ("plot-cell", "{fx}/badgeno.json --out {out}", "{fx}/badgeno.json: field 'nodes[0][0]'"),
    ("plot-cell", "nosuch --out {out}", "cell 'nosuch': no such file, and not a shipped cell"),
    ("sample-cells", "--n 0 --out {out}", "--n: must be in [1, 1000000], got 0"),
    ("sample-cells", "--n 2 --out {fx}/afile", "--out: {fx}/afile: a file, not a folder"),
    ("sample-cells", "--out {out}", "Missing option '--n'"),
    # train-tagger
    ("train-tagger", f"{TAGGER} --lr -1", "--lr: must be positive, got -1.0"),
    ("train-tagger", f"{TAGGER} --lr nan", "--lr: must be a finite number, got nan"),
    ("train-tagger", f"{TAGGER} --anneal-factor 2", "--anneal-factor: must be in (0, 1), got 2.0"),
    ("train-tagger", f"{TAGGER} --anneal-factor 0", "--anneal-factor: must be in (0, 1), got 0.0"),
    ("train-tagger", f"{TAGGER} --clip -1", "--clip: must be positive, got -1.0"),
    ("train-tagger", f"{TAGGER} --patience -1", "--patience: must be non-negative, got -1"),
    ("train-tagger", f"{TAGGER} --hidden-size 0", "--hidden-size: must be in [1, 8192], got 0"),
    ("train-tagger", f"{TAGGER} --cell-init glorot", "--cell-init: 'glorot' is not one of 'lstm', 'darts'"),
    ("train-tagger", f"{TAGGER} --word-dropout 1", "--word-dropout: must be in [0, 1), got 1.0"),
    ("train-tagger", f"{TAGGER} --device tpu", "--device: unknown device 'tpu'"),
    pytest.param("train-tagger", f"{TAGGER} --device cuda", "--device: CUDA is not available", marks=NO_CUDA),
    (
        "train-tagger",
        f"{TAGGER} --run-dir {{fx}}/afile/run",
        "--run-dir: {fx}/afile/run: cannot be made: {fx}/afile is a file",
    ),
    ("train-tagger", f"{TAGGER} --run-dir /proc/run", "--run-dir: /proc/run: cannot make a file in /proc"),
    ("train-tagger", f"{TAGGER} --corpus nosuch", "--corpus: 'nosuch' is not one of"),
    ("train-tagger", "--corpus conll03 --data {fx}/nope --run-dir {out}", "{fx}/nope: no such directory (--data)"),
    (
        "train-tagger",
        f"{TAGGER} --cell {{fx}}/badgeno.json --run-dir {{out}}",
        "{fx}/badgeno.json: field 'nodes[0][0]'",
    ),
    # tag, evaluate
    ("tag", "{fx}/binary.txt --model {fx}/nope.pt --out {out}", "{fx}/binary.txt: line 3: a NUL byte (byte 8)"),
    ("tag", "{fx}/nope.txt --model {fx}/nope.pt --out {out}", "{fx}/nope.txt: no such file"),
    (
        "tag",
        f"{TAG} --out {{fx}}/afile/tagged.conll",
        "--out: {fx}/afile/tagged.conll: cannot be made: {fx}/afile is a file",
    ),
    ("tag", f"{TAG} --out /proc/tagged.conll", "--out: /proc/tagged.conll: cannot make a file in /proc"),
    ("tag", f"{TAG} --batch-size 0", "--batch-size: must be in [1, 65536], got 0"),
    ("tag", f"{TAG} --pooled-memory -1", "--pooled-memory: must be non-negative, got -1"),
    ("tag", f"{TAG} --device bogus", "--device: unknown device 'bogus'"),
    ("tag", f"{TAG} --tokenized --columns", "--tokenized and --columns exclude each other"),
    ("evaluate", f"{EVALUATE} --out {{fx}}/afile/eval", "--out: {fx}/afile/eval: cannot be made: {fx}/afile is a file"),
    ("evaluate", f"{EVALUATE} --out /proc/eval", "--out: /proc/eval: cannot make a file in /proc"),
    ("evaluate", f"{EVALUATE} --batch-size 0", "--batch-size: must be in [1, 65536], got 0"),
    ("evaluate", f"{EVALUATE} --device tpu", "--device: unknown device 'tpu'"),
    (
        "evaluate",
        "--model {fx}/nope.pt --corpus conll03 --data {fx}/nope --out {out}",
        "{fx}/nope: no such directory (--data)",
    ),
    (
        "export",
        "{fx}/nope.pt --out {fx}/afile/tagger.pt",
        "--out: {fx}/afile/tagger.pt: cannot be made: {fx}/afile is a file",
    ),
    ("export", "{fx}/nope.pt --out {fx}", "--out: {fx}: a folder, not a file"),
    # train-charlm, train-wordvec, demo
    (
        "train-charlm",
        f"{CHARLM} --run-dir {{fx}}/afile/lm",
        "--run-dir: {fx}/afile/lm: cannot be made: {fx}/afile is a file",
    ),
    ("train-charlm", f"{CHARLM} --run-dir /proc/lm", "--run-dir: /proc/lm: cannot make a file in /proc"),
    ("train-charlm", f"{CHARLM} --run-dir {{out}} --lr 0", "--lr: must be positive, got 0.0"),
    ("train-charlm", f"{CHARLM} --run-dir {{out}} --hidden 0", "--hidden: must be in [1, 8192], got 0"),
    (
        "train-charlm",
        f"{CHARLM} --run-dir {{out}} --time-budget -1",
        "--time-budget: must be a positive number of minutes",
    ),
    (
        "train-charlm",
        "--data {fx}/text.txt --direction forward --run-dir {out}",
        "give --epochs N or --time-budget MIN",
    ),
    ("train-charlm", f"{CHARLM} --run-dir {{out}} --device tpu", "--device: unknown device 'tpu'"),
    (
        "train-wordvec",
        "--data {fx}/text.txt --out {fx}/afile/v.txt",
        "--out: {fx}/afile/v.txt: cannot be made: {fx}/afile is a file",
    ),
    ("train-wordvec", "--data {fx}/text.txt --out /proc/v.txt", "--out: /proc/v.txt: cannot make a file in /proc"),
    ("train-wordvec", "--data {fx}/text.txt --out {fx}", "--out: {fx}: a folder, not a file"),
    ("train-wordvec", "--data {fx}/text.txt --out {out} --dim 0", "--dim: must be in [1, 8192], got 0"),
    (
        "train-wordvec",
        "--data {fx}/text.txt --out {out} --threads 0",
        f"--threads: must be in [1, {CORES}], the cores of this machine, got 0",
    ),
    ("train-wordvec", "--data {fx}/nope.txt --out {out}", "{fx}/nope.txt: no such file"),
    ("train-wordvec", "--data {fx}/nul/ptb.train.txt --out {out}", "{fx}/nul/ptb.train.txt: line 2: a NUL byte"),
    ("demo", "--run-dir {fx}/afile/demo", "--run-dir: {fx}/afile/demo: cannot be made: {fx}/afile is a file"),
    ("demo", "--run-dir /proc/demo", "--run-dir: /proc/demo: cannot make a file in /proc"),
    ("demo", "--run-dir {out} --threads 0", f"--threads: must be in [1, {CORES}], the cores of this machine, got 0"),
    ("demo", "--run-dir {out} --data {fx}/nope", "{fx}/nope/ptb: no such directory (--data, --lm, --corpus)"),
    # every number within limits stated in --help, checked before any work
    (
        "search-lm",
        f"{LM} --threads 100000",
        f"--threads: must be in [1, {CORES}], the cores of this machine, got 100000",
    ),
    ("search-lm", f"{LM} --seed 4294967296", "--seed: must be in [0, 4294967295], got 4294967296"),
    ("search-lm", f"{LM} --seed 18446744073709551617", "--seed: must be in [0, 4294967295]"),
    ("search-lm", f"{LM} --seed -1", "--seed: must be in [0, 4294967295], got -1"),
    ("search-lm", "--data {fx}/lm --emsize 100000 --nhid 100000", "must be in [1, 8192], got 100000"),
    ("search-lm", f"{LM} --nodes 10000", "--nodes: must be in [1, 32], got 10000"),
    ("search-lm", f"{LM} --batch-size 1000000000", "--batch-size: must be in [1, 65536], got 1000000000"),
    ("train-lm", f"{LM} --threads 3000", "--threads: must be in [1, "),
    ("train-lm", f"{LM} --seed 99999999999", "--seed: must be in [0, 4294967295]"),
    ("eval-lm", "{fx}/nope.pt --bptt 100000000", "--bptt: must be in [1, 65536]"),
    ("compare-words", "{fx}/nope {fx}/nope --data {fx}/lm --threads 100000", "--threads: must be in [1, "),
    ("train-tagger", f"{TAGGER} --hidden-size 1000000", "--hidden-size: must be in [1, 8192], got 1000000"),
    ("train-tagger", f"{TAGGER} --threads 100000", "--threads: must be in [1, "),
    ("train-tagger", f"{TAGGER} --seed 4294967296", "--seed: must be in [0, 4294967295]"),
    ("tag", f"{TAG} --threads 100000", "--threads: must be in [1, "),
    ("tag", f"{TAG} --batch-size 1000000000", "--batch-size: must be in [1, 65536]"),
    ("evaluate", f"{EVALUATE} --seed -5", "--seed: must be in [0, 4294967295], got -5"),
    ("train-charlm", f"{CHARLM} --run-dir {{out}} --hidden 1000000", "--hidden: must be in [1, 8192]"),
    ("train-wordvec", "--data {fx}/text.txt --out {out} --dim 100000000", "--dim: must be in [1, 8192], got 100000000"),
    ("train-wordvec", "--data {fx}/text.txt --out {out} --threads 100000", "--threads: must be in [1, "),
    ("sample-cells", "--n 1000000000 --out {out}", "--n: must be in [1, 1000000], got 1000000000"),
    ("sample-cells", "--n 2 --nodes 10000 --out {out}", "--nodes: must be in [1, 32], got 10000"),
    ("demo", "--run-dir {out} --threads 100000", "--threads: must be in [1, "),
    # every JSON read through one bounded reader: depth, integer length, size of a genotype
    ("train-lm", f"{LM} --cell {{fx}}/deep.json", "{fx}/deep.json: JSON nested more than 64 levels deep"),
    (
        "search-lm",
        f"{LM} --method ess --search-space inter --cell {{fx}}/bigint.json",
        "{fx}/bigint.json: an integer of 5000 digits (this toolkit reads at most 40)",
    ),
    (
        "train-tagger",
        f"{TAGGER} --cell {{fx}}/hugegeno.json --run-dir {{out}}",
        "{fx}/hugegeno.json: field 'nodes': 100000 nodes; a cell has at most 32",
    ),
    ("plot-cell", "{fx}/hugegeno.json --out {out}", "{fx}/hugegeno.json: field 'nodes': 100000 nodes"),
    (
        "plot-cell",
        "{fx}/wideno.json --out {out}",
        "field 'nodes[1]': node 2 has 9 inputs, more than the 8 distinct [op, predecessor] pairs",
    ),
    ("search-lm", f"{LM} --config {{fx}}/deep.json", "--config: {fx}/deep.json: JSON nested more than 64 levels deep"),
    ("train-lm", "--config {fx}/bigint.json", "--config: {fx}/bigint.json: an integer of 5000 digits"),
    ("train-lm", "--resume {fx}/deeprun", "{fx}/deeprun/config.json: JSON nested more than 64 levels deep"),
    ("plot-run", "{fx}/badlog --out {out}", "{fx}/badlog/log.jsonl: line 2: an integer of 5000 digits"),
    # on --resume a flag that would change the run is refused; configs are checked field by field
    (
        "search-lm",
        "--resume {fx}/searchrun --lr 5",
        "--lr: not with --resume (the run has 20.0): a resumed run keeps the settings it "
        "started with; to change them, start a new run with --config "
        "{fx}/searchrun/config.json --lr ...",
    ),
    ("search-lm", "--resume {fx}/searchrun --data {fx}/lm", "--data: not with --resume"),
    ("search-lm", "--resume {fx}/searchrun --method enas", "--method: not with --resume (the run has 'darts')"),
    ("search-lm", "--resume {fx}/searchrun --config {fx}/searchrun/config.json", "--config: not with --resume"),
    ("search-lm", "--resume {fx}/searchrun --run-dir {out}", "--run-dir: not with --resume"),
    ("train-lm", "--resume {fx}/trainrun --emsize 16", "--emsize: not with --resume"),
    ("train-lm", "--resume {fx}/trainrun --test-batch-size 4", "--test-batch-size: not with --resume (the run has 1)"),
    ("train-tagger", "--resume {fx}/tagrun --lr 0.5", "--lr: not with --resume (the run has 0.1)"),
    ("train-tagger", "--resume {fx}/tagrun --data {fx}/lm", "--data: not with --resume (the run has '{fx}/tagdata')"),
    (
        "search-lm",
        f"{LM} --config {{fx}}/unknownkey.json",
        "--config: {fx}/unknownkey.json: unknown setting 'lr_typo' (not a setting of bin/search-lm)",
    ),
    (
        "train-lm",
        f"{LM} --config {{fx}}/tagrun/config.json",
        "--config: {fx}/tagrun/config.json: the config of a bin/train-tagger run, not of a bin/train-lm run",
    ),
    (
        "train-tagger",
        "--config {fx}/searchrun2/config.json",
        "the config of a bin/search-lm run, not of a bin/train-tagger run",
    ),
    # a folder, FIFO or symbolic link loop where a file is expected says so
    ("eval-lm", "{fx}/fifo --file {fx}/text.txt", "{fx}/fifo: not a regular file (a FIFO, socket or device)"),
    ("eval-lm", "{fx}/loop.pt --file {fx}/text.txt", "{fx}/loop.pt: a symbolic link loop, not a file"),
    (
        "train-lm",
        "--train {fx}/fifo --valid {fx}/text.txt --test {fx}/text.txt --run-dir {out}",
        "{fx}/fifo: not a regular file (a FIFO, socket or device) (--train)",
    ),
    (
        "search-lm",
        "--train {fx}/lm --valid {fx}/text.txt --test {fx}/text.txt --run-dir {out}",
        "{fx}/lm: a folder, not a file (--train)",
    ),
    ("train-lm", f"{LM} --cell {{fx}}/loop.json", "{fx}/loop.json: a symbolic link loop, not a file"),
    ("plot-cell", "{fx}/dangling.json --out {out}", "{fx}/dangling.json: a symbolic link to nothing"),
    ("train-wordvec", "--data {fx}/fifo --out {out}", "{fx}/fifo: not a regular file"),
    ("train-wordvec", "--data {fx}/lm --out {out}", "{fx}/lm: a folder, not a file"),
    ("tag", "{fx}/fifo --model {fx}/nope.pt --out {out}", "{fx}/fifo: not a regular file"),
    ("tag", "{fx}/loop.pt --model {fx}/nope.pt --out {out}", "{fx}/loop.pt: a symbolic link loop, not a file"),
    (
        "train-tagger",
        "--config {fx}/lm --corpus conll03 --data {fx}/tagdata",
        "--config: {fx}/lm: a folder, not a file",
    ),
    ("compare-words", "{fx}/fifo {fx}/fifo --data {fx}/lm", "{fx}/fifo: not a"),
    (
        "train-lm",
        "--train {fx}/lm/ptb.train.txt --valid {fx}/lm/ptb.valid.txt --test {fx}/text.txt --emsize 8 "
        "--batch-size 4 --bptt 5 --test-batch-size 10 --run-dir {out}",
        "{fx}/text.txt: 7 tokens is shorter than one batch of 10 rows of 2 tokens; lower --test-batch-size",
    ),
    (
        "train-tagger",
        "--corpus conll03 --data {fx}/tabbed --embeddings glove:{fx}/vectors.txt --run-dir {out}",
        "{fx}/tabbed/eng.train: line 1: columns separated by tabs, but this corpus format separates them by spaces "
        "(read a tab-separated file with --corpus column)",
    ),
    ("train-lm", "--resume {fx}/editedrun", "{fx}/editedrun/config.json: setting 'lr': must be positive, got -1"),
    (
        "train-tagger",
        "--resume {fx}/editedtagrun",
        "{fx}/editedtagrun/config.json: setting 'hidden_size': must be in [1, 8192], got 0",
    ),
    (
        "train-tagger",
        f"{TAGGER} --tag-scheme iobes --run-dir {{out}}",
        "{fx}/tagdata/eng.train: line 5: I-ORG after O: not IOBES",
    ),
    ("evaluate", f"{EVALUATE} --tag-scheme iobes", "not IOBES"),
    ("search-lm", f"{LM} --method enas --controller-steps 0", "--controller-steps: must be at least 1, got 0"),
    # vectors are checked when read, file and line
    (
        "train-tagger",
        "--corpus conll03 --data {fx}/tagdata --embeddings glove:{fx}/nanvec.txt --run-dir {out}",
        "{fx}/nanvec.txt: line 2: a value that is not finite (nan)",
    ),
    (
        "train-tagger",
        "--corpus conll03 --data {fx}/tagdata --embeddings glove:{fx}/infvec.txt --run-dir {out}",
        "{fx}/infvec.txt: line 3: a value that is not finite (-inf)",
    ),
    (
        "train-tagger",
        "--corpus conll03 --data {fx}/tagdata --embeddings glove:{fx}/hugevec.txt --run-dir {out}",
        "{fx}/hugevec.txt: line 1: a value of magnitude above 10000 (1e300)",
    ),
]


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    """Small inputs, good and bad, made here: corpora, genotypes, run directories, a regular file."""
    root = tmp_path_factory.mktemp("inputs")
    lm = write_lm_corpus(root / "lm", train_lines=40, other_lines=10)
    for name, train in (("nul", b"a b c\nd \x00 e\n"), ("latin1", b"a b c\nd \xe9 e\n"), ("blank", b"\n \n")):
        (root / name).mkdir()
        for split in ("valid", "test"):
            (root / name / f"ptb.{split}.txt").write_bytes((lm / f"ptb.{split}.txt").read_bytes())
        (root / name / "ptb.train.txt").write_bytes(train)
    write_conll03(root / "tagdata")
    (root / "vectors.txt").write_text("a 0.1 0.2\n", encoding="utf-8")
    (root / "afile").write_text("a regular file\n", encoding="utf-8")
    (root / "text.txt").write_text("George Washington went to Washington .\n", encoding="utf-8")
    (root / "binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / "badjson.json").write_text("{nodes: 1}\n", encoding="utf-8")
    (root / "badgeno.json").write_text(
        json.dumps({"format": "nas-rnn-genotype", "version": 1, "nodes": [[["relu", 3]]], "concat": [1]}),
        encoding="utf-8",
    )
    deep = "[" * 100_000 + "]" * 100_000
    (root / "deep.json").write_text(deep, encoding="utf-8")
    (root / "bigint.json").write_text('{"seed": ' + "7" * 5000 + "}", encoding="utf-8")
    (root / "hugegeno.json").write_text(
        json.dumps({"format": "nas-rnn-genotype", "version": 1, "nodes": [[["tanh", 0]]] * 100_000, "concat": [1]}),
        encoding="utf-8",
    )
    (root / "wideno.json").write_text(
        json.dumps(
            {"format": "nas-rnn-genotype", "version": 1, "nodes": [[["tanh", 0]], [["tanh", 1]] * 9], "concat": [1, 2]}
        ),
        encoding="utf-8",
    )
    (root / "nanvec.txt").write_text("a 0.1 0.2\nb nan 0.2\n", encoding="utf-8")
    (root / "infvec.txt").write_text("a 0.1 0.2\nb 0.3 0.2\nc 0.1 -inf\n", encoding="utf-8")
    (root / "hugevec.txt").write_text("a 1e300 0.2\nb 0.3 0.2\n", encoding="utf-8")
    (root / "unknownkey.json").write_text(json.dumps({"method": "darts", "lr_typo": 3}), encoding="utf-8")
    (root / "tagrun").mkdir()
    (root / "tagrun" / "config.json").write_text(
        json.dumps(
            {
                "corpus": "conll03",
                "data": str(root / "tagdata"),
                "embeddings": f"glove:{root / 'vectors.txt'}",
                "lr": 0.1,
                "max_epochs": 2,
                "command": "bin/train-tagger --corpus conll03",
            }
        ),
        encoding="utf-8",
    )
    (root / "searchrun2").mkdir()
    (root / "searchrun2" / "config.json").write_text(
        json.dumps({"method": "darts", "command": "bin/search-lm --data x"}), encoding="utf-8"
    )
    (root / "tabbed").mkdir()
    for name in ("eng.train", "eng.testa", "eng.testb"):
        text = (root / "tagdata" / name).read_text(encoding="utf-8")
        (root / "tabbed" / name).write_text(text.replace(" ", "\t"), encoding="utf-8")
    for run, config in (
        ("editedrun", {"cell": "darts_v2", "test_batch_size": 1, "lr": -1}),
        ("editedtagrun", {"corpus": "conll03", "embeddings": "glove:x", "hidden_size": 0}),
    ):
        (root / run).mkdir()
        (root / run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    os.mkfifo(root / "fifo")
    (root / "loop.pt").symlink_to(root / "loop.pt")
    (root / "loop.json").symlink_to(root / "loop.json")
    (root / "dangling.json").symlink_to(root / "gone.json")
    (root / "deeprun").mkdir()
    (root / "deeprun" / "config.json").write_text(deep, encoding="utf-8")
    (root / "badlog").mkdir()
    (root / "badlog" / "config.json").write_text(json.dumps({"cell": "darts_v2", "emsize": 8}), encoding="utf-8")
    (root / "badlog" / "log.jsonl").write_text(
        '{"epoch": 1, "train_ppl": 9.0, "valid_ppl": 9.0}\n{"epoch": ' + "1" * 5000 + "}\n", encoding="utf-8"
    )
    for run, config in (
        ("searchrun", {"method": "darts", "train": str(lm / "ptb.train.txt")}),
        ("trainrun", {"cell": "darts_v2", "test_batch_size": 1}),
    ):
        (root / run).mkdir()
        (root / run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return root


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _args(args: str, fx: Path, out: Path) -> list[str]:
    return shlex.split(args.format(fx=fx, out=out))


def _assert_refused(code: int, stdout: str, stderr: str, expected: str) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr and stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert expected in lines[0], lines[0]


def assert_refused_leaving_nothing(main, fx: Path, tmp_path: Path, monkeypatch, args: str, expected: str) -> None:
    """`main` run in process on the case's arguments: one error line, exit 2, nothing written in the output
    location or the working directory, the fixtures unchanged (the matrices of this file and its successor)."""
    work = tmp_path / "work"  # the working directory, where default run directories would appear
    work.mkdir()
    monkeypatch.chdir(work)
    out = tmp_path / "out" / "result"
    before = _tree(fx)
    result = CliRunner().invoke(main, _args(args, fx, out))
    _assert_refused(result.exit_code, result.stdout, result.stderr, expected.format(fx=fx))
    assert not (tmp_path / "out").exists() and not any(work.iterdir())
    assert _tree(fx) == before


@pytest.mark.parametrize("command, args, expected", CASES)
def test_bad_input_is_one_error_line_exit_2_and_leaves_nothing(fx, tmp_path, monkeypatch, command, args, expected):
    assert_refused_leaving_nothing(COMMANDS[command], fx, tmp_path, monkeypatch, args, expected)


def test_the_matrix_covers_every_command():
    assert len(CASES) >= 60 and {getattr(case, "values", case)[0] for case in CASES} == set(COMMANDS)


@pytest.mark.parametrize(
    "command, args, expected",
    [
        ("search-lm", f"{LM} --lr nan", "--lr: must be a finite number, got nan"),
        ("train-lm", f"{LM} --run-dir {{fx}}/afile/run", "{fx}/afile is a file"),
        ("train-tagger", f"{TAGGER} --device tpu", "--device: unknown device 'tpu'"),
        ("tag", "{fx}/binary.txt --model {fx}/nope.pt --out {out}", "{fx}/binary.txt: line 3: a NUL byte"),
        ("sample-cells", "--n 1", "Missing option '--out'"),
    ],
)
def test_bad_input_in_a_real_process(fx, tmp_path, command, args, expected):
    """As a user runs it: bin/COMMAND, exit status and stderr as the shell sees them."""
    out = tmp_path / "out" / "result"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bin" / command), *_args(args, fx, out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    _assert_refused(proc.returncode, proc.stdout, proc.stderr, expected.format(fx=fx))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_tagger_whose_loss_goes_non_finite_stops_with_one_line_and_saves_no_final_model(
    tmp_path, restore_flair_logging
):
    """--lr 1e30: the loss becomes NaN within two epochs; the training stops there, and writes no final model."""
    write_conll03(tmp_path / "data", sizes=(12, 4, 4))
    (tmp_path / "vectors.txt").write_text("Anna 0.1 0.2\nParis 0.3 0.1\n", encoding="utf-8")
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
            "2",
            "--lr",
            "1e30",
            "--run-dir",
            str(tmp_path / "run"),
        ],
    )
    assert result.exit_code == 2 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.splitlines()[-1] == errors[0], result.stderr
    assert "the training diverged; " in errors[0] and "(a lower --lr or --clip avoids it)" in errors[0], errors[0]
    assert not (tmp_path / "run" / "final-model.pt").exists()  # no model of the diverged weights


def test_on_resume_a_larger_epoch_budget_is_applied_and_said_and_another_flag_changes_nothing(
    fx, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    tiny = [*_args(LM, fx, run), "--nodes", "2", "--max-batches-per-epoch", "2", "--eval-batches", "1", "--epochs", "1"]
    assert CliRunner().invoke(COMMANDS["search-lm"], [*tiny, "--run-dir", str(run)]).exit_code == 0
    before = _tree(run)
    refused = CliRunner().invoke(COMMANDS["search-lm"], ["--resume", str(run), "--epochs", "2", "--lr", "3"])
    _assert_refused(refused.exit_code, refused.stdout, refused.stderr, "--lr: not with --resume (the run has 20.0)")
    assert _tree(run) == before
    resumed = CliRunner().invoke(COMMANDS["search-lm"], ["--resume", str(run), "--epochs", "2", "--lr", "20"])
    assert resumed.exit_code == 0, resumed.stderr
    assert "--epochs 2: the run goes on to it (it had 1)" in resumed.stderr.splitlines()
    assert json.loads((run / "config.json").read_text(encoding="utf-8"))["epochs"] == 2


def test_a_failing_demo_leaves_only_the_logs_that_say_why_and_runs_again(fx, tmp_path, monkeypatch):
    """A step that fails (here search-lm on a corpus with a NUL byte) removes what the demo made but its logs."""
    monkeypatch.chdir(tmp_path)
    data, root = tmp_path / "data", tmp_path / "demo"
    (data / "ptb").mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (data / "ptb" / f"ptb.{split}.txt").write_bytes((fx / "nul" / f"ptb.{split}.txt").read_bytes())
    (data / "conll2000").mkdir()  # a good tagging corpus: the demo checks it before its first step
    for split in ("train", "test"):
        (data / "conll2000" / f"{split}.txt").write_text(
            "He PRP B-NP\nran VBD B-VP\n\nShe PRP B-NP\n", encoding="utf-8"
        )
    root.mkdir()
    (root / "search-lm.log").write_text("a failed demo's log\n", encoding="utf-8")  # run again where one failed
    result = CliRunner().invoke(
        COMMANDS["demo"], ["--run-dir", str(root), "--data", str(data), "--embeddings", f"glove:{fx / 'vectors.txt'}"]
    )
    assert result.exit_code == 2 and result.stderr.splitlines()[-1].startswith("error: step search-lm failed"), (
        result.stderr
    )
    assert "a NUL byte" in result.stderr.splitlines()[-1]
    assert sorted(p.name for p in root.iterdir()) == ["search-lm.log"]
