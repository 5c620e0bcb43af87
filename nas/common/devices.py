"""The devices a command may run on: `cpu`, `cuda` or `cuda:N`, checked before any work starts.

torch loads only to check a CUDA device, so `--device cpu` and a misspelt device cost no import."""

from __future__ import annotations

import importlib.util
import re

DEVICES = "cpu, cuda or cuda:N"
# How a CPU's float32 matrix products are run (nas.fast.gemm.Gemm): a fixed rule, so a seed fixes a run.
GEMM_BACKENDS = ("auto", "onednn", "mkl")
# Which fast path runs the cells (nas.fast.backends): the definition, the CPU's fused loops, compiled CUDA steps.
BACKENDS = ("auto", "torch", "cpu-fused", "cuda-graphs", "cuda-loop")
# The training step's precision (nas.common.runs.autocast): bf16 runs it under torch.autocast
PRECISIONS = ("fp32", "bf16")
# The settings of these choices every run's config.json holds, checked when a run is resumed
STORED_CHOICES = {"precision": PRECISIONS, "gemm": GEMM_BACKENDS, "backend": BACKENDS}
_FORM = re.compile(r"cpu|cuda(?::(\d+))?")


def device_problem(device: str) -> str | None:
    """What stops `device` from being used on this machine (None: nothing)."""
    form = _FORM.fullmatch(device)
    if form is None:
        return f"unknown device {device!r} (use {DEVICES})"
    if device == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        return "CUDA is not available on this machine (use --device cpu)"
    count = torch.cuda.device_count()
    if form.group(1) is not None and int(form.group(1)) >= count:
        return f"this machine has {count} CUDA device{'s' if count > 1 else ''} (cuda:0 to cuda:{count - 1})"
    return None


def precision_problem(device: str, precision: str) -> str | None:
    """What stops `precision` on `device` (None: nothing). bf16 on a CPU needs its bf16 instructions
    (AVX512-BF16 or AMX, what oneDNN's bf16 kernels use): elsewhere torch would emulate them, slower than fp32."""
    if precision not in PRECISIONS:
        return f"unknown precision {precision!r} (use {' or '.join(PRECISIONS)})"
    if precision == "fp32":
        return None
    import torch

    if device == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "this CPU has no bf16 instructions (AVX512-BF16 or AMX); use --precision fp32"
    if device != "cpu" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        return "this GPU has no bf16 support; use --precision fp32"
    return None


def backend_problem(backend: str, device: str, compile: bool = False) -> str | None:
    """Why `--backend` cannot run on `device` (None: it can), with search-lm's `--compile`: one error line. The
    one place that says which backends suit a device (`auto_backend` says which `auto` means);
    `nas.fast.backends` builds them."""
    if backend not in BACKENDS:
        return f"--backend {backend}: expected one of {', '.join(BACKENDS)}"
    if backend == "cpu-fused" and device != "cpu":
        return f"--backend cpu-fused: CPU only (the device is {device}); on a GPU use cuda-graphs or torch"
    if backend in ("cuda-graphs", "cuda-loop") and not device.startswith("cuda"):
        return f"--backend {backend}: CUDA only (the device is {device}); on a CPU use cpu-fused or torch"
    if backend == "cpu-fused" and compile:
        return "--compile: not with --backend cpu-fused (its fused loops run no compiled step); use --backend torch"
    if backend in ("cuda-graphs", "cuda-loop") and not triton_available():
        return f"--backend {backend}: needs Triton (torch.compile's GPU code generator), which does not import here"
    return None


def auto_backend(device: str, compile: bool = False) -> str:
    """What `--backend auto` means on `device`: `cpu-fused` on a CPU (`torch` with `--compile`), `cuda-graphs`
    on CUDA where Triton imports, else `torch`."""
    kind = device.split(":")[0]
    if kind == "cuda" and triton_available():
        return "cuda-graphs"
    return "cpu-fused" if kind == "cpu" and not compile else "torch"


def triton_available() -> bool:
    """Whether torch.compile can generate GPU code here (Triton imports; looked up, not imported)."""
    return importlib.util.find_spec("triton") is not None
