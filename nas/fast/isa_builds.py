"""The builds of the C++ kernels an install carries: one per x86-64 ISA level, each the same source, so that
a wheel runs on every x86-64 host and the widest build its CPU runs is chosen at run time (`nas.fast.kernels`).

The levels are ATen's own (`torch.backends.cpu.get_cpu_capability()`, which `ATEN_CPU_CAPABILITY` can lower),
with the flags ATen compiles its own kernels of that level with: the kernels are written on ATen's vector
types, which take the widest instructions the flags allow. setup.py reads this file without torch.
"""

from __future__ import annotations

LEVELS = ("AVX512", "AVX2", "DEFAULT")  # widest first
FLAGS = {
    "AVX512": ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c"],
    "DEFAULT": [],  # what every host of the architecture runs (x86-64: SSE2)
}
MODULES = {"AVX512": "_fused_kernels_avx512", "AVX2": "_fused_kernels_avx2", "DEFAULT": "_fused_kernels"}


def runnable(capability: str) -> list[str]:
    """The levels a CPU of ATen's `capability` runs, widest first (a capability ATen names that is not
    x86's, such as an ARM one, runs the DEFAULT build)."""
    return list(LEVELS[LEVELS.index(capability) :]) if capability in LEVELS else ["DEFAULT"]


def levels_for(machine: str) -> list[str]:
    """The levels an install builds on `machine` (platform.machine()): every one on x86-64, else DEFAULT."""
    return list(LEVELS) if machine.lower() in ("x86_64", "amd64") else ["DEFAULT"]
