"""ESS inter-cell gates (Li et al. 2020 §3.2-3.4; docs/concepts/cell.md): how a cell reads the previous cells and
inputs.

    ĥ_{t-1} = f′(h_{t-1}; x_{t-m..t-1}) = h_{t-1} ⊙ s^β_f        (Eq. 8)
    x̂_t     = g′(x_t; h_{t-m..t-1})     = x_t ⊙ s^β_g             (Eq. 9)
and the intra cell π (the DARTS cell) reads ĥ_{t-1} and x̂_t. Each gate s^β is F(α; β) = s^α ⊙ s^β
(Eq. 6) with a DAG over β, the m history vectors:
    node i (1..N) takes its own history vector e_i (x_{t-i} for f′, h_{t-i} for g′; only i ≤ m)
    and the earlier nodes s_j; an edge applies op(src·W_src), one W per source (Eq. 4, no highway);
    s^β = squash(mean(s_1..s_N))  — the paper's last node is the mean of the others.
In search every edge mixes the ops over `alpha` by the search method's mixing rule (ESS: DARTS's
per-edge softmax, as in ESS Eq. 4; the Architect picks any parameter named `alpha...`), and the
derived gate keeps what that rule keeps (DARTS: one input per node). History before a sequence start is zero.

Choices where the paper is silent (flags of `bin/search-lm`, fields of the genotype's `inter`):
- `squash` (`--gate-squash`): `sigmoid` (default) keeps the gate in (0, 1) like the GLU/LSTM
  gates ESS compares itself to, so a gate can only attenuate and an unregularised retraining
  cannot blow up h; `2sigmoid` (Mogrifier LSTM's 2σ) starts every gate at ≈1, so the gated cell
  starts as the plain cell; `none` is Eq. 6 literally (an unbounded gate).
- `size_match` (`--gate-size-match`): `project` (default) lets the edges out of the history
  vectors map the source size to the gated size (W_e is d_src × d_gate: x is emsize, h is nhid),
  so no information is cut; `pad` zero-pads or truncates each history vector to the gated size
  and keeps every W square.
- The gates read x as given to the layer and h as the layer produced it; the cell's variational
  dropout masks act inside π only.

Genotype schema (the `inter` field of `nas.cells.genotype`, checked by `nas.cells.genotype.validate_inter`):
    {"history": m, "squash": "sigmoid", "size_match": "project",
     "f": [[[op, pred], ...], ...],  "g": [...]}
`f` and `g` list the inputs of nodes 1..N (N ≥ m) like the intra cell's `nodes`; predecessor 0
is the node's own history vector e_i (allowed for i ≤ m only), j ≥ 1 is node j < i.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from nas.cells.backend import DEFINITION, CellBackend, times
from nas.cells.ops import GATES, predecessors
from nas.cells.ops import ACTIVATIONS, INIT_RANGE, OPS, SQUASHES
from nas.cells.mixing import MixingRule


def gate_sizes(gate: str, ninp: int, nhid: int) -> tuple[int, int]:
    """(history vector size, gated vector size): f′ reads x to gate h, g′ reads h to gate x."""
    return (ninp, nhid) if gate == "f" else (nhid, ninp)


def match_size(v: torch.Tensor, size: int) -> torch.Tensor:
    """Zero-pad or truncate the last dimension to `size` (the `pad` size matching)."""
    have = v.size(-1)
    return v if have == size else F.pad(v, (0, size - have)) if have < size else v[..., :size]


def _uniform(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape).uniform_(-INIT_RANGE, INIT_RANGE))


class SearchGate(nn.Module):
    """One gate as a mixed DAG over history (m, L, ..., d_src) -> (L, ..., d_gate).

    `backend` (None: the definition, op by op) may run the DAG (`CellBackend.gate_nodes`: on a CPU, in
    training, the one Function of `nas.fast.gate_dag`).
    """

    backend: CellBackend | None = None

    def __init__(
        self,
        history: int,
        nodes: int,
        d_src: int,
        d_gate: int,
        rule: MixingRule,
        squash: str = "sigmoid",
        size_match: str = "project",
    ):
        super().__init__()
        self.rule = rule
        if not 1 <= history <= nodes:
            raise ValueError(f"history {history} needs 1 ≤ m ≤ inter nodes ({nodes}): node i reads history vector i")
        self.history, self.nodes, self.d_gate, self.squash, self.size_match = history, nodes, d_gate, squash, size_match
        self.layout = [len(predecessors(history, i)) for i in range(1, nodes + 1)]
        self.d_in = d_src if size_match == "project" else d_gate
        self.w_hist = _uniform(history, self.d_in, d_gate)
        self.w_node = _uniform(nodes - 1, d_gate, d_gate)
        self.alpha = nn.Parameter(1e-3 * torch.randn(sum(self.layout), len(OPS)))

    def mixing_weights(self) -> torch.Tensor:
        return self.rule.normalise(self.alpha, self.layout)

    def forward(self, history: torch.Tensor) -> torch.Tensor:
        hist = history if self.size_match == "project" else match_size(history, self.d_gate)
        e = torch.einsum("k...i,kio->k...o", hist, self.w_hist)  # e_i·W_{e_i}
        return self._nodes(list(e), list(self.w_node), self.mixing_weights())

    def stepwise(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The gate as a time loop calls it at every step, history (m, B, d_src) -> (B, d_gate): the same
        values, each weight as the backend holds it for a time loop (`step_weight`), the mixing weights
        normalised once."""
        backend = self.backend or DEFINITION
        w_hist, w_node = [backend.step_weight(w) for w in self.w_hist], [backend.step_weight(w) for w in self.w_node]
        weights = self.mixing_weights()

        def gate(history: torch.Tensor) -> torch.Tensor:
            hist = history if self.size_match == "project" else match_size(history, self.d_gate)
            return self._nodes([times(h, w) for w, h in zip(w_hist, hist)], w_node, weights)

        return gate

    def _nodes(self, e: list[torch.Tensor], w_node: list, weights: torch.Tensor) -> torch.Tensor:
        """The DAG over the projected history vectors e_i: every edge mixes the ops by `weights`."""
        fast = (self.backend or DEFINITION).gate_nodes(self, e, w_node, weights)
        if fast is not None:
            return fast
        rows = 0
        projected: list[torch.Tensor] = []  # s_j·W_{s_j}
        states = []
        for i in range(1, self.nodes + 1):
            sources = torch.stack(([e[i - 1]] if i <= self.history else []) + projected)
            ops = torch.stack([ACTIVATIONS[op](sources) for op in OPS[1:]])
            mix = weights[rows : rows + len(sources), 1:]  # `none` adds nothing
            rows += len(sources)
            s = torch.einsum("jo,oj...->...", mix, ops)
            states.append(s)
            if i < self.nodes:
                projected.append(times(s, w_node[i - 1]))
        return SQUASHES[self.squash](torch.stack(states).mean(0))

    def derive(self) -> list[list[list]]:
        """The gate's nodes by the search's rule, with real predecessor numbers."""
        nodes = self.rule.derive(self.mixing_weights(), self.layout)
        return [[[op, predecessors(self.history, i)[pos]] for op, pos in node] for i, node in enumerate(nodes, start=1)]

    def mad(self) -> float:
        return self.rule.mad(self.mixing_weights().detach(), self.layout)


