"""The frozen cell's whole time loop as one autograd Function, back-propagated through time by hand.

Autograd records a node for each of the hundreds of small ops per time step and keeps every
intermediate; here the forward runs the loop under no_grad into a few preallocated buffers and
the backward is written out (NOTES §1, equations in `nas.cell`). Both directions are stacked on
a leading axis; the batch is packed step after step (step t runs the first `counts[t]`
sequences, a length-sorted batch) and the variational mask m_h is fixed.

Every GEMM of the loop is a "slot": slot 0 is (h_{t-1}⊙m_h)·W0h, slot 1 + e is edge e's
(s_j⊙m_h)·W_i, edges in wave order. Per slot, step and row the forward keeps
    X: the GEMM input (D, R, H),   A: [σ(c) | f(h)] (D, R, 2H),
and per node the state S (D, R, H); nothing else. The backward fills G = ∂[c | h] (D, R, 2H)
per slot, step by step in reverse and wave by wave in reverse, and then forms every weight
gradient at once, ∂W = Xᵀ·G summed over all R packed rows: one batched GEMM for all slots.
Slot 0's G is the gradient of the input projection, which is computed outside, as one GEMM.

The derivatives use the saved activations: σ' = σ(1 − σ), tanh' = 1 − a², relu' = [a > 0];
for s = p + σ(c)(a − p): ∂p = ∂s(1 − σ), ∂c = ∂s(a − p)σ', ∂a = ∂s·σ.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

Edge = tuple[int, int, str]  # (node, predecessor, op)


class Plan(NamedTuple):
    """A genotype's edges as the Function runs them: waves of GEMM slots."""

    steps: int  # nodes besides s0
    bounds: list[tuple[int, int]]  # per wave, its edges [start, stop) in wave order
    preds: list[torch.Tensor]  # per wave, each edge's predecessor node
    nodes: list[torch.Tensor]  # per wave, each edge's node
    runs: list[list[tuple[str, int, int]]]  # per wave, runs (op, start, stop) of edges with the same op
    edge_nodes: torch.Tensor  # every edge's node − 1 (its index into ws), in wave order
    concat: torch.Tensor  # the nodes averaged into h_t


def plan(waves: Sequence[Sequence[Edge]], concat: Sequence[int], steps: int) -> Plan:
    """The Plan of waves of edges (each wave's edges sorted so equal ops are contiguous)."""
    bounds, preds, nodes, runs, start = [], [], [], [], 0
    for wave in waves:
        bounds.append((start, start + len(wave)))
        start += len(wave)
        preds.append(torch.tensor([pred for _, pred, _ in wave]))
        nodes.append(torch.tensor([node for node, _, _ in wave]))
        wave_runs: list[tuple[str, int, int]] = []
        for e, (_, _, op) in enumerate(wave):
            if wave_runs and wave_runs[-1][0] == op:
                wave_runs[-1] = (op, wave_runs[-1][1], e + 1)
            else:
                wave_runs.append((op, e, e + 1))
        runs.append(wave_runs)
    edge_nodes = torch.tensor([node - 1 for wave in waves for node, _, _ in wave])
    return Plan(steps, bounds, preds, nodes, runs, edge_nodes, torch.tensor(list(concat)))


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


def _highway(prev: torch.Tensor, act: torch.Tensor, H: int, out: torch.Tensor) -> torch.Tensor:
    """out = prev + σ(c)(f(h) − prev), from act = [σ(c) | f(h)]."""
    return torch.addcmul(prev, act[..., :H], act[..., H:] - prev, out=out)


def _highway_grad(grad: torch.Tensor, prev: torch.Tensor, act: torch.Tensor, H: int,
                  runs: list[tuple[str, int, int]], out: torch.Tensor) -> torch.Tensor:
    """Fills out = [∂c | ∂h] of s = prev + σ(c)(f(h) − prev); returns ∂prev through the highway alone."""
    sig, a = act[..., :H], act[..., H:]
    torch.mul(grad * (a - prev), sig - sig * sig, out=out[..., :H])
    grad_a = grad * sig
    for op, start, stop in runs:
        _activation_grad(op, a[start:stop], grad_a[start:stop], out[start:stop, ..., H:])
    return grad - grad_a


