"""The frozen cell's whole time loop as one autograd Function, back-propagated through time by hand.

Autograd records a node for each of the hundreds of small ops per time step and keeps every
intermediate; here the forward runs the loop under no_grad into a few preallocated buffers and
the backward is written out (NOTES §1, equations in `nas.cell`). Both directions are stacked on
a leading axis; the batch is packed step after step (step t runs the first `counts[t]`
sequences of a length-sorted batch) and the variational mask m_h is fixed.

The cell is run as waves of "edges" s_node += prev + σ(c)(f(h) − prev), [c | h] = (prev⊙m_h)·W:
wave 0 is s0 (prev = h_{t-1}, W = W0h, f = tanh, plus the input projection x·W0x), then the
genotype's waves. Each edge is one GEMM slot; per direction, slot and packed row the forward keeps
    X: the GEMM input (H),   A: [σ(c) | f(h)] (2H),   S: h_{t-1} and every node's state (H),
nothing else. The backward fills G = ∂[c | h] per slot and row, step by step and wave by wave in
reverse, then forms each weight's gradient as one GEMM over all R rows, ∂W = Xᵀ·G (and
∂W0x = xᵀ·G₀, ∂x = G₀·W0xᵀ: the input projection is one GEMM over all rows both ways).

The derivatives use the saved activations: σ' = σ(1 − σ), tanh' = 1 − a², relu' = [a > 0];
for s = p + σ(c)(a − p): ∂p = ∂s(1 − σ), ∂c = ∂s(a − p)σ', ∂a = ∂s·σ. Those two elementwise
passes run in the C++ kernels of `nas/csrc/fused_kernels.cpp` when `pip install -e .` built them
(one fused loop each), else as a few PyTorch ops.
"""
from __future__ import annotations

import logging
from typing import NamedTuple, Sequence

import torch

try:
    from . import _fused_kernels as _kernels
except ImportError:
    _kernels = None

# A wave of `nas.cell.plan_waves`: its edges' nodes and predecessors, and runs (op, first, end) of edges
CellWave = tuple[Sequence[int], Sequence[int], Sequence[tuple[str, int, int]]]
OP_CODES = {"identity": 0, "tanh": 1, "relu": 2, "sigmoid": 3}  # as in nas/csrc/fused_kernels.cpp


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
            return t.narrow(dim, self.index[0], 1).expand(*t.shape[:dim], len(self.index), *t.shape[dim + 1:])
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


class Wave(NamedTuple):
    """Edges whose inputs are ready together: one GEMM per direction and step."""

    slots: slice  # its GEMM slots in X, A, G
    nodes: Pick  # the states it writes (S slots)
    preds: Pick  # the states it reads (S slots)
    weights: Pick | None  # its node matrices in ws (None: wave 0, W0h)
    ops: list[str]
    codes: list[int]


class Plan(NamedTuple):
    """A genotype's edges as the Function runs them. S slot 0 is h_{t-1}, slot 1 + k node k."""

    waves: list[Wave]
    concat: Pick  # the states averaged into h_t
    states: int
    slots: int
    multi_input: bool  # some node sums several edges


def plan(waves: Sequence[CellWave], concat: Sequence[int], steps: int) -> Plan:
    """The Plan of a genotype's waves, as `nas.cell.plan_waves` groups its edges."""
    out = [Wave(slice(0, 1), Pick([1]), Pick([0]), None, ["tanh"], [OP_CODES["tanh"]])]
    start = 1
    for nodes, preds, runs in waves:
        ops = [op for op, first, end in runs for _ in range(first, end)]
        edges = sorted(zip(nodes, preds, ops))  # by node, so that picks are views more often
        ops = [op for _, _, op in edges]
        out.append(Wave(slice(start, start + len(edges)), Pick([node + 1 for node, _, _ in edges]),
                        Pick([pred + 1 for _, pred, _ in edges]), Pick([node - 1 for node, _, _ in edges]),
                        ops, [OP_CODES[op] for op in ops]))
        start += len(edges)
    return Plan(out, Pick([k + 1 for k in concat]), steps + 2, start, any(not w.nodes.distinct for w in out))


