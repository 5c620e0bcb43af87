"""Matrix products on oneDNN where torch.mm is slower: CPU, float32.

torch.mm on a CPU runs MKL's sgemm, which on AMD CPUs with AVX-512 takes its AVX2 path, where
oneDNN's matmul (the op Inductor calls, `torch.ops.mkldnn._linear_pointwise`) runs AVX-512
(figures: docs/speed.md, and bench/). `product` is the one GEMM routine of the fused cells;
`Linear` is nn.Linear computing forward and backward with it, for the decoder and the input
projections; `prefers_onednn` says, measured on this host, whether oneDNN beats torch.mm for a
product of a given shape, packed or not, and every product asks it. Elsewhere (GPU, float64, bf16,
a build without oneDNN, `ONEDNN = False`) both are plain torch.

A weight multiplied at every time step is first `pack`ed into oneDNN's blocked layout, which
oneDNN would otherwise form anew in each call (a cost that weighs most on small products).
`pack_for_steps` does so only where it pays: a batch's later steps have fewer rows (its shorter
sentences have ended), where torch.mm can be the faster, and packing costs about as much as a few
products. `PackedCache` keeps packed weights while their source is unchanged (prediction).
"""
from __future__ import annotations

import itertools
import statistics
import sys
import time
from typing import Callable, NamedTuple, Sequence, TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F

ONEDNN = True  # benchmarks turn it off to time torch.mm (MKL) instead
MARGIN = 1.05  # `prefers_onednn`: how much faster oneDNN must measure (packing, once per pass, is not timed): ties stay on torch.mm
_AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
_PACKING = hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
_T = TypeVar("_T")


def uses_onednn(x: torch.Tensor) -> bool:
    return ONEDNN and _AVAILABLE and x.device.type == "cpu" and x.dtype == torch.float32


def _gapped(t: torch.Tensor) -> bool:
    """Neither a contiguous matrix nor the transpose of one: rows (or columns) with a gap between
    them, as a slice of a wider buffer. oneDNN multiplies such layouts on a reference kernel, hundreds
    of times slower, so it must be given a copy; torch.mm (BLAS) reads them in place."""
    return not (t.is_contiguous() or t.t().is_contiguous())


def _dense(t: torch.Tensor) -> torch.Tensor:
    """t itself, or a contiguous copy where it is `_gapped`."""
    return t.contiguous() if _gapped(t) else t


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(_dense(x), _dense(weight), bias, "none", [], "")


def _packed(weight: torch.Tensor) -> bool:
    return weight.layout == torch._mkldnn


class OnMKL(NamedTuple):
    """A weight (N, K) that `product` multiplies on torch.mm: what `pack` gives where MKL measures faster."""

    weight: torch.Tensor


def pack(weight: torch.Tensor, rows: int | None = None) -> torch.Tensor | OnMKL:
    """weight (N, K) in oneDNN's blocked layout for `product` (which is all it is good for: an opaque
    tensor without views, copies or pickling), or weight itself where `product` would not use oneDNN.
    Given the row count of the products it will take part in, `OnMKL(weight)` where `prefers_onednn`
    says torch.mm is as fast for that shape on this host."""
    if uses_onednn(weight) and _PACKING:
        if rows is not None and not prefers_onednn(rows, weight.size(1), weight.size(0)):
            return OnMKL(weight)
        with torch.no_grad():
            return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), None)
    return weight


class LoopWeight(NamedTuple):
    """A weight (N, K) multiplied at every step (`pack_for_steps`): a product of at least `min_rows`
    rows runs on oneDNN with `blocked`, the weight packed, and a smaller one on torch.mm with `plain`."""

    plain: torch.Tensor
    blocked: torch.Tensor | None
    min_rows: int


NEVER = sys.maxsize  # `LoopWeight.min_rows` of a weight not packed


