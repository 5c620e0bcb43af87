"""Dropout masks drawn once per sequence and reused at every step (variational and locked dropout).

A mask's dim −2 is the batch. Under data parallelism (`nas.common.distributed`: torchrun, every rank
holding an equal share of the batch columns) a mask is drawn for the whole batch from the RNG
state every rank shares, and each rank keeps its own columns: the ranks draw exactly the masks
of a single-process run, and their RNG states stay equal.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def batch_mask(like: torch.Tensor, p: float, shape: tuple[int, ...]) -> torch.Tensor:
    """A dropout mask, Bernoulli(1 − p) / (1 − p), of `shape` with like's dtype and device."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return like.new_empty(shape).bernoulli_(1 - p) / (1 - p)
    rank, world = dist.get_rank(), dist.get_world_size()
    full = list(shape)
    full[-2] *= world
    mask = like.new_empty(full).bernoulli_(1 - p) / (1 - p)
    return mask.narrow(-2, rank * shape[-2], shape[-2])


def variational_mask(like: torch.Tensor, p: float, shape: tuple[int, ...]) -> torch.Tensor | None:
    """`batch_mask`, or None when p ≤ 0 (no dropout, and no random numbers drawn)."""
    if p <= 0:
        return None
    return batch_mask(like, p, shape)
