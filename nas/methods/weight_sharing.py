"""Search by weight sharing (random search, ENAS): the search cell trains on one drawn architecture per batch.

The shared weights are those of the DARTS search cell (`SearchRNN`: W0 and one W_i per node,
shared by every edge into node i). `SampledRNN` runs the drawn cell on them, each node reading one
predecessor through one op (what one-hot mixing weights would compute, without the zeroed work),
and without the search cell's BatchNorm, so it computes exactly the frozen cell of that genotype (`FrozenRNN`) on the
shared weights, dropout masks
included: the shared model of Li & Talwalkar (the DARTS cell, its genotype set per batch) and of
ENAS, neither of which normalises. DARTS needs the BatchNorm to keep its mixture of ops at one
scale; one architecture at a time has no mixture, and in eval mode the running statistics of a
BatchNorm that saw differently shaped architectures rescale h at every step, which makes the
recurrence diverge (a NaN validation perplexity after two tiny epochs when we kept it). A method draws the architecture
of each batch (`draw`) from its own generator,
seeded by --seed and the same on every rank, so under torchrun every rank trains the same
architecture; the generator's state goes into the checkpoint, and the architecture in use is a
buffer of the layer, so a resumed search draws what an uninterrupted one would. At the end it
scores --candidates architectures (`candidates`, `score`) with the shared weights and keeps the best.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn as nn

from nas.cells.attention import SearchAttention
from nas.cells.cell import first_node, highway
from nas.cells.genotype import Genotype
from nas.cells.ops import ACTIVATIONS, OPS, edge_offsets
from nas.cells.search_cell import SearchRNN
from nas.common.errors import InputError
from nas.common.stats import ppl
from nas.methods.architect import Architect, Batch
from nas.methods.sampling import Space
from nas.methods.settings import SearchSettings
from .base import Conclusion, Scoring, SearchMethod
from nas.cells.mixing import SoftmaxPerEdge


class SampledRNN(SearchRNN):
    """The search cell running one architecture at a time (`use`): its mixing weights are that architecture's one-hot.

    It has no α and no BatchNorm; before the first `use` every weight is zero and the nodes are empty.
    DARTS's rule derives the drawn cell back from the one-hot weights.
    """

    def __init__(
        self,
        ninp: int,
        nhid: int,
        steps: int,
        dropout_x: float = 0.0,
        dropout_h: float = 0.0,
        attention: nn.Module | None = None,
    ):
        super().__init__(ninp, nhid, steps, SoftmaxPerEdge(), dropout_x, dropout_h, None, attention)
        choice = torch.zeros_like(self.alpha)
        del self.alpha
        self.bn = nn.ModuleList(nn.Identity() for _ in self.bn)
        self.register_buffer("choice", choice)  # in the checkpoint: the architecture in use when it was written

    def use(self, genotype: Genotype) -> None:
        """Run `genotype`'s cell from now on (one input per node, concat = all nodes)."""
        rows = edge_offsets(self.steps)
        choice = torch.zeros(self.choice.shape)  # built on the CPU, copied to the device in one go
        for i, ((op, pred),) in enumerate(genotype.nodes):
            choice[rows[i] + pred, OPS.index(op)] = 1.0
        self.choice.copy_(choice)

    def mixing_weights(self) -> torch.Tensor:
        return self.choice

    def step_function(self, mh: torch.Tensor | None, w0h: torch.Tensor) -> Callable:
        """The drawn cell's own step: per node one GEMM of its one predecessor and one op, not the
        mixture of every edge and op that one-hot weights would zero out (the same values, a
        fraction of the work)."""
        pairs = self.choice.nonzero().tolist()  # (edge row, op column): one per node, in node order
        if len(pairs) != self.steps:  # before the first `use`: no cell yet, every weight zero
            return super().step_function(mh, w0h)
        rows = edge_offsets(self.steps)
        nodes = [(row - rows[i], OPS[col]) for i, (row, col) in enumerate(pairs)]
        ws = list(self.ws)
        return lambda xp, h: sampled_step(xp, h, mh, w0h, ws, nodes)


