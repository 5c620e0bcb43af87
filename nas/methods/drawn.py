"""The search cell for methods whose mixing weights are random draws from α (GDAS, DrNAS).

Such a method's rule (`DrawingRule`) says three things: the weights a training forward mixes
under, drawn afresh at every forward and differentiable in α (`draw`: a Gumbel-softmax sample,
a Dirichlet sample); the fixed weights an eval forward mixes under (`settled`: the epoch's
validation and the Hessian health check, which need the same loss at every call); and, as every
rule, `normalise`, the distribution's own weights, from which the cell is derived and which the
log's shares and MAD read. `DrawnRNN` holds the forward's weights while the forward runs, so
the search cell, its fused loop and the backends, which ask the layer for `mixing_weights()`,
run unchanged, and everything read outside a forward (the genotype, the log) sees `normalise`.
Each forward of a training step draws anew, as the authors' code of both methods does: the α
step's forward, then the weight step's; in the tagger each direction draws its own.
"""

from __future__ import annotations

import torch

from nas.cells.ops import Layout
from nas.cells.search_cell import SearchRNN
from nas.cells.mixing import MixingRule


class DrawingRule(MixingRule):
    """A mixing rule whose training forwards mix under random draws."""

    def draw(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        """Mixing weights for one training forward, drawn afresh, differentiable in α."""
        raise NotImplementedError

    def settled(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        """Mixing weights for an eval forward: no randomness, differentiable in α (the health check's Hessian)."""
        return self.normalise(alpha, layout)


class DrawnRNN(SearchRNN):
    """The search cell whose every forward mixes under its rule's draw (training) or settled weights (eval)."""

    rule: DrawingRule

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.forward_weights: torch.Tensor | None = None  # set while a forward runs

    def mixing_weights(self) -> torch.Tensor:
        if self.forward_weights is not None:
            return self.forward_weights
        return self.rule.normalise(self.alpha, self.steps)

    def forward(self, x: torch.Tensor, hidden=None, lengths: torch.Tensor | None = None):
        pick = self.rule.draw if self.training else self.rule.settled
        self.forward_weights = pick(self.alpha, self.steps)
        try:
            return super().forward(x, hidden, lengths)
        finally:
            self.forward_weights = None
