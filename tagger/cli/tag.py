"""`bin/tag`: tag raw text, tokenised text or a column file with a saved tagger, streaming."""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import click

from nas.common.cli import BATCH_SIZE, DEVICE, NON_NEGATIVE_COUNT, OUTPUT_FILE_OR_FOLDER, THREAD_COUNT, command
from nas.common.errors import InputError
from nas.common.memory import long_lived_frozen

from ..light_import import without_unused_libraries
from ..output_formats import EXTENSIONS, FORMATS, Writer
from ..pooled_memory import DEFAULT_MAX_WORDS
from ..prediction import tag
from ..text_input import ENCODING_ERRORS, check_columns, check_file, check_text, open_text, read_chunks, sentences
from .runtime import flair_logs_to_stderr, offline, use_device, warn_if_unfinished

STDIN = "-"


@command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option(
    "--model",
    required=True,
    type=click.Path(),
    help="A bin/train-tagger run directory (its best-model.pt, else final-model.pt) or a model file.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="conll",
    help="conll: token tag lines; jsonl: text, tokens and spans with character offsets; inline: [PER George Washington "
    "] went ...; html: a displaCy-like page.",
)
@click.option(
    "--out",
    type=OUTPUT_FILE_OR_FOLDER,
    help="Output file, or directory for one file per input (NAME.conll, .jsonl, .txt, .html); a directory when it "
    "exists, ends in /, or several INPUTs are given. [default: stdout]",
)
@click.option(
    "--tokenized", is_flag=True, help="One sentence per line, tokens separated by spaces (no splitting or tokenising)."
)
@click.option(
    "--split-sentences",
    is_flag=True,
    help="With --tokenized: several sentences to a line (WikiText-style paragraphs); a sentence also ends after a "
    "token '.', '!' or '?'.",
)
@click.option(
    "--columns",
    is_flag=True,
    help="A CoNLL-style column file: tag its first column (blank line between sentences, -DOCSTART- skipped).",
)
@click.option(
    "--no-line-breaks",
    is_flag=True,
    help="Raw text wrapped at a fixed width: a line break is a space, and only sentence-final punctuation or a blank "
    "line ends a sentence (segtok's own splitting).",
)
@click.option(
    "--batch-size", type=BATCH_SIZE, default=32, help="Sentences (pieces of at most 512 tokens) tagged at once."
)
@click.option(
    "--encoding-errors",
    type=click.Choice(ENCODING_ERRORS),
    default="strict",
    help="strict refuses input that is not UTF-8; replace reads such bytes as U+FFFD.",
)
@click.option(
    "--pooled-memory",
    type=NON_NEGATIVE_COUNT,
    default=DEFAULT_MAX_WORDS,
    help="Pooled Flair embeddings keep the memory saved with the model and the pooled vectors of at most this many "
    "words more, the most recently seen (0: no limit, flair's own unbounded memory).",
)
@click.option("--device", type=DEVICE, default="cpu")
@click.option("--threads", type=THREAD_COUNT, default=None, help="CPU threads for torch [default: torch's choice].")
def main(
    inputs,
    model,
    fmt,
    out,
    tokenized,
    split_sentences,
    columns,
    no_line_breaks,
    batch_size,
    encoding_errors,
    pooled_memory,
    device,
    threads,
) -> None:
    """Tag INPUT files (- for stdin) with a saved tagger and write them as they are read.

    Raw text is split into sentences and tokens by segtok (flair's splitter), and a line break ends
    a sentence too (--no-line-breaks for text wrapped at a fixed width); output order is input
    order; a progress bar with sentences/s goes to stderr (when it is a terminal), the output alone
    to stdout or --out. Every input is checked (binary data, UTF-8) before anything is written, and
    files are written under a temporary name and renamed when complete.

    \b
        bin/tag --model runs/ner news.txt --format jsonl > news.jsonl
        bin/tag --model runs/ner/best-model.pt a.txt b.txt --format html --out tagged/
        bin/tag --model runs/chunk --columns test.txt --out test.tagged.conll
    """
    offline()
    layout = _layout(inputs, tokenized, split_sentences, columns, no_line_breaks)
    with ExitStack() as stack:
        sources = _sources(stack, inputs, columns, encoding_errors)
        plan = _outputs(list(inputs), out, fmt)
        without_unused_libraries(model)  # before flair's import (tagger.light_import)
        flair_logs_to_stderr(logging.WARNING)
        use_device(device, threads)
        from ..model import load_for_prediction

        tagger = load_for_prediction(model, device, pooled_memory)
        warn_if_unfinished(tagger, model)
        stack.enter_context(
            long_lived_frozen(full_collection=False)
        )  # the loaded model out of the collector's way (nas.common.memory)
        for destination, names in plan:
            _write(
                tagger, [(name, sources[name]) for name in names], destination, fmt, layout, batch_size, encoding_errors
            )


