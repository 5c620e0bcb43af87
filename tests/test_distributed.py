"""Data parallelism under torchrun (2 processes, gloo on CPU) against single-process runs, and multi-seed search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch
from click.testing import CliRunner

from data_parallel_runs import SEARCH, run_all, weight_sharing_runs
from nas.cli.search_lm import main as search_lm
from nas.common.distributed import Ranks
from nas.common.errors import InputError
from nas.cells.genotype import load
from nas.runs.seeds import leaderboard

REPO = Path(__file__).resolve().parent.parent


def _two_and_one(
    root: Path, corpus: Path, runs: Callable[[Path, Path], None], *mode: str
) -> subprocess.CompletedProcess:
    """`runs` under torchrun with two processes into root/two (`data_parallel_runs.py ... *mode`), then in this one into
    root/one.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(REPO / "tests" / "data_parallel_runs.py"),
            str(root / "two"),
            str(corpus),
            *mode,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs(root / "one", corpus)
    finally:
        torch.set_num_threads(before)
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory, lm_corpus_module) -> dict[str, Path]:
    """The same runs in one process and under torchrun with two processes (one launch for all three)."""
    root = tmp_path_factory.mktemp("dp")
    result = _two_and_one(root, lm_corpus_module, run_all)
    return {"one": root / "one", "two": root / "two", "stderr": result.stderr}


@pytest.fixture(scope="module")
def lm_corpus_module(tmp_path_factory) -> Path:
    from conftest import write_lm_corpus

    return write_lm_corpus(tmp_path_factory.mktemp("corpus"))


def _only_run_dir(root: Path) -> Path:
    found = list((root / "runs").iterdir())
    assert len(found) == 1, found
    return found[0]


def _assert_same_state(one: dict, two: dict) -> None:
    assert one.keys() == two.keys()
    for name in one:
        if one[name].is_floating_point():
            assert torch.allclose(one[name], two[name], rtol=1e-9, atol=1e-12), name
            assert one[name].dtype == torch.float64


@pytest.mark.parametrize("case", ["search order 1", "search order 2, stopped and resumed"])
def test_two_process_search_reaches_the_single_process_alpha_and_weights(runs, case):
    if case.startswith("search order 1"):
        one, two = _only_run_dir(runs["one"]), _only_run_dir(runs["two"])
    else:
        one, two = runs["one"] / "search2", runs["two"] / "search2"
    a = torch.load(one / "checkpoint.pt", weights_only=True)
    b = torch.load(two / "checkpoint.pt", weights_only=True)
    assert a["epoch"] == b["epoch"] == 2
    _assert_same_state(a["model"], b["model"])
    assert a["model"]["rnn.alpha"].abs().max() > 5e-3  # α moved far from its N(0, 1e-3) start: not a vacuous match
    log_one = [json.loads(line) for line in (one / "log.jsonl").read_text().splitlines()]
    log_two = [json.loads(line) for line in (two / "log.jsonl").read_text().splitlines()]
    assert len(log_two) == 2  # rank 1 wrote no second copy of the log lines
    for x, y in zip(log_one, log_two):
        assert x["train_ppl"] == pytest.approx(y["train_ppl"], rel=1e-9)  # the global token mean over both shards
        assert x["valid_ppl"] == pytest.approx(y["valid_ppl"], rel=1e-9)
        assert x["genotype"] == y["genotype"]


