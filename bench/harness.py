"""What every benchmark shares: import paths, the commands' malloc setting, device sync, timing, the measured
GEMM peak, the JSON line, and the tagger's training step as flair's `ModelTrainer` takes it.

Benchmarks print one JSON line on stdout (`report`): medians of several runs, the thread count, the load
average (the machine is shared, so say how busy it was) and the machine (`machine`: the CPU, its ISA
flags that decide the GEMMs' speed, both GEMM backends' peaks, the GEMM rule, torch), since this
project's hosts are not all one kind and a figure means little without them.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import random
import re
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
from nas.fast import gemm  # noqa: E402

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


def gemm_sample(device: torch.device) -> dict[str, float]:
    """Seconds of one GEMM_N³ fp32 matmul on each backend: MKL's torch.mm, and oneDNN's matmul called
    directly (whatever the GEMM rule: the machine's peak, not the rule's). On a GPU, torch.mm alone."""
    a = torch.randn(GEMM_N, GEMM_N, device=device)
    b = torch.randn(GEMM_N, GEMM_N, device=device)
    backends = {"mkl_torch_mm": lambda: torch.mm(a, b)}
    if device.type == "cpu" and gemm._AVAILABLE:
        backends["onednn"] = lambda: torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
    seconds = {}
    for name, fn in backends.items():
        fn()  # warm
        seconds[name] = timed(fn, device)
    return seconds


def gemm_seconds(device: torch.device) -> float:
    """Seconds of one GEMM_N³ fp32 matmul on the faster backend (`gemm_sample`): the machine's fp32 GEMM peak
    is GEMM_FLOPS / seconds. On an AMD CPU with AVX-512 torch.mm (MKL, AVX2 path) reaches about half of
    what oneDNN does, so a peak from torch.mm alone would flatter anything that runs on oneDNN."""
    return min(gemm_sample(device).values())


def gemm_peaks(samples: list[dict[str, float]] | None = None, repeats: int = 5) -> dict[str, float]:
    """GFLOP/s of a GEMM_N³ fp32 matmul per backend (`gemm_sample`), the median of `samples` (taken
    interleaved with a benchmark's runs, at its thread count) or of `repeats` taken now on one thread."""
    if samples is None:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            samples = [gemm_sample(torch.device("cpu")) for _ in range(repeats)]
        finally:
            torch.set_num_threads(threads)
    return {name: round(GEMM_FLOPS / median([s[name] for s in samples]) / 1e9, 1) for name in samples[0]}


# The CPU flags that decide how fast the products run: AVX-512 (oneDNN's fp32 kernels; MKL's on Intel
# only), AVX512-BF16 and AMX (bf16 products, `--precision bf16`), AVX2 (the floor of both libraries).
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_info(cpuinfo: str | None = None) -> dict:
    """The CPU's model, vendor and `ISA_FLAGS` (present or not), from /proc/cpuinfo or `cpuinfo`'s text."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""

    def field(name: str) -> str | None:
        found = re.search(rf"^{name}\s*:\s*(.*)$", cpuinfo, re.M)
        return found.group(1).strip() if found else None

    flags = set((field("flags") or "").split())
    return {
        "cpu_model": field("model name") or platform.processor() or platform.machine(),
        "cpu_vendor": field("vendor_id"),
        "cpu_family_model": f"{field('cpu family')}/{field('model')}",
        "isa": {flag: flag in flags for flag in ISA_FLAGS},
        "logical_cpus": os.cpu_count(),
    }


@functools.lru_cache(maxsize=1)
def _machine_now() -> dict:
    return {**cpu_info(), "gemm_peaks_gflop_s": gemm_peaks(), "gemm_peak_threads": 1}


def machine(peak_samples: list[dict[str, float]] | None = None, threads: int | None = None) -> dict:
    """What a figure was measured on: `cpu_info`, both GEMM backends' fp32 peaks (from the benchmark's own
    interleaved `peak_samples` at `threads`, else measured once per process on one thread), the GEMM
    rule `auto` gives here (`nas.fast.gemm.resolve`), torch and Python."""
    described = dict(_machine_now())
    if peak_samples:
        described.update(gemm_peaks_gflop_s=gemm_peaks(peak_samples), gemm_peak_threads=threads)
    return {
        **described,
        "gemm_rule": gemm.resolve("auto"),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


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


def report(record: dict, peak_samples: list[dict[str, float]] | None = None) -> None:
    """Print `record` as one JSON line with the thread count, the load and the `machine` (its peaks from
    `peak_samples` where the benchmark took them interleaved with its runs)."""
    record.update(
        threads=torch.get_num_threads(),
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
        torch=torch.__version__,
        loadavg_1min_end=round(os.getloadavg()[0], 2),
        machine=machine(peak_samples, torch.get_num_threads()),
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
