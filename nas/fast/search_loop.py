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
instead (`nas.fast.backends.search_fusable`). With ESS gates x_t's projection needs h_{t-1..t-m}: where g′ projects
its history `FusedGatedSearchCell` runs the whole gated loop in C++; otherwise the cell calls
`FusedSearchCell` one step at a time, with `loop_weights` packed once per forward.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable

from nas.cells.ops import edge_offsets
from nas.fast.gemm import NEVER, Gemm, LoopWeight, OnMKL, is_packed
from .gate_dag import SQUASH_CODES
from .kernels import built, compiled

OPS_SUPPORTED = ("none", "identity", "tanh", "relu", "sigmoid")  # the op set the kernels' mixed node knows


class LoopWeights(NamedTuple):
    """The weights multiplied at every step, `pack`ed: forward (W0hᵀ, [W_iᵀ]) and backward (W0h, [W_i]), and
    the GEMM rule they were packed by, which every other product of the loop follows too."""

    forward: tuple[torch.Tensor, list[torch.Tensor]]
    backward: tuple[torch.Tensor, list[torch.Tensor]]
    gemm: Gemm


def loop_weights(gemm: Gemm, w0h: torch.Tensor, ws: torch.Tensor, batch: int) -> LoopWeights:
    """Packed for a batch of `batch` rows (node i's products take (i + 1)·batch), each where the GEMM
    rule puts its shape on oneDNN (`Gemm.pack`); once per forward when the Function runs step by step
    (ESS gates) instead of once per call."""
    rows = [batch * (i + 1) for i in range(ws.size(0))]
    return LoopWeights(
        (gemm.pack(w0h.t(), batch), [gemm.pack(w.t(), n) for w, n in zip(ws, rows)]),
        (gemm.pack(w0h, batch), [gemm.pack(w, n) for w, n in zip(ws, rows)]),
        gemm,
    )


def _mean_var_update(running: torch.Tensor, batch: torch.Tensor, momentum: float) -> None:
    """running ← (1 − m)·running + m·batch_k for each row k of `batch` in turn, as one weighted sum."""
    calls = batch.size(0)
    decay = (1 - momentum) ** torch.arange(calls - 1, -1, -1, dtype=torch.float64)
    running.mul_((1 - momentum) ** calls).add_((momentum * decay).to(batch) @ batch)


def _update_running(bn: nn.ModuleList, means: torch.Tensor, variances: torch.Tensor) -> None:
    """Move each BatchNorm's running statistics by its batch means and unbiased variances, (T, N + 1, H)
    for T calls of every norm in turn."""
    for k, norm in enumerate(bn):
        if norm.track_running_stats and norm.running_mean is not None:
            _mean_var_update(norm.running_mean, means[:, k], norm.momentum)
            _mean_var_update(norm.running_var, variances[:, k], norm.momentum)
            norm.num_batches_tracked.add_(means.size(0))


class RunningStats:
    """The batch statistics of a forward that calls the Function one step at a time (ESS gates),
    moved into the BatchNorms' running statistics once, by `update`, as one call over all the steps
    would: per step and norm, a dozen small ops cost more than the step's own BatchNorm."""

    def __init__(self, bn: nn.ModuleList):
        self.bn = bn
        self.means: list[torch.Tensor] = []
        self.variances: list[torch.Tensor] = []

    def add(self, means: torch.Tensor, variances: torch.Tensor) -> None:
        self.means.append(means)
        self.variances.append(variances)

    def update(self) -> None:
        if self.means:
            _update_running(self.bn, torch.cat(self.means), torch.cat(self.variances))
            self.means.clear()
            self.variances.clear()