class FusedFrozenCell(torch.autograd.Function):
    """Packed outputs (D, R, H) of the frozen cell over packed input projections (D, R, 2H).

    Inputs: xproj = (x_t ⊙ m_x)·W0x of every packed row, h0 (D, B, H) the initial state
    (B = counts[0]), w0h (D, H, 2H), ws (D, N, H, 2H), mh (D, B, H) or None, the Plan, and
    counts (the rows of each step, non-increasing). Row r of step t is sequence r − offset_t.
    """

    @staticmethod
    def forward(ctx, xproj: torch.Tensor, h0: torch.Tensor, w0h: torch.Tensor, ws: torch.Tensor,
                mh: torch.Tensor | None, plan: Plan, counts: list[int]) -> torch.Tensor:
        D, R, H = xproj.size(0), xproj.size(1), h0.size(-1)
        slots = 1 + len(plan.edge_nodes)
        device = xproj.device
        plan = _on(plan, device)
        weights = torch.cat([w0h.unsqueeze(0), ws[:, plan.edge_nodes].transpose(0, 1)])  # (slots, D, H, 2H)
        X = xproj.new_empty(slots, D, R, H)
        A = xproj.new_empty(slots, D, R, 2 * H)
        S = xproj.new_zeros(plan.steps + 1, D, R, H)
        out = xproj.new_empty(D, R, H)
        h, start = h0, 0
        for n in counts:
            rows = slice(start, start + n)
            h = h[:, :n]
            x0, a0 = X[0, :, rows], A[0, :, rows]
            _mask(h, mh, n, x0)
            torch.baddbmm(xproj[:, rows], x0, weights[0], out=a0)
            a0[..., :H].sigmoid_()
            a0[..., H:].tanh_()
            states = S[:, :, rows]
            _highway(h, a0, H, states[0])
            for (e0, e1), preds, nodes, runs in zip(plan.bounds, plan.preds, plan.nodes, plan.runs):
                prev = states.index_select(0, preds)
                xs, act = X[1 + e0: 1 + e1, :, rows], A[1 + e0: 1 + e1, :, rows]
                _mask(prev, mh, n, xs)
                torch.bmm(xs.view(-1, n, H), weights[1 + e0: 1 + e1].view(-1, H, 2 * H), out=act.view(-1, n, 2 * H))
                act[..., :H].sigmoid_()
                for op, r0, r1 in runs:
                    _activate_(op, act[r0:r1, ..., H:])
                states.index_add_(0, nodes, _highway(prev, act, H, torch.empty_like(prev)))
            h = out[:, rows]
            torch.mean(states.index_select(0, plan.concat), 0, out=h)
            start += n
        ctx.save_for_backward(h0, weights, mh, X, A, S, out)
        ctx.plan, ctx.counts, ctx.ws_shape = plan, counts, ws.shape
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        h0, weights, mh, X, A, S, out = ctx.saved_tensors
        plan, counts = ctx.plan, ctx.counts
        slots, D, R, H = X.shape
        G = torch.empty_like(A)  # ∂[c | h] of every slot and row
        scale = 1.0 / len(plan.concat)
        carry = None  # ∂h_t from step t + 1, whose h_{t-1} it was
        grad_h0 = None
        end = R
        for t in range(len(counts) - 1, -1, -1):
            n = counts[t]
            rows = slice(end - n, end)
            end -= n
            grad_h = grad_out[:, rows]
            if carry is not None:
                grad_h = grad_h.clone()
                grad_h[:, : carry.size(1)] += carry
            grad_s = grad_out.new_zeros(plan.steps + 1, D, n, H)
            grad_s.index_copy_(0, plan.concat, (grad_h * scale).unsqueeze(0).expand(len(plan.concat), -1, -1, -1))
            states = S[:, :, rows]
            for (e0, e1), preds, nodes, runs in reversed(list(zip(plan.bounds, plan.preds, plan.nodes, plan.runs))):
                g = G[1 + e0: 1 + e1, :, rows]
                grad_prev = _highway_grad(grad_s.index_select(0, nodes), states.index_select(0, preds),
                                          A[1 + e0: 1 + e1, :, rows], H, runs, g)
                through = torch.bmm(g.reshape(-1, n, 2 * H), weights[1 + e0: 1 + e1].view(-1, H, 2 * H).transpose(1, 2))
                grad_s.index_add_(0, preds, _unmask(grad_prev, through.view(-1, D, n, H), mh, n))
            h = h0[:, :n] if t == 0 else out[:, rows.start - counts[t - 1]: rows.start - counts[t - 1] + n]
            g0 = G[0, :, rows]
            grad_h_in = _highway_grad(grad_s[0], h, A[0, :, rows], H, [("tanh", 0, D)], g0)
            carry = _unmask(grad_h_in, torch.bmm(g0, weights[0].transpose(1, 2)), mh, n)
        grad_h0 = carry
        grad_w = torch.bmm(X.view(-1, R, H).transpose(1, 2), G.view(-1, R, 2 * H)).view(slots, D, H, 2 * H)
        grad_ws = grad_w.new_zeros(ctx.ws_shape).index_add_(1, plan.edge_nodes, grad_w[1:].transpose(0, 1))
        return G[0], grad_h0, grad_w[0], grad_ws, None, None, None


def _mask(h: torch.Tensor, mh: torch.Tensor | None, n: int, out: torch.Tensor) -> None:
    """out = h ⊙ m_h (the mask's first n rows), or h itself."""
    if mh is None:
        out.copy_(h)
    else:
        torch.mul(h, mh[:, :n], out=out)


def _unmask(direct: torch.Tensor, through: torch.Tensor, mh: torch.Tensor | None, n: int) -> torch.Tensor:
    """∂ of a state used both directly and, masked, as a GEMM input."""
    if mh is None:
        return direct + through
    return torch.addcmul(direct, through, mh[:, :n])


def _on(plan: Plan, device: torch.device) -> Plan:
    """The plan's index tensors on the device."""
    if plan.concat.device == device:
        return plan
    move = lambda ts: [t.to(device) for t in ts]  # noqa: E731
    return plan._replace(preds=move(plan.preds), nodes=move(plan.nodes), edge_nodes=plan.edge_nodes.to(device),
                         concat=plan.concat.to(device))


def fused_frozen_cell(xproj: torch.Tensor, h0: torch.Tensor, w0h: torch.Tensor, ws: torch.Tensor,
                      mh: torch.Tensor | None, plan: Plan, counts: list[int]) -> torch.Tensor:
    """FusedFrozenCell.apply: the packed outputs (D, R, H)."""
    return FusedFrozenCell.apply(xproj, h0, w0h, ws, mh, plan, counts)
