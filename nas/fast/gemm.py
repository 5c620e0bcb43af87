"""Matrix products on oneDNN or on torch.mm, by a fixed rule: CPU, float32.

torch.mm on a CPU runs MKL's sgemm, which on AMD CPUs with AVX-512 takes its AVX2 path, where
oneDNN's matmul (the op Inductor calls, `torch.ops.mkldnn._linear_pointwise`) runs AVX-512
(figures: docs/speed.md, and bench/). A run's rule is a `Gemm`, which its backend holds: `Gemm.product`
is the one GEMM routine of the fused cells; `Gemm.linear` is F.linear computing forward and backward with
it, for the decoder, the reprojection and the input projections; `Gemm.prefers_onednn` says whether a
product of a given shape, packed or not, runs on oneDNN, and every product asks it.

Which backend a product gets is a rule of the run's setting (a `Gemm`: `onednn` or `mkl`, resolved from
`auto`, the host's rule, `host_backend`) and of the product's shape, never a timing: the two backends differ in
the last bits, so a choice measured at run time made a run's floats depend on the machine's load (a
neighbour process), and a seed no longer fixed the run. The rule is the run's backend's
(`nas.fast.backends`), never the process's: the commands that train record it in config.json and resume
with it. Elsewhere (GPU, float64, bf16, a build without oneDNN, `mkl`)
both are plain torch.

A weight multiplied at every time step is first `pack`ed into oneDNN's blocked layout, which
oneDNN would otherwise form anew in each call (a cost that weighs most on small products).
`pack_for_steps` does so only where the rule says it pays: a batch's later steps have fewer rows
(its shorter sentences have ended), and packing costs about as much as many rows of products.
`PackedCache` keeps packed weights while their source is unchanged (prediction).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence, TypeVar

import torch
import torch.nn.functional as F

from nas.common.errors import InputError

# Products of fewer multiply-adds (rows·K·N) run on torch.mm under `onednn`: below about 2^20 oneDNN's
# per-call overhead makes it the slower on the hosts measured (64 × 64 × 128: 0.8× torch.mm's speed, docs/speed.md).
MIN_ONEDNN = 1 << 20
# A weight is packed for a pass when the products it takes part in on oneDNN add up to this many rows:
# packing costs about what 800 to 6,000 rows of products save by it (docs/speed.md).
PACK_ROWS = 2048
_AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
_PACKING = hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
_T = TypeVar("_T")
GEMM_ENV = "NAS_GEMM"  # `auto`'s rule where set (`host_backend`)


def host_backend(cpuinfo: str | None = None) -> str:
    """`auto`'s backend, from the CPU's vendor and flags (/proc/cpuinfo, or `cpuinfo`'s text): `onednn` on
    an AMD CPU with AVX-512, where MKL's sgemm runs its AVX2 path at about half oneDNN's speed; `mkl`
    elsewhere (on Intel CPUs MKL runs AVX-512 itself and ties with oneDNN; other CPUs are unmeasured).

    `$NAS_GEMM` (`onednn` or `mkl`), when set, is `auto`'s rule in place of this host's: hosts of both
    vendors then run the same products (and the suite runs under each rule so, on any host)."""
    forced = os.environ.get(GEMM_ENV, "").strip() if cpuinfo is None else ""
    if forced:
        if forced not in ("onednn", "mkl"):
            raise InputError(f"${GEMM_ENV}={forced!r}: expected onednn or mkl (or unset: the host's rule)")
        return forced
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read()
        except OSError:
            cpuinfo = ""
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo, re.M)
    flags = re.search(r"^flags\s*:(.*)$", cpuinfo, re.M)
    amd_avx512 = (
        vendor is not None
        and vendor.group(1) == "AuthenticAMD"
        and flags is not None
        and "avx512f" in flags.group(1).split()
    )
    return "onednn" if amd_avx512 else "mkl"


def resolve(backend: str) -> str:
    """`onednn` or `mkl`: `backend` itself, or for `auto` the host's (`host_backend`)."""
    if backend == "auto":
        return host_backend()
    if backend not in ("onednn", "mkl"):
        raise ValueError(f"GEMM backend {backend!r}: expected auto, onednn or mkl")
    return backend


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


def is_packed(weight: torch.Tensor) -> bool:
    """Whether `weight` is in oneDNN's blocked layout (`Gemm.pack`)."""
    return weight.layout == torch._mkldnn


class OnMKL(NamedTuple):
    """A weight (N, K) that `product` multiplies on torch.mm: what `Gemm.pack` gives where `prefers_onednn` says
    torch.mm."""

    weight: torch.Tensor


class LoopWeight(NamedTuple):
    """A weight (N, K) multiplied at every step (`Gemm.pack_for_steps`): a product of at least `min_rows`
    rows runs on oneDNN with `blocked`, the weight packed, and a smaller one on torch.mm with `plain`."""

    plain: torch.Tensor
    blocked: torch.Tensor | None
    min_rows: int


NEVER = sys.maxsize  # `LoopWeight.min_rows` of a weight not packed


def packing_pays(counts: Sequence[int], K: int, N: int) -> bool:
    """Whether products of counts[t] rows by a weight (N, K) save more on oneDNN packed than packing the
    weight costs: both grow with K·N, so the rule is a count of rows, `PACK_ROWS`."""
    return sum(counts) >= PACK_ROWS


@dataclass(frozen=True)
class Gemm:
    """A run's GEMM rule, `onednn` or `mkl` (`resolve`): `onednn`, oneDNN for every product of at least
    `MIN_ONEDNN` multiply-adds it can run (CPU, float32), torch.mm for the rest; `mkl`, torch.mm (MKL on
    x86) for all. Its backend holds it (`nas.fast.backends`) and hands it to the fast paths."""

    rule: str = "mkl"

    def __post_init__(self):
        if self.rule not in ("onednn", "mkl"):
            raise ValueError(f"GEMM rule {self.rule!r}: expected onednn or mkl")

    def uses_onednn(self, x: torch.Tensor) -> bool:
        return self.rule == "onednn" and _AVAILABLE and x.device.type == "cpu" and x.dtype == torch.float32

    def prefers_onednn(self, rows: int, K: int, N: int, packed: bool = True) -> bool:
        """Whether x (rows, K)·W (K, N) runs on oneDNN, W packed for it (or as it is, `packed=False`): under
        the `onednn` rule, where the product has at least `MIN_ONEDNN` multiply-adds. A rule of the shape,
        never a timing, so that a run's floats do not depend on the machine's load. False wherever
        `product` would not use oneDNN."""
        return self.rule == "onednn" and _AVAILABLE and (_PACKING or not packed) and rows * K * N >= MIN_ONEDNN

    def pack(self, weight: torch.Tensor, rows: int | None = None) -> torch.Tensor | OnMKL:
        """weight (N, K) in oneDNN's blocked layout for `product` (which is all it is good for: an opaque
        tensor without views, copies or pickling), or weight itself where `product` would not use oneDNN.
        Given the row count of the products it will take part in, `OnMKL(weight)` where `prefers_onednn`
        puts that shape on torch.mm."""
        if self.uses_onednn(weight) and _PACKING:
            if rows is not None and not self.prefers_onednn(rows, weight.size(1), weight.size(0)):
                return OnMKL(weight)
            with torch.no_grad():
                return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), None)
        return weight

    def pack_for_steps(self, weight: torch.Tensor, counts: Sequence[int]) -> LoopWeight:
        """weight (N, K) for one product per step t of counts[t] rows: packed, and used from the fewest rows
        from which `prefers_onednn` puts every larger row count of the batch on oneDNN, where `packing_pays`
        for those products; else as it is throughout (oneDNN unpacked or torch.mm, as `product` decides)."""
        N, K = weight.shape
        if not (self.uses_onednn(weight) and _PACKING):
            return LoopWeight(weight, None, NEVER)
        leading = list(
            itertools.takewhile(lambda rows: self.prefers_onednn(rows, K, N), sorted(set(counts), reverse=True))
        )
        if not leading or not packing_pays([n for n in counts if n >= leading[-1]], K, N):
            return LoopWeight(weight, None, NEVER)
        with torch.no_grad():
            blocked = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), None)
        return LoopWeight(weight, blocked, leading[-1])

    def product(
        self,
        x: torch.Tensor,
        weight: torch.Tensor | LoopWeight | OnMKL,
        out: torch.Tensor | None = None,
        accumulate: bool = False,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (n, K) · weight (N, K)ᵀ (+ bias), written to / added to `out` when given. Any strides;
        weight may be `pack`ed, or a `LoopWeight`. Unpacked, the product runs on oneDNN only where
        `prefers_onednn` puts its shape, and never with a `_gapped` operand (the fused loops' per-edge slices
        in their weight gradients): torch.mm reads those in place, where oneDNN would copy them first, and
        the copies cost more than oneDNN gains (a tagger epoch 9% faster without them)."""
        if isinstance(weight, LoopWeight):
            weight = weight.blocked if x.size(0) >= weight.min_rows else weight.plain
        if isinstance(weight, OnMKL):
            weight = weight.weight
        elif is_packed(weight) or (
            self.uses_onednn(x)
            and not (_gapped(x) or _gapped(weight))
            and self.prefers_onednn(x.size(0), x.size(1), weight.size(0), packed=False)
        ):
            result = _onednn_product(x, weight, bias)
            if out is None:
                return result.contiguous()
            return out.add_(result) if accumulate else out.copy_(result)
        if out is None:
            return F.linear(x, weight, bias)
        if bias is not None:
            raise ValueError("product: bias only without out")
        return torch.addmm(out, x, weight.t(), out=out) if accumulate else torch.mm(x, weight.t(), out=out)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """F.linear, on oneDNN on a CPU in float32 (outside autocast)."""
        if self.uses_onednn(x) and weight.dtype == torch.float32 and not torch.is_autocast_enabled("cpu"):
            return _OneDNNLinear.apply(x, weight, bias, self)
        return F.linear(x, weight, bias)


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


def _onednn_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if is_packed(weight):
        return torch.ops.mkldnn._linear_pointwise(_dense(x), weight, bias, "none", [], "")
    if bias is None and not x.is_contiguous() and x.numel() > weight.numel() + x.size(0) * weight.size(0):
        # oneDNN copies a transposed x (not a transposed weight): for a weight gradient gᵀ·x over
        # many rows, (xᵀ·g)ᵀ copies far less (the decoder's: 2240×300 instead of 2240×10000)
        return _onednn(weight, x).t()
    return _onednn(x, weight, bias)


class _OneDNNLinear(torch.autograd.Function):
    """y = x·Wᵀ + b over the last dimension, every product of forward and backward through `Gemm.product`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gemm: Gemm) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias, ctx.gemm = bias is not None, gemm
        return gemm.product(x.reshape(-1, x.size(-1)), weight, bias=bias).view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.size(-1))
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        # Under create_graph (a Hessian-vector product, nas.runs.health) autograd must record the backward's
        # products, and it cannot record oneDNN's op: plain torch.mm then.
        mm = (lambda a, b: a @ b.t()) if torch.is_grad_enabled() else ctx.gemm.product  # both: a·bᵀ
        grad_x = mm(g, weight.t()).view(x.shape) if need_x else None
        grad_w = mm(g.t(), x.reshape(-1, x.size(-1)).t()) if need_w else None
        grad_b = g.sum(0) if need_b and ctx.has_bias else None
        return grad_x, grad_w, grad_b, None
