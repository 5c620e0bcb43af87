"""`bin/train-wordvec`: word vectors with gensim, as a GloVe-style text file the tagger reads."""
from __future__ import annotations

import click

from common.errors import InputError, cli_errors


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--corpus", required=True, type=click.Path(), help="Whitespace-tokenised text, one sentence per line.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output vectors, GloVe text format (no header).")
@click.option("--dim", type=int, default=100)
@click.option("--method", type=click.Choice(["word2vec", "fasttext"]), default="word2vec")
@click.option("--epochs", type=int, default=5)
@click.option("--window", type=int, default=5)
@click.option("--min-count", type=int, default=1)
@click.option("--seed", type=int, default=1)
@click.option("--workers", type=int, default=1, help="gensim threads; 1 makes a seed reproducible.")
@cli_errors
def main(corpus, out, dim, method, epochs, window, min_count, seed, workers) -> None:
    """Train word2vec or fastText vectors offline and write them as `word v1 ... vD` lines.

        bin/train-wordvec --corpus ../shared/data/wikitext-2/wiki.train.tokens --out wt2-100d.txt --dim 100
    """
    from ..wordvec import train_wordvec

    if dim < 1 or epochs < 1:
        raise InputError("--dim and --epochs must be at least 1")
    result = train_wordvec(corpus, out, dim, method, epochs, window, min_count, seed, workers)
    click.echo(f"{out}: {result['words']} words × {dim} dimensions from {result['sentences']} sentences")


if __name__ == "__main__":
    main()