class FusedSearchCell(torch.autograd.Function):
    """Outputs h_1..h_T (T, B, H) of the search cell.

    Inputs: xproj (T, B, 2H) the input projection (x⊙m_x)·W0x, h0 (B, H), w0h (H, 2H),
    ws (N, H, 2H), mix (E, 4) the normalised weights of identity, tanh, relu, sigmoid per edge,
    mh (B, H) or None, the BatchNorm modules of s0 and each node, whose running statistics the forward
    moves (or, given `stats`, leaves to `stats.update`), and `loop_weights(gemm, w0h, ws, B)`.
    """

    @staticmethod
    def forward(
        ctx,
        xproj: torch.Tensor,
        h0: torch.Tensor,
        w0h: torch.Tensor,
        ws: torch.Tensor,
        mix: torch.Tensor,
        mh: torch.Tensor | None,
        bn: nn.ModuleList,
        packed: LoopWeights,
        stats: RunningStats | None = None,
    ) -> torch.Tensor:
        T, B, H2 = xproj.shape
        H, N = H2 // 2, ws.size(0)
        A0 = torch.empty_like(xproj)  # [σ(c0) | tanh(h0)] per step
        S = xproj.new_empty(T, N + 1, B, H)  # s0 and the nodes, after BatchNorm
        rstd = xproj.new_empty(T, N + 1, H)
        means, variances = xproj.new_empty(T, N + 1, H), xproj.new_empty(T, N + 1, H)
        out = xproj.new_empty(T, B, H)
        mix = mix.contiguous()
        ctx.packed = packed
        w0h_t, ws_t = ctx.packed.forward
        acts = compiled().search_forward_steps(
            xproj,
            h0,
            mix,
            mh,
            _native(w0h_t),
            [_native(w) for w in ws_t],
            bn[0].eps,
            A0,
            S,
            means,
            variances,
            rstd,
            out,
        )
        variances.mul_(B / (B - 1))  # what BatchNorm's running variance takes (the forward has used rstd)
        if stats is None:
            _update_running(bn, means, variances)
        else:
            stats.add(means, variances)
        ctx.save_for_backward(h0, w0h, ws, mix, mh, out, A0, S, rstd)
        ctx.acts = acts
        return out

    @staticmethod
    @once_differentiable  # a second derivative (create_graph) needs the autograd path (backend `torch`)
    def backward(ctx, grad_out: torch.Tensor):
        h0, w0h, ws, mix, mh, out, A0, S, rstd = ctx.saved_tensors
        T, N1, B, H = S.shape
        need_h0, need_w0h, need_ws, need_mix = ctx.needs_input_grad[1:5]
        G0 = torch.empty_like(A0)  # ∂[c0 | h0] per step: ∂xproj, and ∂W0h's right factor
        grad_mix = torch.zeros(edge_offsets(N1 - 1)[-1], 5, dtype=torch.float64, device=S.device)
        grad_ws = torch.zeros_like(ws) if need_ws else None
        w0h_p, ws_p = ctx.packed.backward
        carry = compiled().search_backward_steps(
            grad_out.contiguous(),
            h0,
            mix,
            mh,
            _native(w0h_p),
            [_native(w) for w in ws_p],
            _wgrad_onednn(ctx.packed.gemm, S),
            out,
            A0,
            S,
            rstd,
            ctx.acts,
            G0,
            grad_mix,
            grad_ws,
        )
        grad_w0h = None
        if need_w0h:
            previous = torch.cat([h0.unsqueeze(0), out[:-1]])
            previous = previous if mh is None else previous * mh
            grad_w0h = ctx.packed.gemm.product(previous.view(T * B, H).t(), G0.view(T * B, 2 * H).t())
        grad_mix = (grad_mix[:, :4] + grad_mix[:, 4:]).to(mix.dtype) if need_mix else None
        return G0, carry if need_h0 else None, grad_w0h, grad_ws, grad_mix, None, None, None, None


