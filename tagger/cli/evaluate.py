"""`bin/evaluate`: score a saved tagger on a split of a corpus, with the report `bin/train-tagger` writes."""
from __future__ import annotations

import logging
from pathlib import Path

import click

from common.errors import InputError, cli_errors

from ..corpus_formats import FORMATS, SPLITS
from ..pooled_memory import DEFAULT_MAX_WORDS, bound_pooled_memory
from ..tag_schemes import SCHEMES, spans
from .runtime import flair_logs_to_stderr, offline, use_device


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--model", required=True, type=click.Path(), help="A bin/train-tagger run directory (its best-model.pt, else final-model.pt) or a model file.")
@click.option("--corpus", type=click.Choice([*FORMATS, "column"]), required=True, help="Corpus format, as for bin/train-tagger.")
@click.option("--data", type=click.Path(), required=True, help="Directory with the corpus files.")
@click.option("--split", type=click.Choice(SPLITS), default="test")
@click.option("--columns", help="column corpus: INDEX:NAME items [default: the run's, else 0:text,1:ner].")
@click.option("--tag-column", help="Named column holding the gold tags [default: the run's, else as bin/train-tagger].")
@click.option("--tag-scheme", type=click.Choice(SCHEMES), help="Tag scheme of the files [default: the run's, else as bin/train-tagger].")
@click.option("--seed", type=int, default=None, help="Seed of the dev split sampled from train when a corpus has none [default: the run's, else 1].")
@click.option("--out", type=click.Path(file_okay=False), help="Directory for metrics.json and SPLIT.conll [default: eval-CORPUS-SPLIT beside the model file].")
@click.option("--batch-size", type=int, default=64)
@click.option("--pooled-memory", type=int, default=DEFAULT_MAX_WORDS, help="Word memory of pooled Flair embeddings (see bin/tag; 0: no limit).")
@click.option("--device", default="cpu", help="cpu, cuda or cuda:N.")
@click.option("--threads", type=int, default=None, help="CPU threads for torch [default: torch's choice].")
@cli_errors
def main(model, corpus, data, split, columns, tag_column, tag_scheme, seed, out, batch_size, pooled_memory, device,
         threads) -> None:
    """Score a saved tagger on a corpus split: seqeval strict (IOB2) and lenient (conlleval), per type.

    Prints the per-type table and writes metrics.json (the report under the split's name, as in the
    run's own metrics.json) and SPLIT.conll (`token gold predicted`, conlleval's input). Corpus
    settings not given are taken from the run's config.json when the model sits in a run directory.

    \b
        bin/evaluate --model runs/ner --corpus conll03 --data ../shared/data/conll03 --split test
    """
    from common.files import atomic_write_json

    from ..corpora import load_corpus, parse_columns

    offline()
    if batch_size < 1 or pooled_memory < 0:
        raise InputError("--batch-size must be at least 1 and --pooled-memory at least 0")
    model_path = Path(model)
    run = _run_config(model_path, corpus)
    spec = columns or run.get("columns")
    gold = load_corpus(corpus, data, columns=parse_columns(spec) if spec else None,
                       tag_column=tag_column or run.get("tag_column"), scheme=tag_scheme or run.get("tag_scheme"),
                       seed=seed if seed is not None else run.get("seed", 1))
    part = getattr(gold, split)
    flair_logs_to_stderr(logging.WARNING)
    use_device(device, threads)
    import torch

    from .. import evaluation
    from ..corpora import to_sentences
    from ..model import load_tagger

    tagger = load_tagger(model_path, device)
    _check_types(tagger, part, model_path)
    bound_pooled_memory(tagger, pooled_memory)
    with torch.inference_mode():
        report, predicted = evaluation.evaluate(tagger, to_sentences(part, gold.tag_type), part.tags, batch_size)
    target = Path(out) if out else (model_path if model_path.is_dir() else model_path.parent) / f"eval-{corpus}-{split}"
    evaluation.write_conll(target / f"{split}.conll", part.tokens, part.tags, predicted)
    atomic_write_json(target / "metrics.json", {"model": str(model_path), "corpus": corpus, "data": str(data),
                                                "split": split, "sentences": len(part.tokens), split: report})
    click.echo(f"{split} of {data}: {len(part.tokens)} sentences; wrote {target / 'metrics.json'} and "
               f"{target / f'{split}.conll'}", err=True)
    click.echo(evaluation.table(report))


def _run_config(model: Path, corpus: str) -> dict:
    """Corpus settings of the run that trained the model (config.json beside it, or one level up for
    --runs), when that run used this corpus format."""
    from common.files import read_json

    folder = model if model.is_dir() else model.parent
    for candidate in (folder / "config.json", folder.parent / "config.json"):
        if candidate.is_file():
            config = read_json(candidate)
            return config if isinstance(config, dict) and config.get("corpus") == corpus else {}
    return {}


def _check_types(tagger, part, model: Path) -> None:
    """A model that predicts none of the split's entity types was trained on another task: say so."""
    predicted = {item.split("-", 1)[-1] for item in tagger.label_dictionary.get_items()
                 if "-" in item and item[0] in "BIES"}
    gold = {kind for tags in part.tags for _, _, kind in spans(tags)}
    if gold and predicted and not gold & predicted:
        raise InputError(f"{model}: the model predicts {', '.join(sorted(predicted))}, but the {part.name} split "
                         f"({part.path}) holds {', '.join(sorted(gold))}: a model for another task?")
