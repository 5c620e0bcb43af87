"""The frozen cell's whole time loop as one autograd Function, back-propagated through time by hand.

Autograd records a node for each of the hundreds of small ops per time step and keeps every
intermediate; here the forward runs the loop under no_grad into a few preallocated buffers and
the backward is written out (equations in `nas.cells.cell` and docs/concepts/cell.md). Both directions are stacked on
a leading axis (on a CPU the loop runs them one after the other, so that each one's weights stay
in cache); the batch is packed step after step (step t runs the first `counts[t]` sequences of a
length-sorted batch) and the variational mask m_h is fixed.

The cell is run as waves of edges s_node += prev + σ(c)(f(h) − prev), [c | h] = (prev⊙m_h)·W:
wave 0 is s0 (prev = h_{t-1}, W = W0h, f = tanh, on top of the input projection x·W0x), then
the genotype's waves. The edges of a wave that share a predecessor form a group: one GEMM
(prev⊙m_h)·[W_i | W_j | …] per step, and one for its gradient. Per direction and packed row the
forward keeps
    X: each group's GEMM input (H),  A: each edge's [σ(c) | f(h)] (2H),  S: h_{t-1} and every state (H),
nothing else. The backward fills G = ∂[c | h] per edge and row, step by step and wave by wave in
reverse, then forms each weight's gradient as one GEMM over all rows, ∂W = Xᵀ·G (and
∂W0x = xᵀ·G₀, ∂x = G₀·W0xᵀ: the input projection is one GEMM over all rows both ways). When no
gradient is wanted (prediction) nothing is kept and X is not formed.

Step t (rows `counts[t]`), per wave: each group's GEMM into its edges' slots of A (wave 0 adds to the
input projection), the edges' activations A = [σ(c) | f(h)] in place, each edge's highway into its node's
state in S; then h_t = the mean of the concat states. Backward, per step in reverse and wave by wave in
reverse: G = ∂[c | h] of each edge from ∂s, A and S (the equations of `nas.fast.kernels`), ∂prev through the
highway, then through each group's GEMM, (G·[W_i | W_j | …]ᵀ)⊙m_h. The steps run in C++ on a CPU
(`CpuSteps`: `frozen_forward_steps`, `frozen_backward_steps` in nas/fast/csrc/fused_kernels.cpp; a tagger's
sentences are short and its batches small, so a Python loop's few dozen views and calls per step cost about
a seventh of an epoch) and as two Triton kernels on a GPU (`nas.fast.triton_loop`); without the C++ kernels
the backend leaves the layer to its definition (autograd). Every GEMM outside the steps is the run's
`Gemm.product` (`nas.fast.gemm`: oneDNN's matmul in float32 on a CPU where its rule puts it, docs/speed.md), with
the weights of the per-step GEMMs packed once per pass where that pays (`loop_weights`). The tests hold each
path to the definition.
"""

from __future__ import annotations

import functools
from typing import Iterable, NamedTuple, Sequence

import torch

from nas.cells.waves import Wave
from nas.fast.gemm import Gemm, LoopWeight
from .kernels import OP_CODES, compiled

LoopWeights = list[list[Sequence[LoopWeight]]]  # per wave, per group, per direction (`loop_weights`)


