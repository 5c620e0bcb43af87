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

The derivatives use the saved activations; the two elementwise passes of an edge are
`nas.fast.kernels` (C++ when the install built it, else a few PyTorch ops). Every GEMM is
`nas.fast.gemm.product` (oneDNN's matmul in float32 on a CPU, where it beats torch.mm: docs/speed.md), with the weights
of the per-step GEMMs packed once per pass where that pays (`loop_weights`).

Where the C++ kernels are built, on a CPU, the steps themselves run in C++ (`frozen_forward_steps`,
`frozen_backward_steps` in nas/fast/csrc/fused_kernels.cpp, line for line `_forward_steps` and
`_backward_steps` below): a tagger's sentences are short and its batches small, so the few dozen
views and calls per step that Python makes cost about a seventh of an epoch. The Python steps run
on other devices and without the kernels; the tests hold both to the autograd path.
"""

from __future__ import annotations

import functools
from typing import Iterable, NamedTuple, Sequence

import torch

from nas.cells.waves import Wave
from nas.fast.gemm import LoopWeight, pack_for_steps, product
from .kernels import OP_CODES, compiled, highway_backward, highway_forward, warn_once_without_kernels, with_kernels

LoopWeights = list[list[Sequence[LoopWeight]]]  # per wave, per group, per direction (`loop_weights`)


class Pick:
    """Indices into one dimension, taken as a view when they are evenly spaced (a copy otherwise)."""

    def __init__(self, index: Sequence[int]):
        self.index = list(index)
        steps = {b - a for a, b in zip(self.index, self.index[1:])}
        self.step = (steps.pop() if len(steps) == 1 else None) if self.index[1:] else 1
        if self.step is not None and self.step < 0:
            self.step = None
        self.distinct = len(set(self.index)) == len(self.index)
        self._tensors: dict[torch.device, torch.Tensor] = {}

    def tensor(self, device: torch.device) -> torch.Tensor:
        if device not in self._tensors:
            self._tensors[device] = torch.tensor(self.index, device=device)
        return self._tensors[device]

    @property
    def is_view(self) -> bool:
        return self.step is not None

    def take(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """t.index_select(dim, index)."""
        if self.step is None:
            return t.index_select(dim, self.tensor(t.device))
        if self.step == 0:
            return t.narrow(dim, self.index[0], 1).expand(*t.shape[:dim], len(self.index), *t.shape[dim + 1 :])
        view = t.narrow(dim, self.index[0], (len(self.index) - 1) * self.step + 1)
        return view if self.step == 1 else view.unfold(dim, 1, self.step).squeeze(-1)

    def put(self, t: torch.Tensor, dim: int, src: torch.Tensor) -> None:
        """Writes src at the indices; repeated indices add up (into a t that is zero there)."""
        if self.distinct and self.step is not None:
            self.take(t, dim).copy_(src)
        elif self.distinct:
            t.index_copy_(dim, self.tensor(t.device), src)
        else:
            self.add(t, dim, src)

    def add(self, t: torch.Tensor, dim: int, src: torch.Tensor) -> None:
        """t.index_add_(dim, index, src)."""
        if self.step == 0:
            t.narrow(dim, self.index[0], 1).add_(src.sum(dim, keepdim=True))
        elif self.step is not None:
            self.take(t, dim).add_(src)
        else:
            t.index_add_(dim, self.tensor(t.device), src)


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
    plan: Plan, w0h: torch.Tensor, ws: torch.Tensor, counts: list[int], forward: bool = True
) -> LoopWeights:
    """Per wave, per group, per direction: the weight the loop multiplies by at every step, packed for
    oneDNN's products from the row count the GEMM rule puts on oneDNN and where that pays for the
    packing, over steps of `counts` rows (`nas.fast.gemm.pack_for_steps`). Forward [W_i | W_j | …]ᵀ
    (E·2H, H), backward [W_i | W_j | …] (H, E·2H). A caller may keep the forward ones while the
    weights do not change (`nas.cells.cell.FrozenRNN` in prediction)."""
    with torch.no_grad():
        return [
            [[pack_for_steps(w, counts) for w in _group_weights(g, w0h, ws, forward)] for g in wave.groups]
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


def _forward_steps(
    plan: Plan,
    counts: list[int],
    h: torch.Tensor,
    mh: torch.Tensor | None,
    weights: LoopWeights,
    X: torch.Tensor | None,
    A: torch.Tensor,
    S: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """The time loop: fills X, A, S and out (A's slot 0 already holds the input projection). Without X
    (no gradient wanted, no mask) each GEMM reads its state in place."""
    start = 0
    for n in counts:
        rows = slice(start, start + n)
        states = S[:, :, rows]
        states[:, 0] = h[:, :n]
        for wave, wave_weights in zip(plan.waves, weights):
            for group, w in zip(wave.groups, wave_weights):
                prev = states[:, group.pred]
                if X is None:
                    xs = prev
                else:
                    xs = X[:, rows, group.input]
                    torch.mul(prev, mh[:, :n], out=xs) if mh is not None else xs.copy_(prev)
                for d in range(xs.size(0)):  # wave 0 adds to the input projection
                    product(xs[d], w[d], A[d, rows, group.edges].flatten(-2), accumulate=group.weights is None)
            act, prev = A[:, rows, wave.edges].transpose(1, 2), wave.preds.take(states, 1)
            if wave.nodes.is_view and wave.nodes.distinct:
                highway_forward(act, prev, wave.ops, wave.codes, wave.nodes.take(states, 1))
            else:
                new = torch.empty_like(prev)
                highway_forward(act, prev, wave.ops, wave.codes, new)
                wave.nodes.put(states, 1, new)
        h = out[:, rows]
        torch.mean(plan.concat.take(states, 1), 1, out=h)
        start += n


def _backward_steps(
    plan: Plan,
    counts: list[int],
    grad_out: torch.Tensor,
    mh: torch.Tensor | None,
    weights: LoopWeights,
    A: torch.Tensor,
    S: torch.Tensor,
    G: torch.Tensor,
) -> torch.Tensor:
    """Back-propagation through the time loop: fills G, returns ∂h0."""
    D, _, R, H = S.shape
    scale = 1.0 / len(plan.concat.index)
    grad_states = grad_out.new_empty(D, plan.states, counts[0], H)
    grad_prevs = grad_out.new_empty(D, max(len(wave.ops) for wave in plan.waves), counts[0], H)
    through = grad_out.new_empty(counts[0], H)
    carry = None  # ∂h_{t-1} of step t: h_{t-1} is the output of step t − 1
    end = R
    for n in reversed(counts):
        rows = slice(end - n, end)
        end -= n
        grad_h = grad_out[:, rows] * scale
        if carry is not None:
            grad_h[:, : carry.size(1)].add_(carry, alpha=scale)
        grad_s = grad_states[:, :, :n].zero_()
        plan.concat.put(grad_s, 1, grad_h.unsqueeze(1).expand(-1, len(plan.concat.index), -1, -1))
        states = S[:, :, rows]
        for wave, wave_weights in zip(reversed(plan.waves), reversed(weights)):
            grad_prev = grad_prevs[:, : len(wave.ops), :n]
            highway_backward(
                wave.nodes.take(grad_s, 1),
                wave.preds.take(states, 1),
                A[:, rows, wave.edges].transpose(1, 2),
                wave.ops,
                wave.codes,
                G[:, rows, wave.edges].transpose(1, 2),
                grad_prev,
            )
            wave.preds.add(grad_s, 1, grad_prev)
            for group, w in zip(wave.groups, wave_weights):  # through the group's GEMM, masked
                for d in range(D):
                    product(G[d, rows, group.edges].flatten(-2), w[d], through[:n])
                    grad_s[d, group.pred].add_(through[:n]) if mh is None else grad_s[d, group.pred].addcmul_(
                        through[:n], mh[d, :n]
                    )
        carry = grad_s[:, 0].clone()
    return carry


class CpuSteps:
    """The time steps on a CPU: `_forward_steps` and `_backward_steps` in C++ where the kernels are built
    (`frozen_forward_steps`, `frozen_backward_steps` in nas/fast/csrc/fused_kernels.cpp, line for line the
    same steps, every direction: one after the other on one thread, concurrently on more), else in
    Python, one direction after the other so that each one's weights stay in cache from step to step.
    Their weights are `loop_weights`. `nas.fast.triton_loop.TritonSteps` is the same interface on a GPU."""

    def weights(
        self, plan: Plan, w0h: torch.Tensor, ws: torch.Tensor, counts: list[int], forward: bool = True
    ) -> LoopWeights:
        return loop_weights(plan, w0h, ws, counts, forward)

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
        warn_once_without_kernels()
        if with_kernels(A):
            return compiled().frozen_forward_steps(
                _native_plan(plan.key), counts, h0, mh, _native_weights(weights), X, A, S, out
            )
        for d in _directions(A.size(0), A.device):
            _forward_steps(
                plan,
                counts,
                h0[d],
                None if mh is None else mh[d],
                [[w[d] for w in wave] for wave in weights],
                None if X is None else X[d],
                A[d],
                S[d],
                out[d],
            )

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
        if with_kernels(A):
            return compiled().frozen_backward_steps(
                _native_plan(plan.key), counts, grad_out, mh, _native_weights(weights), A, S, G
            )
        return torch.cat(
            [
                _backward_steps(
                    plan,
                    counts,
                    grad_out[d],
                    None if mh is None else mh[d],
                    [[w[d] for w in wave] for wave in weights],
                    A[d],
                    S[d],
                    G[d],
                )
                for d in _directions(A.size(0), A.device)
            ]
        )


CPU_STEPS = CpuSteps()


def _directions(D: int, device: torch.device) -> list[slice]:
    """On a CPU one direction after the other, so that each one's weights stay in cache from step to
    step; elsewhere both at once."""
    return [slice(d, d + 1) for d in range(D)] if device.type == "cpu" else [slice(None)]


class FusedFrozenCell(torch.autograd.Function):
    """Packed outputs (D, R, H) of the frozen cell over packed inputs x (D, R, ninp).

    Inputs: x (already masked by m_x), h0 (D, B, H) the initial state (B = counts[0]),
    w0 (D, ninp + H, 2H), ws (D, N, H, 2H), mh (D, B, H) or None, the Plan, counts (the
    rows of each step, non-increasing; row r of step t is sequence r − offset_t), the steps that run the
    time loop (`CPU_STEPS`, or `nas.fast.triton_loop.STEPS` on a GPU), and their forward weights
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
            product(x[d], w0[d, :ninp].t(), A[d, :, 0])
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
        D, ninp = x.size(0), x.size(-1)
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
    steps: CpuSteps = CPU_STEPS,
    weights: object | None = None,
) -> torch.Tensor:
    """FusedFrozenCell.apply: the packed outputs (D, R, H)."""
    return FusedFrozenCell.apply(x, h0, w0, ws, mh, plan, counts, steps, weights)
