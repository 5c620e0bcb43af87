"""`bin/evaluate`: score a saved tagger on a split of a corpus, with the report `bin/train-tagger` writes."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import click

from nas.common.cli import (
    BATCH_SIZE,
    DEVICE,
    NON_NEGATIVE_COUNT,
    OUTPUT_FOLDER,
    SEED_VALUE,
    THREAD_COUNT,
    command,
    output_problem,
)
from nas.common.errors import InputError

from ..corpus_formats import FORMATS, SPLITS
from ..light_import import without_unused_libraries
from ..pooled_memory import DEFAULT_MAX_WORDS
from ..tag_schemes import SCHEMES, spans
from .runtime import flair_logs_to_stderr, offline, run_config, use_device, warn_if_unfinished


@command()
@click.option(
    "--model",
    required=True,
    type=click.Path(),
    help="A bin/train-tagger run directory (its best-model.pt, else final-model.pt) or a model file.",
)
@click.option(
    "--corpus",
    type=click.Choice([*FORMATS, "column"]),
    help="Corpus format, as for bin/train-tagger [default: the run's].",
)
@click.option(
    "--data",
    type=click.Path(),
    help="Directory with the corpus files [default: the run's, for the run's corpus format].",
)
@click.option("--split", type=click.Choice(SPLITS), default="test")
@click.option("--columns", help="column corpus: INDEX:NAME items [default: the run's, else 0:text,1:ner].")
@click.option("--tag-column", help="Named column holding the gold tags [default: the run's, else as bin/train-tagger].")
@click.option(
    "--tag-scheme",
    type=click.Choice(SCHEMES),
    help="Tag scheme of the files [default: the run's, else as bin/train-tagger].",
)
@click.option(
    "--seed",
    type=SEED_VALUE,
    default=None,
    help="Seed of the dev split sampled from train when a corpus has none [default: the run's, else 1].",
)
@click.option(
    "--out",
    type=OUTPUT_FOLDER,
    help="Directory for metrics.json and SPLIT.conll [default: eval-CORPUS-SPLIT beside the model file].",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "conlleval"]),
    default="table",
    help="The report printed: the per-type table (seqeval strict IOB2, gold support), or conlleval.pl's report "
    "(lenient, found counts per type).",
)
@click.option(
    "--batch-size",
    type=BATCH_SIZE,
    default=None,
    help="Sentences tagged at once [default: the run's eval batch size, else 64]; with pooled Flair embeddings the "
    "batches shape the memory, so the run's own gives its scores to the byte.",
)
@click.option(
    "--pooled-memory",
    type=NON_NEGATIVE_COUNT,
    default=DEFAULT_MAX_WORDS,
    help="Words pooled Flair embeddings may remember beyond the memory saved with the model (bin/tag; 0: no limit).",
)
@click.option("--device", type=DEVICE, default="cpu")
@click.option("--threads", type=THREAD_COUNT, default=None, help="CPU threads for torch [default: torch's choice].")
def main(
    model,
    corpus,
    data,
    split,
    columns,
    tag_column,
    tag_scheme,
    seed,
    out,
    fmt,
    batch_size,
    pooled_memory,
    device,
    threads,
) -> None:
    """Score a saved tagger on a corpus split: seqeval strict (IOB2) and lenient (conlleval), per type.

    Prints the per-type table (or conlleval's report) and writes metrics.json (the report under the
    split's name, as in the run's own metrics.json) and SPLIT.conll (`token gold predicted`,
    conlleval's input). Corpus settings not given (format, data, columns, tag column and scheme,
    seed) are taken from the run's config.json when the model sits in a run directory.

    \b
        bin/evaluate --model runs/ner --format conlleval
        bin/evaluate --model runs/ner --corpus conll03 --data data/conll03 --split dev
    """
    offline()
    model_path = Path(model)
    run = run_config(model_path, corpus)
    corpus, data = corpus or run.get("corpus"), data or run.get("data")
    target = _out_folder(model_path, corpus, data, split, out)
    without_unused_libraries(model_path, scoring=True)  # before flair's and seqeval's import (tagger.light_import)
    gold = _gold(corpus, data, run, columns, tag_column, tag_scheme, seed)
    part = getattr(gold, split)
    flair_logs_to_stderr(logging.WARNING)
    use_device(device, threads)
    from .. import evaluation
    from ..corpora import to_sentences
    from ..model import load_for_prediction

    tagger = load_for_prediction(model_path, device, pooled_memory)
    warn_if_unfinished(tagger, model)
    _check_types(tagger, part, model_path)
    report, predicted = evaluation.evaluate_saved(
        tagger, to_sentences(part, gold.tag_type), part.tags, batch_size or run.get("eval_batch_size") or 64
    )
    scores = {"model": str(model_path), "corpus": corpus, "data": str(data), "split": split}
    _write_both(target, split, part, predicted, {**scores, "sentences": len(part.tokens), split: report})
    click.echo(
        f"{split} of {data}: {len(part.tokens)} sentences; wrote {target / 'metrics.json'} and "
        f"{target / f'{split}.conll'}",
        err=True,
    )
    click.echo(evaluation.table(report) if fmt == "table" else evaluation.conlleval(part.tags, predicted))


def _out_folder(model: Path, corpus: str | None, data: str | None, split: str, out: str | None) -> Path:
    """Where the scores go: --out, or eval-CORPUS-SPLIT beside the model file (named after the corpus format, the
    run's when --corpus is not given), which must be free; --corpus and --data, given or the run's, checked first."""
    for flag, value in (("--corpus", corpus), ("--data", data)):
        if not value:
            raise InputError(
                f"{flag}: not given, and {model} has no run config.json (of this corpus format) to take it from"
            )
    target = Path(out) if out else (model if model.is_dir() else model.parent) / f"eval-{corpus}-{split}"
    problem = None if out else output_problem(target, "folder")
    if problem:
        raise InputError(f"{target}: {problem} (the default --out; give another)")
    return target


def _gold(corpus: str, data: str, run: dict, columns, tag_column, tag_scheme, seed):
    """The corpus with the gold tags, each setting not given taken from the run's config.json (`run`, {} when
    there is none); its notes said on stderr."""
    from ..corpora import load_corpus, parse_columns

    spec = columns if columns is not None else run.get("columns")  # an empty --columns is refused, not the run's
    gold = load_corpus(
        corpus,
        data,
        columns=parse_columns(spec) if spec is not None else None,
        tag_column=tag_column or run.get("tag_column"),
        scheme=tag_scheme or run.get("tag_scheme"),
        seed=seed if seed is not None else run.get("seed", 1),
    )
    for note in gold.notes:
        click.echo(note, err=True)
    return gold


def _write_both(target: Path, split: str, part, predicted: list, metrics: dict) -> None:
    """SPLIT.conll and metrics.json in `target`: both files or neither (a folder made for them goes again)."""
    from nas.common.files import atomic_write_json

    from ..evaluation import write_conll

    made = next((p for p in reversed([target, *target.parents]) if not p.exists()), None)
    try:
        write_conll(target / f"{split}.conll", part.tokens, part.tags, predicted)
        atomic_write_json(target / "metrics.json", metrics)
    except BaseException:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise


def _check_types(tagger, part, model: Path) -> None:
    """A model that predicts none of the split's entity types was trained on another task: say so."""
    predicted = {
        item.split("-", 1)[-1] for item in tagger.label_dictionary.get_items() if "-" in item and item[0] in "BIES"
    }
    gold = {kind for tags in part.tags for _, _, kind in spans(tags)}
    if gold and predicted and not gold & predicted:
        raise InputError(
            f"{model}: the model predicts {', '.join(sorted(predicted))}, but the {part.name} split "
            f"({part.path}) holds {', '.join(sorted(gold))}: a model for another task?"
        )


if __name__ == "__main__":
    main()
