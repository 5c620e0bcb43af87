"""The ops a cell edge can apply, and how mixing weights over them become a derived cell (docs/concepts/).

The bottom of `nas`: it imports only torch, and every cell, gate and plot reads its tables from
here. α has one row per edge and one column per op in `OPS`; the rows of the edges into one node
are consecutive, and `Layout` says how many edges each node has.
"""
from __future__ import annotations

import itertools
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

OPS = ("none", "identity", "tanh", "relu", "sigmoid")  # search candidates, `none` first as in DARTS
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "identity": lambda t: t, "tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid}
INIT_RANGE = 0.04  # weights start uniform in ±INIT_RANGE, as in the DARTS RNN code
# How an ESS gate squashes its DAG's output (`nas.gates`; the choice is the genotype's `inter.squash`).
SQUASHES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid, "2sigmoid": lambda s: 2 * torch.sigmoid(s), "none": lambda s: s}
NORMALISATIONS = ("darts", "idarts")

Layout = int | Sequence[int]


def edge_offsets(layout: Layout) -> list[int]:
    """Row of α where the edges into each node start, plus the total row count at the end.

    `layout` is the node count of a DARTS cell (node i has i candidate inputs, rows ordered by
    predecessor), or the candidate-input count of each node (the ESS gates in `nas.gates`).
    """
    fan_in = range(1, layout + 1) if isinstance(layout, int) else layout
    return [0, *itertools.accumulate(fan_in)]


def normalise(alpha: torch.Tensor, steps: Layout, method: str) -> torch.Tensor:
    """Softmaxed mixing weights with α's shape: per edge (darts) or per node (idarts, Jiang et al. 2019 Eq. 4)."""
    if method == "darts":
        return F.softmax(alpha, dim=-1)
    if method != "idarts":
        raise ValueError(f"unknown normalisation {method!r}")
    off = edge_offsets(steps)
    return torch.cat([F.softmax(alpha[off[i]:off[i + 1]].reshape(-1), 0).view(-1, alpha.size(1))
                      for i in range(len(off) - 1)])


def derive(weights: torch.Tensor, steps: Layout, method: str, top_n: int = 1) -> list[list[tuple[str, int]]]:
    """Nodes of the derived cell from mixing weights (`none` never kept).

    darts: per node, the predecessor whose best non-none op weighs most, with that op.
    idarts: per node, the top-n (predecessor, op) pairs by weight.
    Predecessors are row positions within the node's block (the predecessor number in a DARTS cell).
    """
    off = edge_offsets(steps)
    w = weights.detach().cpu()
    nodes = []
    for i in range(len(off) - 1):
        block = w[off[i]:off[i + 1], 1:]  # (predecessors, ops without none)
        if method == "darts":
            best, op = block.max(dim=1)
            pred = int(best.argmax())
            nodes.append([(OPS[1 + int(op[pred])], pred)])
        else:
            flat = block.reshape(-1)
            picks = flat.topk(min(top_n, flat.numel())).indices.tolist()
            nodes.append([(OPS[1 + k % block.size(1)], k // block.size(1)) for k in picks])
    return nodes


def mean_abs_deviation(weights: torch.Tensor, steps: Layout, method: str) -> float:
    """Mean |w − uniform| of the softmaxed weights: how far the search has moved (ESS Fig. 6)."""
    if method == "darts":
        uniform = torch.full_like(weights, 1.0 / weights.size(1))
    else:
        off = edge_offsets(steps)
        uniform = torch.cat([torch.full((off[i + 1] - off[i], weights.size(1)), 1.0 / ((off[i + 1] - off[i]) * weights.size(1)))
                             for i in range(len(off) - 1)]).to(weights)
    return float((weights - uniform).abs().mean())
