"""Taggers compared at equal parameters: the hidden size at which one recurrent layer has another's count.

At equal hidden size a searched cell is not comparable with an LSTM: DARTS_V2 over 100-d input at
hidden 256 has 3.4× the LSTM's recurrent parameters and does 3.4× its arithmetic. Here the layer
being sized (a cell, or flair's LSTM for `genotype=None`) gets the hidden size whose recurrent
layer, both directions, at the same input size (the embedding length: flair's reprojection keeps
it), has the parameter count closest to the reference layer's; a tie goes to the smaller size.
Counts are of the modules the tagger builds (`model.recurrent_layer`), built on the meta device.
The linear layer after the RNN (2·hidden × tags) and the CRF are not part of the match.
"""

from __future__ import annotations

from dataclasses import dataclass

from nas.common.parameters import closest_size, count_on_meta
from nas.cells.genotype import Genotype

from .model import recurrent_layer


@dataclass(frozen=True)
class Match:
    hidden_size: int  # of the layer being sized
    rnn_parameters: int  # its count at that size
    reference: dict  # {"cell", "hidden_size", "rnn_parameters"} of the layer it is matched to


def rnn_parameters(genotype: Genotype | None, input_size: int, hidden_size: int) -> int:
    """Parameters of the tagger's recurrent layer (both directions) for a genotype, or flair's LSTM for None."""
    return count_on_meta(lambda: recurrent_layer(genotype, input_size, hidden_size))


def match_layer(
    genotype: Genotype | None,
    reference_cell: str,
    reference_genotype: Genotype | None,
    reference_hidden: int,
    input_size: int,
) -> Match:
    """The hidden size of `genotype`'s layer that matches `reference_cell`'s layer at `reference_hidden`."""
    target = rnn_parameters(reference_genotype, input_size, reference_hidden)
    hidden = closest_size(lambda h: rnn_parameters(genotype, input_size, h), target)
    return Match(
        hidden,
        rnn_parameters(genotype, input_size, hidden),
        {"cell": reference_cell, "hidden_size": reference_hidden, "rnn_parameters": target},
    )
