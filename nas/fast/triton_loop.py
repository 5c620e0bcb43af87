"""The frozen cell's time loop as two Triton kernels, forward and backward, each one launch per pass.

On a GPU the loop of `nas.fast.frozen_loop` launches a few kernels per wave and step, and a tagger's
batches are too small for any of them to fill the device: the layer waits on launches, not on
arithmetic. Here one program per direction and block of `BLOCK_B` sequences steps through the whole
sentence: a sequence's step t reads only its own step t − 1, so the programs never wait for each
other, and the only synchronisation is a barrier among one program's threads between the phases of
a step. The kernels fill the same buffers as the CPU's steps (`frozen_loop.CpuSteps`: X, A, S
forward; G and ∂h0 backward; docstring of `nas.fast.frozen_loop`), from the same `Plan`
flattened into small integer tables, so `FusedFrozenCell` does the rest (the input projection and the
weight gradients, large GEMMs over all rows) as on a CPU.

Each step, per wave: each group's GEMM (prev⊙m_h)·[W_i | W_j | …] a tile of columns at a time
(`tl.dot` in IEEE float32, as torch.mm), the edge's activations [σ(c) | f(h)] stored in A; then each
edge's highway s = p + σ(c)(f(h) − p) into S; h_t the mean of the concat states. Backward, the same in
reverse with the equations of `nas.fast.kernels`. Weights are read from global memory (L2) at every
step: the weights of one cell do not fit a multiprocessor's shared memory at the papers' sizes.

Triton is an optional extra (`pip install triton`, CUDA). With `TRITON_INTERPRET=1` the kernels run on
a CPU in Triton's interpreter, which is how the tests hold them to the definition without a GPU.
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType, SimpleNamespace

import torch

from .frozen_loop import Plan
from .gemm import Gemm

BLOCK_B = 16  # sequences per program (tl.dot's smallest M)


def tiles(H: int, forward: bool) -> dict:
    """Tile sizes and launch settings for hidden size H: GEMM tiles as wide as a weight row allows (2H
    columns forward, H backward, at most 512), so that each streams long contiguous rows of the weights
    with further reduction tiles of 32 rows in flight (num_stages − 1 buffers of shared memory: 132 KB at
    512 columns, within an H100's 227); elementwise tiles of up to 256 columns. Chosen by reasoning, not
    yet tuned on a GPU."""
    n = min(_power_of_2(2 * H if forward else H), 512)
    return dict(
        BLOCK_H=min(_power_of_2(H), 256),
        BLOCK_N=n,
        BLOCK_K=32,
        num_warps=8 if n >= 256 else 4,
        num_stages=3 if n > 256 else 4,
    )


def _power_of_2(n: int) -> int:
    return 1 << max(n - 1, 15).bit_length()  # at least 16: tl.dot's smallest tile


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (`TRITON_INTERPRET=1`)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def runs_on(t: torch.Tensor) -> bool:
    """Whether the kernels can run on `t`: float32 on CUDA with Triton, or any float tensor on a CPU under
    Triton's interpreter."""
    if t.device.type == "cuda":
        return t.dtype == torch.float32 and _triton_imports()
    return t.device.type == "cpu" and interpreting() and t.dtype in (torch.float32, torch.float64) and _triton_imports()


@functools.cache
def _triton_imports() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def stacked_weights(plan: Plan, w0h: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    """Every edge's matrix side by side in edge-slot order, (D, H, E·2H): edge e's columns are
    [e·2H, (e + 1)·2H), so a group's GEMM output lands where A keeps it (edge 0 is W0h)."""
    index = [node for wave in plan.waves[1:] for group in wave.groups for node in group.weights.index]
    w = torch.cat([w0h.unsqueeze(1), ws[:, index]], 1)  # (D, E, H, 2H)
    D, E, H, H2 = w.shape
    return w.transpose(1, 2).reshape(D, H, E * H2).contiguous()


class _Tables(SimpleNamespace):
    """A plan as integer tables on a device (rows of int32: waves, groups, edges, concat)."""


@functools.lru_cache(maxsize=64)
def _tables(key: tuple, device: torch.device) -> _Tables:
    edge_slots, node_slots, pred_slots, codes, groups, concat = key
    waves, group_rows = [], []
    for w, (start, stop) in enumerate(edge_slots):
        mine = [g for g in groups if g[0] == w]
        waves.append([len(group_rows), len(group_rows) + len(mine), start, stop])
        group_rows += [[g[1], g[2], g[3], g[4]] for g in mine]
    edges = [[n, p, c] for wave in zip(node_slots, pred_slots, codes) for n, p, c in zip(*wave)]

    def table(rows: list) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.int32, device=device).flatten()

    return _Tables(
        waves=table(waves),
        groups=table(group_rows),
        edges=table(edges),
        concat=table(list(concat)),
        n_waves=len(waves),
        n_concat=len(concat),
    )


@functools.lru_cache(maxsize=256)
def _steps(counts: tuple[int, ...], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows per step and each step's first packed row, with a step of no rows after the last. Kept per
    batch shape: a training step recorded as a CUDA graph (`nas.fast.graphs`) may copy nothing from the
    host, and its warm-up calls leave these made."""
    offsets = [0]
    for n in counts:
        offsets.append(offsets[-1] + n)
    as_tensor = functools.partial(torch.tensor, dtype=torch.int32, device=device)
    return as_tensor([*counts, 0]), as_tensor(offsets)


class TritonSteps:
    """`FusedFrozenCell`'s time steps on the Triton kernels: weights stacked once per pass. On a GPU every
    product is torch's (`gemm`: no oneDNN)."""

    gemm = Gemm("mkl")

    def weights(
        self, plan: Plan, w0h: torch.Tensor, ws: torch.Tensor, counts: list[int], forward: bool = True
    ) -> torch.Tensor:
        """Forward the stacked weights (D, H, E·2H), backward their transpose (D, E·2H, H): each pass's
        GEMM tiles then read rows of the weights."""
        with torch.no_grad():
            stacked = stacked_weights(plan, w0h, ws)
            return stacked if forward else stacked.transpose(1, 2).contiguous()

    def forward(
        self,
        plan: Plan,
        counts: list[int],
        h0: torch.Tensor,
        mh: torch.Tensor | None,
        weights: torch.Tensor,
        X: torch.Tensor | None,
        A: torch.Tensor,
        S: torch.Tensor,
        out: torch.Tensor,
    ) -> None:
        D, R, E, H2 = A.shape
        H, B = H2 // 2, h0.size(1)
        tables = _tables(plan.key, A.device)
        steps, offsets = _steps(tuple(counts), A.device)
        dummy = A.new_zeros(1)  # never read: an absent mask or X (one each: the interpreter's copies must not alias)
        _kernels(interpreting()).forward[(D, -(-B // BLOCK_B))](
            steps,
            offsets,
            h0.contiguous(),
            dummy if mh is None else mh.contiguous(),
            weights,
            dummy.clone() if X is None else X,
            A,
            S,
            out,
            tables.waves,
            tables.groups,
            tables.edges,
            tables.concat,
            len(counts),
            B,
            R,
            E,
            1 if X is None else X.size(2),
            S.size(1),
            tables.n_waves,
            tables.n_concat,
            1.0 / tables.n_concat,
            H=H,
            HAS_MASK=mh is not None,
            HAS_X=X is not None,
            MULTI=plan.multi_input,
            BLOCK_B=BLOCK_B,
            **tiles(H, forward=True),
        )

    def backward(
        self,
        plan: Plan,
        counts: list[int],
        grad_out: torch.Tensor,
        mh: torch.Tensor | None,
        weights: torch.Tensor,
        A: torch.Tensor,
        S: torch.Tensor,
        G: torch.Tensor,
    ) -> torch.Tensor:
        D, R, E, H2 = A.shape
        H, B = H2 // 2, counts[0]
        tables = _tables(plan.key, A.device)
        steps, offsets = _steps(tuple(counts), A.device)
        grad_states = A.new_zeros(D, S.size(1), B, H)
        grad_h0 = A.new_empty(D, B, H)
        _kernels(interpreting()).backward[(D, -(-B // BLOCK_B))](
            steps,
            offsets,
            grad_out.contiguous(),
            A.new_zeros(1) if mh is None else mh.contiguous(),
            weights,
            A,
            S,
            G,
            grad_states,
            grad_h0,
            tables.waves,
            tables.groups,
            tables.edges,
            tables.concat,
            len(counts),
            B,
            R,
            E,
            S.size(1),
            tables.n_waves,
            tables.n_concat,
            1.0 / tables.n_concat,
            H=H,
            HAS_MASK=mh is not None,
            BLOCK_B=BLOCK_B,
            **tiles(H, forward=False),
        )
        return grad_h0


@functools.cache
def _kernels(interpret: bool) -> ModuleType:
    """`nas.fast.triton_kernels`, imported for this mode (compiled for the GPU, or the interpreter's)."""
    import nas.fast.triton_kernels as kernels

    return kernels if kernels.INTERPRETED == interpret else importlib.reload(kernels)


STEPS = TritonSteps()
