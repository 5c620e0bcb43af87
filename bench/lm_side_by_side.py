#!/usr/bin/env python3
"""DARTS_V2, an LSTM of equal parameter count and a searched cell, retrained with the same time budget.

Runs `bin/train-lm` once per model, one after the other (so each has the machine to itself), or
with `--parallel` all at once (so load from other work on a shared machine hits them alike), and
prints one JSON line per model: validation and test perplexity, parameter counts, epochs done.
The budget covers training and validation; the final test (batch 1) comes on top.

    bench/lm_side_by_side.py --searched runs/search-x/genotype.json --budget 20
    bench/lm_side_by_side.py --searched cell.json --budget 1 -- --max-batches-per-epoch 50
    bench/lm_side_by_side.py --searched cell.json --budget 20 --parallel

Default size for a CPU: emsize = nhid = 200 for the cells (the LSTM's nhid is matched to
DARTS_V2's layer at that width: 442, projected to 200); every other setting is the DARTS PTB
protocol of `bin/train-lm`. Arguments after `--` go to every `bin/train-lm` call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import harness

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "ptb"))
    parser.add_argument("--budget", type=float, default=20.0, help="minutes per model (training + validation)")
    parser.add_argument("--searched", help="genotype JSON of a cell found by bin/search-lm")
    parser.add_argument("--emsize", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1267)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per run (1 is fastest for these sizes on a shared 2-core machine)",
    )
    parser.add_argument("--parallel", action="store_true", help="run the models at the same time, one process each")
    parser.add_argument("--out", default=str(REPO / "runs" / f"side-by-side-{time.strftime('%Y%m%d-%H%M%S')}"))
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    if not Path(args.data).is_dir():
        harness.report({"skipped": f"{args.data}: no such directory"})
        return
    models = [("darts_v2", ["--cell", "darts_v2"]), ("lstm", ["--cell", "lstm", "--match-cell", "darts_v2"])]
    if args.searched:
        models.append((Path(args.searched).stem, ["--cell", args.searched]))
    else:
        print("no --searched cell given: running DARTS_V2 and the LSTM only", file=sys.stderr)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    started = []
    for name, cell in models:
        run = Path(args.out) / name
        command = [
            sys.executable,
            str(REPO / "bin" / "train-lm"),
            *cell,
            "--data",
            args.data,
            "--run-dir",
            str(run),
            "--emsize",
            str(args.emsize),
            "--time-budget",
            str(args.budget),
            "--seed",
            str(args.seed),
            *extra,
        ]
        print("$ " + " ".join(command), file=sys.stderr)
        started.append((name, run, time.perf_counter(), subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)))
        if not args.parallel:
            report(*started[-1], args.budget)
    if args.parallel:
        for run in started:
            report(*run, args.budget)


def report(name: str, run: Path, start: float, process: subprocess.Popen, budget: float) -> None:
    """Wait for one bin/train-lm run and print its JSON line."""
    if process.wait() != 0:
        harness.report({"model": name, "error": f"bin/train-lm exited {process.returncode}"})
        return
    m = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    harness.report(
        {
            "model": name,
            "cell": m["cell"],
            "params": m["params"],
            "rnn_params": m["rnn_params"],
            "emsize": m["emsize"],
            "nhid": m["nhid"],
            "valid_ppl": m["best_valid_ppl"],
            "test_ppl": m["test_ppl"],
            "epochs": m["epochs"],
            "budget_min": budget,
            "train_valid_s": round(m["seconds"], 1),
            "wall_s": round(time.perf_counter() - start, 1),
            "run_dir": str(run),
        }
    )


if __name__ == "__main__":
    main()
