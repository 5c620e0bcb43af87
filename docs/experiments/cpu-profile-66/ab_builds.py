"""The install's portable AVX-512 build of the C++ kernels (nas/fast/isa_builds.py's flags) against the build
compiled for this processor (-march=native, the kernel cache's), interleaved in one process, 1 thread: the
fused search cell's forward and backward (H = 300, batch 64, bptt 35, 8 nodes) and the frozen BiRNN's
training step (bench/birnn.py's sizes). Prints one JSON line (bench/harness.py's machine included).

    taskset -c 0 python docs/experiments/cpu-profile-66/ab_builds.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from harness import report  # noqa: E402

import torch  # noqa: E402

import nas.fast.frozen_loop as frozen_loop  # noqa: E402
import nas.fast.kernels as kernels  # noqa: E402
import nas.fast.search_loop as sl  # noqa: E402
from nas.cells.cell import FrozenRNN  # noqa: E402
from nas.cells.genotype import load  # noqa: E402
from nas.fast import backends  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    assert kernels._level is not None, "build the install's kernels first: python setup.py build_ext --inplace"
    portable = kernels._kernels
    native = kernels._load_library(kernels.build_directory() / "nas_fused_kernels.so", "nas_fused_kernels")
    if native is None:
        kernels._level, kernels._kernels, kernels._compile_pending = None, None, True
        kernels.compile_now()
        native = kernels._kernels
    builds = {f"portable_{kernels._level or 'AVX512'}": portable, "native": native}

    torch.manual_seed(0)
    T, B, H, N = 35, 64, 300, 8
    E = N * (N + 1) // 2
    xproj = torch.randn(T, B, 2 * H, requires_grad=True)
    h0 = torch.randn(B, H)
    w0h = (torch.randn(H, 2 * H) * 0.04).requires_grad_()
    ws = (torch.randn(N, H, 2 * H) * 0.04).requires_grad_()
    mix = torch.softmax(torch.randn(E, 4), -1).requires_grad_()
    mh = torch.bernoulli(torch.full((B, H), 0.75)) / 0.75
    bn = torch.nn.ModuleList(torch.nn.BatchNorm1d(H, affine=False) for _ in range(N + 1))
    go = torch.randn(T, B, H)

    def search_cell() -> None:
        sl.fused_search_cell(xproj, h0, w0h, ws, mix, mh, bn).backward(go)

    gen = torch.Generator().manual_seed(0)
    lengths = (torch.randn(32, generator=gen) * 10 + 14).round().clamp(min=1).long()
    L = int(lengths.max())
    x = torch.randn(L, 32, 4096, generator=gen)
    x[torch.arange(L).unsqueeze(1) >= lengths] = 0.0
    grad_out = torch.randn(L, 32, 1024, generator=gen)
    frozen = FrozenRNN(load("darts_v2"), 4096, 512, directions=2).train()
    frozen.backend = backends.choose("auto", torch.device("cpu"))

    def birnn() -> None:
        with torch.no_grad():
            for p in frozen.parameters():
                p.add_(0.0)
        frozen.zero_grad(set_to_none=True)
        out, _ = frozen(x, lengths=lengths)
        (out * grad_out).sum().backward()

    record: dict = {
        "bench": "kernel_builds_ab",
        "repeats": args.repeats,
        "load_start": list(__import__("os").getloadavg()),
    }

    def use(module) -> None:
        kernels._kernels = module
        frozen_loop._native_plan.cache_clear()  # a plan is an object of the module that made it

    for name, step in (("search_cell", search_cell), ("frozen_birnn", birnn)):
        times: dict[str, list[float]] = {build: [] for build in builds}
        for build, module in builds.items():
            use(module)
            step()
            step()
        for _ in range(args.repeats):
            for build, module in builds.items():
                use(module)
                start = time.perf_counter()
                step()
                times[build].append(time.perf_counter() - start)
        for build in builds:
            record[f"{name}_{build}_s"] = round(statistics.median(times[build]), 4)
        first, second = builds
        record[f"{name}_ratio_{first}_over_{second}"] = round(
            statistics.median(times[first]) / statistics.median(times[second]), 3
        )
    report(record)


if __name__ == "__main__":
    main()
