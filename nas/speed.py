"""The speed layer as a run gets it: the one module outside `nas/fast` that imports it.

A run chooses its backend once, from its settings (`of`: `--backend`, `--gemm`, the device, search-lm's
`--compile`), and its model builders inject that object into the model (`attach`): the cells and gates
ask it for their fused paths, the language model's decoder and the tagger's reprojection for the run's
GEMM rule, the language model's loss for its cross-entropy, the training loops whether they record whole
steps as CUDA graphs. Nothing is process-wide: two runs in one process each keep their own. The commands
resolve the names first (`resolve`, `resolve_gemm`) and record them in config.json, so that a resumed run
runs the same code. What each backend is: `nas.fast.backends`; what a model asks of it:
`nas.cells.backend.CellBackend`.
"""

from __future__ import annotations

from typing import Any

import torch

from nas.fast import backends, gemm, kernels

Backend = backends.Backend
attach = backends.attach
on_definition = backends.on_definition
for_prediction = backends.for_prediction
choose = backends.choose


def resolve(name: str, device: str | torch.device, compile: bool = False) -> str:
    """The backend `--backend name` means on `device` (`auto` resolved); InputError (one line) where it
    cannot run there."""
    return backends.resolve(name, device, compile)


def resolve_gemm(name: str) -> str:
    """The GEMM rule `--gemm name` means here: `onednn` or `mkl` (`auto`: the host's, or `$NAS_GEMM`)."""
    return gemm.resolve(name)


def of(config: Any) -> Backend:
    """The backend of a run's settings: its `backend`, `device`, `gemm` and (search-lm) `compile`."""
    return backends.choose(config.backend, config.device, getattr(config, "compile", False), config.gemm)


def compile_kernels(rebuild: bool = False) -> str:
    """Compile the C++ kernels into their cache now, or load them from there (`nas-build-kernels`); which
    kernels run, in words. RuntimeError with the reason where none can."""
    return kernels.compile_now(rebuild=rebuild)
