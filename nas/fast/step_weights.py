"""Weight gradients of a time loop in one GEMM instead of one per step.

In a recurrence y_t = x_t·W, autograd forms ∂W = Σ_t x_tᵀ·g_t as one small GEMM per step, each
writing a whole W-sized gradient that is then accumulated: at hidden 512 that memory traffic
costs more than the arithmetic. `StepWeight` hands the loop a W whose per-step products pass
gradients to x_t only and keep (x_t, g_t); once every step's backward has run (autograd runs
the node that produced the loop's W after all its users), W's gradient is formed from all of
them in one batched GEMM with T·B rows. Forward values are those of `torch.matmul`.

The per-step products x_t·W and g_t·Wᵀ run on oneDNN with W packed once per pass where the
run's GEMM rule puts their shape there (`Gemm.prefers_onednn`: the ESS gates'
4,096-wide products at 32 rows), else on `torch.matmul`; under autocast, and in a backward that
autograd records (`create_graph`), always on `torch.matmul`.
"""

from __future__ import annotations

import torch

from .gemm import Gemm, OnMKL


class StepWeight:
    """A weight (K, N) or (P, K, N) shared by the steps of one forward pass; `matmul(x)` is x·W,
    x (..., K) or (P, rows, K), its products on the GEMM rule `gemm`."""

    def __init__(self, weight: torch.Tensor, gemm: Gemm):
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.deferred = weight.requires_grad and torch.is_grad_enabled()
        self.weight = _Collect.apply(weight, self.pairs) if self.deferred else weight
        self.packed = _Packed(weight, gemm)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        if self.deferred or (torch.is_grad_enabled() and x.requires_grad):
            # through the Function: oneDNN's op has no autograd kernel, so recorded as it is it would
            # pass x no gradient (a weight that needs none, as the first-order α step's, still has x's)
            return _Step.apply(x, self.weight, self.pairs, self.packed)
        return self.packed.times(x, self.weight)


class _Packed:
    """W packed for oneDNN, per matrix of a stack, both ways round (x·W forward, g·Wᵀ backward), each
    packed at its first use if `prefers_onednn` says so for that product's shape, else None."""

    def __init__(self, weight: torch.Tensor, gemm: Gemm):
        self.source, self.gemm = weight.detach(), gemm
        self.usable = gemm.uses_onednn(weight) and weight.dim() in (2, 3)
        self.ways: dict[bool, list[torch.Tensor] | None] = {}

    def times(self, x: torch.Tensor, weight: torch.Tensor, transposed: bool = False) -> torch.Tensor:
        """x·W (or x·Wᵀ), on the packed weight where it is faster."""
        packed = self._packed(x, transposed)
        if packed is None:
            return torch.matmul(x, weight.transpose(-1, -2) if transposed else weight)
        if self.source.dim() == 2:
            return self.gemm.product(x.reshape(-1, x.size(-1)), packed[0]).view(*x.shape[:-1], -1)
        return torch.stack([self.gemm.product(part, p) for part, p in zip(x.unbind(0), packed)])

    def _packed(self, x: torch.Tensor, transposed: bool) -> list[torch.Tensor] | None:
        stacked = self.source.dim() == 3
        if (
            not self.usable
            or x.dtype != self.source.dtype
            or torch.is_autocast_enabled(x.device.type)
            or (stacked and (x.dim() != 3 or x.size(0) != self.source.size(0)))
        ):
            return None
        if transposed not in self.ways:
            rows = x.size(1) if stacked else x.numel() // x.size(-1)
            mats = self.source.unbind(0) if stacked else [self.source]
            # product multiplies by its weight transposed: x·W packs Wᵀ (N, K), g·Wᵀ packs W (K, N)
            packs = [self.gemm.pack(m if transposed else m.t(), rows) for m in mats]
            self.ways[transposed] = None if isinstance(packs[0], OnMKL) else packs  # None: one torch.matmul
        return self.ways[transposed]


def _compute_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The matmul dtype autocast would choose here (None when autocast is off)."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, pairs, packed):
        dtype = _compute_dtype(x)
        if dtype is not None:  # as autocast would run the matmul, with backward in the same dtype
            x, weight = x.to(dtype), weight.to(dtype)
        ctx.save_for_backward(x, weight)
        ctx.pairs, ctx.packed = pairs, packed
        with torch.autocast(x.device.type, enabled=False):
            return packed.times(x, weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad = grad.to(weight.dtype)
        if ctx.needs_input_grad[1]:
            ctx.pairs.append((x, grad))
        if not ctx.needs_input_grad[0]:
            grad_x = None
        elif torch.is_grad_enabled():  # create_graph: autograd records the product, which it cannot for oneDNN's op
            grad_x = torch.matmul(grad, weight.transpose(-1, -2))
        else:
            grad_x = ctx.packed.times(grad, weight, transposed=True)
        return grad_x, None, None, None


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
