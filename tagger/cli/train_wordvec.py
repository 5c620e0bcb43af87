"""`bin/train-wordvec`: word vectors with gensim, as a GloVe-style text file the tagger reads."""

from __future__ import annotations

import click

from nas.common.cli import COUNT, EPOCH_COUNT, LAYER_SIZE, OUTPUT_FILE, SEED_VALUE, THREAD_COUNT, command


@command()
@click.option("--data", required=True, type=click.Path(), help="Whitespace-tokenised text, one sentence per line.")
@click.option("--out", required=True, type=OUTPUT_FILE, help="Output vectors, GloVe text format (no header).")
@click.option("--dim", type=LAYER_SIZE, default=100)
@click.option("--method", type=click.Choice(["word2vec", "fasttext"]), default="word2vec")
@click.option("--epochs", type=EPOCH_COUNT, default=5)
@click.option("--window", type=COUNT, default=5)
@click.option("--min-count", type=COUNT, default=1)
@click.option("--seed", type=SEED_VALUE, default=1)
@click.option("--threads", type=THREAD_COUNT, default=1, help="gensim worker threads; 1 makes a seed reproducible.")
def main(data, out, dim, method, epochs, window, min_count, seed, threads) -> None:
    """Train word2vec or fastText vectors offline and write them as `word v1 ... vD` lines.

    \b
        bin/train-wordvec --data data/wikitext-2/wiki.train.tokens --out wt2-100d.txt --dim 100
    """
    from nas.cli.terminal import StatusLine

    from ..wordvec import train_wordvec

    status = StatusLine()
    result = train_wordvec(
        data,
        out,
        dim,
        method,
        epochs,
        window,
        min_count,
        seed,
        threads,
        on_epoch=lambda k: status.show(f"{method}: epoch {k} of {epochs} done, {status.elapsed():.0f} s"),
    )
    status.clear()
    click.echo(f"{out}: {result['words']} words × {dim} dimensions from {result['sentences']} sentences")


if __name__ == "__main__":
    main()
