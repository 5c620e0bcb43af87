"""What a search method is: the plug-in interface `nas.search.Searcher` runs (DARTS's architect.py and the method parts of its model_search.py).

A method owns the search layer it trains, its α groups (one `Architect` each, an Adam optimiser
over some of the α), the schedule that picks which group steps at each batch, and the genotype
it derives from the layer. The defaults here are DARTS's: one group of all α stepping on every
batch, an epoch one pass over the training split, the cell derived by the layer's own rule.
"""
from __future__ import annotations

import torch.nn as nn

from ..architect import Architect, Batch
from ..config import SearchConfig
from ..genotype import Genotype
from ..model import RNNModel


class SearchMethod:
    wraps = False  # True: an epoch runs on through the end of the training data (ESS rounds)

    def __init__(self, config: SearchConfig, model: RNNModel, full_epoch: int):
        """`full_epoch`: batches of one pass over the training split."""
        self.config, self.full_epoch = config, full_epoch
        self.architects = self.make_architects(model)

    @classmethod
    def layer(cls, config: SearchConfig, attention: nn.Module | None) -> nn.Module:
        """The search layer (emsize → nhid = emsize), with the NASABN `attention` after it when given."""
        raise NotImplementedError

    def make_architects(self, model: RNNModel) -> dict[str, Architect]:
        """The α groups by phase name."""
        c = self.config
        return {"all": Architect(model, c.arch_lr, c.arch_wdecay, c.order, c.wdecay, weight_clip=c.clip)}

    def batches_per_epoch(self, one_pass: int) -> int:
        """Batches of an epoch, given those of one (capped) pass over the training split."""
        return one_pass

    def phase(self, batch: int) -> str:
        """The α group that steps at batch `batch` of the epoch."""
        return next(iter(self.architects))

    def step_alpha(self, batch: int, train: Batch, train_hidden, valid: Batch, valid_hidden, eta: float):
        """The α step of batch `batch`; returns the validation hidden state to carry on."""
        return self.architects[self.phase(batch)].step(train, train_hidden, valid, valid_hidden, eta)

    def state(self) -> dict:
        return {phase: a.optimizer.state_dict() for phase, a in self.architects.items()}

    def load_state(self, state: dict) -> None:
        for phase, architect in self.architects.items():
            architect.optimizer.load_state_dict(state[phase])

    def cell(self, rnn: nn.Module) -> Genotype:
        """The intra cell the layer stands for now."""
        return rnn.genotype(self.config.top_n)

    def derive(self, rnn: nn.Module) -> Genotype:
        """The cell, ESS gates and attention type the search layer stands for now."""
        cell = self.cell(rnn)
        inter = None if rnn.inter is None else rnn.inter.derive()
        attention = None if rnn.attention is None else rnn.attention.derive()
        return Genotype(cell.nodes, cell.concat, inter, attention)

    def genotype_name(self) -> str:
        c = self.config
        return f"{c.method}_search_seed{c.seed}"