def sampled_step(
    xp: torch.Tensor,
    h: torch.Tensor,
    mh: torch.Tensor | None,
    w0h: torch.Tensor,
    ws: list[torch.Tensor],
    nodes: list[tuple[int, str]],
) -> torch.Tensor:
    """One time step of a cell with one (predecessor, op) per node on the shared weights: the
    frozen cell's equations (`nas.cells.cell`), s_i = s_j + σ(c)(op(h) − s_j), [c | h] = (s_j⊙m_h)·W_i."""
    H = h.size(-1)
    states = [first_node(xp, (h if mh is None else h * mh) @ w0h, h)]
    for w, (pred, op) in zip(ws, nodes):
        prev = states[pred]
        c, hh = ((prev if mh is None else prev * mh) @ w).split(H, -1)
        states.append(highway(prev, c, ACTIVATIONS[op](hh)))
    return torch.stack(states[1:]).mean(0)


class WeightSharing(SearchMethod):
    """What random search and ENAS share: the layer, the draw of each batch's architecture, the final choice."""

    records_steps = False  # each batch runs the cell it draws
    candidate_scoring = ""  # which part of the validation data a candidate's `valid_ppl` in metrics.json is scored on

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, **kwargs):
        super().__init__(config, model, full_epoch, **kwargs)
        self.layers = [m for m in model.modules() if isinstance(m, SampledRNN)]  # the tagger's: one per direction
        self.rng = torch.Generator().manual_seed(config.seed)  # the same draws on every rank
        self.space = Space(nodes=config.nodes)
        self.parallel_scoring: Callable[[Sequence[Genotype]], list[float]] | None = None

    @classmethod
    def layer(cls, config: SearchSettings, attention: nn.Module | None) -> nn.Module:
        c = config
        if isinstance(attention, SearchAttention):
            raise InputError(
                f"--attention search: --method {c.method} draws the cell only; "
                "give a fixed type (dot, multihead) or none"
            )
        return SampledRNN(c.emsize, c.nhid, c.nodes, c.dropoutx, c.dropouth, attention)

    def make_architects(self, model: nn.Module) -> dict[str, Architect]:
        return {}

    def use(self, genotype: Genotype) -> None:
        """Run `genotype`'s cell in every layer of the model from now on."""
        for layer in self.layers:
            layer.use(genotype)

    def draw(self) -> Genotype:
        """The architecture of the next batch."""
        raise NotImplementedError

    def candidates(self) -> Sequence[Genotype]:
        """The architectures scored at the end."""
        raise NotImplementedError

    def score(self, validation: Scoring) -> float:
        """The validation NLL of the architecture in use, by which the candidates are ranked."""
        raise NotImplementedError

    def step_alpha(self, batch: int, train: Batch, train_hidden, valid: Batch, valid_hidden, eta: float):
        """No α: the batch's architecture is drawn instead."""
        self.use(self.draw())
        return valid_hidden

    def record(self, rnn: nn.Module) -> dict:
        return {}

    def state(self) -> dict:
        return {"rng": self.rng.get_state()}

    def load_state(self, state: dict) -> None:
        self.rng.set_state(state["rng"])

    def score_all(self, genotypes: Sequence[Genotype], validation: Scoring) -> list[float]:
        """Each architecture's `score` (a validation NLL), run in turn on the shared weights, or by
        `parallel_scoring` (the search sets it to score on Ray workers: `nas.runs.candidates`)."""
        if self.parallel_scoring is not None:
            return self.parallel_scoring(genotypes)
        scores = []
        for genotype in genotypes:
            self.use(genotype)
            scores.append(self.score(validation))
        return scores

    def conclude(self, rnn: nn.Module, validation: Scoring) -> Conclusion:
        """The candidate scoring best, with every candidate's score, and its perplexity on the epoch's validation."""
        candidates = self.candidates()
        scored = list(zip(self.score_all(candidates, validation), candidates))
        best = min(range(len(scored)), key=lambda k: scored[k][0])
        self.use(scored[best][1])
        ppls = sorted(ppl(nll) for nll, _ in scored)
        metrics = {
            "candidates": [{"valid_ppl": ppl(nll), "nodes": genotype.to_dict()["nodes"]} for nll, genotype in scored],
            "selected": best,
            "candidate_scoring": f"{validation.description}; {self.candidate_scoring}",
            "candidate_ppl": {"best": ppls[0], "median": ppls[len(ppls) // 2], "worst": ppls[-1]},
        }
        return Conclusion(self.derive(rnn), ppl(validation.full()), metrics)
