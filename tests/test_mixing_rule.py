"""A search method with a mixing rule of its own, added in this one file: sparsemax per edge
(Martins & Astudillo, "From Softmax to Sparsemax", ICML 2016, arXiv:1602.02068) instead of DARTS's
softmax. It runs a whole search through the unchanged loop, layer and registry of `nas`."""

from __future__ import annotations

import json

import torch

from nas.common.runs import RunDir
from nas.common.splits import find_splits
from nas.cells import genotype
from nas.runs.config import SearchConfig
from nas.lm.corpus import Corpus
from nas.methods import METHODS, Entry
from nas.cells.mixing import SoftmaxPerEdge
from nas.methods.darts import Darts
from nas.runs.search import Searcher


def sparsemax(z: torch.Tensor) -> torch.Tensor:
    """The Euclidean projection of each row of z onto the probability simplex (the paper's Alg. 1)."""
    ordered, _ = z.sort(-1, descending=True)
    k = torch.arange(1, z.size(-1) + 1, dtype=z.dtype)
    cumulative = ordered.cumsum(-1)
    support = (1 + k * ordered > cumulative).sum(-1, keepdim=True)
    tau = (cumulative.gather(-1, support - 1) - 1) / support
    return torch.clamp(z - tau, min=0)


class SparsemaxPerEdge(SoftmaxPerEdge):
    """Sparsemax over each edge's ops; derived as DARTS derives (the inherited `derive`); MAD: nas.cells.mixing"""

    def normalise(self, alpha, layout):
        return sparsemax(alpha)


class Sparsemax(Darts):
    rule = SparsemaxPerEdge()


def test_sparsemax_by_hand():
    assert torch.allclose(sparsemax(torch.tensor([[0.5, 0.2, -1.0]])), torch.tensor([[0.65, 0.35, 0.0]]))


def test_a_method_with_its_own_mixing_rule_searches_end_to_end(lm_corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(METHODS, "sparsemax", Entry(lambda: Sparsemax, "sparsemax per edge"))
    paths = find_splits(lm_corpus)
    config = SearchConfig(
        train=str(paths["train"]),
        valid=str(paths["valid"]),
        test=str(paths["test"]),
        method="sparsemax",
        emsize=12,
        nhid=12,
        nodes=3,
        batch_size=4,
        bptt=8,
        eval_batch_size=2,
        max_batches_per_epoch=6,
        lr=2.0,
        order=1,
        epochs=2,
        arch_lr=0.3,
        seed=5,
    )
    config.validate()
    run = RunDir(tmp_path / "run")
    searcher = Searcher(config, run, Corpus.load(paths))
    searcher.start()
    alpha = searcher.rnn.alpha.detach().clone()
    geno = searcher.run()

    rnn = searcher.rnn
    assert not torch.equal(rnn.alpha, alpha)  # α stepped through the sparsemax
    weights = rnn.mixing_weights()
    assert torch.equal(weights, sparsemax(rnn.alpha))
    assert torch.allclose(weights.sum(1), torch.ones(len(weights))) and (weights == 0).any()  # sparse
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2] and all(r["mad"] > 0 for r in log)
    assert geno.name == "sparsemax_search_seed5" and geno.provenance["method"] == "sparsemax"
    assert (
        genotype.load(tmp_path / "run" / "genotype.json").nodes
        == geno.nodes
        == tuple(tuple(node) for node in Darts.rule.derive(weights, 3))
    )
