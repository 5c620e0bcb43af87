"""ESS (Li et al. 2020): joint search of the cell and the inter-cell gates, in rounds (Fig. 4).

A round is `intra_steps` batches that step the intra-cell α (and the attention α) with the
inter-cell α frozen, then `inter_steps` batches that step the inter-cell α with the intra-cell α
frozen; the weights train on every batch, and the data runs on across rounds. The search space
is the cell alone (plain DARTS in rounds), the gates around a fixed cell, or both. The cell's
edges are a softmax per edge (Eq. 4), as in DARTS.
"""

from __future__ import annotations

import math

import torch.nn as nn

from nas.cells.cell import FrozenRNN
from nas.cells.gates import InterGates
from nas.cells.genotype import Genotype, validate
from nas.common.distributed import current
from nas.methods.architect import Architect, split_parameters
from nas.methods.settings import EssSettings, SearchSettings
from .darts import Darts


class Ess(Darts):
    wraps = True

    settings: EssSettings

    @classmethod
    def layer(cls, config: SearchSettings, attention: nn.Module | None) -> nn.Module:
        c, s = config, config.method_settings
        inter = None
        if s.search_space != "intra":
            inter = InterGates.search(
                c.emsize, c.nhid, cls.rule, s.history, s.inter_nodes, s.gate_squash, s.gate_size_match
            )
        if s.search_space == "inter":
            cell = validate(s.cell, "--cell")
            return FrozenRNN(
                Genotype(cell.nodes, cell.concat),
                c.emsize,
                c.nhid,
                1,
                c.dropoutx,
                c.dropouth,
                c.attention_heads,
                inter,
                attention,
            )
        return cls.search_cell(c, inter, attention)

    def make_architects(self, model: nn.Module) -> dict[str, Architect]:
        """`intra` and/or `inter`; the attention α steps with the intra-cell α, or with the
        inter-cell α when the intra cell is fixed."""
        c, s = self.config, self.settings
        _, arch = split_parameters(model)
        inter = [n for n in arch if ".inter." in n]
        attention = [n for n in arch if ".attention." in n]
        intra = [n for n in arch if n not in inter and n not in attention]
        phases = {
            "intra": (intra + attention if intra else [], s.arch_lr_intra),
            "inter": (inter + ([] if intra else attention), s.arch_lr_inter),
        }
        return {
            phase: Architect(
                model,
                lr,
                c.arch_wdecay,
                c.order,
                c.wdecay,
                names,
                weight_clip=c.clip,
                loss_fn=self.loss_fn,
                average=current().average,
            )
            for phase, (names, lr) in phases.items()
            if names
        }

    @property
    def round_steps(self) -> tuple[int, int]:
        """(intra, inter) batches of a round; half a pass over the training split each by default."""
        half = math.ceil(self.full_epoch / 2)
        return self.settings.intra_steps or half, self.settings.inter_steps or half

    def batches_per_epoch(self, one_pass: int) -> int:
        return sum(self.round_steps)

    def phase(self, batch: int) -> str:
        if len(self.architects) == 1:
            return super().phase(batch)
        return "intra" if batch < self.round_steps[0] else "inter"

    def cell(self, rnn: nn.Module) -> Genotype:
        return rnn.genotype if self.settings.search_space == "inter" else super().cell(rnn)

    def genotype_name(self) -> str:
        c = self.config
        return f"{c.method}_{self.settings.search_space}_search_seed{c.seed}"
