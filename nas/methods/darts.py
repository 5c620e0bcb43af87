"""DARTS (Liu et al. 2019): every edge of the cell mixes all ops with a softmax per edge (DARTS's model_search.py)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nas.cells.ops import OPS, Layout, edge_offsets
from nas.cells.search_cell import SearchRNN
from nas.cells.mixing import MixingRule, Nodes
from nas.methods.settings import SearchSettings
from .base import SearchMethod


class SoftmaxPerEdge(MixingRule):
    """DARTS's rule: a softmax over each edge's ops; per node, the predecessor whose best op other
    than `none` weighs most is kept, with that op (one input per node, whatever `top_n`)."""

    def normalise(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        return F.softmax(alpha, dim=-1)

    def derive(self, weights: torch.Tensor, layout: Layout, top_n: int = 1) -> Nodes:
        off, w = edge_offsets(layout), weights.detach().cpu()
        nodes = []
        for i in range(len(off) - 1):
            best, op = w[off[i] : off[i + 1], 1:].max(dim=1)  # (predecessors,) over the ops without none
            pred = int(best.argmax())
            nodes.append([(OPS[1 + int(op[pred])], pred)])
        return nodes


class Darts(SearchMethod):
    rule: MixingRule = SoftmaxPerEdge()  # how the search cell mixes its ops and derives its cell

    @classmethod
    def layer(cls, config: SearchSettings, attention: nn.Module | None) -> nn.Module:
        return cls.search_cell(config, None, attention)

    @classmethod
    def search_cell(cls, c: SearchSettings, inter: nn.Module | None, attention: nn.Module | None) -> SearchRNN:
        return SearchRNN(c.emsize, c.nhid, c.nodes, cls.rule, c.dropoutx, c.dropouth, inter, attention)
