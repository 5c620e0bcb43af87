"""The LSTM baseline layer of `bin/train-lm --cell lstm`, sized to match a cell's parameter count.

A fused `nn.LSTM` with the regularisation the frozen cell gets, in the form a fused kernel allows
(our choice; the papers give no LSTM recipe for this protocol):
- `dropout_x`: one mask per sequence on the layer input (the cell's variational x mask);
- `dropout_h`: DropConnect on the hidden-to-hidden weights, one mask per batch (AWD-LSTM's
  weight drop), the fused-kernel analogue of the cell's variational h mask.
When nhid differs from the embedding size the LSTM projects its output back to emsize
(`proj_size`), so the decoder stays tied to the embedding.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from nas.common.parameters import closest_size, count_on_meta
from nas.lm.model import locked_dropout

# oneDNN has no projected LSTM; torch says so once and uses its own kernel, which is what we want.
warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")


class LSTMLayer(nn.Module):
    """(T, B, ninp) -> (T, B, ninp); hidden is the LSTM's (h, c) pair."""

    def __init__(self, ninp: int, nhid: int, dropout_x: float = 0.0, dropout_h: float = 0.0):
        super().__init__()
        self.ninp, self.nhid, self.dropout_x, self.dropout_h = ninp, nhid, dropout_x, dropout_h
        self.lstm = nn.LSTM(ninp, nhid, proj_size=ninp if nhid != ninp else 0)

    @property
    def output_size(self) -> int:
        return self.ninp

    def init_hidden(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.lstm.weight_ih_l0
        return w.new_zeros(1, batch, self.ninp), w.new_zeros(1, batch, self.nhid)

    def forward(self, x: torch.Tensor, hidden=None, lengths=None):
        x = locked_dropout(x, self.dropout_x, self.training)
        if not (self.training and self.dropout_h > 0):
            return self.lstm(x, hidden)
        weights = dict(self.lstm.named_parameters())
        weights["weight_hh_l0"] = F.dropout(weights["weight_hh_l0"], self.dropout_h, training=True)
        return functional_call(self.lstm, weights, (x, hidden))


def lstm_parameters(ninp: int, nhid: int) -> int:
    return count_on_meta(lambda: LSTMLayer(ninp, nhid))


def matching_nhid(ninp: int, target: int) -> int:
    """The LSTM hidden size whose layer has the parameter count closest to `target` (a tie: the smaller).

    nhid is at least ninp (a projection needs nhid > ninp). The count grows with nhid (about
    nhid·(9·ninp + 8) with the projection) except at nhid = ninp, which has no projection.
    """
    return closest_size(lambda h: lstm_parameters(ninp, h), target, smallest=ninp + 1, also=(ninp,))
