"""`bin/transfer`: does a searched cell tag better than an LSTM? Every cell on every corpus, over seeds."""

from __future__ import annotations

from pathlib import Path

import click

from nas.common.cli import COUNT, LAYER_SIZE, MANY_COUNT, RUN_FOLDER, THREAD_COUNT, bounded, command
from nas.common.ranges import MINUTES

from ..config import TaggerConfig

D = TaggerConfig()


@command()
@click.option(
    "--cells",
    default="darts_v2,lstm",
    help="Comma-separated shipped cells, genotype files (named by their stem) and lstm (flair's BiLSTM, the reference "
    "of the tests).",
)
@click.option(
    "--corpora",
    required=True,
    help="Comma-separated [NAME=]FORMAT:PATH, as train-tagger's --corpus FORMAT --data PATH; NAME defaults to FORMAT. "
    "E.g. conll2000:data/conll2000,wnut17:data/wnut17.",
)
@click.option("--seeds", type=MANY_COUNT, default=3, help="Seeds 1..N of every cell on every corpus.")
@click.option(
    "--hidden-size",
    type=LAYER_SIZE,
    default=D.hidden_size,
    help="The LSTM's hidden size per direction (with --sizes hidden: every model's).",
)
@click.option(
    "--sizes",
    type=click.Choice(["params", "hidden"]),
    default="params",
    help="params: each cell's hidden size chosen so its recurrent layer has the parameters of the LSTM at "
    "--hidden-size; hidden: all at --hidden-size.",
)
@click.option(
    "--time-budget",
    type=bounded(MINUTES),
    help="Minutes per run (train-tagger --time-budget), added to either --sizes; epochs reached then differ.",
)
@click.option(
    "--run-dir",
    type=RUN_FOLDER,
    help="Where the runs go [default: runs/transfer-<time>]; an existing one is resumed (finished runs are skipped).",
)
@click.option("--threads", type=THREAD_COUNT, help="CPU threads of each run (train-tagger --threads).")
@click.option(
    "--workers",
    type=COUNT,
    default=1,
    help="Runs at once, on a local Ray instance started for this command (more than 1 needs the ray extra); each run "
    "keeps its own --threads.",
)
@click.option(
    "--ray-address",
    help="Send the runs to this existing Ray cluster (e.g. 10.0.0.1:6379, or auto); every node needs the same "
    "environment, data paths and --run-dir.",
)
@click.option(
    "--random-cells",
    default="",
    help="Comma-separated names among --cells that are random cells: every other cell is also compared with their mean "
    "F1 of each seed.",
)
@click.argument("tagger_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- TRAIN_TAGGER_ARGS]")
def main(
    cells,
    corpora,
    seeds,
    hidden_size,
    sizes,
    time_budget,
    run_dir,
    threads,
    workers,
    ray_address,
    random_cells,
    tagger_args,
) -> None:
    """Train every cell on every corpus for several seeds as ordinary bin/train-tagger runs, then print
    one table (dev and test F1 mean ± std over seeds), the headline test over training runs of each
    cell against the LSTM and against the --random-cells' mean (Almost Stochastic Order on each
    seed's test F1, both ways: ε_min and a verdict at ε_min < 0.2, the mean per-seed difference, the
    paired t-test, and the seeds it rests on; one seed gives no test), and, as per-seed detail, the
    paired bootstrap over test sentences of each seed's trained models (the difference, its 95%
    interval, p); write them as RUN_DIR/transfer.md and transfer.json with a plot of dev F1 by epoch,
    transfer.png.

    Arguments after -- go to every train-tagger run. A small example (2 cells, 1 corpus, 2 seeds):

    \b
        bin/transfer --cells darts_v2,lstm --corpora conll2000:data/conll2000 --seeds 2 --hidden-size 128 --run-dir runs/transfer -- --embeddings glove:glove-6b-50d --max-epochs 3
    """  # noqa: E501 (example command lines stay whole, to copy)
    from nas.common.cli import passed_on
    from nas.common.runs import default_run_dir

    from ..transfer import Benchmark, parse_cells, parse_corpora
    from .train_tagger import main as train_tagger

    bench = Benchmark(
        Path(run_dir) if run_dir else default_run_dir("transfer"),
        parse_cells(cells),
        parse_corpora(corpora),
        seeds,
        hidden_size,
        sizes,
        time_budget,
        tagger_args,
        threads,
        tuple(name.strip() for name in random_cells.split(",") if name.strip()),
        report=lambda line: click.echo(line, err=True),
    )
    given_as = f"bin/transfer -- {' '.join(tagger_args)}"
    bench.run(lambda argv: passed_on(train_tagger, "bin/train-tagger", argv, given_as), workers, ray_address)
    _, table = bench.write_report()
    click.echo(table)
    click.echo(f"written: {bench.run_dir / 'transfer.md'}, transfer.json, transfer.png", err=True)


if __name__ == "__main__":
    main()
