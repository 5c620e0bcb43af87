"""The ops a cell edge can apply, and the tables every cell and gate reads (docs/concepts/cell.md,
docs/concepts/search-methods.md).

The bottom of `nas`: it imports only torch, and every cell, gate and plot reads its tables from
here. α has one row per edge and one column per op in `OPS`; the rows of the edges into one node
are consecutive, and `Layout` says how many edges each node has. How α becomes mixing weights and
a derived cell is the search method's rule (`nas.cells.mixing`).
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import torch

OPS = ("none", "identity", "tanh", "relu", "sigmoid")  # search candidates, `none` first as in DARTS
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "identity": lambda t: t,
    "tanh": torch.tanh,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
}
INIT_RANGE = 0.04  # weights start uniform in ±INIT_RANGE, as in the DARTS RNN code
# How an ESS gate squashes its DAG's output (`nas.cells.gates`; the choice is the genotype's `inter.squash`).
SQUASHES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid,
    "2sigmoid": lambda s: 2 * torch.sigmoid(s),
    "none": lambda s: s,
}

Layout = int | Sequence[int]


def edge_offsets(layout: Layout) -> list[int]:
    """Row of α where the edges into each node start, plus the total row count at the end.

    `layout` is the node count of a DARTS cell (node i has i candidate inputs, rows ordered by
    predecessor), or the candidate-input count of each node (the ESS gates in `nas.cells.gates`).
    """
    fan_in = range(1, layout + 1) if isinstance(layout, int) else layout
    return [0, *itertools.accumulate(fan_in)]
