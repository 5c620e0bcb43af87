"""`bin/plot-search`: the pictures of a search run (cell, α over training, MAD, perplexity)."""

from __future__ import annotations

import click

from nas.common.cli import OUTPUT_FOLDER, command


@command()
@click.argument("run_dir", type=click.Path())
@click.option("--out", type=OUTPUT_FOLDER, help="Directory for the pictures [default: RUN_DIR/plots].")
@click.option(
    "--compare",
    multiple=True,
    type=click.Path(),
    help="Another run whose MAD and perplexity curves join the pictures (repeatable).",
)
def main(run_dir, out, compare) -> None:
    """Draw a `bin/search-lm` run: the derived cell with its inter-cell gates, every edge's op
    weights over training, the mean absolute deviation of intra- and inter-cell weights from
    uniform (ESS Fig. 6) and the validation perplexity, each as PNG and SVG. For example, joint
    against intra-only search: `bin/plot-search runs/joint --compare runs/intra`.
    """
    from nas.pictures.plots import plot_search

    for path in plot_search(run_dir, out, compare):
        click.echo(str(path))


if __name__ == "__main__":
    main()
