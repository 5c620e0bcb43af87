"""`bin/train-tagger`: train a BiRNN-CRF tagger whose recurrent layer is a searched cell (or an LSTM)."""
from __future__ import annotations

import json
import shlex
import sys
from dataclasses import fields
from pathlib import Path

import click

from common.errors import InputError, cli_errors

from ..config import TaggerConfig
from ..corpus_formats import FORMATS
from ..embeddings import POOLINGS, build_embeddings
from ..tag_schemes import SCHEMES
from .runtime import flair_logs_to_stderr, offline, use_device

D = TaggerConfig()


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--cell", default=D.cell, help="Genotype JSON file, a shipped cell name (darts_v2, ...), or lstm for flair's BiLSTM-CRF.")
@click.option("--corpus", type=click.Choice([*FORMATS, "column"]), required=True, help="Corpus format; column: any column file, see --columns.")
@click.option("--data", type=click.Path(), required=True, help="Directory with the corpus files (eng.train/testa/testb, wnut17train.conll/emerging.dev.conll/emerging.test.annotated, train.txt/test.txt, or *train*/*dev*/*test* for column).")
@click.option("--columns", help="column corpus: INDEX:NAME items, e.g. 0:text,3:ner [default: 0:text,1:ner].")
@click.option("--tag-column", help="Which named column holds the tags to learn [default: ner; chunk for conll2000; the only tag column for column].")
@click.option("--tag-scheme", type=click.Choice(SCHEMES), help="Tag scheme of the files [default: iob1 for conll03, else iob2].")
@click.option("--train-scheme", type=click.Choice(["bioes", "iob2"]), default=D.train_scheme, help="Tags the CRF learns (evaluation is always on IOB2 spans).")
@click.option("--embeddings", default=D.embeddings, help="Comma-separated glove:PATH_OR_NAME, flair:FWD.pt:BWD.pt, pooled-flair:FWD.pt:BWD.pt, transformer:DIR.")
@click.option("--pooling", type=click.Choice(POOLINGS), default=D.pooling, help="Pooling of pooled-flair embeddings.")
@click.option("--hidden-size", type=int, default=D.hidden_size, help="Hidden units per direction.")
@click.option("--locked-dropout", type=float, default=D.locked_dropout, help="Locked (variational) dropout on the RNN input and output.")
@click.option("--word-dropout", type=float, default=D.word_dropout)
@click.option("--dropout-x", type=float, default=D.dropout_x, help="Variational dropout on x inside the cell.")
@click.option("--dropout-h", type=float, default=D.dropout_h, help="Variational dropout on h inside the cell.")
@click.option("--reproject/--no-reproject", default=D.reproject, help="A linear layer on the embeddings before the RNN (flair's reprojection).")
@click.option("--lr", type=float, default=D.lr, help="SGD learning rate.")
@click.option("--batch-size", type=int, default=D.batch_size)
@click.option("--eval-batch-size", type=int, default=D.eval_batch_size)
@click.option("--max-epochs", type=int, default=D.max_epochs)
@click.option("--anneal-factor", type=float, default=D.anneal_factor, help="lr factor after --patience epochs without dev improvement.")
@click.option("--patience", type=int, default=D.patience)
@click.option("--min-lr", type=float, default=D.min_lr, help="Stop when the lr falls below this.")
@click.option("--clip", type=float, default=D.clip, help="Gradient norm clipping.")
@click.option("--train-with-dev", is_flag=True, help="Train on train+dev and test the final model.")
@click.option("--seed", type=int, default=D.seed, help="Seed of the first run (and of the sampled dev split).")
@click.option("--runs", type=int, default=D.runs, help="Train this many seeds (seed, seed+1, ...) and report mean ± std.")
@click.option("--device", default=D.device, help="cpu, cuda or cuda:N.")
@click.option("--threads", type=int, default=None, help="CPU threads for torch [default: torch's choice]; 1 is often fastest for small models on a busy machine.")
@click.option("--out", type=click.Path(file_okay=False), help="Run directory [default: runs/tagger-<time>].")
@click.option("--dry-run", is_flag=True, help="Load and check everything, print sentence/token/entity counts as JSON, and exit.")
@cli_errors
def main(out, dry_run, **options) -> None:
    """Train a BiRNN-CRF tagger whose recurrent layer is a frozen searched cell.

    Example, DARTS_V2 on CoNLL-2000 chunking with the packaged GloVe vectors (a short run):

        bin/train-tagger --cell darts_v2 --corpus conll2000 --data ../shared/data/conll2000 --embeddings glove:glove-6b-50d --hidden-size 128 --max-epochs 2 --out runs/chunk-darts
    """
    from common.runs import check_device, default_run_dir

    from ..corpora import load_corpus, parse_columns

    offline()
    config = TaggerConfig(**{f.name: options[f.name] for f in fields(TaggerConfig) if f.name in options},
                          command=" ".join(shlex.quote(a) for a in ["bin/train-tagger", *sys.argv[1:]]))
    check_device(config.device)
    config.check()
    run_dir = Path(out) if out else default_run_dir("tagger")
    if not dry_run and (run_dir / "config.json").exists():
        raise InputError(f"{run_dir}: already holds a run; choose another --out")
    genotype = _genotype(config.cell)
    corpus = load_corpus(config.corpus, config.data, columns=parse_columns(config.columns) if config.columns else None,
                         tag_column=config.tag_column, scheme=config.tag_scheme, seed=config.seed)
    flair_logs_to_stderr()
    use_device(config.device, config.threads)
    embeddings = build_embeddings(config.embeddings, config.pooling)
    if dry_run:
        click.echo(json.dumps(corpus.counts()))
        return
    from ..evaluation import summary_table, table
    from ..train import train_runs

    for note in corpus.notes:
        click.echo(note, err=True)
    click.echo(f"run directory: {run_dir}", err=True)
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
