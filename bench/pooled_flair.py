#!/usr/bin/env python3
"""What pooled Flair embeddings cost a tagger: seconds per epoch, peak memory and test F1 against the
same tagger with the word vectors alone, each run an ordinary `bin/train-tagger` child process.

Runs, one at a time, on a CoNLL-2000 folder (--data; --sentences N keeps the first N training
sentences, and the first N/5 test sentences):

    words          --embeddings glove:glove-6b-50d
    pooled         + pooled-flair:FWD:BWD, the character LMs' states computed into a fresh --charlm-states folder
    pooled-read    the same, reading the states that run saved (the later runs of a grid)
    before         `pooled` with another checkout's bin/train-tagger (--before DIR, e.g. a worktree of an
                   earlier commit): the comparison that shows F1 unchanged and what the change saved

Each run's epoch times are flair's training passes (`seconds_per_epoch.each_train` of metrics.json;
dev evaluation apart), its peak RSS the child's own (wait4). Prints one JSON line with the GEMM peaks
of both backends, the load, and each run's figures and ratios to `words`.

    bench/pooled_flair.py --data data/conll2000 [--sentences 2000] [--cell darts_v2] [--hidden-size 64] [--epochs 3]
    [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, report

import torch  # noqa: E402


def first_sentences(source: Path, out: Path, n: int) -> int:
    """Copy the first `n` blank-line-separated sentences of `source` to `out`; returns how many."""
    blocks = [b for b in source.read_text(encoding="utf-8").split("\n\n") if b.strip()][:n]
    out.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return len(blocks)


def train(checkout: Path, args, embeddings: str, run_dir: Path, data: Path, states: Path | None) -> dict:
    """One bin/train-tagger run of `checkout`, pinned to --core; its metrics and peak RSS (GB)."""
    command = [
        "taskset",
        "-c",
        str(args.core),
        sys.executable,
        str(checkout / "bin" / "train-tagger"),
        "--cell",
        args.cell,
        "--corpus",
        "conll2000",
        "--data",
        str(data),
        "--hidden-size",
        str(args.hidden_size),
        "--embeddings",
        embeddings,
        "--max-epochs",
        str(args.epochs),
        "--seed",
        str(args.seed),
        "--threads",
        "1",
        "--run-dir",
        str(run_dir),
    ]
    if states is not None:
        command += ["--charlm-states", str(states)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)}
    start = time.perf_counter()
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=checkout)
        _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(command)} failed; its log: {run_dir.parent / f'{run_dir.name}.log'}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    epochs = metrics["seconds_per_epoch"]["each_train"]
    return {
        "first_epoch_s": round(epochs[0], 2),
        "later_epochs_s": [round(e, 2) for e in epochs[1:]],
        "peak_rss_gb": round(usage.ru_maxrss / 2**20, 3),
        "test_f1": metrics["test"]["f1"],
        "wall_s": round(time.perf_counter() - start, 1),
        "charlm_states": metrics.get("charlm_states"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a CoNLL-2000 folder (train.txt, test.txt)")
    parser.add_argument("--sentences", type=int, default=0, help="first N training sentences (0: all)")
    parser.add_argument("--cell", default="darts_v2")
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--words", default="glove:glove-6b-50d")
    parser.add_argument("--charlm", default="wt2-forward:wt2-backward", help="FWD:BWD character LMs of pooled-flair")
    parser.add_argument("--before", type=Path, help="another checkout to run the pooled tagger with, for before/after")
    parser.add_argument("--core", type=int, default=0, help="the CPU core every run is pinned to")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {args.core})
    record = {
        "bench": "pooled_flair",
        "loadavg_start": open("/proc/loadavg").read().split()[:3],
        "cell": args.cell,
        "hidden_size": args.hidden_size,
        "epochs": args.epochs,
    }
    pooled = f"{args.words},pooled-flair:{args.charlm}"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = args.data
        if args.sentences:
            data = tmp / "data"
            data.mkdir()
            record["train_sentences"] = first_sentences(args.data / "train.txt", data / "train.txt", args.sentences)
            first_sentences(args.data / "test.txt", data / "test.txt", max(1, args.sentences // 5))
        runs = {
            "words": (ROOT, args.words, None),
            "pooled": (ROOT, pooled, tmp / "states"),
            "pooled-read": (ROOT, pooled, tmp / "states"),
        }
        if args.before:
            runs["before"] = (args.before.resolve(), pooled, None)
        results = {
            name: train(checkout, args, spec, tmp / name, data, states)
            for name, (checkout, spec, states) in runs.items()
        }
    words = results["words"]
    for name, r in results.items():
        if name != "words":
            r["first_epoch_vs_words"] = round(r["first_epoch_s"] / words["first_epoch_s"], 3)
            r["later_epochs_vs_words"] = round(sum(r["later_epochs_s"]) / max(sum(words["later_epochs_s"]), 1e-9), 3)
            r["peak_rss_vs_words"] = round(r["peak_rss_gb"] / words["peak_rss_gb"], 3)
    record["runs"] = results
    report(record)


if __name__ == "__main__":
    main()