def pack_for_steps(weight: torch.Tensor, counts: Sequence[int]) -> LoopWeight:
    """weight (N, K) for one product per step t of counts[t] rows: packed, and used from the fewest rows
    from which oneDNN measures faster at every larger row count of the batch, where what those
    products save (measured) exceeds what packing costs (measured); else on torch.mm throughout."""
    N, K = weight.shape
    if not (uses_onednn(weight) and _PACKING):
        return LoopWeight(weight, None, NEVER)
    buckets = sorted({_power_of_two(n) for n in counts}, reverse=True)
    leading = list(itertools.takewhile(lambda rows: prefers_onednn(rows, K, N), buckets))
    if not leading or not packing_pays([n for n in counts if _power_of_two(n) >= leading[-1]], K, N):
        return LoopWeight(weight, None, NEVER)
    with torch.no_grad():
        blocked = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), None)
    return LoopWeight(weight, blocked, leading[-1] // 2 + 1)  # the bucket's fewest rows


def packing_pays(counts: Sequence[int], K: int, N: int) -> bool:
    """Whether products of counts[t] rows by a weight (N, K), on oneDNN packed rather than on
    torch.mm, save more than packing the weight costs (each measured once per shape and process)."""
    saved = 0.0
    for n in counts:
        mkl, onednn = _seconds((_power_of_two(n), K, N, True))
        saved += mkl - onednn
    return saved > _pack_seconds(K, N)


_timings: dict[tuple[int, int, int, bool], tuple[float, float]] = {}
_packing: dict[tuple[int, int], float] = {}


def prefers_onednn(rows: int, K: int, N: int, packed: bool = True) -> bool:
    """Whether x (rows, K)·W (K, N) on oneDNN, W packed for it (or as it is, `packed=False`), beats
    `torch.mm` (MKL) on this host by `MARGIN`.

    Hosts of one machine kind differ most here: oneDNN's lead over MKL ranges from none to 2× with
    the CPU (on an Intel host MKL's own AVX-512 path was the faster), and on small products
    (64 × 128) MKL is several times faster. So the choice is measured, once per shape and process,
    rows (and, unpacked, K: a weight gradient's rows of all steps) rounded up to a power of two (a
    few milliseconds; the largest products take one call per timing). False wherever `product`
    would not use oneDNN.
    """
    if not (ONEDNN and _AVAILABLE and (_PACKING or not packed)):
        return False
    mkl, onednn = _seconds((_power_of_two(rows), K if packed else _power_of_two(K), N, packed))
    return mkl > MARGIN * onednn


def _seconds(key: tuple[int, int, int, bool]) -> tuple[float, float]:
    if key not in _timings:
        _timings[key] = _measure(*key)
    return _timings[key]


def _power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _measure(rows: int, K: int, N: int, packed: bool = True, repeats: int = 5) -> tuple[float, float]:
    """Seconds of one product of this shape on torch.mm and on oneDNN: medians, timed alternately."""
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)  # the global RNG (a run's dropout masks) stays untouched
        x, w = torch.randn(rows, K, generator=gen), torch.randn(N, K, generator=gen)
        on_onednn = (lambda p=pack(w): _onednn_product(x, p, None)) if packed else (lambda: _onednn(x, w))
        calls = min(100, max(1, int(4e7 // (2 * rows * K * N))))  # about 0.4 ms a timing at 100 GFLOP/s

        def seconds(fn: Callable[[], torch.Tensor]) -> float:
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            return time.perf_counter() - start

        mkl, onednn = [], []
        for _ in range(repeats + 1):  # the first pair warms up
            mkl.append(seconds(lambda: torch.mm(x, w.t())))
            onednn.append(seconds(on_onednn))
    return statistics.median(mkl[1:]) / calls, statistics.median(onednn[1:]) / calls


def _pack_seconds(K: int, N: int, repeats: int = 3) -> float:
    """Seconds to pack a weight (N, K), from a transposed view as the loops' forward weights are."""
    if (K, N) not in _packing:
        w = torch.randn(K, N, generator=torch.Generator().manual_seed(0)).t()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), None)
            times.append(time.perf_counter() - start)
        _packing[(K, N)] = statistics.median(times)
    return _packing[(K, N)]


class PackedCache:
    """What `make()` packs from `sources`, kept while they are the same tensors at the same version
    (an in-place change, a load or a move packs again). Copies and pickles of the owner start empty:
    packed tensors cannot be copied."""

    def __init__(self):
        self._key, self._value = None, None

    def get(self, sources: tuple[torch.Tensor, ...], make: Callable[[], _T], tag: object = None) -> _T:
        """make()'s value, kept for the same sources at the same version and the same `tag`."""
        key = (tag, *((t.data_ptr(), t._version, t.dtype, t.device) for t in sources))
        if key != self._key:
            self._value, self._key = make(), key
        return self._value

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._key, self._value = None, None


def product(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None, accumulate: bool = False,
            bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (n, K) · weight (N, K)ᵀ (+ bias), written to / added to `out` when given. Any strides;
    weight may be `pack`ed, or a `LoopWeight`. Unpacked, the product runs on oneDNN only where `prefers_onednn` measures
    it faster for its shape, and never with a `_gapped` operand (the fused loops' per-edge slices in
    their weight gradients): torch.mm reads those in place, where oneDNN would copy them first, and
    the copies cost more than oneDNN gains (a tagger epoch 9% faster without them)."""
    if isinstance(weight, LoopWeight):
        weight = weight.blocked if x.size(0) >= weight.min_rows else weight.plain
    if isinstance(weight, OnMKL):
        weight = weight.weight
    elif _packed(weight) or (uses_onednn(x) and not (_gapped(x) or _gapped(weight))
                             and prefers_onednn(x.size(0), x.size(1), weight.size(0), packed=False)):
        result = _onednn_product(x, weight, bias)
        if out is None:
            return result.contiguous()
        return out.add_(result) if accumulate else out.copy_(result)
    if out is None:
        return F.linear(x, weight, bias)
    if bias is not None:
        raise ValueError("product: bias only without out")
    return torch.addmm(out, x, weight.t(), out=out) if accumulate else torch.mm(x, weight.t(), out=out)


def _onednn_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if _packed(weight):
        return torch.ops.mkldnn._linear_pointwise(_dense(x), weight, bias, "none", [], "")
    if bias is None and not x.is_contiguous() and x.numel() > weight.numel() + x.size(0) * weight.size(0):
        # oneDNN copies a transposed x (not a transposed weight): for a weight gradient gᵀ·x over
        # many rows, (xᵀ·g)ᵀ copies far less (the decoder's: 2240×300 instead of 2240×10000)
        return _onednn(weight, x).t()
    return _onednn(x, weight, bias)


class _OneDNNLinear(torch.autograd.Function):
    """y = x·Wᵀ + b over the last dimension, every product of forward and backward through `product`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return product(x.reshape(-1, x.size(-1)), weight, bias=bias).view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.size(-1))
        need_x, need_w, need_b = ctx.needs_input_grad
        # Under create_graph (a Hessian-vector product, nas.runs.health) autograd must record the backward's
        # products, and it cannot record oneDNN's op: plain torch.mm then.
        mm = (lambda a, b: a @ b.t()) if torch.is_grad_enabled() else product  # both: a·bᵀ
        grad_x = mm(g, weight.t()).view(x.shape) if need_x else None
        grad_w = mm(g.t(), x.reshape(-1, x.size(-1)).t()) if need_w else None
        grad_b = g.sum(0) if need_b and ctx.has_bias else None
        return grad_x, grad_w, grad_b


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, on oneDNN on a CPU in float32 (outside autocast)."""
    if uses_onednn(x) and weight.dtype == torch.float32 and not torch.is_autocast_enabled("cpu"):
        return _OneDNNLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    """nn.Linear through `linear` (same parameters and state dict)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
