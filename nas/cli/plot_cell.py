"""`bin/plot-cell`: draw a genotype's cell, its inter-cell gates and attention type."""
from __future__ import annotations

from pathlib import Path

import click

from common.errors import cli_errors


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.argument("cell")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Output path without extension [default: beside CELL, or ./NAME for a shipped cell].")
@cli_errors
def main(cell, out) -> None:
    """Draw CELL (a genotype file or a shipped name such as darts_v2) as PNG and SVG: nodes, the
    op on each edge, the output mean, and the ESS gates f′ and g′ when the genotype has them.
    """
    from ..genotype import load
    from ..plots import plot_cell

    geno = load(cell)
    stem = Path(out) if out else (Path(cell).with_suffix("") if Path(cell).is_file() else Path(Path(cell).stem))
    for path in plot_cell(geno, stem):
        click.echo(str(path))


if __name__ == "__main__":
    main()
