"""Issue 30: how close were the choices that kept the gradient-based searches from the convergence rule?

For each epoch (ESS: round) logged by `bin/search-lm`, each node's derived pair is the largest
mixing weight in its block of α (its predecessors × the ops other than `none`), with the search
method's own rule (`nas.methods.*.rule`: a softmax per edge for DARTS and ESS, per node for
I-DARTS). Its margin is that weight minus the largest weight of any other pair of the block: the
change in mixing weight that would flip the node. Printed per run for its last five epochs: each
node's margin (×10⁻³) and whether its pair changed since the epoch before (*), then the largest
change of any mixing weight in the node's block from one epoch to the next, the scale of the
search's epoch-to-epoch movement.

    python docs/experiments/search-margins/margins.py RUN_DIR...  (a run's log.jsonl and config.json)
"""
import json
import sys
from pathlib import Path

import torch

from nas.cells.ops import edge_offsets
from nas.methods.darts import Darts
from nas.methods.ess import Ess
from nas.methods.idarts import IDarts

RULES = {"darts": Darts.rule, "idarts": IDarts.rule, "ess": Ess.rule}


def margins(weights: torch.Tensor, nodes: int) -> tuple[list[float], list[tuple[int, int]]]:
    off = edge_offsets(nodes)
    gaps, picks = [], []
    for i in range(nodes):
        block = weights[off[i]:off[i + 1], 1:].reshape(-1)  # without none
        top = block.topk(min(2, block.numel()))
        gaps.append(float(top.values[0] - top.values[1]) if block.numel() > 1 else float("inf"))
        picks.append(divmod(int(top.indices[0]), weights.size(1) - 1))
    return gaps, picks


for run in map(Path, sys.argv[1:]):
    config = json.loads((run / "config.json").read_text())
    rule, nodes = RULES[config["method"]], config["nodes"]
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]
    weights = [rule.normalise(torch.tensor(r["alpha"], dtype=torch.float64), nodes) for r in log]
    off = edge_offsets(nodes)
    print(f"{run.name} ({config['method']}, {len(log)} epochs): margin ×1e-3 per node, * = its pair changed")
    for k in range(max(1, len(log) - 5), len(log)):
        gaps, picks = margins(weights[k], nodes)
        _, before = margins(weights[k - 1], nodes)
        moved = [float((weights[k][off[i]:off[i + 1]] - weights[k - 1][off[i]:off[i + 1]]).abs().max()) for i in range(nodes)]
        cells = " ".join(f"{g * 1e3:6.2f}{'*' if p != b else ' '}" for g, p, b in zip(gaps, picks, before))
        print(f"  epoch {log[k]['epoch']:3d}: {cells} | largest weight change ×1e-3: {max(moved) * 1e3:.2f}")
