"""`bin/demo`: the whole pipeline in one command, on the embedded default data or on real data.

search-lm (tiny) → train-lm (short) → train-tagger with the found cell → tag raw text. Each step
is the real command a user would type, printed before it runs, with its output in the demo's
run directory; the demo only chooses small sizes and chains the files.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import click

from nas.common.cli import RUN_FOLDER, SEED_VALUE, THREAD_COUNT, command
from nas.common.errors import InputError
from nas.common.files import atomic_write_text
from nas.common.subprocesses import IMPORT_ROOT, last_error, run_module

FULL = {
    "data": {},
    "wordvec_epochs": "10",
    "emsize": "48",
    "search_batches": "25",
    "lm_batches": "60",
    "tagger_hidden": "64",
    "tagger_epochs": "4",
}
# --quick: the tagger needs word vectors from the full LM text and ten short epochs to tag anything
# (fewer, or vectors from fewer lines, leave it tagging everything O); the rest is as small as runs.
QUICK = {
    "data": {"train": 300, "dev": 40, "test": 40, "raw_paragraphs": 3},
    "wordvec_epochs": "10",
    "emsize": "16",
    "search_batches": "3",
    "lm_batches": "4",
    "tagger_hidden": "16",
    "tagger_epochs": "10",
}


STEPS = {
    "train-wordvec": "tagger.cli.train_wordvec",
    "search-lm": "nas.cli.search_lm",
    "train-lm": "nas.cli.train_lm",
    "train-tagger": "tagger.cli.train_tagger",
    "tag": "tagger.cli.tag",
}


def _run(name: str, args: list[str], log: Path) -> None:
    """Run the command NAME (its module, so an installed toolkit runs too), echoing it as a user would
    type it: `bin/NAME` in a checkout, the console script `nas-NAME` once installed. Its stdout and
    stderr go to LOG, and its latest line is shown while it runs."""
    command = f"bin/{name}" if (IMPORT_ROOT / "bin" / name).is_file() else f"nas-{name}"
    click.echo(f"$ {' '.join(shlex.quote(a) for a in [command, *args])}", err=True)
    click.echo(f"  (output in {log})", err=True)
    started = time.time()
    progress = _Progress(sys.stderr.isatty())
    code = run_module(STEPS[name], args, log, on_line=progress.show)
    progress.clear()
    if code != 0:
        raise InputError(f"step {name} failed (exit {code}): {last_error(log)} — full log in {log}")
    click.echo(f"  done in {time.time() - started:.0f} s", err=True)


class _Progress:
    """A step's latest output line on stderr: on a terminal one line rewritten in place; otherwise (CI,
    a captured run) a new line at most every EVERY seconds, so that such output stays short."""

    EVERY = 10.0

    def __init__(self, tty: bool) -> None:
        self.tty, self.shown, self.last = tty, False, time.time()

    def show(self, line: str) -> None:
        if self.tty:
            width = shutil.get_terminal_size().columns - 3
            sys.stderr.write(f"\r\033[K  {line[:width]}")
            sys.stderr.flush()
            self.shown = True
        elif time.time() - self.last >= self.EVERY:
            click.echo(f"  {line[:200]}", err=True)
            self.last = time.time()

    def clear(self) -> None:
        """Erase the rewritten line before the next message."""
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


@command()
@click.option("--run-dir", type=RUN_FOLDER, help="Demo directory [default: runs/demo-<time>].")
@click.option(
    "--data",
    type=click.Path(file_okay=False),
    help="Real data instead of the embedded default: a "
    "directory laid out like data/ in docs/data.md (an LM corpus folder and a tagging corpus folder).",
)
@click.option("--lm", "lm_name", default="ptb", help="With --data: the LM corpus folder inside DATA.")
@click.option(
    "--corpus",
    default="conll2000",
    type=click.Choice(["conll03", "wnut17", "conll2000"]),
    help="With --data: the tagging corpus (its folder inside DATA has the same name).",
)
@click.option(
    "--embeddings",
    default=None,
    help="Tagger embeddings [default: vectors trained by bin/train-wordvec "
    "on the LM text for the default data; glove:glove-6b-50d with --data].",
)
@click.option("--seed", type=SEED_VALUE, default=1)
@click.option(
    "--threads", type=THREAD_COUNT, default=1, help="torch threads per step (1 is fastest for these tiny models)."
)
@click.option(
    "--quick",
    is_flag=True,
    help="Smallest sizes (seconds per step) that still tag some names: checks the chain, learns little.",
)
def main(run_dir, data, lm_name, corpus, embeddings, seed, threads, quick) -> None:
    """Search a cell, retrain it, train a tagger with it, and tag raw text, printing each command
    before it runs it (its time on one machine, and what load does to it: docs/demo.md).

    \b
        bin/demo                # the embedded default data (generated from --seed)
        bin/demo --data data    # PTB and CoNLL-2000 at the same tiny sizes
    """
    from nas.common.runs import default_run_dir

    os.environ["OMP_NUM_THREADS"] = str(threads)
    root = Path(run_dir or default_run_dir("demo"))
    if (root / "summary.json").exists():
        raise InputError(f"{root}: holds a finished demo already; choose another --run-dir")
    ctx = click.get_current_context()
    for name, flag in (("lm_name", "--lm"), ("corpus", "--corpus")):
        if data is None and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            raise InputError(f"{flag}: only with --data (it names a folder inside DATA); the default data has its own")
    for folder in [] if data is None else [Path(data) / lm_name, Path(data) / corpus]:
        if not folder.is_dir():
            raise InputError(f"{folder}: no such directory (--data, --lm, --corpus)")
    _check_late_inputs(data, corpus, embeddings)
    made = not root.exists() or all(entry.suffix == ".log" for entry in root.iterdir())  # new, or a failed demo's
    root.mkdir(parents=True, exist_ok=True)
    try:
        _demo(root, data, lm_name, corpus, embeddings, seed, threads, quick)
    except BaseException:
        if made:  # a demo that failed: keep the steps' logs, which say why, and nothing half-made beside them
            for entry in root.iterdir():
                if entry.suffix != ".log":
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        raise


def _check_late_inputs(data: str | None, corpus: str, embeddings: str | None) -> None:
    """What the third step (bin/train-tagger) reads, checked before the first: a bad tagging corpus or
    --embeddings file would otherwise fail after the search and the retraining."""
    from tagger.corpora import load_corpus
    from tagger.embeddings import check_files

    if embeddings is not None:
        check_files(embeddings)
    if data is not None:
        load_corpus(corpus, Path(data) / corpus)


def _demo(
    root: Path,
    data: str | None,
    lm_name: str,
    corpus: str,
    embeddings: str | None,
    seed: int,
    threads: int,
    quick: bool,
) -> None:
    """The four steps into `root`, then the summary."""
    started = time.time()
    size = QUICK if quick else FULL
    if data is None:
        lm_dir, tag_dir, tag_corpus, raw = _generate(root, seed, size)
        if embeddings is None:
            embeddings = _train_word_vectors(root, lm_dir, size, seed)
    else:
        lm_dir, tag_dir, tag_corpus = Path(data) / lm_name, Path(data) / corpus, corpus
        raw = root / "raw.txt"
        atomic_write_text(raw, _raw_from_lm_test(lm_dir))
        embeddings = embeddings or "glove:glove-6b-50d"
    cell = root / "cell.json"
    _search(root, lm_dir, cell, size, seed)
    _retrain(root, lm_dir, cell, size, seed)
    _train_tagger(root, cell, tag_corpus, tag_dir, embeddings, size, seed, threads)
    tagged = root / "tagged.txt"
    _run(
        "tag", ["--model", str(root / "tagger"), str(raw), "--format", "inline", "--out", str(tagged)], root / "tag.log"
    )
    _summarise(root, cell, tagged, started)


def _generate(root: Path, seed: int, size: dict) -> tuple[Path, Path, str, Path]:
    """The embedded default data, generated from `seed` into root/data: the LM text folder, the tagging corpus
    folder and format, and the raw text to tag."""
    from tagger.synthetic import generate

    click.echo(f"generating the default data (seed {seed}) in {root / 'data'}", err=True)
    generated = generate(root / "data", seed=seed, **size["data"])
    return generated / "lm", generated / "conll03", "conll03", generated / "raw.txt"


def _train_word_vectors(root: Path, lm_dir: Path, size: dict, seed: int) -> str:
    """Step 0 on the default data: word vectors from the LM text (bin/train-wordvec); their --embeddings spec."""
    _run(
        "train-wordvec",
        [
            "--data",
            str(lm_dir / "train.txt"),
            "--out",
            str(root / "vectors.txt"),
            "--dim",
            "50",
            "--epochs",
            size["wordvec_epochs"],
            "--seed",
            str(seed),
        ],
        root / "train-wordvec.log",
    )
    return f"glove:{root / 'vectors.txt'}"


def _search(root: Path, lm_dir: Path, cell: Path, size: dict, seed: int) -> None:
    """Step 1: a tiny DARTS search on the LM text (bin/search-lm), its cell written to `cell`."""
    _run(
        "search-lm",
        [
            "--data",
            str(lm_dir),
            "--method",
            "darts",
            "--epochs",
            "2",
            "--nodes",
            "4",
            "--emsize",
            size["emsize"],
            "--nhid",
            size["emsize"],
            "--batch-size",
            "16",
            "--bptt",
            "20",
            "--lr",
            "10",
            "--max-batches-per-epoch",
            size["search_batches"],
            "--eval-batches",
            "20",
            "--seed",
            str(seed),
            "--run-dir",
            str(root / "search"),
            "--out",
            str(cell),
        ],
        root / "search-lm.log",
    )


def _retrain(root: Path, lm_dir: Path, cell: Path, size: dict, seed: int) -> None:
    """Step 2: the found cell's language model retrained, short (bin/train-lm)."""
    _run(
        "train-lm",
        [
            "--cell",
            str(cell),
            "--data",
            str(lm_dir),
            "--run-dir",
            str(root / "lm"),
            "--emsize",
            size["emsize"],
            "--batch-size",
            "16",
            "--epochs",
            "3",
            "--max-batches-per-epoch",
            size["lm_batches"],
            "--eval-batches",
            "40",
            "--test-batch-size",
            "10",
            "--lr",
            "10",
            "--seed",
            str(seed),
        ],
        root / "train-lm.log",
    )


