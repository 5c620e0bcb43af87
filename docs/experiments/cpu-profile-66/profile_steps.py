"""Where a step's time goes on this host (issue 66, item 2): a first- and second-order DARTS search step
(H = 300, batch 64, bptt 35, 8 nodes, 10k words) and a frozen BiRNN training step (DARTS_V2, ninp 4,096,
hidden 512, batch 32, bench/birnn.py's sizes), one thread, torch's profiler over `--steps` steps.

Self CPU time is split into: GEMMs (oneDNN's matmul, torch.mm and kin), the C++ kernels' own elementwise
work (each entry point wrapped in a record_function, so the GEMMs they call are subtracted), other aten
elementwise ops, copies, allocation, views, and what no op accounts for: Python and dispatch. Prints one
JSON line per step kind, with the top ops, the wall time and the machine (bench/harness.py).

    taskset -c 0 python docs/experiments/cpu-profile-66/profile_steps.py [--steps 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

import search_step as ss  # noqa: E402
from harness import report  # noqa: E402

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

import nas.fast.kernels as kernels  # noqa: E402
from nas.cells.cell import FrozenRNN  # noqa: E402
from nas.cells.genotype import load  # noqa: E402
from nas.lm.corpus import Corpus  # noqa: E402

GEMM = {
    "mkldnn::_linear_pointwise",
    "aten::mm",
    "aten::addmm",
    "aten::addmm_",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
    "mkldnn::_reorder_linear_weight",
}
COPIES = {
    "aten::copy_",
    "aten::contiguous",
    "aten::clone",
    "aten::cat",
    "aten::index_select",
    "aten::index_copy",
    "aten::stack",
    "aten::_to_copy",
    "aten::to",
    "aten::fill_",
    "aten::zero_",
}
ALLOCATION = {
    "aten::empty",
    "aten::empty_like",
    "aten::zeros",
    "aten::zeros_like",
    "aten::new_empty",
    "aten::new_zeros",
    "aten::empty_strided",
    "aten::resize_",
    "aten::ones",
    "aten::full",
}
VIEWS = {
    "aten::select",
    "aten::slice",
    "aten::as_strided",
    "aten::view",
    "aten::reshape",
    "aten::t",
    "aten::transpose",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::expand",
    "aten::narrow",
    "aten::permute",
    "aten::detach",
    "aten::alias",
    "aten::unbind",
    "aten::split",
    "aten::chunk",
    "aten::_unsafe_view",
    "aten::numpy_T",
    "aten::unfold",
    "aten::lift_fresh",
    "detach",
}


class Wrapped:
    """The C++ kernels' module with every entry point inside a record_function named cpp::NAME."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        real = getattr(self._module, name)
        if not callable(real) or isinstance(real, type):
            return real

        def call(*args, **kwargs):
            with record_function(f"cpp::{name}"):
                return real(*args, **kwargs)

        return call


def category(key: str) -> str:
    if key in GEMM:
        return "gemm"
    if key.startswith("cpp::"):
        return "cpp_elementwise"
    if key in COPIES:
        return "copies"
    if key in ALLOCATION:
        return "allocation"
    if key in VIEWS:
        return "views"
    if key.startswith("aten::") or key.startswith("mkldnn::"):
        return "aten_elementwise_and_other"
    return "autograd_nodes_and_python_functions"  # Function nodes' own time: Python in their forward/backward


def profiled(name: str, step, steps: int) -> None:
    for _ in range(2):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    wall_plain = (time.perf_counter() - start) / steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - start) / steps
    rows = prof.key_averages()
    split: dict[str, float] = {}
    for row in rows:
        split[category(row.key)] = split.get(category(row.key), 0.0) + row.self_cpu_time_total / steps / 1e6
    accounted = sum(split.values())
    split["python_and_dispatch_outside_ops"] = max(0.0, wall - accounted)
    top = sorted(rows, key=lambda r: -r.self_cpu_time_total)[:15]
    report(
        {
            "bench": "cpu_profile",
            "step": name,
            "steps": steps,
            "wall_s_unprofiled": round(wall_plain, 4),
            "wall_s_profiled": round(wall, 4),
            "share": {k: round(v / wall, 3) for k, v in sorted(split.items(), key=lambda kv: -kv[1])},
            "seconds": {k: round(v, 4) for k, v in split.items()},
            "top_ops": [[r.key, round(r.self_cpu_time_total / steps / 1e3, 2), round(r.count / steps, 1)] for r in top],
        }
    )


def search_steps(order: int, tmp: Path, steps: int) -> None:
    torch.manual_seed(0)
    V, B, bptt, H = 10_000, 64, 35, 300
    tokens = B * (8 * bptt + 2)
    corpus = Corpus(
        [f"w{i}" for i in range(V)],
        torch.randint(V, (tokens,)),
        torch.randint(V, (tokens,)),
        torch.randint(V, (tokens,)),
        {s: Path("synthetic") for s in ("train", "valid", "test")},
    )
    args = argparse.Namespace(nhid=H, nodes=8, batch_size=B, bptt=bptt, device="cpu", method="darts", precision="fp32")
    step, _ = ss.build("fast", args, ss.config_of(args, order), corpus, tmp / f"o{order}", None)
    profiled(f"search_order{order}", step, steps)


def birnn_step(steps: int) -> None:
    gen = torch.Generator().manual_seed(0)
    lengths = (torch.randn(32, generator=gen) * 10 + 14).round().clamp(min=1).long()
    T = int(lengths.max())
    x = torch.randn(T, 32, 4096, generator=gen)
    x[torch.arange(T).unsqueeze(1) >= lengths] = 0.0
    grad_out = torch.randn(T, 32, 1024, generator=gen)
    torch.manual_seed(0)
    frozen = FrozenRNN(load("darts_v2"), 4096, 512, directions=2).train()
    from nas.fast import backends

    frozen.backend = backends.choose("auto", torch.device("cpu"))

    def step() -> None:
        with torch.no_grad():
            for p in frozen.parameters():
                p.add_(0.0)  # as a training step changes them: the layer packs its weights anew
        frozen.zero_grad(set_to_none=True)
        out, _ = frozen(x, lengths=lengths)
        (out * grad_out).sum().backward()

    profiled("frozen_birnn", step, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--only", choices=["search_order1", "search_order2", "frozen_birnn"], nargs="+")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if kernels.compiled() is not None:
        kernels._kernels = Wrapped(kernels._kernels)
    only = set(args.only or ["search_order1", "search_order2", "frozen_birnn"])
    with tempfile.TemporaryDirectory() as tmp:
        for order in (1, 2):
            if f"search_order{order}" in only:
                search_steps(order, Path(tmp), args.steps)
    if "frozen_birnn" in only:
        birnn_step(args.steps)


if __name__ == "__main__":
    main()
