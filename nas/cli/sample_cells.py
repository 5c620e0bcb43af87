"""`bin/sample-cells`: random cells drawn uniformly from the search space (the random-cell baseline)."""

from __future__ import annotations


import click

from nas.common.cli import MANY_COUNT, NODE_COUNT, OUTPUT_FOLDER, SEED_VALUE, command, command_line


@command()
@click.option("--n", "count", type=MANY_COUNT, required=True, help="How many cells to draw.")
@click.option("--seed", type=SEED_VALUE, default=1, help="Seed of the draws: the same seed gives the same cells.")
@click.option(
    "--out", type=OUTPUT_FOLDER, required=True, help="Directory for DIR/random_<seed>_<index>.json (created)."
)
@click.option("--nodes", type=NODE_COUNT, default=8, help="Intermediate nodes of the cell, as bin/search-lm --nodes.")
@click.option(
    "--inter",
    is_flag=True,
    help="Draw the ESS inter-cell gates f′ and g′ too (bin/search-lm's default --history, --inter-nodes, --gate-squash "
    "and --gate-size-match).",
)
@click.option("--attention", is_flag=True, help="Draw the NASABN attention type too (dot or multihead).")
def main(count, seed, out, nodes, inter, attention) -> None:
    """Draw N cells uniformly from the search space of bin/search-lm and write them as genotype files.

    Each node gets one op from identity, tanh, relu, sigmoid and one predecessor, every choice
    equally likely; the files load wherever a cell is taken (bin/train-lm --cell FILE,
    bin/train-tagger --cell FILE) and record the seed, index and space. Example:

    \b
        bin/sample-cells --n 5 --seed 1 --out cells/random
    """
    from nas.cells.genotype import save
    from nas.common.runs import RunDir
    from nas.methods.sampling import Space, random_cells  # torch: imported here so that --help answers at once

    folder = RunDir(out)  # not a run, but `discard` removes what this command added if it fails
    folder.claim()
    typed = command_line("bin/sample-cells")
    written = []
    try:
        for cell in random_cells(Space(nodes=nodes, inter=inter, attention=attention), seed, count, typed):
            written.append(folder.path / f"{cell.name}.json")
            save(cell, written[-1])
    except BaseException:
        folder.discard()
        raise
    click.echo("\n".join(str(path) for path in written))


if __name__ == "__main__":
    main()