def _activate_(op: str, h: torch.Tensor) -> None:
    if op == "tanh":
        h.tanh_()
    elif op == "relu":
        h.relu_()
    elif op == "sigmoid":
        h.sigmoid_()


def _activation_grad(op: str, a: torch.Tensor, grad: torch.Tensor, out: torch.Tensor) -> None:
    """out = grad · f'(h), with f' written through the activation's output a = f(h)."""
    if op == "tanh":
        torch.mul(grad, 1 - a * a, out=out)
    elif op == "relu":
        torch.mul(grad, a > 0, out=out)
    elif op == "sigmoid":
        torch.mul(grad, a - a * a, out=out)
    else:
        out.copy_(grad)


def _with_kernels(t: torch.Tensor) -> bool:
    return _kernels is not None and t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64)


def _highway_forward(act: torch.Tensor, prev: torch.Tensor, wave: Wave, out: torch.Tensor) -> None:
    """act = [c | h] → [σ(c) | f(h)] in place; out = prev + σ(c)(f(h) − prev). Edges at dim 1."""
    if _with_kernels(act):
        return _kernels.highway_forward(act, prev, wave.codes, out)
    H = prev.size(-1)
    sig, a = act[..., :H], act[..., H:]
    sig.sigmoid_()
    for e, op in enumerate(wave.ops):
        _activate_(op, a[:, e])
    torch.addcmul(prev, sig, a - prev, out=out)


def _highway_backward(grad: torch.Tensor, prev: torch.Tensor, act: torch.Tensor, wave: Wave,
                      g: torch.Tensor, direct: torch.Tensor) -> None:
    """g = [∂c | ∂h] of out = prev + σ(c)(f(h) − prev) from act = [σ(c) | f(h)] and grad = ∂out;
    direct = ∂prev through the highway alone, grad·(1 − σ(c))."""
    if _with_kernels(act):
        return _kernels.highway_backward(grad, prev, act, wave.codes, g, direct)
    H = prev.size(-1)
    sig, a = act[..., :H], act[..., H:]
    torch.mul(grad * (a - prev), sig - sig * sig, out=g[..., :H])
    grad_a = grad * sig
    for e, op in enumerate(wave.ops):
        _activation_grad(op, a[:, e], grad_a[:, e], g[:, e, ..., H:])
    torch.sub(grad, grad_a, out=direct)


def _weights(wave: Wave, w0h: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    """The wave's matrices (D, edges, H, 2H)."""
    return w0h.unsqueeze(1) if wave.weights is None else wave.weights.take(ws, 1)


def _onednn(t: torch.Tensor) -> bool:
    """Whether the per-step GEMMs go to oneDNN's matmul (float32 on a CPU with MKL-DNN)."""
    return USE_ONEDNN and t.device.type == "cpu" and t.dtype == torch.float32 and torch.backends.mkldnn.is_available()


USE_ONEDNN = True


def _as_linear(w: torch.Tensor, onednn: bool) -> torch.Tensor:
    """Matrices (…, K, N) as linear weights (…, N, K): contiguous for oneDNN, a view for bmm."""
    w = w.transpose(-1, -2)
    return w.contiguous() if onednn else w


def _gemm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, accumulate: bool = False) -> None:
    """out (E, n, N) = x (E, n, K) · weight (E, N, K)ᵀ, plus out when accumulating."""
    if _onednn(x):
        for e in range(x.size(0)):
            product = torch.ops.mkldnn._linear_pointwise(x[e], weight[e], None, "none", [], "")
            out[e].add_(product) if accumulate else out[e].copy_(product)
    elif accumulate:
        torch.baddbmm(out, x, weight.transpose(1, 2), out=out)
    else:
        torch.bmm(x, weight.transpose(1, 2), out=out)


