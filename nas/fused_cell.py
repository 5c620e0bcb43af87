"""The frozen cell's whole time loop as one autograd Function, back-propagated through time by hand.

Autograd records a node for each of the hundreds of small ops per time step and keeps every
intermediate; here the forward runs the loop under no_grad into a few preallocated buffers and
the backward is written out (NOTES §1, equations in `nas.cell`). Both directions are stacked on
a leading axis; the batch is packed step after step (step t runs the first `counts[t]`
sequences of a length-sorted batch) and the variational mask m_h is fixed.

Every recurrent GEMM is a "slot": slot 0 is (h_{t-1}⊙m_h)·W0h, slot 1 + e is edge e's
(s_j⊙m_h)·W_i, edges in wave order. Per direction, slot and packed row the forward keeps
    X: the GEMM input (H),   A: [σ(c) | f(h)] (2H),   S: every node's state (H),
nothing else. The backward fills G = ∂[c | h] per slot and row, step by step and wave by wave
in reverse, then forms each weight's gradient as one GEMM over all R rows, ∂W = Xᵀ·G (and
∂W0x = xᵀ·G₀, ∂x = G₀·W0xᵀ: the input projection is one GEMM over all rows both ways).

The derivatives use the saved activations: σ' = σ(1 − σ), tanh' = 1 − a², relu' = [a > 0];
for s = p + σ(c)(a − p): ∂p = ∂s(1 − σ), ∂c = ∂s(a − p)σ', ∂a = ∂s·σ.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

Edge = tuple[int, int, str]  # (node, predecessor, op)


class Wave(NamedTuple):
    """Edges whose inputs are ready together, sorted by node: one batched GEMM per step."""

    start: int  # the first edge's index; its slot is 1 + start
    nodes: list[int]
    preds: list[int]
    ops: list[str]


class Plan(NamedTuple):
    """A genotype's edges as the Function runs them."""

    steps: int  # nodes besides s0
    waves: list[Wave]
    concat: list[int]  # the nodes averaged into h_t
    multi_input: bool  # some node sums several edges


def plan(waves: Sequence[Sequence[Edge]], concat: Sequence[int], steps: int) -> Plan:
    """The Plan of a genotype's waves of edges (as `nas.cell` groups them)."""
    out, start = [], 0
    for wave in waves:
        edges = sorted(wave)
        out.append(Wave(start, [e[0] for e in edges], [e[1] for e in edges], [e[2] for e in edges]))
        start += len(edges)
    nodes = [node for wave in out for node in wave.nodes]
    return Plan(steps, out, list(concat), len(set(nodes)) < len(nodes))


def _step_of(index: list[int]) -> int | None:
    """The common difference of an arithmetic progression (0 for repeats), None if there is none."""
    step = index[1] - index[0] if len(index) > 1 else 1
    return step if step >= 0 and all(b - a == step for a, b in zip(index, index[1:])) else None


def _pick(t: torch.Tensor, dim: int, index: list[int]) -> torch.Tensor:
    """t.index_select(dim, index), as a view when the indices are evenly spaced (a copy otherwise)."""
    step = _step_of(index)
    if step is None:
        return t.index_select(dim, torch.tensor(index, device=t.device))
    view = t.narrow(dim, index[0], 1) if step == 0 else t.narrow(dim, index[0], (len(index) - 1) * step + 1)
    if step == 0:
        return view.expand(*t.shape[:dim], len(index), *t.shape[dim + 1:])
    return view if step == 1 else view.unfold(dim, 1, step).squeeze(-1)


def _add_at(t: torch.Tensor, dim: int, index: list[int], src: torch.Tensor) -> None:
    """t.index_add_(dim, index, src), without the index where the indices allow."""
    step = _step_of(index)
    if step == 0:
        t.narrow(dim, index[0], 1).add_(src.sum(dim, keepdim=True))
    elif step is not None:
        _pick(t, dim, index).add_(src)
    else:
        t.index_add_(dim, torch.tensor(index, device=t.device), src)


def _distinct_view(index: list[int]) -> bool:
    step = _step_of(index)
    return step is not None and (step > 0 or len(index) == 1)


def _put(t: torch.Tensor, dim: int, index: list[int], src: torch.Tensor) -> None:
    """Writes src at index along dim; repeated indices add up (into a t that starts at zero there)."""
    if len(set(index)) == len(index):
        t.index_copy_(dim, torch.tensor(index, device=t.device), src)
    else:
        _add_at(t, dim, index, src)


