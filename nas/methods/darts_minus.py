"""DARTS−: DARTS with an auxiliary skip on every edge whose weight β decays to 0.

Chu, Wang, Zhang, Lu, Wei, Yan. "DARTS-: Robustly Stepping out of Performance Collapse
Without Indicators." ICLR 2021, arXiv:2009.01027. Each edge's output is the DARTS mixture plus
β times a skip of its input, β falling linearly from --aux-skip-start (the paper's 1) in the
first epoch to 0 in the last; the skip takes over the residual role that lets the skip op win
the softmax unfairly, and is gone by the time the cell is derived (from the softmax alone).

How the skip maps onto the recurrent space: the RNN cell has no parameter-free skip op; its
edges are highways, s_j = (1 − c)·s_i + c·f(h), and the op collapse of these searches is to
`identity` (f(h) = h). The auxiliary skip here is that identity edge: the mixing weights are
softmax(α_edge) + β·e_identity, so every edge adds β times its identity highway, with the edge's
own projection, to its mixture (the DARTS search cell's BatchNorm then normalises the node as it
does any mixture). That is the space's skip op, not a bare copy of s_i. The log's α shares
(`alpha_share`) count β in identity's share while β > 0; MAD and the derived cell do not.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nas.cells.ops import OPS, Layout
from nas.methods.base import Scoring
from nas.cells.mixing import Nodes
from nas.methods.settings import SearchSettings
from nas.cells.mixing import SoftmaxPerEdge
from .scheduled import ScheduledDarts
from .settings import DartsMinusSettings

IDENTITY = OPS.index("identity")


class SoftmaxWithSkip(SoftmaxPerEdge):
    """DARTS's softmax per edge plus `beta` on each edge's identity op; the cell is derived from the softmax alone."""

    def __init__(self, beta: float = 0.0):
        self.beta = beta

    def skip(self, like: torch.Tensor) -> torch.Tensor:
        return self.beta * F.one_hot(torch.tensor(IDENTITY, device=like.device), like.size(-1)).to(like.dtype)

    def normalise(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        return F.softmax(alpha, dim=-1) + self.skip(alpha)

    def derive(self, weights: torch.Tensor, layout: Layout, top_n: int = 1) -> Nodes:
        return super().derive(weights - self.skip(weights), layout, top_n)


class DartsMinus(ScheduledDarts):
    settings: DartsMinusSettings
    rule = SoftmaxWithSkip()  # β = 0: the rule that reads a log's α (each layer gets its own, whose β moves)

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, **kwargs):
        super().__init__(config, model, full_epoch, **kwargs)
        self.set_beta()

    def set_beta(self) -> None:
        beta = self.scheduled(self.settings.aux_skip_start, 0.0)
        for rule in self.rules:
            rule.beta = beta

    def after_batches(self, validation: Scoring) -> None:
        super().after_batches(validation)
        self.set_beta()

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.set_beta()