_warned = False


def _warn_once_without_kernels() -> None:
    global _warned
    if _kernels is None and not _warned:
        _warned = True
        logging.getLogger(__name__).warning(
            "nas.fused_cell: C++ kernels not built (pip install -e . builds them); running the pure PyTorch path")


def _forward_steps(plan: Plan, counts: list[int], h: torch.Tensor, mh: torch.Tensor | None,
                   weights: list[torch.Tensor], X: torch.Tensor, A: torch.Tensor, S: torch.Tensor,
                   out: torch.Tensor) -> None:
    """The time loop: fills X, A, S and out (A's wave-0 slot already holds the input projection)."""
    start = 0
    for n in counts:
        rows = slice(start, start + n)
        m = None if mh is None else mh[:, None, :n]
        states = S[:, :, rows]
        states[:, 0] = h[:, :n]
        for wave, w in zip(plan.waves, weights):
            prev, xs, act = wave.preds.take(states, 1), X[:, wave.slots, rows], A[:, wave.slots, rows]
            torch.mul(prev, m, out=xs) if m is not None else xs.copy_(prev)
            for d in range(act.size(0)):  # wave 0 adds to the input projection
                _gemm(xs[d], w[d], act[d], accumulate=wave.weights is None)
            if wave.nodes.is_view and wave.nodes.distinct:
                _highway_forward(act, prev, wave, wave.nodes.take(states, 1))
            else:
                new = torch.empty_like(prev)
                _highway_forward(act, prev, wave, new)
                wave.nodes.put(states, 1, new)
        h = out[:, rows]
        torch.mean(plan.concat.take(states, 1), 1, out=h)
        start += n


