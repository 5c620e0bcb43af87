"""Whole steps recorded as CUDA graphs (`nas.fast.graphs`) compute what the eager steps compute.

On the CPU the recorded path of the search (`Searcher.device_step`: α step and weight step as GPU
work alone, checked after the replay) is run through a stand-in that calls the step eagerly: the
run must equal the eager path's bit for bit. On a GPU the real recordings are checked against eager
steps: a small training step replayed, and a search whose steps and validation chunks are replayed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import nas.runs.search
from conftest import write_lm_corpus
import nas.runs.train
from nas.cli.search_lm import main as search_lm
from nas.cli.train_lm import main as train_lm
from nas.fast.backends import CpuFused
from nas.fast.graphs import StepGraphs

TINY_LM = [
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
    "--max-batches-per-epoch",
    "6",
    "--epochs",
    "6",
    "--nonmono",
    "1",
    "--seed",
    "3",
    "--lr",
    "20",
]  # DARTS's lr 20: validation worsens in epoch 4 on this corpus, so ASGD from epoch 5
TINY = [
    "--emsize",
    "12",
    "--nhid",
    "12",
    "--nodes",
    "3",
    "--batch-size",
    "4",
    "--bptt",
    "8",
    "--eval-batch-size",
    "2",
    "--max-batches-per-epoch",
    "6",
    "--lr",
    "2",
    "--epochs",
    "2",
    "--seed",
    "3",
]
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class CallsEagerly:
    """StepGraphs' interface, stepping eagerly: the recorded path's logic without a GPU."""

    calls = 0

    def __call__(self, key, step, *inputs):
        CallsEagerly.calls += 1
        return step(*inputs)

    def clear(self) -> None:
        pass

    @staticmethod
    def make_capturable(optimizer) -> None:  # CPU optimisers can't be
        pass


def search(run_dir: Path, corpus: Path, *extra: str) -> tuple[list[dict], dict]:
    result = CliRunner().invoke(
        search_lm, ["--data", str(corpus), "--run-dir", str(run_dir), *TINY, *extra], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    return log, torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=True)["model"]


def train(run_dir: Path, corpus: Path, *extra: str) -> tuple[list[dict], dict, dict]:
    result = CliRunner().invoke(
        train_lm, ["--data", str(corpus), "--run-dir", str(run_dir), *TINY_LM, *extra], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    for record in log:
        record.pop("seconds"), record.pop("tokens_per_s"), record.pop("elapsed")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return log, torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=True)["state_dict"], metrics


def records_eagerly(monkeypatch) -> None:
    """Searches and trainings on the CPU's backend take the recorded path (the backend says it captures steps),
    stepping eagerly through `CallsEagerly`."""
    monkeypatch.setattr(CpuFused, "captures", lambda self, device, parallel: True)
    monkeypatch.setattr(CpuFused, "step_graphs", lambda self: CallsEagerly(), raising=False)
    CallsEagerly.calls = 0


def test_the_recorded_search_step_is_the_eager_step(tmp_path, monkeypatch):
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=120, other_lines=40)
    eager_log, eager_weights = search(tmp_path / "eager", corpus)
    records_eagerly(monkeypatch)
    recorded_log, recorded_weights = search(tmp_path / "recorded", corpus)
    assert CallsEagerly.calls >= 2 * 6  # every bilevel step and every validation chunk went through it
    for record in (*eager_log, *recorded_log):
        record.pop("seconds"), record.pop("tokens_per_s")
    assert recorded_log == eager_log
    assert recorded_weights.keys() == eager_weights.keys()
    assert all(torch.equal(recorded_weights[k], eager_weights[k]) for k in eager_weights)


def test_the_recorded_lm_training_step_is_the_eager_step_through_the_switch_to_asgd(tmp_path, monkeypatch):
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=120, other_lines=40)
    eager = train(tmp_path / "eager", corpus)
    records_eagerly(monkeypatch)
    recorded = train(tmp_path / "recorded", corpus)
    assert CallsEagerly.calls >= 4 * 6
    assert "ASGD" in [r["optimizer"] for r in eager[0]]  # the switch, and the optimiser it brings, were exercised
    assert recorded[0] == eager[0]
    assert all(torch.equal(recorded[1][k], eager[1][k]) for k in eager[1])
    assert recorded[2]["test_ppl"] == eager[2]["test_ppl"]


@NEEDS_CUDA
def test_a_replayed_training_step_equals_the_eager_steps():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 4))
    models = [model.cuda(), copy.deepcopy(model).cuda()]
    optimisers = [torch.optim.Adam(m.parameters(), lr=1e-2, capturable=True) for m in models]

    def step(m, opt):
        def run(x, y):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        return run

    graphs = StepGraphs(warmup=2)
    state = torch.cuda.get_rng_state()
    generator = torch.Generator("cpu").manual_seed(1)
    batches = [
        (torch.randn(n, 16, generator=generator).cuda(), torch.randint(4, (n,), generator=generator).cuda())
        for n in [8] * 6 + [5] * 4
    ]
    replayed = [float(graphs("train", step(models[0], optimisers[0]), x, y)) for x, y in batches]
    assert graphs.recorded() == 2  # one per batch shape, after two warm-up calls each
    torch.cuda.set_rng_state(state)
    eager = [float(step(models[1], optimisers[1])(x, y)) for x, y in batches]
    assert replayed == pytest.approx(eager, rel=1e-5)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@NEEDS_CUDA
def test_a_search_on_the_gpu_replays_its_steps_and_ends_where_the_eager_search_ends(tmp_path, monkeypatch):
    """Without dropout (no random numbers) the two runs differ only by the GPU's summation order."""
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=120, other_lines=40)
    no_dropout = ["--device", "cuda", "--dropout", "0", "--dropout-h", "0", "--dropout-x", "0", "--dropout-i", "0"]
    recorded_log, recorded_weights = search(tmp_path / "recorded", corpus, *no_dropout)
    monkeypatch.setattr(nas.runs.search.graphs, "usable", lambda device, parallel: False)
    eager_log, eager_weights = search(tmp_path / "eager", corpus, *no_dropout)
    assert [r["valid_ppl"] for r in recorded_log] == pytest.approx([r["valid_ppl"] for r in eager_log], rel=1e-4)
    assert [r["genotype"] for r in recorded_log] == [r["genotype"] for r in eager_log]
    for name, value in eager_weights.items():
        torch.testing.assert_close(recorded_weights[name], value, rtol=1e-3, atol=1e-5)


@NEEDS_CUDA
@pytest.mark.parametrize("backend", ["auto", "cuda-loop"])  # cuda-loop: the frozen cell's Triton kernels in the graphs
def test_lm_training_on_the_gpu_replays_its_steps_and_ends_where_the_eager_training_ends(
    backend, tmp_path, monkeypatch
):
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=120, other_lines=40)
    no_dropout = [
        "--device",
        "cuda",
        "--dropout",
        "0",
        "--dropout-h",
        "0",
        "--dropout-x",
        "0",
        "--dropout-i",
        "0",
        "--backend",
        backend,
    ]
    recorded = train(tmp_path / "recorded", corpus, *no_dropout)
    monkeypatch.setattr(nas.runs.train.graphs, "usable", lambda device, parallel: False)
    eager = train(tmp_path / "eager", corpus, *no_dropout)
    assert [r["valid_ppl"] for r in recorded[0]] == pytest.approx([r["valid_ppl"] for r in eager[0]], rel=1e-4)
    assert [r["optimizer"] for r in recorded[0]] == [r["optimizer"] for r in eager[0]]
    assert recorded[2]["test_ppl"] == pytest.approx(eager[2]["test_ppl"], rel=1e-4)
