"""`bin/sample-cells`: random cells drawn uniformly from the search space (the random-cell baseline)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from common.errors import InputError, cli_errors


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--n", "count", type=int, required=True, help="How many cells to draw.")
@click.option("--seed", type=int, required=True, help="Seed of the draws: the same seed gives the same cells.")
@click.option("--out", type=click.Path(), required=True, help="Directory for DIR/random_<seed>_<index>.json (created).")
@click.option("--nodes", type=int, default=8, help="Intermediate nodes of the cell, as bin/search-lm --nodes.")
@click.option("--inter", is_flag=True, help="Draw the ESS inter-cell gates f′ and g′ too (bin/search-lm's default --history, --inter-nodes, --gate-squash and --gate-size-match).")
@click.option("--attention", is_flag=True, help="Draw the NASABN attention type too (dot or multihead).")
@cli_errors
def main(count, seed, out, nodes, inter, attention) -> None:
    """Draw N cells uniformly from the search space of bin/search-lm and write them as genotype files.

    Each node gets one op from identity, tanh, relu, sigmoid and one predecessor, every choice
    equally likely; the files load wherever a cell is taken (bin/train-lm --cell FILE,
    bin/train-tagger --cell FILE) and record the seed, index and space. Example:

    \b
        bin/sample-cells --n 5 --seed 1 --out cells/random
    """
    if count < 1:
        raise InputError(f"--n: must be at least 1, got {count}")
    if nodes < 1:
        raise InputError(f"--nodes: must be at least 1, got {nodes}")
    directory = Path(out)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"--out {out}: cannot make the directory ({err.strerror})") from None
    from ..sampling import Space, random_cells  # torch: imported here so that --help answers at once

    command = " ".join(shlex.quote(a) for a in ["bin/sample-cells", *sys.argv[1:]])
    for cell in random_cells(Space(nodes=nodes, inter=inter, attention=attention), seed, count, command):
        path = directory / f"{cell.name}.json"
        cell.save(path)
        click.echo(str(path))


if __name__ == "__main__":
    main()
