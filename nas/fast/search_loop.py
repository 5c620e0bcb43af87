"""The search cell's whole time loop as one autograd Function, back-propagated through time by hand.

The autograd path (`nas.cells.search_cell.search_step`) records a dozen ops per edge and step, 36 edges
at 8 nodes, and keeps most of their outputs. Here the forward runs the loop under no_grad and
keeps, per step, each edge's [σ(c) | h] (2H) and each state after BatchNorm (H), nothing else;
the backward is written out (equations in `nas.cells.search_cell` and docs/concepts/search-methods.md):

    s0 = BN(h + σ(c0)(tanh(h0) − h)),  [c0 | h0] = xp_t + (h⊙m_h)·W0h
    node i, edges j ≤ i from the states S_j:  [c_j | h_j] = (S_j⊙m_h)·W_i   (one GEMM for all j)
        s_i = BN( Σ_j keep_j·S_j + σ(c_j)(Σ_op w_j,op·f_op(h_j) − keep_j·S_j) ),  keep_j = Σ_op w_j,op
    h_t = mean of the nodes

Backward, per step in reverse and node by node in reverse: BatchNorm's derivative through the
normalised state, ∂s·(1 − σ) back to S_j directly, ∂c = ∂s·U·σ', ∂h = ∂s·σ·Σ_op w_op·f_op'(h)
(tanh and σ(h) recomputed rather than kept), then ∂S_j += (∂[c | h]·W_iᵀ)⊙m_h. The mixing
weights' gradient is summed in the same pass: ∂w_j,op = Σ ∂s·σ(c_j)·f_op(h_j) + Σ ∂s·(1 − σ(c_j))·S_j.
Weight gradients are formed only when the caller's weights require them (the first-order α step
passes them detached): ∂W_i one GEMM per step, ∂W0h one GEMM over all steps.

BatchNorm is one module per state (`nas.cells.search_cell.node_norms`, affine off) in training mode:
each of the 9 calls per step normalises with its batch's statistics and moves its state's running
statistics, as the autograd path does. The elementwise passes are C++ kernels (`nas/fast/csrc/`); without
them, on another device, under autocast or with a synced BatchNorm the cell runs its autograd path
instead (`SearchRNN.fusable`). With ESS gates the cell calls the Function one step at a time (x_t's
projection needs h_{t-1}), with `loop_weights` packed once per forward.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable

from nas.cells.ops import edge_offsets
from nas.fast.gemm import pack, product
from .kernels import OP_CODES, built, compiled, highway_backward, highway_forward

OPS_SUPPORTED = ("none", "identity", "tanh", "relu", "sigmoid")  # the op set the kernels' mixed node knows
FIRST_NODE = ("tanh",), [OP_CODES["tanh"]]  # s0's edge: its op and the kernels' code for it


class LoopWeights(NamedTuple):
    """The weights multiplied at every step, `pack`ed: forward (W0hᵀ, [W_iᵀ]) and backward (W0h, [W_i])."""

    forward: tuple[torch.Tensor, list[torch.Tensor]]
    backward: tuple[torch.Tensor, list[torch.Tensor]]


def loop_weights(w0h: torch.Tensor, ws: torch.Tensor, batch: int) -> LoopWeights:
    """Packed for a batch of `batch` rows (node i's products take (i + 1)·batch), each where oneDNN
    measures faster for its shape (`nas.fast.gemm.pack`); once per forward when the Function runs
    step by step (ESS gates) instead of once per call."""
    rows = [batch * (i + 1) for i in range(ws.size(0))]
    return LoopWeights((pack(w0h.t(), batch), [pack(w.t(), n) for w, n in zip(ws, rows)]),
                       (pack(w0h, batch), [pack(w, n) for w, n in zip(ws, rows)]))


def _mean_var_update(running: torch.Tensor, batch: torch.Tensor, momentum: float) -> None:
    """running ← (1 − m)·running + m·batch_k for each row k of `batch` in turn, as one weighted sum."""
    calls = batch.size(0)
    decay = (1 - momentum) ** torch.arange(calls - 1, -1, -1, dtype=torch.float64)
    running.mul_((1 - momentum) ** calls).add_((momentum * decay).to(batch) @ batch)


class FusedSearchCell(torch.autograd.Function):
    """Outputs h_1..h_T (T, B, H) of the search cell.

    Inputs: xproj (T, B, 2H) the input projection (x⊙m_x)·W0x, h0 (B, H), w0h (H, 2H),
    ws (N, H, 2H), mix (E, 4) the normalised weights of identity, tanh, relu, sigmoid per edge,
    mh (B, H) or None, the BatchNorm modules of s0 and each node, whose running statistics the forward
    moves, and `loop_weights(w0h, ws, B)` or None to form them here.
    """

    @staticmethod
    def forward(ctx, xproj: torch.Tensor, h0: torch.Tensor, w0h: torch.Tensor, ws: torch.Tensor,
                mix: torch.Tensor, mh: torch.Tensor | None, bn: nn.ModuleList,
                packed: LoopWeights | None) -> torch.Tensor:
        kernels = compiled()
        T, B, H2 = xproj.shape
        H, N = H2 // 2, ws.size(0)
        off = edge_offsets(N)
        A0 = torch.empty_like(xproj)  # [σ(c0) | tanh(h0)] per step
        acts = []  # per step and node, [σ(c) | h] of its edges: the product's output, σ(c) written over c
        S = xproj.new_empty(T, N + 1, B, H)  # s0 and the nodes, after BatchNorm
        rstd = xproj.new_empty(T, N + 1, H)
        means, variances = xproj.new_empty(T, N + 1, H), xproj.new_empty(T, N + 1, H)
        out = xproj.new_empty(T, B, H)
        pre = xproj.new_empty(B, H)
        masked = None if mh is None else xproj.new_empty(N, B, H)  # this step's S_j⊙m_h, each made once
        mix = mix.contiguous()
        ctx.packed = loop_weights(w0h, ws, B) if packed is None else packed
        w0h_t, ws_t = ctx.packed.forward
        eps = bn[0].eps
        h = h0
        for t in range(T):
            torch.add(xproj[t], product(h if mh is None else h * mh, w0h_t), out=A0[t])
            highway_forward(A0[t].view(1, 1, B, H2), h.view(1, 1, B, H), *FIRST_NODE, pre.view(1, 1, B, H))
            kernels.batch_norm_forward(pre, eps, S[t, 0], means[t, 0], variances[t, 0], rstd[t, 0])
            for i in range(N):
                k = i + 1
                states = S[t, :k]
                if mh is not None:  # S_i is final from here on
                    torch.mul(S[t, i], mh, out=masked[i])
                x = states if mh is None else masked[:k]
                ch = product(x.view(k * B, H), ws_t[i]).view(k, B, H2)
                kernels.mixed_node_forward(ch, states, mix[off[i]:off[k]], ch, pre)
                acts.append(ch)
                kernels.batch_norm_forward(pre, eps, S[t, k], means[t, k], variances[t, k], rstd[t, k])
            h = torch.mean(S[t, 1:], 0, out=out[t])
        for k, norm in enumerate(bn):
            if norm.track_running_stats and norm.running_mean is not None:
                _mean_var_update(norm.running_mean, means[:, k], norm.momentum)
                _mean_var_update(norm.running_var, variances[:, k] * (B / (B - 1)), norm.momentum)
                norm.num_batches_tracked.add_(T)
        ctx.save_for_backward(h0, w0h, ws, mix, mh, out, A0, S, rstd)
        ctx.acts = acts
        return out

    @staticmethod
    @once_differentiable  # a second derivative (create_graph) needs the autograd path, `SearchRNN(fused=False)`
    def backward(ctx, grad_out: torch.Tensor):
        h0, w0h, ws, mix, mh, out, A0, S, rstd = ctx.saved_tensors
        kernels = compiled()
        T, N1, B, H = S.shape
        N, off = N1 - 1, edge_offsets(N1 - 1)
        need_h0, need_w0h, need_ws, need_mix = ctx.needs_input_grad[1:5]
        G0 = torch.empty_like(A0)  # ∂[c0 | h0] per step: ∂xproj, and ∂W0h's right factor
        G = S.new_empty(off[-1], B, 2 * H)  # one step's ∂[c | h]
        grad_states = S.new_empty(N1, B, H)
        grad_pre, direct = S.new_empty(B, H), S.new_empty(B, H)
        grad_mix = torch.zeros(off[-1], 5, dtype=torch.float64, device=S.device)
        grad_ws = torch.zeros_like(ws) if need_ws else None
        masked = None if mh is None or not need_ws else S.new_empty(N, B, H)  # S_j⊙m_h for ∂W_i
        carry = torch.zeros_like(h0)  # ∂h_t from step t + 1
        w0h_p, ws_p = ctx.packed.backward
        for t in reversed(range(T)):
            grad_states[0].zero_()
            torch.add(grad_out[t], carry, out=grad_states[1]).div_(N)
            grad_states[2:].copy_(grad_states[1].expand(N - 1, B, H))
            if masked is not None:
                torch.mul(S[t, :N], mh, out=masked)
            for i in reversed(range(N)):
                k = i + 1
                states, act, g = S[t, :k], ctx.acts[t * N + i], G[off[i]:off[k]]
                kernels.batch_norm_backward(grad_states[k], S[t, k], rstd[t, k], grad_pre)
                kernels.mixed_node_backward(grad_pre, act, states, mix[off[i]:off[k]], g, grad_states[:k],
                                             grad_mix[off[i]:off[k]])
                through = product(g.view(k * B, 2 * H), ws_p[i]).view(k, B, H)
                if mh is None:
                    grad_states[:k].add_(through)
                else:
                    grad_states[:k].addcmul_(through, mh)
                if need_ws:
                    x = states if mh is None else masked[:k]
                    product(x.view(k * B, H).t(), g.view(k * B, 2 * H).t(), grad_ws[i], accumulate=True)
            h = h0 if t == 0 else out[t - 1]
            kernels.batch_norm_backward(grad_states[0], S[t, 0], rstd[t, 0], grad_pre)
            highway_backward(grad_pre.view(1, 1, B, H), h.view(1, 1, B, H), A0[t].view(1, 1, B, 2 * H),
                             *FIRST_NODE, G0[t].view(1, 1, B, 2 * H), direct.view(1, 1, B, H))
            carry = product(G0[t], w0h_p)
            if mh is not None:
                carry.mul_(mh)
            carry.add_(direct)
        grad_w0h = None
        if need_w0h:
            previous = torch.cat([h0.unsqueeze(0), out[:-1]])
            previous = previous if mh is None else previous * mh
            grad_w0h = product(previous.view(T * B, H).t(), G0.view(T * B, 2 * H).t())
        grad_mix = (grad_mix[:, :4] + grad_mix[:, 4:]).to(mix.dtype) if need_mix else None
        return G0, carry if need_h0 else None, grad_w0h, grad_ws, grad_mix, None, None, None


def fused_search_cell(xproj: torch.Tensor, h0: torch.Tensor, w0h: torch.Tensor, ws: torch.Tensor,
                      mix: torch.Tensor, mh: torch.Tensor | None, bn: nn.ModuleList,
                      packed: LoopWeights | None = None) -> torch.Tensor:
    """FusedSearchCell.apply: the outputs h_1..h_T (T, B, H)."""
    return FusedSearchCell.apply(xproj, h0, w0h, ws, mix, mh, bn, packed)


def supports(ops: tuple[str, ...]) -> bool:
    """Whether this loop can run a search cell over the op set `ops` (the kernels built, else one
    warning line). Any mixing rule: the loop takes the mixing weights, and autograd carries their
    gradient back through the rule's normalisation."""
    return tuple(ops) == OPS_SUPPORTED and built()
