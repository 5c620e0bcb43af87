"""Weight gradients of a time loop in one GEMM instead of one per step.

In a recurrence y_t = x_t·W, autograd forms ∂W = Σ_t x_tᵀ·g_t as one small GEMM per step, each
writing a whole W-sized gradient that is then accumulated: at hidden 512 that memory traffic
costs more than the arithmetic. `StepWeight` hands the loop a W whose per-step products pass
gradients to x_t only and keep (x_t, g_t); once every step's backward has run (autograd runs
the node that produced the loop's W after all its users), W's gradient is formed from all of
them in one batched GEMM with T·B rows. Forward values are those of `torch.matmul`.
"""
from __future__ import annotations

import torch


class StepWeight:
    """A weight (…, K, N) shared by the steps of one forward pass; `matmul(x)` is x·W."""

    def __init__(self, weight: torch.Tensor):
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.deferred = weight.requires_grad and torch.is_grad_enabled()
        self.weight = _Collect.apply(weight, self.pairs) if self.deferred else weight

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        if not self.deferred:
            return torch.matmul(x, self.weight)
        return _Step.apply(x, self.weight, self.pairs)


def _compute_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The matmul dtype autocast would choose here (None when autocast is off)."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, pairs):
        dtype = _compute_dtype(x)
        if dtype is not None:  # as autocast would run the matmul, with backward in the same dtype
            x, weight = x.to(dtype), weight.to(dtype)
        ctx.save_for_backward(x, weight)
        ctx.pairs, ctx.x_dtype = pairs, x.dtype
        with torch.autocast(x.device.type, enabled=False):
            return torch.matmul(x, weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad = grad.to(weight.dtype)
        ctx.pairs.append((x, grad))
        grad_x = torch.matmul(grad, weight.transpose(-1, -2)) if ctx.needs_input_grad[0] else None
        return grad_x, None, None


class _Collect(torch.autograd.Function):
    """Identity on W; its backward adds Σ_t x_tᵀ·g_t of every step, in one GEMM."""

    @staticmethod
    def forward(ctx, weight, pairs):
        ctx.pairs, ctx.dtype = pairs, weight.dtype
        ctx.set_materialize_grads(False)
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad):
        if ctx.pairs:
            xs, gs = zip(*ctx.pairs)
            ctx.pairs.clear()
            total = torch.matmul(torch.cat(xs, -2).transpose(-1, -2), torch.cat(gs, -2)).to(ctx.dtype)
            grad = total if grad is None else grad + total
        return grad, None
