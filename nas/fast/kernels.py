"""The C++ elementwise kernels (`nas/fast/csrc/fused_kernels.cpp`, built by the install), and the highway
edge's two elementwise passes that both fused loops run on them, with PyTorch ops where they are missing.

For an edge s = p + σ(c)(f(h) − p) with the activations saved, a = f(h):
σ' = σ(1 − σ), tanh' = 1 − a², relu' = [a > 0], sigmoid' = a(1 − a); ∂p = ∂s(1 − σ), ∂c = ∂s(a − p)σ',
∂a = ∂s·σ. The kernels know the ops of `OP_CODES`: a fast path supports that op set only.
"""
from __future__ import annotations

import importlib.util
import logging
from types import ModuleType
from typing import Sequence

import torch

try:
    from nas.fast import _fused_kernels as _kernels
    _kernels_error: ImportError | None = None  # why a built module does not load (None: not built)
except ImportError as error:  # not built when the package was installed, or built against another torch
    _kernels = None
    _kernels_error = error if importlib.util.find_spec("nas.fast._fused_kernels") else None

OP_CODES = {"identity": 0, "tanh": 1, "relu": 2, "sigmoid": 3}  # as in nas/fast/csrc/fused_kernels.cpp
_warned = False


def compiled() -> ModuleType | None:
    """The C++ kernels, or None when the install did not build them (read at each call, so tests can take them away)."""
    return _kernels


def built() -> bool:
    """Whether the C++ kernels are built (else one warning line, once)."""
    warn_once_without_kernels()
    return _kernels is not None


def warn_once_without_kernels() -> None:
    """One log line per process when the C++ kernels are missing (both fused cells call it)."""
    global _warned
    if _kernels is None and not _warned:
        _warned = True
        if _kernels_error is None:
            why = ("were not built when nas-tagger was installed (torch could not be imported by the build, as in "
                   "pip's default isolated build, or the compiler failed)")
        else:
            why = f"do not load ({_kernels_error}; built against another torch?)"
        logging.getLogger(__name__).warning(
            f"nas.fast: the C++ kernels {why}; the frozen cell runs PyTorch ops, the search cell its autograd path. "
            "To build them, reinstall from the source with torch already installed: "
            "pip install --no-build-isolation SOURCE (README, Setup)")


def _activate_(op: str, h: torch.Tensor) -> None:
    if op == "tanh":
        h.tanh_()
    elif op == "relu":
        h.relu_()
    elif op == "sigmoid":
        h.sigmoid_()


def _activation_grad(op: str, a: torch.Tensor, grad: torch.Tensor, out: torch.Tensor) -> None:
    """out = grad · f'(h), with f' written through the activation's output a = f(h)."""
    if op == "tanh":
        torch.mul(grad, 1 - a * a, out=out)
    elif op == "relu":
        torch.mul(grad, a > 0, out=out)
    elif op == "sigmoid":
        torch.mul(grad, a - a * a, out=out)
    else:
        out.copy_(grad)


def with_kernels(t: torch.Tensor) -> bool:
    return _kernels is not None and t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64)


def highway_forward(act: torch.Tensor, prev: torch.Tensor, ops: Sequence[str], codes: list[int],
                    out: torch.Tensor) -> None:
    """act = [c | h] → [σ(c) | f(h)] in place; out = prev + σ(c)(f(h) − prev). Edges at dim 1."""
    if with_kernels(act):
        return _kernels.highway_forward(act, prev, codes, out)
    H = prev.size(-1)
    sig, a = act[..., :H], act[..., H:]
    sig.sigmoid_()
    for e, op in enumerate(ops):
        _activate_(op, a[:, e])
    torch.addcmul(prev, sig, a - prev, out=out)


def highway_backward(grad: torch.Tensor, prev: torch.Tensor, act: torch.Tensor, ops: Sequence[str], codes: list[int],
                     g: torch.Tensor, direct: torch.Tensor) -> None:
    """g = [∂c | ∂h] of out = prev + σ(c)(f(h) − prev) from act = [σ(c) | f(h)] and grad = ∂out;
    direct = ∂prev through the highway alone, grad·(1 − σ(c))."""
    if with_kernels(act):
        return _kernels.highway_backward(grad, prev, act, codes, g, direct)
    H = prev.size(-1)
    sig, a = act[..., :H], act[..., H:]
    torch.mul(grad * (a - prev), sig - sig * sig, out=g[..., :H])
    grad_a = grad * sig
    for e, op in enumerate(ops):
        _activation_grad(op, a[:, e], grad_a[:, e], g[:, e, ..., H:])
    torch.sub(grad, grad_a, out=direct)
