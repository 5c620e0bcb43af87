"""`bin/train-tagger`: train a BiRNN-CRF tagger whose recurrent layer is a searched cell (or an LSTM)."""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import fields
from pathlib import Path

import click

from common.cli import DEVICE, OUTPUT_FOLDER, command, flag_types
from common.errors import InputError

from ..config import TaggerConfig
from ..corpus_formats import FORMATS
from ..embeddings import POOLINGS, build_embeddings
from ..tag_schemes import SCHEMES
from .runtime import flair_logs_to_stderr, offline, use_device

D = TaggerConfig()
T = flag_types(TaggerConfig.RANGES)


@command()
@click.option("--cell", default=D.cell, help="Genotype JSON file, a shipped cell name (darts_v2, ...), or lstm for flair's BiLSTM-CRF.")
@click.option("--corpus", type=click.Choice([*FORMATS, "column"]), required=True, help="Corpus format; column: any column file, see --columns.")
@click.option("--data", type=click.Path(), required=True, help="Directory with the corpus files (eng.train/testa/testb, wnut17train.conll/emerging.dev.conll/emerging.test.annotated, train.txt/test.txt, or *train*/*dev*/*test* for column).")
@click.option("--columns", help="column corpus: INDEX:NAME items, e.g. 0:text,3:ner [default: 0:text,1:ner].")
@click.option("--tag-column", help="Which named column holds the tags to learn [default: ner; chunk for conll2000; the only tag column for column].")
@click.option("--tag-scheme", type=click.Choice(SCHEMES), help="Tag scheme of the files [default: iob1 for conll03, else iob2].")
@click.option("--train-scheme", type=click.Choice(["bioes", "iob2"]), default=D.train_scheme, help="Tags the CRF learns (evaluation is always on IOB2 spans).")
@click.option("--embeddings", default=D.embeddings, help="Comma-separated glove:PATH_OR_NAME, flair:FWD.pt:BWD.pt, pooled-flair:FWD.pt:BWD.pt, transformer:DIR; a character LM may be a shipped name (flair:wt2-forward:wt2-backward).")
@click.option("--pooling", type=click.Choice(POOLINGS), default=D.pooling, help="Pooling of pooled-flair embeddings.")
@click.option("--hidden-size", type=T["hidden_size"], default=D.hidden_size, help="Hidden units per direction.")
@click.option("--locked-dropout", type=T["locked_dropout"], default=D.locked_dropout, help="Locked (variational) dropout on the RNN input and output.")
@click.option("--word-dropout", type=T["word_dropout"], default=D.word_dropout)
@click.option("--dropout-x", type=T["dropout_x"], default=D.dropout_x, help="Variational dropout on x inside the cell.")
@click.option("--dropout-h", type=T["dropout_h"], default=D.dropout_h, help="Variational dropout on h inside the cell.")
@click.option("--reproject/--no-reproject", default=D.reproject, help="A linear layer on the embeddings before the RNN (flair's reprojection).")
@click.option("--lr", type=T["lr"], default=D.lr, help="SGD learning rate.")
@click.option("--batch-size", type=T["batch_size"], default=D.batch_size)
@click.option("--eval-batch-size", type=T["eval_batch_size"], default=D.eval_batch_size)
@click.option("--max-epochs", type=T["max_epochs"], default=D.max_epochs)
@click.option("--anneal-factor", type=T["anneal_factor"], default=D.anneal_factor, help="lr factor after --patience epochs without dev improvement.")
@click.option("--patience", type=T["patience"], default=D.patience)
@click.option("--min-lr", type=T["min_lr"], default=D.min_lr, help="Stop when the lr falls below this.")
@click.option("--clip", type=T["clip"], default=D.clip, help="Gradient norm clipping.")
@click.option("--train-with-dev", is_flag=True, help="Train on train+dev and test the final model.")
@click.option("--seed", type=int, default=D.seed, help="Seed of the first run (and of the sampled dev split).")
@click.option("--runs", type=T["runs"], default=D.runs, help="Train this many seeds (seed, seed+1, ...) and report mean ± std.")
@click.option("--device", type=DEVICE, default=D.device)
@click.option("--threads", type=T["threads"], default=None, help="CPU threads for torch [default: torch's choice]; 1 is often fastest for small models on a busy machine.")
@click.option("--run-dir", type=OUTPUT_FOLDER, help="Run directory [default: runs/tagger-<time>].")
@click.option("--dry-run", is_flag=True, help="Load and check everything and build the model; print its parameter count (stderr) and the sentence/token/entity counts as JSON, and exit.")
def main(run_dir, dry_run, **options) -> None:
    """Train a BiRNN-CRF tagger whose recurrent layer is a frozen searched cell.

    Example, DARTS_V2 on CoNLL-2000 chunking with the packaged GloVe vectors (a short run):

    \b
        bin/train-tagger --cell darts_v2 --corpus conll2000 --data ../shared/data/conll2000 --embeddings glove:glove-6b-50d --hidden-size 128 --max-epochs 2 --run-dir runs/chunk-darts
    """
    from common.runs import default_run_dir

    from ..corpora import load_corpus, parse_columns

    offline()
    config = TaggerConfig(**{f.name: options[f.name] for f in fields(TaggerConfig) if f.name in options},
                          command=" ".join(shlex.quote(a) for a in ["bin/train-tagger", *sys.argv[1:]]))
    config.check()
    run_dir = Path(run_dir) if run_dir else default_run_dir("tagger")
    if not dry_run and (run_dir / "config.json").exists():
        raise InputError(f"{run_dir}: already holds a run; choose another --run-dir")
    genotype = _genotype(config.cell)
    corpus = load_corpus(config.corpus, config.data, columns=parse_columns(config.columns) if config.columns else None,
                         tag_column=config.tag_column, scheme=config.tag_scheme, seed=config.seed)
    flair_logs_to_stderr()
    use_device(config.device, config.threads)
    embeddings = build_embeddings(config.embeddings, config.pooling)
    for note in corpus.notes:
        click.echo(note, err=True)
    if dry_run:
        from ..train import build_model

        model = build_model(config, corpus, embeddings, genotype)
        click.echo(f"model: {config.cell} cell, hidden {config.hidden_size}: "
                   f"{sum(p.numel() for p in model.parameters() if p.requires_grad):,} trainable parameters", err=True)
        click.echo(json.dumps(corpus.counts()))
        return
    from ..evaluation import summary_table, table
    from ..train import train_runs

    click.echo(f"run directory: {run_dir}", err=True)
    config.data = str(Path(config.data).resolve())  # config.json is read back from anywhere (bin/evaluate)
    metrics = train_runs(config, corpus, embeddings, genotype, run_dir)
    click.echo(table(metrics["test"]) if config.runs == 1 else summary_table(metrics["test"]))


def _genotype(cell: str) -> dict | None:
    """The genotype dict of --cell (None for lstm: flair's BiLSTM)."""
    if cell.lower() == "lstm":
        return None
    from nas.genotype import load

    return load(cell).to_dict()


if __name__ == "__main__":
    main()
