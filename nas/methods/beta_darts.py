"""β-DARTS: DARTS with the Beta-Decay regulariser on α.

Ye, Li, Li, Chen, Fan, Ouyang. "β-DARTS: Beta-Decay Regularization for Differentiable Architecture
Search." CVPR 2022, arXiv:2203.01665. The α step minimises L_val + λ·L_β, where

    L_β = mean over edges of logsumexp(α_edge)

(the paper's Beta-Decay loss: its gradient in α_edge is softmax(α_edge) / |edges|, so it pulls
every edge's α down in proportion to the weight the softmax gives it, keeping the mixing weights'
logits small and their scale even across edges). λ moves linearly from --beta-lambda-start in the
first epoch to --beta-lambda-end in the last (defaults 0 and 50; these, and the mean over edges,
are recalled from the paper, whose text was not at hand here: check them against it before a
study). The mixing rule, the weight step and the derivation are DARTS's.

Departures: the regulariser covers the intra cell's α only (the RNN space has no reduction cell;
NASABN's attention α, when searched, is left to the plain loss). The search loop's
Hessian health check measures the plain validation loss, without the regulariser. In a
second-order step the regulariser rides on the training loss too, where it changes nothing: it
does not depend on the weights, and the finite difference of ∇α L_train cancels it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from nas.cells.search_cell import SearchRNN
from nas.methods.architect import LossFn
from nas.methods.settings import SearchSettings
from .scheduled import ScheduledDarts
from .settings import BetaDartsSettings


def beta_decay(alpha: torch.Tensor) -> torch.Tensor:
    """The Beta-Decay loss of α (one row per edge): the mean over edges of logsumexp of the edge's α."""
    return torch.logsumexp(alpha, dim=-1).mean()


def cell_alphas(model: nn.Module) -> list[nn.Parameter]:
    """The intra cell's α of every search cell in `model`, each once (the tagger's two directions share one)."""
    return list({id(m.alpha): m.alpha for m in model.modules() if isinstance(m, SearchRNN)}.values())


class BetaDarts(ScheduledDarts):
    settings: BetaDartsSettings

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, loss_fn: LossFn):
        alphas = cell_alphas(model)

        def regularised(model: nn.Module, params: dict[str, torch.Tensor], batch: Any, hidden: Any):
            loss, hidden = loss_fn(model, params, batch, hidden)
            return loss + self.weight() * beta_decay(torch.cat(alphas)), hidden

        super().__init__(config, model, full_epoch, loss_fn=regularised)

    def weight(self) -> float:
        """λ in the epoch now running."""
        return self.scheduled(self.settings.beta_lambda_start, self.settings.beta_lambda_end)
