"""DrNAS: DARTS whose mixing weights are drawn from a Dirichlet distribution whose concentration α learns.

Chen, Wang, Cheng, Tang, Hsieh. "DrNAS: Dirichlet Neural Architecture Search." ICLR 2021,
arXiv:2006.10355. Each edge's mixing weights are a random variable θ_edge ~ Dir(β_edge) with
concentration β = ELU(α) + 1 (positive, 1 at α = 0: the flat Dirichlet), and the search
minimises the expected validation loss E_θ[L_val(w*, θ)] + λ·d(β, β̂) in β, the anchor β̂ = 1.
Every training forward (the α step's and the weight step's) mixes under a fresh draw, and α's
gradient comes through the draw by the pathwise (reparameterised) derivative of the Dirichlet
(`torch.distributions.Dirichlet.rsample`), as in the authors' code.

The regulariser d: the authors' code offers an ℓ2 one, its default, which is the weight decay of
α's Adam optimiser (their --arch_weight_decay 1e-3; here --arch-wdecay, also 1e-3 by default,
so the default search has it), and a KL one, λ·Σ_edges KL(Dir(β_edge) ‖ Dir(1)) added to α's
loss with λ = 1e-3 in their code; --dirichlet-kl is that λ, 0 by default (the code's default
ℓ2 alone). In a second-order step the KL term rides on the training loss too, where it changes
nothing (it does not depend on the weights).

Eval mode (the epoch's validation, the Hessian health check) mixes under the Dirichlet's mean,
β / Σβ per edge, which is also the rule's `normalise`, from which DARTS's rule derives the cell
and the log's shares and MAD are read. Departures: the authors' validation samples as training
does, and their genotype ranks softmax(α) (the same op per edge, since both rise with α; the
choice between a node's predecessors may differ); their progressive learning (partial channels,
then pruning ops per edge) and their 10 warm-up epochs without α steps belong to their CNN
searches of 50 epochs and are not here; α's learning rate is the toolkit's DARTS one (--arch-lr
3e-3 where their CNN search has 6e-4).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Dirichlet, kl_divergence

from nas.cells.ops import Layout
from nas.methods.architect import LossFn
from nas.methods.settings import SearchSettings
from .beta_darts import cell_alphas
from nas.cells.mixing import SoftmaxPerEdge
from .darts import Darts
from .drawn import DrawingRule, DrawnRNN
from .settings import DrnasSettings


def concentration(alpha: torch.Tensor) -> torch.Tensor:
    """The Dirichlet's concentration β = ELU(α) + 1."""
    return F.elu(alpha) + 1


def anchor_kl(alpha: torch.Tensor) -> torch.Tensor:
    """Σ over edges of KL(Dir(β_edge) ‖ Dir(1, …, 1)), the distance to the flat anchor."""
    beta = concentration(alpha)
    return kl_divergence(Dirichlet(beta), Dirichlet(torch.ones_like(beta))).sum()


class DirichletPerEdge(SoftmaxPerEdge, DrawingRule):
    """DrNAS's rule: per edge a draw from Dir(ELU(α) + 1); settled and derived, its mean; DARTS's derivation."""

    def normalise(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        beta = concentration(alpha)
        return beta / beta.sum(-1, keepdim=True)

    def draw(self, alpha: torch.Tensor, layout: Layout) -> torch.Tensor:
        return Dirichlet(concentration(alpha)).rsample()


class Drnas(Darts):
    settings: DrnasSettings
    rule = DirichletPerEdge()
    records_steps = False  # a replayed CUDA graph would replay one Dirichlet draw

    @classmethod
    def search_cell(cls, c: SearchSettings, inter: nn.Module | None, attention: nn.Module | None) -> DrawnRNN:
        return DrawnRNN(c.emsize, c.nhid, c.nodes, cls.rule, c.dropoutx, c.dropouth, inter, attention)

    def __init__(self, config: SearchSettings, model: nn.Module, full_epoch: int, loss_fn: LossFn):
        alphas, weight = cell_alphas(model), config.method_settings.dirichlet_kl

        def regularised(model: nn.Module, params: dict[str, torch.Tensor], batch: Any, hidden: Any):
            loss, hidden = loss_fn(model, params, batch, hidden)
            return (loss + weight * anchor_kl(torch.cat(alphas)) if weight else loss), hidden

        super().__init__(config, model, full_epoch, loss_fn=regularised)
