"""The runs tests/test_distributed.py compares: launched under torchrun, or called in one process.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/data_parallel_runs.py OUT CORPUS [weight-sharing]

In float64, so that equality with the single-process run is checked to 1e-9 rather than at the
level where float32 rounding, amplified by Adam's first steps and the finite-difference Hessian,
makes two otherwise equal searches differ. Dropouts are on: each rank draws its columns of the
single-process masks. Writes, under OUT: runs/search-<time> (first order, default run
directory), search2 (second order, stopped after batch 2 and resumed from the checkpoint) and
train (bin/train-lm); with `weight-sharing`, random and enas (`weight_sharing_runs`).
"""  # noqa: E501 (example command lines stay whole, to copy)

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nas.common import distributed  # noqa: E402
from nas.cli.search_lm import main as search_lm  # noqa: E402
from nas.cli.train_lm import main as train_lm  # noqa: E402
from nas.common.splits import find_splits
from nas.lm.corpus import Corpus  # noqa: E402
from nas.common.runs import Interrupted, RunDir  # noqa: E402
from nas.runs.config import SearchConfig  # noqa: E402
from nas.runs.search import Searcher  # noqa: E402

SEARCH = [
    "--emsize",
    "12",
    "--nhid",
    "12",
    "--nodes",
    "2",
    "--batch-size",
    "4",
    "--bptt",
    "6",
    "--eval-batch-size",
    "2",
    "--max-batches-per-epoch",
    "3",
    "--eval-batches",
    "3",
    "--lr",
    "2",
    "--epochs",
    "2",
    "--dropout",
    "0.5",
]
TRAIN = [
    "--cell",
    "darts_v2",
    "--emsize",
    "12",
    "--batch-size",
    "4",
    "--bptt",
    "8",
    "--eval-batch-size",
    "2",
    "--test-batch-size",
    "4",
    "--max-batches-per-epoch",
    "4",
    "--eval-batches",
    "3",
    "--epochs",
    "2",
]


def interrupted_search(run_dir: Path, corpus: Path) -> None:
    """A second-order search stopped after batch 2 of epoch 1 (checkpoint), then resumed from it to the end."""
    paths = find_splits(corpus)
    config = SearchConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        order=2,
        epochs=2,
        emsize=12,
        nhid=12,
        nodes=2,
        batch_size=4,
        bptt=6,
        eval_batch_size=2,
        max_batches_per_epoch=3,
        eval_batches=3,
        lr=2.0,
        dropout=0.5,
    )
    ranks = distributed.init(config.device)
    run = ranks.run_dir(RunDir(run_dir))
    run.start({})
    try:
        Searcher(config, run, Corpus.load(paths)).run(
            on_batch=lambda s: s.stop.request() if (s.epoch, s.batch) == (0, 2) else None
        )
    except Interrupted:
        pass
    if ranks.parallel:
        torch.distributed.barrier()  # rank 0 has written the checkpoint every rank now loads
    resumed = Searcher(config, run, Corpus.load(paths))
    resumed.load_state(run.load_checkpoint())
    resumed.run()


def weight_sharing_runs(out: Path, corpus: Path) -> None:
    """A random search and an ENAS search (dropouts on, float64) into out/random and out/enas."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for method, extra in (("random", []), ("enas", ["--controller-steps", "4"])):
            search_lm(
                [
                    "--data",
                    str(corpus),
                    *SEARCH,
                    "--method",
                    method,
                    "--candidates",
                    "3",
                    *extra,
                    "--run-dir",
                    str(out / method),
                ],
                standalone_mode=False,
            )
    finally:
        torch.set_default_dtype(before)


def run_all(out: Path, corpus: Path) -> None:
    """All three runs into `out` (the working directory moves there for the default run directory)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    cwd = os.getcwd()
    try:
        out.mkdir(parents=True, exist_ok=True)
        os.chdir(out)
        search_lm(["--data", str(corpus), *SEARCH, "--order", "1"], standalone_mode=False)
        interrupted_search(out / "search2", corpus)
        train_lm(["--data", str(corpus), *TRAIN, "--run-dir", str(out / "train")], standalone_mode=False)
    finally:
        os.chdir(cwd)
        torch.set_default_dtype(before)


def divergence(out: Path) -> None:
    """Each rank writes the message of a checksum check on weights that differ by rank."""
    ranks = distributed.current()
    layer = torch.nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.fill_(ranks.rank)
    try:
        ranks.check_in_sync(layer, "at the end of epoch 1")
    except distributed.RanksDiverged as err:
        (out / f"diverged-{ranks.rank}.txt").write_text(str(err))


if __name__ == "__main__":
    torch.set_num_threads(1)
    out = Path(sys.argv[1]).resolve()
    if sys.argv[3:] == ["weight-sharing"]:
        weight_sharing_runs(out, Path(sys.argv[2]).resolve())
    else:
        run_all(out, Path(sys.argv[2]).resolve())
        divergence(out)
