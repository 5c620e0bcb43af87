"""`bin/plot-run`: training and validation curves of any run directory (search, train-lm, tagger)."""

from __future__ import annotations

from pathlib import Path

import click

from nas.common.cli import OUTPUT_FOLDER, command


@command()
@click.argument("run_dir", type=click.Path())
@click.option("--out", type=OUTPUT_FOLDER, help="Directory for the pictures [default: RUN_DIR/plots].")
@click.option(
    "--tensorboard",
    is_flag=True,
    help="Also write the curves as TensorBoard events to OUT/tensorboard (needs `pip install tensorboard`, which this "
    "toolkit does not install).",
)
def main(run_dir, out, tensorboard) -> None:
    """Draw the training and validation curves of a run directory of bin/search-lm, bin/train-lm or
    bin/train-tagger, as curves.png and curves.svg: perplexity per epoch (per round for ESS) for
    language models; loss, dev F1 and learning rate per epoch for taggers, a curve per seed of a
    --runs N run. A run still training is drawn up to its last finished epoch.

    \b
        bin/plot-run runs/dartsv2
        bin/plot-run runs/chunk-darts --out pictures/ --tensorboard
    """
    from nas.pictures.curves import read_curves, write_tensorboard
    from nas.pictures.plots import plot_curves

    curves = read_curves(run_dir)
    out_dir = Path(out) if out else curves.path / "plots"
    if tensorboard:
        click.echo(str(write_tensorboard(curves, out_dir / "tensorboard")))
    for path in plot_curves(curves, out_dir):
        click.echo(str(path))


if __name__ == "__main__":
    main()
