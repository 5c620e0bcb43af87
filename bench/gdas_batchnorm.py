"""GDAS's BatchNorm, before and after (docs/concepts/search-methods.md, "GDAS and BatchNorm").

Runs the same tiny searches (the tests' size: emsize = nhid = 12, 3 nodes, batch 4, bptt 8,
eval batch 2, 6 batches an epoch, lr 2, arch-lr 0.1, 3 epochs, the tests' generated corpus) for
seeds 1-12 in three variants, and writes every epoch's validation perplexity and the count of
searches with a non-finite (or above 1e6) one:

- gdas-running-stats: GDAS with the DARTS search cell's BatchNorm (running statistics in eval mode);
- gdas: GDAS as shipped (batch statistics in either mode);
- drnas: DrNAS as shipped (the DARTS search cell's BatchNorm).

    PYTHONPATH=. python bench/gdas_batchnorm.py --out docs/experiments/collapse-proof-methods/gdas-batchnorm.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import write_lm_corpus  # noqa: E402

from nas.cells.search_cell import node_norms  # noqa: E402
from nas.common.runs import RunDir  # noqa: E402
from nas.common.splits import find_splits  # noqa: E402
from nas.lm.corpus import Corpus  # noqa: E402
from nas.methods import gdas  # noqa: E402
from nas.runs.config import SearchConfig  # noqa: E402
from nas.runs.search import Searcher  # noqa: E402

VARIANTS = {"gdas-running-stats": "gdas", "gdas": "gdas", "drnas": "drnas"}


def search(paths: dict, corpus: Corpus, method: str, seed: int, run_dir: Path) -> list[float]:
    """Every epoch's validation perplexity of one tiny search (NaN where the search stopped on non-finite weights)."""
    config = SearchConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        method=method,
        emsize=12,
        nhid=12,
        nodes=3,
        batch_size=4,
        bptt=8,
        eval_batch_size=2,
        max_batches_per_epoch=6,
        lr=2.0,
        epochs=3,
        arch_lr=0.1,
        seed=seed,
        hessian_iterations=2,
    )
    config.validate()
    run = RunDir(run_dir)
    run.start({})
    try:
        Searcher(config, run, corpus).run()
    except Exception:  # noqa: BLE001 - a search that stops on non-finite weights counts as diverged
        pass
    ppls = [r["valid_ppl"] for r in run.read_log()]
    return ppls + [math.nan] * (3 - len(ppls))


def finite_or_none(ppls: list[float]) -> list[float | None]:
    return [p if math.isfinite(p) else None for p in ppls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shipped = gdas.batch_norms
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = find_splits(write_lm_corpus(Path(tmp) / "corpus"))
        corpus = Corpus.load(paths)
        for variant, method in VARIANTS.items():
            gdas.batch_norms = node_norms if variant == "gdas-running-stats" else shipped
            runs = {seed: search(paths, corpus, method, seed, Path(tmp) / f"{variant}-{seed}") for seed in range(1, 13)}
            diverged = [s for s, p in runs.items() if not all(math.isfinite(v) and v < 1e6 for v in p)]
            results[variant] = {"valid_ppl": {s: finite_or_none(p) for s, p in runs.items()}, "diverged": diverged}
            print(f"{variant}: {len(diverged)} of 12 diverged (seeds {diverged})", flush=True)
    gdas.batch_norms = shipped
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