class FusedGatedSearchCell(torch.autograd.Function):
    """Outputs h_1..h_T (T, B, H) of the search cell with searchable ESS gates, the whole time loop in C++.

    At each step g′ reads the layer's own states, so the input projection cannot be formed before the
    loop: the C++ steps (`search_gated_forward_steps`) run, per step, g′ on the gate kernels of
    `nas.fast.gate_dag`, x̂_t = x_t ⊙ g′ and its projection x̂_t·W0x, ĥ = h_{t-1} ⊙ f_t, and the cell's
    step as `FusedSearchCell` runs it; the backward runs the same steps in reverse, the gradients of
    the states the gate read carried to their steps. f′ reads the inputs only: it is computed for
    every step before the loop (`f`, through autograd and its own Function).

    Inputs: xin (T, B, ninp) the masked input, h0 (B, H), h_hist0 (m, B, H) the states before the
    batch (most recent first), f (T, B, H), W0x (ninp, 2H), W0h (H, 2H), ws, mix, then g′'s W_hist
    (m, H, ninp), node matrices (N_g − 1, ninp, ninp) and mixing weights (edges, 4), mh, the
    BatchNorms, g′'s squash (`gate_dag.SQUASH_CODES`), and `loop_weights(gemm, w0h, ws, B)`.
    """

    @staticmethod
    def forward(ctx, xin, h0, h_hist0, f, w0x, w0h, ws, mix, w_hist, w_node, mixg, mh, bn, squash, packed):
        T, B, _ = xin.shape
        H, N = h0.size(-1), ws.size(0)
        A0 = xin.new_empty(T, B, 2 * H)
        S = xin.new_empty(T, N + 1, B, H)
        rstd, means, variances = (xin.new_empty(T, N + 1, H) for _ in range(3))
        out, h_in, xhat = xin.new_empty(T, B, H), xin.new_empty(T, B, H), torch.empty_like(xin)
        weights = packed
        w0h_t, ws_t = weights.forward
        contiguous = [t.contiguous() for t in (xin, h0, h_hist0, f, w0x, w_hist, w_node, mixg)]
        mix = mix.contiguous()
        saved = compiled().search_gated_forward_steps(
            *contiguous,
            squash,
            mix,
            mh,
            _native(w0h_t),
            [_native(w) for w in ws_t],
            bn[0].eps,
            A0,
            S,
            means,
            variances,
            rstd,
            out,
            h_in,
            xhat,
        )
        _update_running(bn, means, variances.mul_(B / (B - 1)))
        ctx.save_for_backward(*contiguous, w0h, ws, mix, mh, out, A0, S, rstd, h_in, xhat)
        ctx.saved, ctx.weights, ctx.squash = saved, weights, squash
        return out

    @staticmethod
    @once_differentiable  # a second derivative (create_graph) needs the autograd path (backend `torch`)
    def backward(ctx, grad_out: torch.Tensor):
        xin, h0, h_hist0, f, w0x, w_hist, w_node, mixg, w0h, ws, mix, mh, out, A0, S, rstd, h_in, xhat = (
            ctx.saved_tensors
        )
        T, N1, B, H = S.shape
        need = dict(zip(("w0x", "w0h", "ws", "mix", "w_hist", "w_node", "mixg"), ctx.needs_input_grad[4:11]))
        G0 = torch.empty_like(A0)
        grad_mix = torch.zeros(edge_offsets(N1 - 1)[-1], 5, dtype=torch.float64, device=S.device)
        grad_mixg = torch.zeros(mixg.size(0), 4, dtype=torch.float64, device=S.device)
        grads = {
            name: torch.zeros_like(w) if need[name] else None
            for name, w in (("ws", ws), ("w_hist", w_hist), ("w_node", w_node))
        }
        w0h_p, ws_p = ctx.weights.backward
        dxin, df, dh0, dh_hist0 = compiled().search_gated_backward_steps(
            grad_out.contiguous(),
            xin,
            h0,
            h_hist0,
            f,
            w0x,
            w_hist,
            w_node,
            mixg,
            ctx.squash,
            mix,
            mh,
            _native(w0h_p),
            [_native(w) for w in ws_p],
            _wgrad_onednn(ctx.weights.gemm, S),
            out,
            A0,
            S,
            rstd,
            h_in,
            ctx.saved,
            G0,
            grad_mix,
            grads["ws"],
            grad_mixg,
            grads["w_hist"],
            grads["w_node"],
        )
        # W0x's and W0h's gradients, one GEMM each over every step: x̂ᵀ·∂xp and (ĥ⊙m_h)ᵀ·∂xp
        rows, product = G0.view(T * B, 2 * H).t(), ctx.weights.gemm.product
        grad_w0x = product(xhat.view(T * B, -1).t(), rows) if need["w0x"] else None
        grad_w0h = product((h_in if mh is None else h_in * mh).view(T * B, H).t(), rows) if need["w0h"] else None
        grad_mix = (grad_mix[:, :4] + grad_mix[:, 4:]).to(mix.dtype) if need["mix"] else None
        grad_mixg = grad_mixg.to(mixg.dtype) if need["mixg"] else None
        weights = (grad_w0x, grad_w0h, grads["ws"], grad_mix, grads["w_hist"], grads["w_node"], grad_mixg)
        return (dxin, dh0, dh_hist0, df, *weights, None, None, None, None)


