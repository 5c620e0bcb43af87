"""The language model's loss, `F.cross_entropy` over the rows of the logits (mean), on C++ kernels.

torch forms the (rows × classes) log-softmax in the forward and keeps it; its backward fills a
zero gradient of the same size, scatters the targets into it and reads both back. Over a 10,000-word
vocabulary those passes over memory are most of the loss's time. Here the forward keeps only each
row's log-sum-exp (lse), and the backward writes (exp(logits − lse) − onehot(target))·∂loss/rows in
one pass over the logits (`cross_entropy_forward` / `cross_entropy_backward` in
`nas/fast/csrc/fused_kernels.cpp`). Under create_graph (a Hessian-vector product) the backward is
the same formula in differentiable torch ops, so second derivatives go through it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .kernels import compiled


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean softmax cross-entropy of logits (rows, classes) against targets (rows): `F.cross_entropy`'s
    value and gradient, on the kernels where they apply (a CPU tensor in float32/64, no autocast)."""
    if (
        compiled() is None
        or logits.device.type != "cpu"
        or logits.dtype not in (torch.float32, torch.float64)
        or torch.is_autocast_enabled("cpu")
        or logits.dim() != 2
        or targets.dtype != torch.long
    ):
        return F.cross_entropy(logits, targets)
    return _CrossEntropy.apply(logits.contiguous(), targets.contiguous())


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):
        lse, loss = compiled().cross_entropy_forward(logits, targets)
        ctx.save_for_backward(logits, targets, lse)
        return loss

    @staticmethod
    def backward(ctx, grad):
        logits, targets, lse = ctx.saved_tensors
        rows = logits.size(0)
        if torch.is_grad_enabled():  # create_graph: the same gradient, recorded
            onehot = F.one_hot(targets, logits.size(1)).to(logits.dtype)
            return (torch.softmax(logits, 1) - onehot) * (grad / rows), None
        return compiled().cross_entropy_backward(logits, targets, lse, float(grad) / rows), None
