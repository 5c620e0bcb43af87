"""`bin/export`: write a saved tagger as one model file that flair's own API loads."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from nas.common.cli import OUTPUT_FILE, command
from nas.common.errors import InputError

from .runtime import flair_logs_to_stderr, offline


@command()
@click.argument("model", type=click.Path())
@click.option("--out", required=True, type=OUTPUT_FILE, help="The model file to write.")
@click.option(
    "--rebuild-memory",
    is_flag=True,
    help="Fill the pooled-Flair word memory again from the training and dev splits of the run that trained MODEL (for "
    "a model saved without it).",
)
@click.option(
    "--data",
    type=click.Path(),
    help="With --rebuild-memory: the run's corpus directory, where it has moved [default: the run's].",
)
def main(model, out, rebuild_memory, data) -> None:
    """Write the tagger of MODEL (a bin/train-tagger run directory or a model file, also one saved by
    an earlier version of this toolkit) as one flair model file, after loading it safely.

    Load it with flair's own loaders after `import tagger`, which makes them read model files
    without running pickled code (plain flair runs whatever a model file's pickle names: give it
    only files you trust); a tagger on a searched cell needs the import anyway. The file says
    what it needs under "requires" (flair's version; for a cell, this toolkit's and the genotype),
    and a model card in the Hugging Face shape is written beside it (OUT with suffix .md) from the
    run directory's config.json and metrics.json:

    \b
        bin/export runs/chunk-lstm --out chunker.pt
        python -c 'import tagger; from flair.models import SequenceTagger; SequenceTagger.load("chunker.pt")'
        python -c 'import tagger; from flair.models import SequenceTagger; SequenceTagger.load("ner-darts.pt")'

    The word memory of pooled Flair embeddings is saved with the model. A model saved without it
    (by flair, or by this toolkit before it saved the memory) tags from an empty memory and scores
    far below its reported figures; --rebuild-memory pools it again over the run's training and dev
    sentences, as a training epoch and its dev evaluation fill it:

    \b
        bin/export runs/ner --rebuild-memory --out ner-with-memory.pt
    """
    offline()
    target = Path(out)  # OUTPUT_FILE refused a folder while the flags were parsed
    corpus = _training_corpus(Path(model), data) if rebuild_memory else None
    if data and not rebuild_memory:
        raise InputError("--data is read only with --rebuild-memory")
    flair_logs_to_stderr(logging.WARNING)
    from .. import model_card
    from ..model import load_tagger

    card = model_card.export_path(target)
    tagger = load_tagger(model, "cpu")
    if corpus is not None:
        _rebuild(tagger, corpus)
    tagger.save(target)
    from ..pooled_memory import pooled_embeddings

    how = (
        "its searched cell needs this toolkit"
        if tagger.genotype is not None
        else "which restores its pooled-Flair memory"
        if pooled_embeddings(tagger)
        else "which reads it without running pickled code"
    )
    how = f"flair.models.SequenceTagger.load after `import tagger` ({how})"
    click.echo(f"wrote {target}: load it with {how}", err=True)
    click.echo(
        f"wrote its model card {card}"
        if model_card.write_for_export(Path(model), target, card)
        else f"warning: no model card: {model} has no run directory of one seed beside it (config.json, metrics.json)",
        err=True,
    )


def _training_corpus(model: Path, data: str | None):
    """The corpus of the run that trained MODEL (its config.json), checked before any work."""
    from ..corpora import load_corpus, parse_columns
    from .runtime import run_config

    run = run_config(model)
    if not run.get("corpus"):
        raise InputError(f"--rebuild-memory: {model} has no run config.json beside it to read its training corpus from")
    columns = run.get("columns")
    return load_corpus(
        run["corpus"],
        data or run["data"],
        columns=parse_columns(columns) if columns else None,
        tag_column=run.get("tag_column"),
        scheme=run.get("tag_scheme"),
        seed=run.get("seed", 1),
    )


def _rebuild(tagger, corpus) -> None:
    from nas.cli.terminal import StatusLine

    from ..corpora import to_sentences
    from ..pooled_memory import pool_memory, pooled_embeddings

    if not pooled_embeddings(tagger):
        raise InputError("--rebuild-memory: the model has no pooled Flair embeddings")
    sentences = to_sentences(corpus.train, corpus.tag_type)
    if corpus.dev is not None:
        sentences += to_sentences(corpus.dev, corpus.tag_type)
    status = StatusLine()

    def shown(items: list):  # the sentences as they are pooled: minutes with Flair embeddings on a large corpus
        for k, sentence in enumerate(items, start=1):
            yield sentence
            if status.due():
                status.show(f"pooling: {k:,} of {len(items):,} sentences, {status.elapsed():.0f} s")

    words = max(len(vectors) for vectors, _ in pool_memory(tagger, shown(sentences)))
    status.clear()
    click.echo(
        f"rebuilt the pooled-Flair memory from {len(sentences)} sentences of {corpus.train.path.parent}: {words} words",
        err=True,
    )


if __name__ == "__main__":
    main()