def fused_gated_search_cell(
    xin: torch.Tensor,
    h0: torch.Tensor,
    h_hist0: torch.Tensor,
    f: torch.Tensor,
    w0x: torch.Tensor,
    w0h: torch.Tensor,
    ws: torch.Tensor,
    mix: torch.Tensor,
    gate: nn.Module,
    mh: torch.Tensor | None,
    bn: nn.ModuleList,
    packed: LoopWeights,
) -> torch.Tensor:
    """FusedGatedSearchCell.apply with g′ = `gate` (a `SearchGate` whose history is projected)."""
    return FusedGatedSearchCell.apply(
        xin,
        h0,
        h_hist0,
        f,
        w0x,
        w0h,
        ws,
        mix,
        gate.w_hist,
        gate.w_node,
        gate.mixing_weights()[:, 1:],
        mh,
        bn,
        SQUASH_CODES[gate.squash],
        packed,
    )


def _wgrad_onednn(gemm: Gemm, S: torch.Tensor) -> list[bool]:
    """Per node i, whether ∂W_i = Σ_t (S⊙m_h)ᵀ·∂[c | h] runs on oneDNN (where `product` would choose it
    for the shape), for the saved states S (T, N + 1, B, H)."""
    _, N1, B, H = S.shape
    return [gemm.uses_onednn(S) and gemm.prefers_onednn(H, (i + 1) * B, 2 * H, packed=False) for i in range(N1 - 1)]


def _native(weight: torch.Tensor | OnMKL) -> LoopWeight:
    """A `pack`ed weight as the C++ steps take it: a LoopWeight used packed for every product, or never."""
    if isinstance(weight, OnMKL):
        return LoopWeight(weight.weight, None, NEVER)
    if is_packed(weight):
        return LoopWeight(weight, weight, 0)
    return LoopWeight(weight, None, NEVER)


def fused_search_cell(
    xproj: torch.Tensor,
    h0: torch.Tensor,
    w0h: torch.Tensor,
    ws: torch.Tensor,
    mix: torch.Tensor,
    mh: torch.Tensor | None,
    bn: nn.ModuleList,
    packed: LoopWeights,
    stats: RunningStats | None = None,
) -> torch.Tensor:
    """FusedSearchCell.apply: the outputs h_1..h_T (T, B, H)."""
    return FusedSearchCell.apply(xproj, h0, w0h, ws, mix, mh, bn, packed, stats)


def supports(ops: tuple[str, ...]) -> bool:
    """Whether this loop can run a search cell over the op set `ops` (the kernels built, else one
    warning line). Any mixing rule: the loop takes the mixing weights, and autograd carries their
    gradient back through the rule's normalisation."""
    return tuple(ops) == OPS_SUPPORTED and built()
