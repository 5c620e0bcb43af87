"""The order a genotype's edges run in: waves of nodes whose inputs are ready together.

Both the readable frozen cell (`nas.cells.cell.cell_step`) and its fast path (`nas.fast.frozen_loop`)
run a cell wave by wave; each wave is one batched product per step.
"""

from __future__ import annotations

from typing import NamedTuple

from nas.cells.ops import Genotype


class Wave(NamedTuple):
    """The edges s_node += highway(s_pred, op) of nodes computable together, sorted by op."""

    nodes: tuple[int, ...]
    preds: tuple[int, ...]
    runs: tuple[tuple[str, int, int], ...]  # (op, first edge, end): contiguous edges of one op


def plan_waves(geno: Genotype) -> list[Wave]:
    """Group the cell's edges into waves of nodes computable together, the same ops side by side."""
    depth = {0: 0}
    for i, node in enumerate(geno.nodes, start=1):
        depth[i] = 1 + max(depth[pred] for _, pred in node)
    edges: list[list[tuple[int, int, str]]] = [[] for _ in range(max(depth.values()))]
    for i, node in enumerate(geno.nodes, start=1):
        for op, pred in node:
            edges[depth[i] - 1].append((i, pred, op))
    waves = []
    for wave in edges:
        wave.sort(key=lambda e: (e[2], e[0]))
        runs: list[tuple[str, int, int]] = []
        for e, (_, _, op) in enumerate(wave):
            if runs and runs[-1][0] == op:
                runs[-1] = (op, runs[-1][1], e + 1)
            else:
                runs.append((op, e, e + 1))
        nodes, preds, _ = zip(*wave)
        waves.append(Wave(nodes, preds, tuple(runs)))
    return waves
