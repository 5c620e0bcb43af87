"""Random search with weight sharing and ENAS (nas.methods.random_search, nas.methods.enas, nas.methods.controller):
the shared layer against the frozen cell, REINFORCE on a toy reward, exact resume, and the command end to end."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from click.testing import CliRunner

from nas.common.runs import Interrupted, RunDir
from nas.common.splits import find_splits
from nas.cells import genotype
from nas.cells.cell import FrozenRNN
from nas.cli.search_lm import main as search_lm
from nas.runs.config import SearchConfig
from nas.methods.controller import Controller, Reinforce
from nas.lm.corpus import Corpus
from nas.cells.genotype import Genotype
from nas.pictures.plots import plot_search
from nas.methods.weight_sharing import SampledRNN
from nas.methods.sampling import CANDIDATE_OPS, Space, sample
from nas.runs.search import Searcher

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
]


def cell(pairs: list[tuple[str, int]]) -> Genotype:
    """A cell of one input (op, predecessor) per node, every node in the output."""
    return Genotype(tuple(((op, pred),) for op, pred in pairs), tuple(range(1, len(pairs) + 1)))


def _shared_and_frozen(geno: Genotype, ninp: int, nhid: int, dropout: float) -> tuple[SampledRNN, FrozenRNN]:
    shared = SampledRNN(ninp, nhid, geno.steps, dropout, dropout)
    shared.use(geno)
    frozen = FrozenRNN(geno, ninp, nhid, 1, dropout, dropout)
    with torch.no_grad():
        frozen.w0.copy_(shared.w0.unsqueeze(0))
        frozen.ws.copy_(torch.stack(list(shared.ws)).unsqueeze(0))
    return shared, frozen


@pytest.mark.parametrize("mode", ["eval", "train with dropout"])
def test_shared_layer_running_a_drawn_cell_is_the_frozen_cell_on_the_same_weights(mode):
    torch.manual_seed(0)
    rng = random.Random(5)
    genos = [sample(Space(nodes=5), rng) for _ in range(3)]
    assert len({g.nodes for g in genos}) == 3
    x, h = torch.randn(7, 3, 6), torch.randn(1, 3, 4)
    outputs = []
    for geno in genos:
        shared, frozen = _shared_and_frozen(geno, 6, 4, 0.3)
        shared.train(mode != "eval")
        frozen.train(mode != "eval")
        torch.manual_seed(1)  # the same variational masks: both draw m_x then m_h of the same sizes
        out, last = shared(x, h)
        torch.manual_seed(1)
        expected, expected_last = frozen(x, h)
        assert torch.allclose(out, expected, rtol=1e-5, atol=1e-6)
        assert torch.allclose(last, expected_last, rtol=1e-5, atol=1e-6)
        assert shared.genotype().nodes == geno.nodes  # the layer derives the cell it runs
        outputs.append(out)
    assert not torch.allclose(outputs[0], outputs[1], atol=1e-3)  # the drawn cells do differ


def _p_node2_reads_s0_through_relu(controller: Controller) -> float:
    """The exact marginal probability, summing over node 1's op (its predecessor is always s0)."""
    with torch.no_grad():
        return sum(math.exp(float(controller.log_prob(cell([(op, 0), ("relu", 0)])))) for op in CANDIDATE_OPS)


def test_reinforce_moves_the_controller_toward_the_rewarded_cell():
    torch.manual_seed(3)
    controller = Controller(nodes=2)
    # ENAS's entropy weight and baseline decay; a larger lr than ENAS's 3.5e-4 so that 150 steps suffice
    reinforce = Reinforce(controller, lr=0.02, entropy_weight=1e-4, baseline_decay=0.99)
    before = _p_node2_reads_s0_through_relu(controller)
    assert before == pytest.approx(1 / 8, abs=0.02)  # starts near uniform: 2 predecessors × 4 ops
    rng = torch.Generator().manual_seed(0)
    rewarded = 0
    for _ in range(150):
        s = controller.sample(rng)
        hit = s.genotype.nodes[1] == (("relu", 0),)
        rewarded += hit
        reinforce.step(s, 1.0 if hit else 0.0)
    after = _p_node2_reads_s0_through_relu(controller)
    assert after > 0.6 and rewarded > 150 / 8 * 2
    with torch.no_grad():
        assert controller.greedy().nodes[1] == (("relu", 0),)


