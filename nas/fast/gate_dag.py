"""An ESS search gate's DAG (`nas.cells.gates.SearchGate._nodes`) as one autograd Function on C++ kernels.

Through autograd the DAG records some thirty small ops a call (stacks, each activation, the mixing
einsum, the node products, the squash), and g′ runs once per time step, forward and backward: at
a search's sizes the cost is those ops' dispatch, not their arithmetic. Here one C++ call runs
the forward (`gate_forward` in `nas/fast/csrc/fused_kernels.cpp`) and keeps the node states and
their projections; one runs the backward, in reverse node order (p_i = s_i·W_i is node i's input
to the later nodes, N the node count):

    ∂mean = ∂out·squash′(mean),   ∂s_i = ∂mean/N + ∂p_i·W_iᵀ
    ∂src = ∂s_i ⊙ Σ_op w_src,op·op′(src),   ∂w_src,op = Σ ∂s_i ⊙ op(src)   (activations recomputed)
    ∂W_i = s_iᵀ·∂p_i, left to the `StepWeight` (one GEMM over every call of the forward pass)

Once differentiable, like the fused search cell, and used in training only: a second derivative
(create_graph: the search's Hessian eigenvalue, taken in eval mode) goes through the gate's autograd
path, as it does on the `torch` backend. torch's once_differentiable does not always raise
where a second derivative would cross it (it can drop the term silently), hence the rule.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from nas.cells.ops import OPS
from .step_weights import StepWeight
from .kernels import compiled

OPS_SUPPORTED = ("none", "identity", "tanh", "relu", "sigmoid")  # the op set the kernels know, in this order
SQUASH_CODES = {"none": 0, "sigmoid": 1, "2sigmoid": 2}  # as in the kernels


def supports(x: torch.Tensor) -> bool:
    """Whether `mixed_gate` can run this call: the kernels built, the op set above, a CPU tensor in
    float32/64, gradients recorded (else the plain ops record nothing anyway), no autocast."""
    return (
        compiled() is not None
        and tuple(OPS) == OPS_SUPPORTED
        and x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.float64)
        and torch.is_grad_enabled()
        and not torch.is_autocast_enabled(x.device.type)
    )


def mixed_gate(e: list[torch.Tensor], w_node: list[StepWeight], mix: torch.Tensor, squash: str) -> torch.Tensor:
    """squash(mean of the nodes) for the projected history vectors `e` (m of them, each (..., d)), the
    node matrices W_1..W_{N-1} and the mixing weights `mix` (edges, 4: identity, tanh, relu, sigmoid),
    the edges into node i consecutive: its history vector first (i ≤ m), then nodes 1..i-1."""
    return _MixedGate.apply((w_node, SQUASH_CODES[squash]), mix, *e, *(w.weight for w in w_node))


class _MixedGate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, meta, mix, *tensors):
        w_node, squash = meta
        e = tensors[: len(tensors) - len(w_node)]
        shape, d = e[0].shape, e[0].size(-1)
        flat = [t.reshape(-1, d).contiguous() for t in e]
        weights = [w.packed.source.contiguous() for w in w_node]
        out, *rest = compiled().gate_forward(flat, weights, mix.contiguous(), squash)
        states, projections = rest[: len(w_node) + 1], rest[len(w_node) + 1 :]
        ctx.meta, ctx.shape, ctx.count = (w_node, weights, squash), shape, len(e)
        ctx.save_for_backward(mix, out, *flat, *states[:-1], *projections)
        return out.view(shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        w_node, weights, squash = ctx.meta
        mix, out, *saved = ctx.saved_tensors
        m, n = ctx.count, len(w_node)
        flat, states, projections = saved[:m], saved[m : m + n], saved[m + n :]
        grad_mix, *rest = compiled().gate_backward(
            grad.reshape(out.shape).contiguous(), out, flat, projections, weights, mix.contiguous(), squash
        )
        grad_e, grad_p = rest[:m], rest[m:]
        for weight, state, grad_projection in zip(w_node, states, grad_p):
            if weight.deferred and grad_projection is not None:
                weight.pairs.append((state, grad_projection))
        return (None, grad_mix, *(g.view(ctx.shape) for g in grad_e), *[None] * n)
