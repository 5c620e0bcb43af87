"""GDAS: DARTS's cell trained on one sampled op per edge, a hard Gumbel-softmax sample with a straight-through gradient.

Dong, Yang. "Searching for A Robust Neural Architecture in Four GPU Hours." CVPR 2019,
arXiv:1910.04465. At every training forward (the α step's and the weight step's) each edge
draws one op: with Gumbel noise g = −log(E), E ~ Exp(1),

    p = softmax((log_softmax(α_edge) + g) / τ),   h = one_hot(argmax p),   w = h − stop_grad(p) + p,

so the forward mixes under the one-hot h (the edge is the sampled op's highway; `none` drops the
edge) and the gradient reaches every α_edge through p. τ falls linearly from --tau-max (10) in
the first epoch to --tau-min (0.1) in the last, as the paper and the authors' code (τ per epoch,
τ_max − (τ_max − τ_min)·epoch / (epochs − 1)) have it. The cell is derived from softmax(α) by
DARTS's rule. A draw with a non-finite entry is drawn again, as the authors' code does.

The BatchNorm problem, and its answer. The DARTS search cell normalises s0 and every node with a
BatchNorm (`nas.cells.search_cell.node_norms`), whose eval mode (the epoch's validation, the
Hessian health check) divides by running statistics gathered in training. Under GDAS the
architecture changes at every forward: a node whose sampled edges were all `none`, or one
identity highway, or the sum of several tanh edges, has variances orders of magnitude apart,
and the running variance, an average over them, does not fit the cell that eval mode runs. With
running statistics the recurrence is rescaled at every time step and diverges (validation NaN
or ~1e304 in tiny searches; docs/concepts/search-methods.md gives the before/after runs). Here
every BatchNorm of the GDAS search cell normalises with the statistics of the batch in front of
it, in training and in eval mode alike (`track_running_stats=False`), as the authors' search
code runs its cells (NAS-Bench-201's `track_running_stats` off). Removing the BatchNorm, as
random search and ENAS do (`nas.methods.weight_sharing`), does not suit GDAS: one op per edge
still sums every edge into a node, and without normalisation node i grows with its i inputs.
The price: validation needs batches of at least two (refused otherwise), and a score depends a
little on the batch it is computed in.

Eval mode mixes under the hard argmax of α per edge with the straight-through gradient of
softmax(log_softmax(α)/τ) and no noise (`settled`): the validation perplexity is that of the
one-hot architecture the supernet was trained on (every edge's most likely op), and the health
check's Hessian is that of the straight-through surrogate GDAS's α steps follow. The authors'
validation samples as training does. Departures: every op of an edge is computed and multiplied
by its one-hot weight (the authors compute the sampled op alone and pass the others' weights
through unmultiplied), so the gradient in α is the plain straight-through one; α's optimiser and
learning rate are the toolkit's DARTS ones (--arch-lr, --arch-wdecay).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nas.cells.ops import Layout
from nas.common.errors import InputError
from nas.methods.settings import SearchSettings
from nas.cells.mixing import SoftmaxPerEdge
from .drawn import DrawingRule, DrawnRNN
from .scheduled import ScheduledDarts
from .settings import GdasSettings


def straight_through(probs: torch.Tensor) -> torch.Tensor:
    """one_hot(argmax probs) in value, the gradient of `probs`."""
    hard = F.one_hot(probs.argmax(-1), probs.size(-1)).to(probs.dtype)
    return hard - probs.detach() + probs


def gumbel_noise(like: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise, −log(E) with E ~ Exp(1), α's shape."""
    return -torch.empty_like(like).exponential_().log()


class GumbelHard(SoftmaxPerEdge, DrawingRule):
    """GDAS's rule at temperature `tau`: one op per edge drawn by the Gumbel-max trick, straight through
    the Gumbel-softmax; settled, each edge's most likely op; derived from softmax(α) as DARTS's."""

    def __init__(self, tau: float = 10.0):
        self.tau = tau

    def draw(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        log_probs = F.log_softmax(alpha, dim=-1)
        while True:
            probs = F.softmax((log_probs + gumbel_noise(alpha)) / self.tau, dim=-1)
            if torch.isfinite(probs).all():
                return straight_through(probs)

    def settled(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        return straight_through(F.softmax(F.log_softmax(alpha, dim=-1) / self.tau, dim=-1))


def batch_norms(nhid: int, steps: int) -> nn.ModuleList:
    """One BatchNorm per state (affine off, as `node_norms`) normalising with its batch's statistics in either mode."""
    return nn.ModuleList(nn.BatchNorm1d(nhid, affine=False, track_running_stats=False) for _ in range(steps + 1))


class Gdas(ScheduledDarts):
    settings: GdasSettings
    rule = GumbelHard()  # the rule that reads a log's α (each layer gets its own, whose τ moves)

    @classmethod
    def search_cell(cls, c: SearchSettings, inter: nn.Module | None, attention: nn.Module | None) -> DrawnRNN:
        rnn = DrawnRNN(c.emsize, c.nhid, c.nodes, cls.rule, c.dropoutx, c.dropouth, inter, attention)
        rnn.bn = batch_norms(c.nhid, c.nodes)
        return rnn

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, **kwargs):
        if config.eval_batch_size < 2:
            raise InputError(
                f"--eval-batch-size {config.eval_batch_size}: --method gdas normalises with each "
                "batch's statistics, so validation needs batches of at least 2"
            )
        super().__init__(config, model, full_epoch, **kwargs)

    def tau(self) -> float:
        """τ in the epoch now running."""
        return self.scheduled(self.settings.tau_max, self.settings.tau_min)

    def step_alpha(self, batch: int, train, train_hidden, valid, valid_hidden, eta: float):
        """τ of the epoch now running, set for its batches (and kept for its validation and health check)."""
        for rule in self.rules:
            rule.tau = self.tau()
        return super().step_alpha(batch, train, train_hidden, valid, valid_hidden, eta)