def test_two_process_random_search_and_enas_draw_and_find_what_one_process_does(tmp_path, lm_corpus_module):
    """Every rank draws the same cell for each batch (ENAS: learns the same controller), and the ranks' mean validation
    losses score the candidates as one process does; so the two runs end with the same weights, scores and cell."""
    _two_and_one(tmp_path, lm_corpus_module, weight_sharing_runs, "weight-sharing")
    for name in ("random", "enas"):
        one, two = tmp_path / "one" / name, tmp_path / "two" / name
        a = torch.load(one / "checkpoint.pt", weights_only=True)
        b = torch.load(two / "checkpoint.pt", weights_only=True)
        _assert_same_state(a["model"], b["model"])
        m1, m2 = (json.loads((d / "metrics.json").read_text()) for d in (one, two))
        assert [c["nodes"] for c in m1["candidates"]] == [c["nodes"] for c in m2["candidates"]]
        assert [c["valid_ppl"] for c in m1["candidates"]] == pytest.approx(
            [c["valid_ppl"] for c in m2["candidates"]], rel=1e-9
        )
        assert (
            m1["selected"] == m2["selected"] and load(one / "genotype.json").nodes == load(two / "genotype.json").nodes
        )
        assert m1["search_valid_ppl"] == pytest.approx(m2["search_valid_ppl"], rel=1e-9)
        if name == "enas":
            _assert_same_state(a["architects"]["reinforce"]["controller"], b["architects"]["reinforce"]["controller"])
            log_one, log_two = (
                [json.loads(line) for line in (d / "log.jsonl").read_text().splitlines()] for d in (one, two)
            )
            assert [r["controller"]["reward"] for r in log_one] == pytest.approx(
                [r["controller"]["reward"] for r in log_two], rel=1e-9
            )


def test_two_process_lm_training_reaches_the_single_process_weights(runs):
    one, two = runs["one"] / "train", runs["two"] / "train"
    for name in ("checkpoint.pt", "best.pt"):
        a = torch.load(one / name, weights_only=True)
        b = torch.load(two / name, weights_only=True)
        _assert_same_state(a["state_dict"], b["state_dict"])
    m1, m2 = (json.loads((d / "metrics.json").read_text()) for d in (one, two))
    assert m1["best_valid_ppl"] == pytest.approx(m2["best_valid_ppl"], rel=1e-9)
    assert m1["test_ppl"] == pytest.approx(m2["test_ppl"], rel=1e-9)
    assert len((two / "log.jsonl").read_text().splitlines()) == 2


def test_only_rank_0_writes_one_run_directory(runs):
    two = runs["two"]
    assert sorted(p.name for p in two.iterdir()) == ["diverged-0.txt", "diverged-1.txt", "runs", "search2", "train"]
    assert runs["stderr"].count("run directory: ") == 2  # search and train-lm; rank 1 printed nothing
    run = _only_run_dir(two)  # the default runs/search-<time>: one name, chosen by rank 0
    assert sorted(p.name for p in run.iterdir()) == [
        "checkpoint.pt",
        "config.json",
        "genotype.json",
        "log.jsonl",
        "metrics.json",
    ]
    assert load(run / "genotype.json").provenance["run_dir"] == "runs/" + run.name


def test_ranks_take_equal_column_shares_and_refuse_an_uneven_split():
    data = torch.arange(12).view(3, 4)
    assert Ranks(1, 2).columns(data).tolist() == [[2, 3], [6, 7], [10, 11]]
    hidden = (torch.zeros(1, 4, 3), torch.ones(2, 4, 3))
    assert [h.shape for h in Ranks(0, 2).columns(hidden)] == [(1, 2, 3), (2, 2, 3)]
    with pytest.raises(InputError, match="--batch-size 5: does not split evenly over 2 processes"):
        Ranks(0, 2).columns(torch.zeros(3, 5))


def test_diverged_ranks_stop_with_one_line(runs):
    messages = {(runs["two"] / f"diverged-{r}.txt").read_text() for r in (0, 1)}
    assert messages == {
        "ranks out of sync at the end of epoch 1: weight differs between rank 0 and rank 1 "
        "(checksum 0 vs 4); the last checkpoint was written before this point"
    }