def _activate_(op: str, h: torch.Tensor) -> None:
    """f(h) in place."""
    if op == "tanh":
        h.tanh_()
    elif op == "relu":
        h.relu_()
    elif op == "sigmoid":
        h.sigmoid_()
    elif op != "identity":
        raise ValueError(f"fused cell: no activation {op!r}")


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


def _highway_(act: torch.Tensor, prev: torch.Tensor, ops: list[str], out: torch.Tensor) -> torch.Tensor:
    """From act = [c | h] (edges at dim 1), in place [σ(c) | f(h)]; out = prev + σ(c)(f(h) − prev)."""
    H = prev.size(-1)
    sig, a = act[..., :H], act[..., H:]
    sig.sigmoid_()
    for e, op in enumerate(ops):
        _activate_(op, a[:, e])
    return torch.addcmul(prev, sig, a - prev, out=out)


def _highway_grad(grad: torch.Tensor, prev: torch.Tensor, act: torch.Tensor, ops: list[str],
                  out: torch.Tensor) -> torch.Tensor:
    """Fills out = [∂c | ∂h] of s = prev + σ(c)(f(h) − prev) from act = [σ(c) | f(h)]; returns ∂prev
    through the highway alone."""
    H = prev.size(-1)
    sig, a = act[..., :H], act[..., H:]
    torch.mul(grad * (a - prev), sig - sig * sig, out=out[..., :H])
    grad_a = grad * sig
    for e, op in enumerate(ops):
        _activation_grad(op, a[:, e], grad_a[:, e], out[:, e, ..., H:])
    return grad - grad_a


def _masked(h: torch.Tensor, mh: torch.Tensor | None, out: torch.Tensor) -> None:
    """out = h ⊙ m_h, or h itself."""
    if mh is None:
        out.copy_(h)
    else:
        torch.mul(h, mh, out=out)


def _unmask(direct: torch.Tensor, through: torch.Tensor, mh: torch.Tensor | None) -> torch.Tensor:
    """∂ of a state used both directly and, masked, as a GEMM input."""
    return direct + through if mh is None else torch.addcmul(direct, through, mh)


