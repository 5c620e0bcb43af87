"""The DARTS search cell (Liu et al. 2019; docs/concepts/search-methods.md): the frozen cell with every edge j < i mixed
over all ops.

α (`alpha`, one row per edge, one column per op in `nas.cells.ops.OPS`) is owned here; the Architect
updates it. Node i computes [c | h] for all its predecessors in one matmul (W_i is shared by the
edges entering node i), applies every op to the stacked tensor and mixes them (`search_step`):

    s_i = BN( Σ_j Σ_op w_{j,op} · [s_j + σ(c_j)⊙(op(h_j) − s_j)] )

`none` contributes nothing but stays in the normalisation. Each state has its own BatchNorm
(`node_norms`; DARTS shares one, which breaks eval mode). With one-hot weights this is the
frozen cell of the derived genotype (`nas.cells.cell`, whose `first_node` and `highway` it uses). How α becomes the
weights w and
which cell they derive is the search method's mixing rule (`nas.cells.mixing.MixingRule`: DARTS
normalises each edge's ops, I-DARTS all (j, op) pairs entering a node together), handed in.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from nas.cells.backend import DEFINITION, CellBackend
from nas.cells.cell import first_node
from nas.cells.ops import Genotype
from nas.cells.masks import variational_mask
from nas.cells.ops import ACTIVATIONS, INIT_RANGE, OPS, edge_offsets
from nas.cells.recurrence import run_recurrence
from nas.cells.mixing import MixingRule


class SearchRNN(nn.Module):
    """The search cell over sequences; same first node and parameter shapes as `FrozenRNN`.

    ESS `inter` gates (`nas.cells.gates.InterGates.search`) and a NASABN `attention` layer
    (`nas.cells.attention`) are optional; with gates the hidden state is (h, x_hist, h_hist).
    `backend` (None: the definition, op by op through autograd) may run the whole time loop
    (`CellBackend.search_loop`: on a CPU, in training, the fused Function of `nas.fast.search_loop`)
    or each step (`time_step`: compiled).
    """

    backend: CellBackend | None = None

    def __init__(
        self,
        ninp: int,
        nhid: int,
        steps: int,
        rule: MixingRule,
        dropout_x: float = 0.0,
        dropout_h: float = 0.0,
        inter: nn.Module | None = None,
        attention: nn.Module | None = None,
    ):
        super().__init__()
        self.ninp, self.nhid, self.steps, self.rule = ninp, nhid, steps, rule
        self.dropout_x, self.dropout_h = dropout_x, dropout_h
        self.w0 = nn.Parameter(torch.empty(ninp + nhid, 2 * nhid).uniform_(-INIT_RANGE, INIT_RANGE))
        self.ws = nn.ParameterList(
            nn.Parameter(torch.empty(nhid, 2 * nhid).uniform_(-INIT_RANGE, INIT_RANGE)) for _ in range(steps)
        )
        self.alpha = nn.Parameter(1e-3 * torch.randn(steps * (steps + 1) // 2, len(OPS)))
        self.bn = node_norms(nhid, steps)
        self.inter, self.attention = inter, attention
        self.backend_state: dict = {}  # what the backend keeps for this layer between calls (packed weights)

    @property
    def output_size(self) -> int:
        return self.nhid

    def init_hidden(self, batch: int):
        h = self.w0.new_zeros(1, batch, self.nhid)
        if self.inter is None:
            return h
        m = self.inter.history
        return h, self.w0.new_zeros(m, batch, self.ninp), self.w0.new_zeros(m, batch, self.nhid)

    def mixing_weights(self) -> torch.Tensor:
        return self.rule.normalise(self.alpha, self.steps)

    def genotype(self, top_n: int = 1) -> Genotype:
        """The derived intra cell (the search adds the derived gates and attention type)."""
        nodes = self.rule.derive(self.mixing_weights(), self.steps, top_n)
        return Genotype(tuple(tuple(n) for n in nodes), tuple(range(1, self.steps + 1)))

    def step_function(self, mh: torch.Tensor | None, w0h: torch.Tensor) -> Callable:
        """(xp, h_{t-1}) → h_t for this forward: every edge mixing all ops under the current weights."""
        mixes = node_mixes(self.mixing_weights(), self.steps)
        cell_step = (self.backend or DEFINITION).time_step(search_step)
        ws = list(self.ws)
        return lambda xp, h: cell_step(xp, h, mh, w0h, ws, mixes, self.bn)

    def forward(self, x: torch.Tensor, hidden=None, lengths: torch.Tensor | None = None):
        T, B, _ = x.shape
        H = self.nhid
        hidden = self.init_hidden(B) if hidden is None else hidden
        h, history = (hidden[0], None) if self.inter is None else (hidden[0][0], tuple(hidden[1:]))
        mx = mh = None
        if self.training:
            mx = variational_mask(x, self.dropout_x, (B, self.ninp))
            mh = variational_mask(x, self.dropout_h, (B, H))
        xin = x if mx is None else x * mx
        w0x, w0h = self.w0[: self.ninp], self.w0[self.ninp :]
        backend = self.backend or DEFINITION
        xproj = None if self.inter is not None else backend.linear(xin, w0x.t())
        done = backend.search_loop(self, x, xin, xproj, h, history, w0x, w0h, mh)
        if done is not None:
            return self._finish(*done)
        cell_step = self.step_function(mh, w0h)
        # unbound once: one backward node, not a zero-filled (T, B, ·) gradient per step
        xsteps = xin.unbind(0) if xproj is None else xproj.unbind(0)

        def step(t: int, x_gate: torch.Tensor | None, h: torch.Tensor) -> torch.Tensor:
            xp = xsteps[t] if x_gate is None else (xsteps[t] * x_gate) @ w0x
            return cell_step(xp, h)

        return self._finish(*run_recurrence(step, h, T, self.inter, x, history))

    def _finish(self, out: torch.Tensor, h: torch.Tensor, history: tuple | None):
        if self.attention is not None:
            out = self.attention(out, causal=True)
        return out, (h.unsqueeze(0) if history is None else (h.unsqueeze(0), *history))


def node_norms(nhid: int, steps: int) -> nn.ModuleList:
    """The BatchNorm of s0 and of each node (affine off, as in DARTS): one module each, `[k]` for state k.

    A deliberate deviation from DARTS, whose search cell calls one BatchNorm module for s0 and every
    node. In training the two are the same: each call normalises with its own batch's statistics.
    They differ in eval mode, which normalises with the running statistics: node i sums i
    unit-variance states, so the states' variances before BatchNorm range over orders of magnitude
    (about 0.2 for s0 and 100 for node 8 at nhid 64), and one shared running variance, dominated by
    the last nodes, shrinks s0 and the early nodes towards zero. The search's validation loss was
    then not the loss α descends (the α step runs in training mode), and read far worse than it
    (docs/concepts/search-methods.md). One running statistic per state keeps eval mode faithful to
    training.
    """
    return nn.ModuleList(nn.BatchNorm1d(nhid, affine=False) for _ in range(steps + 1))


def node_mixes(weights: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Per node i, the (i, len(OPS), 1, 1) weights of [op(h) for op in OPS[1:]] and s in Σ_op w·op(h) − keep·s.

    keep = Σ_{op≠none} w is the weight of the edge's highway term (`none` adds nothing).
    """
    off = edge_offsets(steps)
    mixes = []
    for i in range(steps):
        w = weights[off[i] : off[i + 1], 1:]
        mixes.append(torch.cat([w, -w.sum(1, keepdim=True)], 1).view(i + 1, len(OPS), 1, 1))
    return mixes


