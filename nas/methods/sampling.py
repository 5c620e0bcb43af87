"""Architectures drawn uniformly from the search space: the random-cell and random-search baselines.

The space is the one the search derives from (docs/concepts/search-methods.md): each intra-cell node i (1..N) keeps one
input, an op from {identity, tanh, relu, sigmoid} and a predecessor in 0..i-1; with the ESS gates,
each node of f′ and g′ keeps one op and one predecessor among `nas.cells.gates.predecessors`; with
attention, one of the NASABN types. Every choice is uniform and independent of the others, so
every genotype of the space is equally likely. Draws come in a fixed order (per node: op, then
predecessor; cell, then f′, g′, attention), so one seed gives one sequence of cells.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Sequence

import torch

from nas import __version__
from nas.cells.genotype import ATTENTION_TYPES, GATES, SIZE_MATCHES, Genotype, predecessors
from nas.cells.ops import OPS, SQUASHES

CANDIDATE_OPS = OPS[1:]  # a derived cell never keeps `none`
Rng = random.Random | torch.Generator


@dataclass(frozen=True)
class Space:
    """What is drawn; the field names and defaults are those of the search (`nas.runs.config.SearchConfig`)."""

    nodes: int = 8
    inter: bool = False  # draw the ESS gates f′ and g′ too
    history: int = 3
    inter_nodes: int = 3
    gate_squash: str = "sigmoid"
    gate_size_match: str = "project"
    attention: bool = False  # draw the NASABN attention type too

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {self.nodes}")
        if not 1 <= self.history <= self.inter_nodes:
            raise ValueError(f"history {self.history} needs 1 ≤ m ≤ inter nodes ({self.inter_nodes})")
        if self.gate_squash not in SQUASHES or self.gate_size_match not in SIZE_MATCHES:
            raise ValueError(f"unknown gate squash {self.gate_squash!r} or size matching {self.gate_size_match!r}")

    def describe(self) -> dict:
        """The space as a genotype's provenance records it (gate settings only when gates are drawn)."""
        gates = {
            k: v for k, v in asdict(self).items() if k in ("history", "inter_nodes", "gate_squash", "gate_size_match")
        }
        return {
            "nodes": self.nodes,
            "ops": list(CANDIDATE_OPS),
            "inter": gates if self.inter else None,
            "attention": list(ATTENTION_TYPES) if self.attention else None,
        }


def _below(rng: Rng, n: int) -> int:
    """A uniform integer in 0..n-1 from a Python or a torch generator."""
    if isinstance(rng, random.Random):
        return rng.randrange(n)
    return int(torch.randint(n, (), generator=rng))


def _input(rng: Rng, candidates: Sequence[int]) -> tuple[str, int]:
    """A node's one input (op, predecessor)."""
    op = CANDIDATE_OPS[_below(rng, len(CANDIDATE_OPS))]
    return op, candidates[_below(rng, len(candidates))]


def sample(space: Space, rng: Rng) -> Genotype:
    """One architecture of `space`, every one equally likely; `rng` advances by the draws."""
    nodes = tuple((_input(rng, range(i)),) for i in range(1, space.nodes + 1))
    inter = None
    if space.inter:
        m = space.history
        inter = {"history": m, "squash": space.gate_squash, "size_match": space.gate_size_match}
        for gate in GATES:
            inter[gate] = [[list(_input(rng, predecessors(m, i)))] for i in range(1, space.inter_nodes + 1)]
    attention = ATTENTION_TYPES[_below(rng, len(ATTENTION_TYPES))] if space.attention else None
    return Genotype(nodes, tuple(range(1, space.nodes + 1)), inter, attention)


def random_cells(space: Space, seed: int, count: int, command: str = "") -> list[Genotype]:
    """Cells 1..count of `seed` (a Python generator seeded with it), named and with their provenance.

    The first k cells of a seed do not depend on `count`.
    """
    rng = random.Random(seed)
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    cells = []
    for index in range(1, count + 1):
        geno = sample(space, rng)
        provenance = {
            "method": "random",
            "seed": seed,
            "index": index,
            "space": space.describe(),
            "command": command,
            "toolkit_version": __version__,
            "date": date,
        }
        cells.append(
            Genotype(geno.nodes, geno.concat, geno.inter, geno.attention, f"random_{seed}_{index}", provenance)
        )
    return cells