class FusedFrozenCell(torch.autograd.Function):
    """Packed outputs (D, R, H) of the frozen cell over packed inputs x (D, R, ninp).

    Inputs: x (already masked by m_x), h0 (D, B, H) the initial state (B = counts[0]),
    w0 (D, ninp + H, 2H), ws (D, N, H, 2H), mh (D, B, H) or None, the Plan, and counts (the
    rows of each step, non-increasing). Row r of step t is sequence r − offset_t.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, h0: torch.Tensor, w0: torch.Tensor, ws: torch.Tensor,
                mh: torch.Tensor | None, plan: Plan, counts: list[int]) -> torch.Tensor:
        D, R, ninp = x.shape
        H = h0.size(-1)
        slots = 1 + sum(len(w.nodes) for w in plan.waves)
        X = x.new_empty(D, slots, R, H)
        A = x.new_empty(D, slots, R, 2 * H)
        S = (x.new_zeros if plan.multi_input else x.new_empty)(D, plan.steps + 1, R, H)
        out = x.new_empty(D, R, H)
        torch.bmm(x, w0[:, :ninp], out=A[:, 0])  # the input projection of every row at once
        w0h = w0[:, ninp:]
        wave_w = [_pick(ws, 1, [i - 1 for i in wave.nodes]) for wave in plan.waves]
        h, start = h0, 0
        for n in counts:
            rows = slice(start, start + n)
            h = h[:, :n]
            m = None if mh is None else mh[:, None, :n]
            x0, a0, states = X[:, :1, rows], A[:, :1, rows], S[:, :, rows]
            _masked(h.unsqueeze(1), m, x0)
            torch.baddbmm(a0.squeeze(1), x0.squeeze(1), w0h, out=a0.squeeze(1))
            _highway_(a0, h.unsqueeze(1), ["tanh"], states[:, :1])
            for wave, w in zip(plan.waves, wave_w):
                e = slice(1 + wave.start, 1 + wave.start + len(wave.nodes))
                prev, xs, act = _pick(states, 1, wave.preds), X[:, e, rows], A[:, e, rows]
                _masked(prev, m, xs)
                for d in range(D):
                    torch.bmm(xs[d], w[d], out=act[d])
                if _distinct_view(wave.nodes):
                    _highway_(act, prev, wave.ops, _pick(states, 1, wave.nodes))
                else:
                    _put(states, 1, wave.nodes, _highway_(act, prev, wave.ops, torch.empty_like(prev)))
            h = out[:, rows]
            torch.mean(_pick(states, 1, plan.concat), 1, out=h)
            start += n
        ctx.save_for_backward(x, h0, w0, ws, mh, X, A, S, out)
        ctx.plan, ctx.counts = plan, counts
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, h0, w0, ws, mh, X, A, S, out = ctx.saved_tensors
        plan, counts = ctx.plan, ctx.counts
        D, slots, R, H = X.shape
        ninp = x.size(-1)
        G = torch.empty_like(A)  # ∂[c | h] of every slot and row
        scale = 1.0 / len(plan.concat)
        w0h = w0[:, ninp:]
        wave_w = [_pick(ws, 1, [i - 1 for i in wave.nodes]) for wave in plan.waves]
        grad_states = grad_out.new_empty(D, plan.steps + 1, counts[0], H)
        carry = None  # ∂h_t from step t + 1, whose h_{t-1} it was
        end = R
        for t in range(len(counts) - 1, -1, -1):
            n = counts[t]
            rows = slice(end - n, end)
            end -= n
            m = None if mh is None else mh[:, None, :n]
            grad_h = grad_out[:, rows]
            if carry is not None:
                grad_h = grad_h.clone()
                grad_h[:, : carry.size(1)] += carry
            grad_s = grad_states[:, :, :n].zero_()
            _put(grad_s, 1, plan.concat, (grad_h * scale).unsqueeze(1).expand(-1, len(plan.concat), -1, -1))
            states = S[:, :, rows]
            for wave, w in zip(reversed(plan.waves), reversed(wave_w)):
                e = slice(1 + wave.start, 1 + wave.start + len(wave.nodes))
                g = G[:, e, rows]
                grad_prev = _highway_grad(_pick(grad_s, 1, wave.nodes), _pick(states, 1, wave.preds), A[:, e, rows],
                                          wave.ops, g)
                through = torch.stack([torch.bmm(g[d], w[d].transpose(1, 2)) for d in range(D)])
                _add_at(grad_s, 1, wave.preds, _unmask(grad_prev, through, m))
            h = (h0 if t == 0 else out[:, rows.start - counts[t - 1]:]).narrow(1, 0, n).unsqueeze(1)
            g0 = G[:, :1, rows]
            grad_h_in = _highway_grad(grad_s[:, :1], h, A[:, :1, rows], ["tanh"], g0)
            carry = _unmask(grad_h_in, torch.bmm(g0.squeeze(1), w0h.transpose(1, 2)).unsqueeze(1), m).squeeze(1)
        need_x, need_h0, need_w0, need_ws = ctx.needs_input_grad[:4]
        grad_x = torch.bmm(G[:, 0], w0[:, :ninp].transpose(1, 2)) if need_x else None
        grad_w0 = grad_ws = None
        if need_w0:
            grad_w0 = torch.empty_like(w0)
            torch.bmm(x.transpose(1, 2), G[:, 0], out=grad_w0[:, :ninp])
            torch.bmm(X[:, 0].transpose(1, 2), G[:, 0], out=grad_w0[:, ninp:])
        if need_ws:
            grad_ws = torch.zeros_like(ws) if plan.multi_input else torch.empty_like(ws)
            for wave in plan.waves:
                e = slice(1 + wave.start, 1 + wave.start + len(wave.nodes))
                nodes = [i - 1 for i in wave.nodes]
                for d in range(D):
                    xs, gs = X[d, e].transpose(1, 2), G[d, e]
                    if _distinct_view(nodes):
                        torch.bmm(xs, gs, out=_pick(grad_ws[d], 0, nodes))
                    else:
                        _put(grad_ws[d], 0, nodes, torch.bmm(xs, gs))
        return grad_x, carry if need_h0 else None, grad_w0, grad_ws, None, None, None


def fused_frozen_cell(x: torch.Tensor, h0: torch.Tensor, w0: torch.Tensor, ws: torch.Tensor,
                      mh: torch.Tensor | None, plan: Plan, counts: list[int]) -> torch.Tensor:
    """FusedFrozenCell.apply: the packed outputs (D, R, H)."""
    return FusedFrozenCell.apply(x, h0, w0, ws, mh, plan, counts)
