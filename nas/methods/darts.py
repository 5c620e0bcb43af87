"""DARTS (Liu et al. 2019): every edge of the cell mixes all ops with a softmax per edge (DARTS's rnn/model_search.py)."""
from __future__ import annotations

import torch.nn as nn

from ..config import SearchConfig
from ..search_cell import SearchRNN
from .base import SearchMethod


class Darts(SearchMethod):
    normalisation = "darts"  # how the search cell normalises α (nas.search_cell.NORMALISATIONS)

    @classmethod
    def layer(cls, config: SearchConfig, attention: nn.Module | None) -> nn.Module:
        return cls.search_cell(config, None, attention)

    @classmethod
    def search_cell(cls, c: SearchConfig, inter: nn.Module | None, attention: nn.Module | None) -> SearchRNN:
        return SearchRNN(c.emsize, c.nhid, c.nodes, cls.normalisation, c.dropoutx, c.dropouth, inter, attention,
                         c.compile)
