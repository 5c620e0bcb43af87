"""A seed fixes a run, whatever else the machine is doing: the same `bin/train-lm` alone and beside a
busy process on its core gives the same floats, bit for bit.

Before, each product's GEMM backend (oneDNN or torch.mm, which differ in the last bits) was chosen by
timing both at run time, so a neighbour process that took the core during a timing changed the choice,
and the run. Now the choice is a rule of the `--gemm` setting and the shape (`nas.fast.gemm`), recorded
in config.json and kept on `--resume`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import write_lm_corpus
from killing import REPO, _env, run
from nas.common.files import safe_torch_load

TIMES = ("seconds", "tokens_per_s", "elapsed")
# Sizes at which the decoder's products (160 rows × 16 × 1,000 words) run on oneDNN under its rule, the
# cell's small ones on torch.mm: both backends are in play.
ARGS = [
    "--cell",
    "darts_v2",
    "--seed",
    "1",
    "--emsize",
    "16",
    "--nhid",
    "16",
    "--batch-size",
    "16",
    "--bptt",
    "10",
    "--epochs",
    "2",
    "--max-batches-per-epoch",
    "30",
    "--threads",
    "1",
]

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")


def _pinned() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _train(corpus: Path, run_dir: Path, *extra: str) -> dict:
    """A pinned bin/train-lm run: its logged records and metrics less their times, its best model's weights."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import nas.cli.train_lm as m; m.main()",
            "--data",
            str(corpus),
            "--run-dir",
            str(run_dir),
            *ARGS,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=_env(),
        preexec_fn=_pinned,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = [
        {k: v for k, v in json.loads(line).items() if k not in TIMES}
        for line in (run_dir / "log.jsonl").read_text().splitlines()
    ]
    metrics = {
        k: v for k, v in json.loads((run_dir / "metrics.json").read_text()).items() if k not in ("seconds", "model")
    }
    weights = safe_torch_load(run_dir / "best.pt", "cpu")["state_dict"]
    return {
        "log": log,
        "metrics": metrics,
        "weights": weights,
        "gemm": json.loads((run_dir / "config.json").read_text())["gemm"],
    }


def _same(a: dict, b: dict) -> None:
    assert a["log"] == b["log"] and a["metrics"] == b["metrics"] and a["gemm"] == b["gemm"]
    assert a["weights"].keys() == b["weights"].keys()
    assert all(torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"])


@pytest.mark.parametrize("gemm", [None, "onednn"])
def test_a_run_beside_a_busy_process_on_its_core_equals_the_run_alone(gemm: str | None, tmp_path: Path):
    corpus = write_lm_corpus(tmp_path / "corpus", vocab=1000, train_lines=400)
    extra = ["--gemm", gemm] if gemm else []
    alone = _train(corpus, tmp_path / "alone", *extra)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_pinned)
    try:
        time.sleep(0.2)
        loaded = _train(corpus, tmp_path / "loaded", *extra)
    finally:
        busy.kill()
        busy.wait()
    assert alone["gemm"] in ("onednn", "mkl") and (gemm is None or alone["gemm"] == gemm)  # what auto chose
    _same(alone, loaded)


def test_a_resume_runs_the_products_of_the_stored_rule_and_refuses_another(tmp_path: Path):
    """Killed after its first epoch and resumed, a run equals the uninterrupted one; a --gemm on resume
    other than the stored rule is refused (one line, exit 2) and changes nothing."""
    from killing import run_killed

    corpus = write_lm_corpus(tmp_path / "corpus", vocab=1000, train_lines=400)
    whole = _train(corpus, tmp_path / "whole", "--gemm", "mkl")
    cut = tmp_path / "cut"
    run_killed("nas.cli.train_lm", ["--data", str(corpus), "--run-dir", str(cut), *ARGS, "--gemm", "mkl"], at=2)
    before = {p.name: p.read_bytes() for p in cut.iterdir()}
    refused = run("nas.cli.train_lm", ["--resume", str(cut), "--gemm", "onednn"])
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0, refused.stderr
    assert refused.stderr.startswith("error: --gemm: not with --resume (the run has 'mkl')"), refused.stderr
    assert {p.name: p.read_bytes() for p in cut.iterdir()} == before
    resumed = run("nas.cli.train_lm", ["--resume", str(cut)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = [
        {k: v for k, v in json.loads(line).items() if k not in TIMES}
        for line in (cut / "log.jsonl").read_text().splitlines()
    ]
    assert log == whole["log"]
    weights = safe_torch_load(cut / "best.pt", "cpu")["state_dict"]
    assert all(torch.equal(weights[k], whole["weights"][k]) for k in weights)
