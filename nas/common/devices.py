"""The devices a command may run on: `cpu`, `cuda` or `cuda:N`, checked before any work starts.

torch loads only to check a CUDA device, so `--device cpu` and a misspelt device cost no import."""
from __future__ import annotations

import re

DEVICES = "cpu, cuda or cuda:N"
# How a CPU's float32 matrix products are run (nas.fast.gemm.use): a fixed rule, so a seed fixes a run.
GEMM_BACKENDS = ("auto", "onednn", "mkl")
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
