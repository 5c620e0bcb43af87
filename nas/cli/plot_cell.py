"""`bin/plot-cell`: draw a genotype's cell, its inter-cell gates and attention type."""

from __future__ import annotations

from pathlib import Path

import click

from nas.common.cli import OUTPUT_FOLDER, command


@command()
@click.argument("cell")
@click.option(
    "--out",
    type=OUTPUT_FOLDER,
    help="Folder for NAME.png and NAME.svg [default: CELL's folder, or . for a shipped cell].",
)
def main(cell, out) -> None:
    """Draw CELL (a genotype file or a shipped name such as darts_v2) as PNG and SVG: nodes, the
    op on each edge, the output mean, and the ESS gates f′ and g′ when the genotype has them.
    """
    from nas.cells.genotype import load
    from nas.pictures.plots import plot_cell

    geno = load(cell)
    source = Path(cell)
    folder = Path(out) if out else (source.parent if source.is_file() else Path("."))
    for path in plot_cell(geno, folder / source.stem):
        click.echo(str(path))


if __name__ == "__main__":
    main()
