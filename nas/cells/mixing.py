"""What a mixing rule is: how a search turns α into mixing weights, and mixing weights into a derived cell;
and DARTS's rule, a softmax per edge.

α has one row per edge and one column per op in `nas.cells.ops.OPS`; the rows of the edges into one
node are consecutive, and a `Layout` (`nas.cells.ops.edge_offsets`) says how many edges each node has.
A search method hands its rule to the search layer it builds (`nas.methods.darts`: `SoftmaxPerEdge`
below; `nas.methods.idarts`: one softmax per node, in its own file), so the layer, the gates and the
log never ask which method they serve.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nas.cells.ops import OPS, Layout, edge_offsets

Nodes = list[list[tuple[str, int]]]  # per node, its (op, predecessor) pairs


class MixingRule:
    """α → mixing weights (`normalise`), mixing weights → the derived nodes (`derive`), and how far
    the weights have moved from where α = 0 puts them (`mad`)."""

    def normalise(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        """The mixing weights, with α's shape; differentiable in α."""
        raise NotImplementedError

    def derive(self, weights: torch.Tensor, layout: Layout, top_n: int = 1) -> Nodes:
        """Per node, the (op, predecessor) pairs kept (`none` never); a predecessor is the row position
        within the node's block (the predecessor number in a DARTS cell)."""
        raise NotImplementedError

    def mad(self, weights: torch.Tensor, layout: Layout) -> float:
        """Mean |w − uniform|, uniform being the weights of α = 0: how far the search has moved (ESS Fig. 6)."""
        uniform = self.normalise(torch.zeros_like(weights), layout)
        return float((weights - uniform).abs().mean())


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