def test_a_failing_seed_is_recorded_and_the_other_completes(lm_corpus_module, tmp_path):
    run = tmp_path / "seeds"
    (run / "seed-2" / "search").mkdir(parents=True)
    (run / "seed-2" / "search" / "checkpoint.pt").write_bytes(b"")  # seed 2's run directory is taken: it must fail
    small = (
        "--emsize 12 --batch-size 4 --bptt 8 --eval-batch-size 2 --max-batches-per-epoch 3 --eval-batches 2 --epochs 1"
    )
    args = [
        "--data",
        str(lm_corpus_module),
        *SEARCH,
        "--epochs",
        "1",
        "--max-batches-per-epoch",
        "3",
        "--seeds",
        "2,1",
        "--workers",
        "2",
        "--select-budget",
        "5",
        "--select-args",
        small,
        "--run-dir",
        str(run),
        "--out",
        str(tmp_path / "best.json"),
    ]
    result = CliRunner().invoke(search_lm, args, env={"OMP_NUM_THREADS": "1"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    board = json.loads((run / "leaderboard.json").read_text())
    assert [e["seed"] for e in board["entries"]] == [1, 2] and board["winner"] == 1 and board["pending"] == []
    ok, failed = board["entries"]
    assert failed["status"] == "failed" and failed["failed_stage"] == "search" and failed["exit_code"] == 2
    assert "already holds a run" in failed["error"] and failed["retrain_valid_ppl"] is None
    assert ok["status"] == "ok"
    assert (
        ok["retrain_valid_ppl"]
        == json.loads((run / "seed-1" / "retrain" / "metrics.json").read_text())["best_valid_ppl"]
    )
    assert (
        ok["search_valid_ppl"]
        == json.loads((run / "seed-1" / "search" / "metrics.json").read_text())["search_valid_ppl"]
    )
    best = load(tmp_path / "best.json")
    assert best.nodes == load(run / "seed-1" / "search" / "genotype.json").nodes == load(run / "genotype.json").nodes
    assert best.provenance["seed"] == 1 and best.provenance["selection"]["retrain_valid_ppl"] == ok["retrain_valid_ppl"]
    assert "seed 1: " in result.output and "seed 2: failed" in result.output


def test_leaderboard_ranks_by_retrained_perplexity_and_lists_failures_last():
    entries = [
        {"seed": 4, "status": "failed"},
        {"seed": 1, "status": "ok", "retrain_valid_ppl": 90.0},
        {"seed": 3, "status": "ok", "retrain_valid_ppl": 70.5},
    ]
    board = leaderboard(entries, [1, 2, 3, 4], 10.0)
    assert [e["seed"] for e in board["entries"]] == [3, 1, 4]
    assert board["winner"] == 3 and board["pending"] == [2]
    assert leaderboard([{"seed": 4, "status": "failed"}], [4], 10.0)["winner"] is None


def test_seeds_per_gpu_asks_ray_for_that_share_of_a_gpu_per_seed(tmp_path):
    from nas.runs.seeds import SeedRuns

    splits = {split: str(tmp_path / f"{split}.txt") for split in ("train", "valid", "test")}
    runs = lambda device, per_gpu, workers=3: SeedRuns(
        tmp_path,
        [1, 2, 3],
        workers,
        [],
        splits,
        device,
        1.0,
        [],  # noqa: E731
        "cmd",
        seeds_per_gpu=per_gpu,
    )
    assert [runs("cuda", 3)._job(s).gpus for s in (1, 2, 3)] == [pytest.approx(1 / 3)] * 3
    assert runs("cuda:1", 1)._job(1).gpus == 1.0
    assert runs("cpu", 1)._job(1).gpus == 0.0
    with pytest.raises(InputError, match=r"--seeds-per-gpu 2: only with --device cuda and seeds run on Ray"):
        runs("cpu", 2)
    with pytest.raises(InputError, match=r"--seeds-per-gpu 2: only with --device cuda"):
        runs("cuda", 2, workers=1)


def test_seeds_per_gpu_without_seeds_is_refused(lm_corpus_module, tmp_path):
    result = CliRunner().invoke(
        search_lm, ["--data", str(lm_corpus_module), "--seeds-per-gpu", "2", "--run-dir", str(tmp_path / "run")]
    )
    assert result.exit_code == 2
    assert "error: --seeds-per-gpu: only with --seeds (it places several seeds' searches on one GPU)" in result.output