def search_step(
    xp: torch.Tensor,
    h: torch.Tensor,
    mh: torch.Tensor | None,
    w0h: torch.Tensor,
    ws: list[torch.Tensor],
    mixes: list[torch.Tensor],
    bn: nn.ModuleList,
) -> torch.Tensor:
    """One time step of the search cell; returns h_t = mean of the nodes.

    Node i with predecessors j < i (stacked as S, shape (i, B, H)):
        [C | Hh] = (S ⊙ m_h)·W_i                             one GEMM for all edges
        U = Σ_op w_op·op(Hh) − keep·S                         every op on the stacked tensor
        s_i = BN( Σ_j keep_j·S_j + σ(C_j) ⊙ U_j )
    which is Σ_j Σ_op w_j,op·highway(S_j, C_j, op(Hh_j)), the frozen cell's edge (`nas.cells.cell`) under
    the mixing weights, with the sums over ops done once.
    `bn[k]` normalises state k (`node_norms`; under torchrun, the synced ones of nas.common.distributed).
    Written as plain broadcasts over the stacked edges so torch.compile fuses each node into a
    few loops; eager, it needs no stacked copy of the ops' outputs.
    """
    B, H = h.shape
    states = bn[0](first_node(xp, (h if mh is None else h * mh) @ w0h, h)).unsqueeze(0)
    for w, mix in zip(ws, mixes):
        i = states.size(0)
        c, hh = ((states if mh is None else states * mh).view(i * B, H) @ w).view(i, B, 2 * H).split(H, -1)
        m = mix.unbind(1)  # (i, 1, 1) each: the ops of OPS[1:], then −keep
        u = m[0] * ACTIVATIONS[OPS[1]](hh)
        for w_op, op in zip(m[1:-1], OPS[2:]):
            u = u + w_op * ACTIVATIONS[op](hh)
        u = u + m[-1] * states
        s = bn[i]((torch.sigmoid(c) * u - m[-1] * states).sum(0))
        states = torch.cat([states, s.unsqueeze(0)])
    return states[1:].mean(0)