class Pick:
    """Indices into one dimension, taken as a view when they are evenly spaced (a copy otherwise), as the C++
    loop's `Pick` takes them."""

    def __init__(self, index: Sequence[int]):
        self.index = list(index)
        steps = {b - a for a, b in zip(self.index, self.index[1:])}
        self.step = (steps.pop() if len(steps) == 1 else None) if self.index[1:] else 1
        if self.step is not None and self.step < 0:
            self.step = None
        self.distinct = len(set(self.index)) == len(self.index)

    def take(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """t.index_select(dim, index)."""
        if self.step is None:
            return t.index_select(dim, torch.tensor(self.index, device=t.device))
        if self.step == 0:
            return t.narrow(dim, self.index[0], 1).expand(*t.shape[:dim], len(self.index), *t.shape[dim + 1 :])
        view = t.narrow(dim, self.index[0], (len(self.index) - 1) * self.step + 1)
        return view if self.step == 1 else view.unfold(dim, 1, self.step).squeeze(-1)


class Group(NamedTuple):
    """A wave's edges that read the same state: one GEMM (prev⊙m_h)·[W_i | W_j | …] per step."""

    edges: slice  # their slots in A and G
    input: int  # its slot in X
    pred: int  # the state it reads (S slot)
    weights: Pick | None  # the edges' matrices in ws (None: wave 0, W0h)


class WaveSlots(NamedTuple):
    """A wave's edges as the Function runs them, sorted by predecessor, then node."""

    edges: slice  # their slots in A and G
    nodes: Pick  # the states they write (S slots)
    preds: Pick  # the states they read (S slots)
    groups: list[Group]
    ops: list[str]
    codes: list[int]


class Plan(NamedTuple):
    """A genotype's edges as the Function runs them. S slot 0 is h_{t-1}, slot 1 + k node k."""

    waves: list[WaveSlots]
    concat: Pick  # the states averaged into h_t
    states: int
    edges: int
    inputs: int
    multi_input: bool  # some node sums several edges
    key: tuple  # the plan as plain ints, for the C++ loop (`_native_plan`)


# Wave 0, s0 = h + σ(c0)(tanh(h0) − h) from h_{t-1} (W0h): the first node of every cell, the search cell's too
FIRST_NODE = WaveSlots(
    slice(0, 1), Pick([1]), Pick([0]), [Group(slice(0, 1), 0, 0, None)], ["tanh"], [OP_CODES["tanh"]]
)


def supports(ops: Iterable[str]) -> bool:
    """Whether this loop can run a cell whose edges apply `ops` (those the kernels, and their PyTorch
    stand-ins, know)."""
    return set(ops) <= set(OP_CODES)


def plan(waves: Sequence[Wave], concat: Sequence[int], steps: int) -> Plan:
    """The Plan of a genotype's waves, as `nas.cells.waves.plan_waves` groups its edges."""
    out = [FIRST_NODE]
    start, inputs = 1, 1
    for nodes, preds, runs in waves:
        ops = [op for op, first, end in runs for _ in range(first, end)]
        edges = sorted(zip(preds, nodes, ops))
        groups = []
        for pred in sorted(set(preds)):
            first = start + next(e for e, edge in enumerate(edges) if edge[0] == pred)
            mine = [node for p, node, _ in edges if p == pred]
            groups.append(Group(slice(first, first + len(mine)), inputs, pred + 1, Pick([node - 1 for node in mine])))
            inputs += 1
        ops = [op for _, _, op in edges]
        out.append(
            WaveSlots(
                slice(start, start + len(edges)),
                Pick([node + 1 for _, node, _ in edges]),
                Pick([pred + 1 for pred, _, _ in edges]),
                groups,
                ops,
                [OP_CODES[op] for op in ops],
            )
        )
        start += len(edges)
    key = (
        tuple((w.edges.start, w.edges.stop) for w in out),
        tuple(tuple(w.nodes.index) for w in out),
        tuple(tuple(w.preds.index) for w in out),
        tuple(tuple(w.codes) for w in out),
        tuple(
            (i, g.edges.start, g.edges.stop, g.input, g.pred, int(g.weights is None))
            for i, w in enumerate(out)
            for g in w.groups
        ),
        tuple(k + 1 for k in concat),
    )
    return Plan(
        out, Pick([k + 1 for k in concat]), steps + 2, start, inputs, any(not w.nodes.distinct for w in out), key
    )


@functools.lru_cache(maxsize=64)
def _native_plan(key: tuple) -> object:
    """The C++ loop's own form of a plan (`frozen_plan` in nas/fast/csrc/), built once per genotype."""
    return compiled().frozen_plan(*key)


def _native_weights(weights: LoopWeights) -> list[Sequence[LoopWeight]]:
    """The loop weights as the C++ loop takes them: per group (waves in order), per direction."""
    return [w for wave in weights for w in wave]


def loop_weights(
    gemm: Gemm, plan: Plan, w0h: torch.Tensor, ws: torch.Tensor, counts: list[int], forward: bool = True
) -> LoopWeights:
    """Per wave, per group, per direction: the weight the loop multiplies by at every step, packed for
    oneDNN's products from the row count the GEMM rule puts on oneDNN and where that pays for the
    packing, over steps of `counts` rows (`Gemm.pack_for_steps`). Forward [W_i | W_j | …]ᵀ
    (E·2H, H), backward [W_i | W_j | …] (H, E·2H). A caller may keep the forward ones while the
    weights do not change (`nas.cells.cell.FrozenRNN` in prediction)."""
    with torch.no_grad():
        return [
            [[gemm.pack_for_steps(w, counts) for w in _group_weights(g, w0h, ws, forward)] for g in wave.groups]
            for wave in plan.waves
        ]


def _group_weights(group: Group, w0h: torch.Tensor, ws: torch.Tensor, forward: bool) -> torch.Tensor:
    """The group's matrices as one linear weight (D, N, K): backward [W_i | W_j | …] (D, H, E·2H),
    forward its transpose (D, E·2H, H) as a view (packing copies it where oneDNN takes it; torch.mm
    reads it in place)."""
    w = w0h.unsqueeze(1) if group.weights is None else group.weights.take(ws, 1)  # (D, E, H, 2H)
    D, E, H, H2 = w.shape
    joined = w.transpose(1, 2).reshape(D, H, E * H2)
    return joined.transpose(1, 2) if forward else joined


class CpuSteps:
    """The time steps on a CPU, in C++ (`frozen_forward_steps`, `frozen_backward_steps` in
    nas/fast/csrc/fused_kernels.cpp: every direction, one after the other on one thread, concurrently on
    more), on the weights of `loop_weights`. Without the kernels the backend does not run this loop (the cell
    runs its definition). `gemm`: the rule of every product of the loop (`FusedFrozenCell`'s too).
    `nas.fast.triton_loop.TritonSteps` is the same interface on a GPU."""

    def __init__(self, gemm: Gemm):
        self.gemm = gemm

    def weights(
        self, plan: Plan, w0h: torch.Tensor, ws: torch.Tensor, counts: list[int], forward: bool = True
    ) -> LoopWeights:
        return loop_weights(self.gemm, plan, w0h, ws, counts, forward)

    def forward(
        self,
        plan: Plan,
        counts: list[int],
        h0: torch.Tensor,
        mh: torch.Tensor | None,
        weights: LoopWeights,
        X: torch.Tensor | None,
        A: torch.Tensor,
        S: torch.Tensor,
        out: torch.Tensor,
    ) -> None:
        """Fills X (when given), A (whose edge 0 already holds the input projection), S and out."""
        compiled().frozen_forward_steps(_native_plan(plan.key), counts, h0, mh, _native_weights(weights), X, A, S, out)

    def backward(
        self,
        plan: Plan,
        counts: list[int],
        grad_out: torch.Tensor,
        mh: torch.Tensor | None,
        weights: LoopWeights,
        A: torch.Tensor,
        S: torch.Tensor,
        G: torch.Tensor,
    ) -> torch.Tensor:
        """Fills G, returns ∂h0 (D, B, H)."""
        return compiled().frozen_backward_steps(
            _native_plan(plan.key), counts, grad_out, mh, _native_weights(weights), A, S, G
        )


class FusedFrozenCell(torch.autograd.Function):
    """Packed outputs (D, R, H) of the frozen cell over packed inputs x (D, R, ninp).

    Inputs: x (already masked by m_x), h0 (D, B, H) the initial state (B = counts[0]),
    w0 (D, ninp + H, 2H), ws (D, N, H, 2H), mh (D, B, H) or None, the Plan, counts (the
    rows of each step, non-increasing; row r of step t is sequence r − offset_t), the steps that run the
    time loop (`CpuSteps`, or `nas.fast.triton_loop.STEPS` on a GPU) and whose `gemm` runs the products here,
    and their forward weights
    (`steps.weights(plan, w0[:, ninp:], ws, counts)`) or None to form them here.
    """

    @staticmethod
    def forward(
        ctx,
        x: torch.Tensor,
        h0: torch.Tensor,
        w0: torch.Tensor,
        ws: torch.Tensor,
        mh: torch.Tensor | None,
        plan: Plan,
        counts: list[int],
        steps: CpuSteps,
        weights: object | None,
    ) -> torch.Tensor:
        D, R, ninp = x.shape
        H = h0.size(-1)
        backward = any(ctx.needs_input_grad)
        X = x.new_empty(D, R, plan.inputs, H) if backward or mh is not None else None
        A = x.new_empty(D, R, plan.edges, 2 * H)
        S = (x.new_zeros if plan.multi_input else x.new_empty)(D, plan.states, R, H)  # edges into one node add up
        out = x.new_empty(D, R, H)
        for d in range(D):  # the input projection of every row at once
            steps.gemm.product(x[d], w0[d, :ninp].t(), A[d, :, 0])
        weights = steps.weights(plan, w0[:, ninp:], ws, counts) if weights is None else weights
        steps.forward(plan, counts, h0, mh, weights, X, A, S, out)
        if backward:
            ctx.save_for_backward(x, w0, ws, mh, X, A, S)
        ctx.plan, ctx.counts, ctx.steps = plan, counts, steps
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, w0, ws, mh, X, A, S = ctx.saved_tensors
        plan, counts, steps = ctx.plan, ctx.counts, ctx.steps
        D, ninp, product = x.size(0), x.size(-1), steps.gemm.product
        G = torch.empty_like(A)  # ∂[c | h] of every edge and row
        grad_h0 = steps.backward(
            plan, counts, grad_out, mh, steps.weights(plan, w0[:, ninp:], ws, counts, forward=False), A, S, G
        )
        need_x, need_h0, need_w0, need_ws = ctx.needs_input_grad[:4]
        grad_x = torch.stack([product(G[d, :, 0], w0[d, :ninp]) for d in range(D)]) if need_x else None
        grad_w0 = torch.empty_like(w0) if need_w0 else None
        grad_ws = (torch.zeros_like if plan.multi_input else torch.empty_like)(ws) if need_ws else None
        if need_w0:
            for d in range(D):
                product(x[d].t(), G[d, :, 0].t(), grad_w0[d, :ninp])
                product(X[d, :, 0].t(), G[d, :, 0].t(), grad_w0[d, ninp:])
        for group in (g for wave in plan.waves[1:] for g in wave.groups) if need_ws else ():
            for e, node in zip(range(group.edges.start, group.edges.stop), group.weights.index):
                # one GEMM over every row of every step per weight; several edges into one node add up
                for d in range(D):
                    product(X[d, :, group.input].t(), G[d, :, e].t(), grad_ws[d, node], accumulate=plan.multi_input)
        return grad_x, grad_h0 if need_h0 else None, grad_w0, grad_ws, None, None, None, None, None


def fused_frozen_cell(
    x: torch.Tensor,
    h0: torch.Tensor,
    w0: torch.Tensor,
    ws: torch.Tensor,
    mh: torch.Tensor | None,
    plan: Plan,
    counts: list[int],
    steps: CpuSteps,
    weights: object | None = None,
) -> torch.Tensor:
    """FusedFrozenCell.apply: the packed outputs (D, R, H)."""
    return FusedFrozenCell.apply(x, h0, w0, ws, mh, plan, counts, steps, weights)