def test_controller_samples_follow_its_log_prob():
    """Frequencies of 4000 samples of a 2-node controller match exp(log_prob) over all 32 cells (the policy is a
    distribution).
    """
    torch.manual_seed(4)
    controller = Controller(nodes=2)
    with torch.no_grad():
        controller.op_logits.weight.normal_(0, 20)  # a policy far from uniform, so a mismatch would show
        controller.score.weight.normal_(0, 20)
        cells = [cell([(a, 0), (b, p)]) for a in CANDIDATE_OPS for b in CANDIDATE_OPS for p in (0, 1)]
        probs = [math.exp(float(controller.log_prob(c))) for c in cells]
        rng = torch.Generator().manual_seed(1)
        counts = {c.nodes: 0 for c in cells}
        for _ in range(4000):
            counts[controller.sample(rng).genotype.nodes] += 1
    assert sum(probs) == pytest.approx(1.0, abs=1e-5)
    assert max(probs) > 0.1
    for c, p in zip(cells, probs):
        assert abs(counts[c.nodes] / 4000 - p) < 4 * math.sqrt(p * (1 - p) / 4000) + 1e-3


def _searcher(corpus, run_dir, method, epochs=2, **settings):
    paths = find_splits(corpus)
    small = dict(
        emsize=12,
        nhid=12,
        nodes=3,
        batch_size=4,
        bptt=8,
        eval_batch_size=2,
        max_batches_per_epoch=6,
        lr=2.0,
        candidates=4,
        controller_steps=5,
        eval_batches=4,
    )
    config = SearchConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        epochs=epochs,
        method=method,
        **{**small, **settings},
    )
    config.validate()
    return RunDir(run_dir), Searcher(config, RunDir(run_dir), Corpus.load(paths))


@pytest.mark.parametrize(
    "method,stop",
    [("random", (1, 3)), ("random", (0, 6)), ("enas", (1, 3))],
    ids=["random mid-epoch", "random after an epoch's last batch", "enas mid-epoch"],
)
def test_resume_after_interruption_gives_the_same_search(lm_corpus, tmp_path, method, stop):
    run, straight = _searcher(lm_corpus, tmp_path / "straight", method)
    run.start({})
    expected = straight.run()

    run, first = _searcher(lm_corpus, tmp_path / "interrupted", method)
    run.start({})
    with pytest.raises(Interrupted):
        first.run(on_batch=lambda s: s.stop.request() if (s.epoch, s.batch) == stop else None)
    _, resumed = _searcher(lm_corpus, tmp_path / "interrupted", method)
    resumed.load_state(run.load_checkpoint())
    assert (resumed.epoch, resumed.batch) == stop
    found = resumed.run()
    assert found.nodes == expected.nodes
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("straight", "interrupted"))
    assert a["candidates"] == b["candidates"] and len(a["candidates"]) == 4
    assert a["search_valid_ppl"] == b["search_valid_ppl"]
    assert torch.equal(resumed.rnn.w0, straight.rnn.w0)
    if method == "enas":
        for p, q in zip(resumed.method.controller.parameters(), straight.method.controller.parameters()):
            assert torch.equal(p, q)
        assert resumed.method.reinforce.baseline == straight.method.reinforce.baseline
    logs = [
        [json.loads(line) for line in (tmp_path / d / "log.jsonl").read_text().splitlines()]
        for d in ("straight", "interrupted")
    ]
    assert [r["genotype"] for r in logs[0]] == [r["genotype"] for r in logs[1]]
    assert [r["valid_ppl"] for r in logs[0]] == [r["valid_ppl"] for r in logs[1]]


def test_bf16_search_steps_in_bf16_and_keeps_the_controller_in_fp32(lm_corpus, tmp_path):
    run, searcher = _searcher(lm_corpus, tmp_path / "run", "enas", epochs=1, precision="bf16")
    run.start({})
    seen = set()  # (dtype of the logits, grad enabled): training steps and evaluation
    searcher.model.decoder.register_forward_hook(lambda m, i, out: seen.add((out.dtype, torch.is_grad_enabled())))
    searcher.run()
    assert (torch.bfloat16, True) in seen and (torch.float32, False) in seen and (torch.float32, True) not in seen
    assert all(p.dtype == torch.float32 for p in searcher.method.controller.parameters())
    assert math.isfinite(json.loads((tmp_path / "run" / "metrics.json").read_text())["search_valid_ppl"])