class FrozenGate(nn.Module):
    """A derived gate for one or two directions: history (m, L, D, B, d_src) -> (L, D, B, d_gate).

    Parameters: one matrix per source some node reads, stacked per direction,
    D·(#history sources · d_in · d_gate + #node sources · d_gate²).
    """

    backend: CellBackend | None = None

    def __init__(
        self,
        nodes: list,
        history: int,
        d_src: int,
        d_gate: int,
        directions: int = 1,
        squash: str = "sigmoid",
        size_match: str = "project",
    ):
        super().__init__()
        self.nodes = [[(op, pred) for op, pred in node] for node in nodes]
        self.history, self.d_gate, self.squash, self.size_match = history, d_gate, squash, size_match
        self.hist_sources = sorted({i for i, node in enumerate(self.nodes, 1) for _, p in node if p == 0})
        self.node_sources = sorted({p for node in self.nodes for _, p in node if p > 0})
        d_in = d_src if size_match == "project" else d_gate
        self.w_hist = _uniform(directions, len(self.hist_sources), d_in, d_gate)
        self.w_node = _uniform(directions, len(self.node_sources), d_gate, d_gate)

    def forward(self, history: torch.Tensor) -> torch.Tensor:
        e = torch.einsum("kldbi,dkio->kldbo", self._sources(history), self.w_hist)
        return self._nodes(list(e), list(self.w_node.unbind(1)))

    def stepwise(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The gate as a time loop calls it at every step, history (m, D, B, d_src) -> (D, B, d_gate): the
        same values, each weight as the backend holds it for a time loop (`step_weight`)."""
        backend = self.backend or DEFINITION
        w_hist = [backend.step_weight(w) for w in self.w_hist.unbind(1)]
        w_node = [backend.step_weight(w) for w in self.w_node.unbind(1)]
        return lambda history: self._nodes([times(h, w) for w, h in zip(w_hist, self._sources(history))], w_node)

    def _sources(self, history: torch.Tensor) -> torch.Tensor:
        """The history vectors some node reads, sized for their projection."""
        hist = history[[i - 1 for i in self.hist_sources]]
        return match_size(hist, self.d_gate) if self.size_match == "pad" else hist

    def _nodes(self, e: list[torch.Tensor], w_node: list) -> torch.Tensor:
        """The DAG over the projected history vectors, one per source in `hist_sources`."""
        e_of = dict(zip(self.hist_sources, e))
        projected: dict[int, torch.Tensor] = {}
        states = []
        for i, node in enumerate(self.nodes, start=1):
            s = sum(ACTIVATIONS[op](e_of[i] if p == 0 else projected[p]) for op, p in node)
            states.append(s)
            if i in self.node_sources:
                projected[i] = times(s, w_node[self.node_sources.index(i)])
        return SQUASHES[self.squash](torch.stack(states).mean(0))

    def derive(self) -> list[list[list]]:
        return [[[op, p] for op, p in node] for node in self.nodes]


class InterGates(nn.Module):
    """f′ and g′ of one layer; `history` is m. Run by `nas.cells.recurrence.run_recurrence`."""

    def __init__(self, f: nn.Module, g: nn.Module, history: int, squash: str, size_match: str):
        super().__init__()
        self.f, self.g = f, g
        self.history, self.squash, self.size_match = history, squash, size_match

    @classmethod
    def frozen(cls, inter: dict, ninp: int, nhid: int, directions: int = 1) -> "InterGates":
        """The gates a genotype's (validated) `inter` section describes."""
        m, squash, match = inter["history"], inter["squash"], inter["size_match"]
        f, g = (FrozenGate(inter[k], m, *gate_sizes(k, ninp, nhid), directions, squash, match) for k in GATES)
        return cls(f, g, m, squash, match)

    @classmethod
    def search(
        cls,
        ninp: int,
        nhid: int,
        rule: MixingRule,
        history: int = 3,
        nodes: int = 3,
        squash: str = "sigmoid",
        size_match: str = "project",
    ) -> "InterGates":
        """Searchable gates whose α mix and derive by `rule` (ESS: DARTS's softmax per edge)."""
        f, g = (SearchGate(history, nodes, *gate_sizes(k, ninp, nhid), rule, squash, size_match) for k in GATES)
        return cls(f, g, history, squash, size_match)

    @property
    def searchable(self) -> bool:
        return isinstance(self.f, SearchGate)

    def derive(self) -> dict:
        """The genotype's `inter` section."""
        return {
            "history": self.history,
            "squash": self.squash,
            "size_match": self.size_match,
            "f": self.f.derive(),
            "g": self.g.derive(),
        }

    def mad(self) -> float:
        """Mean |w − uniform| over the edges of both gates (ESS Fig. 6, inter-cell curve)."""
        weights = torch.cat([self.f.mixing_weights(), self.g.mixing_weights()]).detach()
        return self.f.rule.mad(weights, self.f.layout + self.g.layout)
