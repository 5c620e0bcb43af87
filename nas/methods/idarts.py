"""I-DARTS (Jiang et al. 2019, Eq. 4): one softmax over all (edge, op) pairs entering a node; `top_n` inputs kept per
node.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nas.cells.ops import OPS, Layout, edge_offsets
from nas.cells.mixing import MixingRule, Nodes
from .darts import Darts


class SoftmaxPerNode(MixingRule):
    """I-DARTS's rule: one softmax over every (predecessor, op) pair entering a node; per node, the
    `top_n` pairs other than `none` that weigh most are kept."""

    def normalise(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        off = edge_offsets(layout)
        return torch.cat(
            [F.softmax(alpha[off[i] : off[i + 1]].reshape(-1), 0).view(-1, alpha.size(1)) for i in range(len(off) - 1)]
        )

    def derive(self, weights: torch.Tensor, layout: Layout, top_n: int = 1) -> Nodes:
        off, w = edge_offsets(layout), weights.detach().cpu()
        nodes = []
        for i in range(len(off) - 1):
            block = w[off[i] : off[i + 1], 1:]  # (predecessors, ops without none)
            picks = block.reshape(-1).topk(min(top_n, block.numel())).indices.tolist()
            nodes.append([(OPS[1 + k % block.size(1)], k // block.size(1)) for k in picks])
        return nodes


class IDarts(Darts):
    rule = SoftmaxPerNode()