@pytest.mark.parametrize("method", ["random", "enas"])
def test_search_command_writes_a_genotype_that_loads_and_every_candidate(lm_corpus, tmp_path, method):
    run_dir, out = tmp_path / "run", tmp_path / "cell.json"
    extra = ["--controller-steps", "4"] if method == "enas" else []
    result = CliRunner().invoke(
        search_lm,
        [
            "--data",
            str(lm_corpus),
            "--method",
            method,
            "--epochs",
            "2",
            "--candidates",
            "5",
            "--run-dir",
            str(run_dir),
            "--out",
            str(out),
            *extra,
            *TINY,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    cell = genotype.load(out)
    assert cell == genotype.load(run_dir / "genotype.json")
    assert cell.steps == 3 and all(len(node) == 1 for node in cell.nodes)
    assert cell.name == f"{method}_search_seed1" and cell.provenance["method"] == method
    metrics = json.loads((run_dir / "metrics.json").read_text())
    scores = [c["valid_ppl"] for c in metrics["candidates"]]
    assert len(scores) == 5 and metrics["selected"] == scores.index(min(scores))
    assert metrics["candidates"][metrics["selected"]]["nodes"] == cell.to_dict()["nodes"]
    assert metrics["candidate_ppl"]["best"] == min(scores) and metrics["candidate_ppl"]["worst"] == max(scores)
    assert cell.provenance["search_valid_ppl"] == metrics["search_valid_ppl"] > 1
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2] and "alpha" not in log[0]
    if method == "enas":
        controller = log[-1]["controller"]
        assert controller["steps"] == 4 and 0 < controller["greedy_prob"] <= 1
        assert 0 < controller["reward"] < 80  # 80 / ppl, and a perplexity is above 1
    model = torch.load(run_dir / "checkpoint.pt", weights_only=True)["model"]
    assert "rnn.alpha" not in model and not any("bn" in k for k in model)
    assert f"best of 5 candidates: valid ppl {min(scores):.1f}" in result.stderr
    if method == "random":  # pictures of a search without α: the cell and the perplexities
        assert sorted(p.name for p in plot_search(run_dir)) == [
            "cell.png",
            "cell.svg",
            "valid_ppl.png",
            "valid_ppl.svg",
        ]


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--method", "random", "--order", "2"], "--order: this method has no α step"),
        (["--method", "darts", "--candidates", "5"], "--candidates: only with --method random or enas"),
        (["--method", "random", "--controller-steps", "5"], "--controller-steps: only with --method enas"),
        (["--method", "enas", "--baseline-decay", "1"], "--baseline-decay: must be in [0, 1), got 1.0"),
        (["--method", "enas", "--candidates", "0"], "--candidates: must be in [1, 1000000], got 0"),
        (["--method", "enas", "--attention", "search"], "--attention search: --method enas draws the cell only"),
        (
            ["--method", "darts", "--workers", "2"],
            "--workers 2 without --seeds: scores candidates on several workers, "
            "which random search and ENAS do and --method darts does not",
        ),
    ],
)
def test_flags_that_do_not_fit_give_one_line(lm_corpus, tmp_path, args, expected):
    result = CliRunner().invoke(search_lm, ["--data", str(lm_corpus), "--run-dir", str(tmp_path / "run"), *args, *TINY])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and expected in result.stderr
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_candidates_scored_on_two_ray_workers_get_the_scores_of_one_process(lm_corpus, tmp_path):
    ray = pytest.importorskip("ray")
    metrics, logs = {}, {}
    try:
        for workers in (1, 2):
            run_dir = tmp_path / f"workers-{workers}"
            result = CliRunner().invoke(
                search_lm,
                [
                    "--data",
                    str(lm_corpus),
                    "--method",
                    "random",
                    "--epochs",
                    "2",
                    "--candidates",
                    "5",
                    "--track-candidates",
                    "3",
                    "--workers",
                    str(workers),
                    "--run-dir",
                    str(run_dir),
                    *TINY,
                ],
                catch_exceptions=False,
            )
            assert result.exit_code == 0, result.output
            assert ray.is_initialized() == (workers == 2)  # the candidates went to Ray only when asked
            metrics[workers] = json.loads((run_dir / "metrics.json").read_text())
            logs[workers] = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    finally:
        ray.shutdown()
    assert metrics[2]["candidates"] == metrics[1]["candidates"] and metrics[2]["selected"] == metrics[1]["selected"]
    assert [(r["best_candidate"], r["best_candidate_ppl"], r["panel_median_ppl"]) for r in logs[2]] == [
        (r["best_candidate"], r["best_candidate_ppl"], r["panel_median_ppl"]) for r in logs[1]
    ]
