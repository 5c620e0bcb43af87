"""The ops a cell edge can apply, the tables every cell and gate reads, and the genotype, the cell a search
derives (docs/concepts/cell.md, docs/concepts/search-methods.md, docs/concepts/genotype.md; DARTS's genotypes.py).

The bottom of `nas`: it imports only torch and the standard library, and every cell, gate and plot reads its
tables from here; `nas.cells.genotype` reads and writes the genotype as a checked JSON file. α has one row per
edge and one column per op in `OPS`; the rows of the edges into one node are consecutive, and `Layout` says
how many edges each node has. How α becomes mixing weights and a derived cell is the search method's rule
(`nas.cells.mixing`).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
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


FORMAT = "nas-rnn-genotype"
VERSION = 1
ATTENTION_TYPES = ("dot", "multihead")
# The `inter` section (ESS gates, `nas.cells.gates`): its fields, the gates and their size matchings.
SIZE_MATCHES = ("project", "pad")
GATES = ("f", "g")
INTER_FIELDS = ("history", "squash", "size_match", *GATES)
_ENAS_FUNCS = ("tanh", "relu", "sigmoid", "identity")  # ENAS fixed-arc function codes 0..3


@dataclass(frozen=True)
class Genotype:
    """A cell: per node 1..N its inputs as (op, predecessor), the nodes averaged into the output
    (`concat`), and the optional ESS gates (`inter`) and NASABN attention; what a search finds and
    the only thing the tagger needs from it. Stored as JSON (docs/concepts/genotype.md)."""

    nodes: tuple[tuple[tuple[str, int], ...], ...]
    concat: tuple[int, ...]
    inter: dict | None = None
    attention: str | None = None
    name: str | None = None
    provenance: dict = field(default_factory=dict, compare=False)

    @property
    def steps(self) -> int:
        return len(self.nodes)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "nodes": [[[op, pred] for op, pred in node] for node in self.nodes],
            "concat": list(self.concat),
            "inter": self.inter,
            "attention": self.attention,
            "provenance": self.provenance,
        }

    def to_enas(self) -> str:
        """ENAS fixed-arc notation: `pred func` per node (func 0=tanh 1=relu 2=sigmoid 3=identity)."""
        out = []
        for number, node in enumerate(self.nodes, start=1):
            if len(node) != 1:
                raise ValueError(f"node {number} has {len(node)} inputs; ENAS notation holds one")
            op, pred = node[0]
            out += [str(pred), str(_ENAS_FUNCS.index(op))]
        return " ".join(out)

    def dumps(self) -> str:
        """JSON with one line per node, so a cell reads at a glance in a diff or a terminal."""
        data = self.to_dict()
        lines = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items() if k != "nodes"]
        nodes = ",\n".join(f"    {json.dumps(node)}" for node in data["nodes"])
        lines.insert(3, f'  "nodes": [\n{nodes}\n  ]')
        return "{\n" + ",\n".join(lines) + "\n}\n"


def predecessors(history: int, node: int) -> list[int]:
    """Candidate inputs of gate node `node` (1-based): 0 = its history vector (if node ≤ m), then nodes 1..node-1."""
    return ([0] if node <= history else []) + list(range(1, node))