def _train_tagger(
    root: Path, cell: Path, corpus: str, data: Path, embeddings: str, size: dict, seed: int, threads: int
) -> None:
    """Step 3: a tagger with the found cell (bin/train-tagger)."""
    _run(
        "train-tagger",
        [
            "--cell",
            str(cell),
            "--corpus",
            corpus,
            "--data",
            str(data),
            "--embeddings",
            embeddings,
            "--hidden-size",
            size["tagger_hidden"],
            "--max-epochs",
            size["tagger_epochs"],
            "--train-scheme",
            "iob2",
            "--threads",
            str(threads),
            "--seed",
            str(seed),
            "--run-dir",
            str(root / "tagger"),
        ],
        root / "train-tagger.log",
    )


def _summarise(root: Path, cell: Path, tagged: Path, started: float) -> None:
    """summary.json and the lines on stdout: the cell, the LM's perplexities, the tagger's F1, tagged examples."""
    genotype = json.loads(cell.read_text(encoding="utf-8"))
    lm = json.loads((root / "lm" / "metrics.json").read_text(encoding="utf-8"))
    tagger = json.loads((root / "tagger" / "metrics.json").read_text(encoding="utf-8"))
    sample = [line for line in tagged.read_text(encoding="utf-8").splitlines() if "[" in line][:5]
    summary = {
        "genotype": genotype["nodes"],
        "search_valid_ppl": genotype["provenance"]["search_valid_ppl"],
        "retrain_valid_ppl": lm["best_valid_ppl"],
        "retrain_test_ppl": lm["test_ppl"],
        "tagger_test_f1": tagger["test"]["f1"],
        "tagged_examples": sample,
        "seconds": round(time.time() - started, 1),
        "directory": str(root),
    }
    atomic_write_text(root / "summary.json", json.dumps(summary, indent=2) + "\n")
    click.echo(f"\nfound cell:        {genotype['nodes']}")
    click.echo(f"search valid ppl:  {summary['search_valid_ppl']:.1f}")
    click.echo(
        f"retrained LM:      valid ppl {summary['retrain_valid_ppl']:.1f}, test ppl {summary['retrain_test_ppl']:.1f}"
    )
    click.echo(f"tagger test F1:    {100 * summary['tagger_test_f1']:.2f} (seqeval strict, IOB2)")
    click.echo("tagged raw text:")
    for line in sample:
        click.echo(f"  {line}")
    click.echo(f"\n{summary['seconds']:.0f} s in all; everything is in {root}")


def _raw_from_lm_test(lm_dir: Path) -> str:
    """A few sentences of the LM test split as raw text to tag (real data has no raw file of its own)."""
    from nas.common.splits import find_splits

    lines = find_splits(lm_dir)["test"].read_text(encoding="utf-8").splitlines()
    return "\n".join(line.strip() for line in lines[:20] if line.strip()) + "\n"


if __name__ == "__main__":
    main()
