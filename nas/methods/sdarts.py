"""SDARTS-RS: DARTS whose weight step sees randomly perturbed mixing weights.

Chen, Hsieh. "Stabilizing Differentiable Architecture Search via Perturbation-based
Regularization." ICML 2020, arXiv:2002.05283. At each batch α takes its DARTS step on the
unperturbed weights; then the weights train under a perturbed architecture, drawn afresh, which
smooths the validation loss in α and keeps its Hessian small. As the authors' code does
(recalled, not checked here), the noise is added to each edge's softmax weights, not to α:
w = softmax(α_edge) + δ, δ uniform in [−ε, ε], clamped to [0, 1] and renormalised per edge (an
edge clamped to all zeros keeps its largest perturbed op), and ε grows linearly from
--epsilon-start (0.03) in the first epoch to --epsilon-end (0.3) in the last (the code's schedule
ends at 0.3 just after the last epoch). SDARTS-ADV, the adversarial variant, is not here.

α itself is never changed: the rule of each search layer holds the draw while the weights step
(set by `before_weight_step`, cleared before the next α step and before each epoch's validation), so
the checkpoint, the log, the Hessian health check and the derived cell all see α unperturbed.
Only the intra cell's weights are perturbed (NASABN's attention α, when searched, are not).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from nas.cells.ops import Layout
from nas.cells.search_cell import SearchRNN
from nas.methods.base import Scoring
from nas.methods.settings import SearchSettings
from nas.cells.mixing import SoftmaxPerEdge
from .scheduled import ScheduledDarts
from .settings import SdartsSettings


def perturbed(weights: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """`weights` (one row per edge) + `noise`, clamped to [0, 1] and renormalised per row; a row
    clamped to all zeros becomes one-hot on its largest perturbed entry."""
    moved = weights + noise
    clamped = moved.clamp(0, 1)
    total = clamped.sum(-1, keepdim=True)
    fallback = F.one_hot(moved.argmax(-1), weights.size(-1)).to(weights.dtype)
    return torch.where(total > 0, clamped / total.clamp_min(torch.finfo(weights.dtype).tiny), fallback)


class PerturbedSoftmax(SoftmaxPerEdge):
    """DARTS's softmax per edge, perturbed by `noise` (one draw, α's shape) while it is set."""

    def __init__(self):
        self.noise: torch.Tensor | None = None

    def normalise(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        weights = F.softmax(alpha, dim=-1)
        return weights if self.noise is None else perturbed(weights, self.noise)


class SdartsRS(ScheduledDarts):
    settings: SdartsSettings
    rule = PerturbedSoftmax()  # unperturbed: the rule that reads a log's α (each layer gets its own)

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, **kwargs):
        super().__init__(config, model, full_epoch, **kwargs)
        self.alpha = next(
            m.alpha for m in model.modules() if isinstance(m, SearchRNN)
        )  # the tagger's directions share α

    def epsilon(self) -> float:
        """ε in the epoch now running."""
        return self.scheduled(self.settings.epsilon_start, self.settings.epsilon_end)

    def perturb(self, noise: torch.Tensor | None) -> None:
        for rule in self.rules:
            rule.noise = noise

    def step_alpha(self, batch: int, train, train_hidden, valid, valid_hidden, eta: float):
        """DARTS's α step, on the unperturbed weights."""
        self.perturb(None)
        return super().step_alpha(batch, train, train_hidden, valid, valid_hidden, eta)

    def before_weight_step(self) -> None:
        """A fresh draw of the perturbation for the weight step."""
        epsilon = self.epsilon()
        self.perturb(torch.empty_like(self.alpha).uniform_(-epsilon, epsilon))

    def after_batches(self, validation: Scoring) -> None:
        self.perturb(None)
        super().after_batches(validation)