def _backward_steps(plan: Plan, counts: list[int], grad_out: torch.Tensor, mh: torch.Tensor | None,
                    weights_t: list[torch.Tensor], A: torch.Tensor, S: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """Back-propagation through the time loop: fills G, returns ∂h0."""
    D, _, R, H = S.shape
    scale = 1.0 / len(plan.concat.index)
    grad_states = grad_out.new_empty(D, plan.states, counts[0], H)
    widest = max(len(wave.ops) for wave in plan.waves)
    through, grad_prevs = grad_out.new_empty(2, D, widest, counts[0], H).unbind(0)
    carry = None  # ∂h_{t-1} of step t: h_{t-1} is the output of step t − 1
    end = R
    for n in reversed(counts):
        rows = slice(end - n, end)
        end -= n
        m = None if mh is None else mh[:, None, :n]
        grad_h = grad_out[:, rows] * scale
        if carry is not None:
            grad_h[:, : carry.size(1)].add_(carry, alpha=scale)
        grad_s = grad_states[:, :, :n].zero_()
        plan.concat.put(grad_s, 1, grad_h.unsqueeze(1).expand(-1, len(plan.concat.index), -1, -1))
        states = S[:, :, rows]
        for wave, w in zip(reversed(plan.waves), reversed(weights_t)):
            g, E = G[:, wave.slots, rows], len(wave.ops)
            grad_prev = grad_prevs[:, :E, :n]
            _highway_backward(wave.nodes.take(grad_s, 1), wave.preds.take(states, 1), A[:, wave.slots, rows], wave,
                              g, grad_prev)
            gemm = through[:, :E, :n]
            for d in range(D):
                _gemm(g[d], w[d], gemm[d])
            grad_prev.add_(gemm) if m is None else grad_prev.addcmul_(gemm, m)
            wave.preds.add(grad_s, 1, grad_prev)
        carry = grad_s[:, 0].clone()
    return carry


def _directions(D: int, device: torch.device) -> list[slice]:
    """On a CPU the time loop runs one direction after the other, so that each one's weights stay in
    cache from step to step (2-3% faster at hidden 512, bench/birnn.py); elsewhere both at once."""
    return [slice(d, d + 1) for d in range(D)] if device.type == "cpu" else [slice(None)]


class FusedFrozenCell(torch.autograd.Function):
    """Packed outputs (D, R, H) of the frozen cell over packed inputs x (D, R, ninp).

    Inputs: x (already masked by m_x), h0 (D, B, H) the initial state (B = counts[0]),
    w0 (D, ninp + H, 2H), ws (D, N, H, 2H), mh (D, B, H) or None, the Plan, and counts (the
    rows of each step, non-increasing). Row r of step t is sequence r − offset_t.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, h0: torch.Tensor, w0: torch.Tensor, ws: torch.Tensor,
                mh: torch.Tensor | None, plan: Plan, counts: list[int]) -> torch.Tensor:
        _warn_once_without_kernels()
        D, R, ninp = x.shape
        H = h0.size(-1)
        X = x.new_empty(D, plan.slots, R, H)
        A = x.new_empty(D, plan.slots, R, 2 * H)
        S = (x.new_zeros if plan.multi_input else x.new_empty)(D, plan.states, R, H)  # edges into one node add up
        out = x.new_empty(D, R, H)
        torch.bmm(x, w0[:, :ninp], out=A[:, 0])  # the input projection of every row at once
        weights = [_as_linear(_weights(wave, w0[:, ninp:], ws), _onednn(x)) for wave in plan.waves]
        for d in _directions(D, x.device):
            _forward_steps(plan, counts, h0[d], None if mh is None else mh[d], [w[d] for w in weights],
                           X[d], A[d], S[d], out[d])
        ctx.save_for_backward(x, w0, ws, mh, X, A, S)
        ctx.plan, ctx.counts = plan, counts
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, w0, ws, mh, X, A, S = ctx.saved_tensors
        plan, counts = ctx.plan, ctx.counts
        D, ninp = x.size(0), x.size(-1)
        G = torch.empty_like(A)  # ∂[c | h] of every slot and row
        weights_t = [_weights(wave, w0[:, ninp:], ws) for wave in plan.waves]  # (…, H, 2H): linear weights of ∂[c | h]·Wᵀ
        grad_h0 = torch.cat([_backward_steps(plan, counts, grad_out[d], None if mh is None else mh[d],
                                             [w[d] for w in weights_t], A[d], S[d], G[d]) for d in _directions(D, x.device)])
        need_x, need_h0, need_w0, need_ws = ctx.needs_input_grad[:4]
        grad_x = torch.bmm(G[:, 0], w0[:, :ninp].transpose(1, 2)) if need_x else None
        grad_w0 = torch.empty_like(w0) if need_w0 else None
        grad_ws = (torch.zeros_like if plan.multi_input else torch.empty_like)(ws) if need_ws else None
        if need_w0:
            torch.bmm(x.transpose(1, 2), G[:, 0], out=grad_w0[:, :ninp])
        for wave in plan.waves:  # one GEMM over every row of every step, per weight
            if wave.weights is None and need_w0:
                torch.bmm(X[:, 0].transpose(1, 2), G[:, 0], out=grad_w0[:, ninp:])
            elif wave.weights is not None and need_ws:
                for d in range(D):
                    xs, gs = X[d, wave.slots].transpose(1, 2), G[d, wave.slots]
                    if wave.weights.is_view and wave.weights.distinct:
                        torch.bmm(xs, gs, out=wave.weights.take(grad_ws[d], 0))
                    else:
                        wave.weights.put(grad_ws[d], 0, torch.bmm(xs, gs))
        return grad_x, grad_h0 if need_h0 else None, grad_w0, grad_ws, None, None, None


def fused_frozen_cell(x: torch.Tensor, h0: torch.Tensor, w0: torch.Tensor, ws: torch.Tensor,
                      mh: torch.Tensor | None, plan: Plan, counts: list[int]) -> torch.Tensor:
    """FusedFrozenCell.apply: the packed outputs (D, R, H)."""
    return FusedFrozenCell.apply(x, h0, w0, ws, mh, plan, counts)
