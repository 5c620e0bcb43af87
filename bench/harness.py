"""What every benchmark shares: import paths, the commands' malloc setting, device sync, timing, the measured
GEMM peak, the JSON line, and the tagger's training step as flair's `ModelTrainer` takes it.

Benchmarks print one JSON line on stdout: medians of several runs, the thread count, and the load
average (the machine is shared, so say how busy it was).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout: nas, tagger and the slow references in reference/

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula  # noqa: E402

from nas.common.memory import keep_freed_memory  # noqa: E402
from nas.fast.gemm import product  # noqa: E402

keep_freed_memory()  # as every command does (nas.common.cli.use_threads), so that benchmarks time what they run

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Wall-clock seconds of one call, with the device drained before and after."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


GEMM_N = 2048
GEMM_FLOPS = 2.0 * GEMM_N**3


def gemm_seconds(device: torch.device, dtype: torch.dtype = torch.float32) -> float:
    """Seconds of one GEMM_N³ matmul on the faster of torch.mm and `nas.fast.gemm.product` (oneDNN on a
    CPU in float32): the machine's GEMM peak is GEMM_FLOPS / seconds. On this project's CPU torch.mm
    (MKL, AVX2 path) reaches about half of what oneDNN does, so a peak from torch.mm alone would flatter
    anything that runs on oneDNN."""
    a = torch.randn(GEMM_N, GEMM_N, device=device, dtype=dtype)
    b = torch.randn(GEMM_N, GEMM_N, device=device, dtype=dtype)
    seconds = []
    for fn in (lambda: torch.mm(a, b), lambda: product(a, b)):
        fn()  # warm
        seconds.append(timed(fn, device))
    return min(seconds)


def gemm_peaks(repeats: int = 7) -> dict[str, float]:
    """GFLOP/s of a GEMM_N³ fp32 matmul on this host, per backend (median of `repeats`): MKL's
    torch.mm and oneDNN's `nas.fast.gemm.product`. Hosts of one machine kind differ mostly here, so
    every timing is reported with both."""
    a, b = torch.randn(GEMM_N, GEMM_N), torch.randn(GEMM_N, GEMM_N)
    peaks = {}
    for name, fn in (("mkl_torch_mm", lambda: torch.mm(a, b)), ("onednn", lambda: product(a, b))):
        fn()  # warm
        seconds = median([timed(fn, torch.device("cpu")) for _ in range(repeats)])
        peaks[name] = round(GEMM_FLOPS / seconds / 1e9, 1)
    return peaks


@register_flop_formula(torch.ops.mkldnn._linear_pointwise, get_raw=True)
def _onednn_linear_flops(x, weight, *args, **kwargs) -> int:
    """oneDNN's matmul (`nas.fast.gemm.product`): x (..., K) · weight (N, K)ᵀ."""
    return 2 * x.numel() * weight.size(0)


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of the matrix products fn executes, forward and backward (torch FlopCounterMode,
    oneDNN's matmul included).

    Elementwise work (activations, BatchNorm, softmax) is not counted, so achieved GFLOP/s are a
    lower bound on the arithmetic actually done.
    """
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(record: dict) -> None:
    record.update(
        threads=torch.get_num_threads(),
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
        torch=torch.__version__,
        loadavg_1min_end=round(os.getloadavg()[0], 2),
    )
    print(json.dumps(record), flush=True)


def train_tagger_epoch(
    model,
    sentences: list,
    batch_size: int,
    optimizer,
    rng: random.Random,
    clip: float = 5.0,
    on_backward: Callable[[], None] | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> None:
    """One epoch of flair's `ModelTrainer` step without its logging and evaluation: shuffled
    mini-batches, the CRF loss summed over the batch, backward, gradient clipping at `clip`, SGD.

    `on_backward()` sees the gradients before clipping; `on_step(batch number from 1, gradient norm
    before clipping)` runs after each step (it may evaluate; the next batch trains again).
    """
    order = list(range(len(sentences)))
    rng.shuffle(order)
    for b, start in enumerate(range(0, len(order), batch_size), start=1):
        model.train()
        batch = [sentences[i] for i in order[start : start + batch_size]]
        optimizer.zero_grad()
        loss, _ = model.forward_loss(batch)
        loss.backward()
        if on_backward is not None:
            on_backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        for sentence in batch:
            sentence.clear_embeddings()
        if on_step is not None:
            on_step(b, float(norm))
