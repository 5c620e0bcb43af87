"""DARTS (Liu et al. 2019): every edge of the cell mixes all ops with a softmax per edge (DARTS's model_search.py).

Its rule, `SoftmaxPerEdge`, is the search cell's definition, so it lives with what a mixing rule is
(`nas.cells.mixing`); a method whose rule differs holds it in its own file (`nas.methods.idarts`, ...).
"""

from __future__ import annotations

import torch.nn as nn

from nas.cells.search_cell import SearchRNN
from nas.cells.mixing import MixingRule, SoftmaxPerEdge
from nas.methods.settings import SearchSettings
from .base import SearchMethod


class Darts(SearchMethod):
    rule: MixingRule = SoftmaxPerEdge()  # how the search cell mixes its ops and derives its cell

    @classmethod
    def layer(cls, config: SearchSettings, attention: nn.Module | None) -> nn.Module:
        return cls.search_cell(config, None, attention)

    @classmethod
    def search_cell(cls, c: SearchSettings, inter: nn.Module | None, attention: nn.Module | None) -> SearchRNN:
        return SearchRNN(c.emsize, c.nhid, c.nodes, cls.rule, c.dropoutx, c.dropouth, inter, attention)