def _layout(
    inputs: tuple[str, ...], tokenized: bool, split_sentences: bool, columns: bool, no_line_breaks: bool
) -> str:
    """What the inputs hold, from the flags, which are checked together: columns, tokenized (one sentence a line, or
    split into sentences), raw text wrapped at a fixed width, or raw text."""
    if tokenized and columns:
        raise InputError("--tokenized and --columns exclude each other")
    if list(inputs).count(STDIN) > 1:
        raise InputError("- (stdin) can be read only once")
    if no_line_breaks and (tokenized or columns):
        raise InputError("--no-line-breaks is for raw text, not --tokenized or --columns")
    if split_sentences and not tokenized:
        raise InputError("--split-sentences splits --tokenized input; raw text is split into sentences anyway")
    return (
        "columns"
        if columns
        else ("tokenized-sentences" if split_sentences else "tokenized")
        if tokenized
        else "wrapped"
        if no_line_breaks
        else "raw"
    )


def _sources(stack: ExitStack, inputs: tuple[str, ...], columns: bool, encoding_errors: str) -> dict[str, Path]:
    """Each input name's file, checked before anything is written: stdin spooled to a file (removed with `stack`)."""
    sources = {}
    for name in inputs:
        if name == STDIN:
            spool = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tag-stdin-"))) / "stdin"
            _spool_stdin(spool, encoding_errors)
            sources[name] = spool
        else:
            check_file(Path(name), encoding_errors)
            sources[name] = Path(name)
    if columns:
        for name, path in sources.items():
            check_columns(path, "stdin" if name == STDIN else name, encoding_errors)
    return sources


def _spool_stdin(path: Path, errors: str) -> None:
    """Copy stdin to a file while checking it, so it is read like any input and checked before output."""
    if sys.stdin is None:  # started with standard input closed (<&-)
        raise InputError("- (stdin): standard input is closed: give the input as a file, or send it in (< FILE)")
    stream = sys.stdin.buffer
    with open(path, "wb") as spool:

        def copied():
            for chunk in read_chunks(stream):
                spool.write(chunk)
                yield chunk

        check_text(copied(), "stdin", errors)


def _outputs(inputs: list[str], out: str | None, fmt: str) -> list[tuple[Path | None, list[str]]]:
    """(destination, inputs written there) pairs: stdout (None) or one file for everything, or one file per input."""
    if out is None:
        if sys.stdout is None:  # started with standard output closed (>&-): Python has none to write to
            raise InputError("standard output is closed: give --out FILE, or send it to a file (> FILE)")
        return [(None, inputs)]
    target = Path(out)
    as_dir = target.is_dir() or out.endswith(("/", os.sep)) or len(inputs) > 1
    if not as_dir:
        _not_an_input(target, inputs)
        return [(target, inputs)]
    if target.exists() and not target.is_dir():
        raise InputError(f"--out {out}: a file, but one output file per input needs a directory")
    plan, taken = [], {}
    for name in inputs:
        destination = target / ((Path(name).stem if name != STDIN else "stdin") + EXTENSIONS[fmt])
        if destination in taken:
            raise InputError(f"--out {out}: {name} and {taken[destination]} would both be written to {destination}")
        _not_an_input(destination, inputs)
        taken[destination] = name
        plan.append((destination, [name]))
    return plan


def _not_an_input(destination: Path, inputs: list[str]) -> None:
    for name in inputs:
        if name != STDIN and destination.exists() and destination.resolve() == Path(name).resolve():
            raise InputError(f"{destination}: is also an input; choose another --out")


def _write(
    tagger,
    inputs: list[tuple[str, Path]],
    destination: Path | None,
    fmt: str,
    layout: str,
    batch_size: int,
    errors: str,
) -> None:
    from nas.common.files import atomic_open

    try:
        with ExitStack() as stack:
            if destination is None:
                out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="")
                stack.callback(out.detach)
                stack.callback(out.flush)
            else:
                out = stack.enter_context(atomic_open(destination))
            title = ", ".join("stdin" if name == STDIN else Path(name).name for name, _ in inputs)
            writer = Writer(fmt, out, title=title)
            for name, path in inputs:
                _tag_one(tagger, name, path, writer, layout, batch_size, errors)
            writer.close()
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    if destination is not None:
        click.echo(f"wrote {destination}", err=True)


def _tag_one(tagger, name: str, path: Path, writer: Writer, layout: str, batch_size: int, errors: str) -> None:
    from tqdm import tqdm

    name = "stdin" if name == STDIN else name
    count = entities = 0
    with (
        open_text(path, errors) as handle,
        tqdm(desc=name, unit=" sentences", file=sys.stderr, disable=None, mininterval=0.5) as bar,
    ):
        for sentence, found in tag(tagger, sentences(handle, layout), batch_size):
            writer.write(sentence, found)
            count, entities = count + 1, entities + len(found)
            bar.update(1)
    click.echo(f"{name}: {count} sentences, {entities} entities", err=True)


if __name__ == "__main__":
    main()
