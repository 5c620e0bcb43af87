"""Tokens/s of a full search step (α step + weight step), ours against slower implementations of the same step.

Ours is `Searcher.bilevel_step` as search-lm builds it, in the variants of OURS (`--ours`): "fast",
as search-lm runs it (the fused search cell of nas/fast/search_loop.py on a CPU; on a GPU the
first-order step recorded as a CUDA graph, nas/fast/graphs.py); "eager", the same without the CUDA
graph; "autograd" (also `--autograd`), the cell op by op through autograd; "compiled" (also
`--compile`), that with the cell's time step through torch.compile. The baselines: "reference",
the per-edge, per-op cell and the α step with the reference DARTS code's structure (full backward,
copied model) from reference/darts.py; and "original" (`--original PATH`), the DARTS code itself
(Liu, Simonyan, Yang, "DARTS: Differentiable Architecture Search", ICLR 2019, arXiv:1806.09055;
github quark0/darts, rnn/), ported to torch 2.x outside this repository: PATH is the port's folder,
whose train_search.py has `parse_args` and `Search` (the set-up, and train()'s loop body at a fixed
sequence length).

All run the same model (synthetic 10k-word vocabulary, as PTB) from the same weights, on the same
batches, with the DARTS search's hyperparameters and training-mode dropouts, interleaved rep by rep
so that load on a shared machine hits them alike. The original's step includes its gc.collect(),
whose time in this process the record gives too (torch alone makes most of it; torch.compile's
objects, with "compiled", add more). FLOPs per token are the matrix products each implementation
executes in one step, counted by torch's FlopCounterMode (forward and backward, so a first-order α
step that skips weight gradients counts less). The fp32 GEMM peak is the median of 2048³ sgemm
timings taken in the same run. Prints one JSON line of medians.

`--check` instead compares first-order α gradients with dropout off: the original's against each of
ours, from the same weights on the same batch (relative difference, one JSON line), in float32 as
timed and in float64, where rounding cannot hide a difference in the maths; and it reports the loss
of the original's first full step at each order (with the usual dropouts).

    python bench/search_step.py [--device cuda] [--precision bf16] [--orders 1 2] [--original PATH [--check]]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from operator import attrgetter
from pathlib import Path
from types import ModuleType
from typing import Callable
from unittest import mock

from harness import DTYPES, count_flops, default_device, gemm_peaks, gemm_sample, median, report, timed

import torch  # noqa: E402  (after common, which sets sys.path)
import torch.nn as nn  # noqa: E402

import nas.fast.backends as backends  # noqa: E402
import nas.methods.base  # noqa: E402
import nas.methods.darts  # noqa: E402
from nas.cells.ops import OPS  # noqa: E402
from nas.common.runs import RunDir  # noqa: E402
from nas.runs.config import SearchConfig  # noqa: E402
from nas.lm.corpus import Corpus  # noqa: E402
from nas.lm.evaluation import get_batch  # noqa: E402
from nas.lm.model import language_model_loss  # noqa: E402
from nas.runs.search import Searcher  # noqa: E402
from reference.darts import ReferenceArchitect, ReferenceSearchRNN  # noqa: E402

Step = Callable[[], None]
BASELINES = ("reference", "original")
ORIGINAL_MODULES = (
    "train_search",
    "model_search",
    "model",
    "architect",
    "genotypes",
    "utils",
)  # the port's flat imports


def make_searcher(config: SearchConfig, corpus: Corpus, run_dir: Path, reference: bool) -> Searcher:
    """A Searcher exactly as search-lm builds it; for the reference, its cell and architect classes are swapped in."""
    torch.manual_seed(config.seed)  # the same initial weights for every implementation

    def reference_cell(ninp, nhid, steps, rule, *rest, **options) -> ReferenceSearchRNN:
        """The reference cell where Darts builds a SearchRNN: it takes the method's name, not its rule."""
        return ReferenceSearchRNN(ninp, nhid, steps, config.method, *rest, **options)

    def reference_architect(model, *args, loss_fn, average, **options) -> ReferenceArchitect:
        """The reference α step where Darts builds an Architect: it knows only the language model's loss, on one
        process."""
        assert loss_fn is language_model_loss, "the reference α step is the language model's"
        return ReferenceArchitect(model, *args, **options)

    with contextlib.ExitStack() as swaps:
        if reference:
            swaps.enter_context(mock.patch.object(nas.methods.darts, "SearchRNN", reference_cell))
            swaps.enter_context(mock.patch.object(nas.methods.base, "Architect", reference_architect))
        searcher = Searcher(config, RunDir(run_dir), corpus)
    searcher.model.train()
    B = config.batch_size
    searcher.hidden, searcher.hidden_valid = searcher.model.init_hidden(B), searcher.model.init_hidden(B)
    return searcher


def positions(train_rows: int, bptt: int) -> Callable[[], int]:
    """The start row of each next batch: full bptt-long batches, cycling through the data."""
    state = {"pos": 0}

    def next_position() -> int:
        pos = state["pos"]
        state["pos"] = (pos + bptt) % (train_rows - bptt - 1)
        return pos

    return next_position


def step_fn(searcher: Searcher, bptt: int, precision: str) -> Step:
    """One full search step on the next train / search batches."""
    device = searcher.device
    next_position = positions(searcher.train_data.size(0), bptt)

    def step() -> None:
        pos = next_position()
        words, targets = get_batch(searcher.train_data, pos, bptt)
        valid = get_batch(searcher.search_data, pos % (searcher.search_data.size(0) - bptt - 1), bptt)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            searcher.bilevel_step(words, targets, valid, bptt)

    return step


@dataclass(frozen=True)
class Ours:
    """A variant of our step: what it changes in the search's settings, what runs its cells (`cell_backend`),
    what it switches on the built Searcher (by attribute path), and how many untimed steps it needs before
    its FLOPs are counted."""

    settings: dict = field(default_factory=dict)
    cells: str = "fused"
    switches: dict = field(default_factory=dict)
    warmups: int = 1  # the allocator's first step; compiling; a CUDA graph's eager calls before its recording

    def config(self, config: SearchConfig) -> SearchConfig:
        return replace(config, **self.settings)

    def build(self, searcher: Searcher, bptt: int, precision: str) -> Step:
        backends.attach(searcher.model, cell_backend(self.cells, searcher.device))
        for path, value in self.switches.items():
            owner, _, name = path.rpartition(".")
            target = attrgetter(owner)(searcher) if owner else searcher
            assert hasattr(target, name), f"the Searcher has no {path} any more"
            setattr(target, name, value)
        return step_fn(searcher, bptt, precision)


# Our step's variants by name; another one is one more entry. "fast" is the step as search-lm runs it:
# the fused search cell on a CPU, on a GPU the first-order step recorded as a CUDA graph (nas.fast.graphs:
# 2 eager calls, then the recording); "fast-compiled" that with each time step through torch.compile (the
# cuda-graphs backend, search-lm's default on a GPU); the others run eagerly.
OURS: dict[str, Ours] = {
    "fast": Ours(warmups=2),
    "fast-compiled": Ours(settings={"compile": True}, cells="compiled", warmups=2),
    "eager": Ours(switches={"graphs": None}),
    "autograd": Ours(cells="autograd", switches={"graphs": None}),
    "compiled": Ours(settings={"compile": True}, cells="compiled", switches={"graphs": None}, warmups=2),
}


def cell_backend(cells: str, device: torch.device) -> backends.Backend:
    """The cells' backend (nas.fast.backends) of a variant: `fused`, the fused search loop on a CPU (on a GPU
    the cell op by op, eagerly); `autograd`, the definition op by op; `compiled`, its time step through
    torch.compile."""
    if cells == "fused":
        return backends.choose("cpu-fused" if device.type == "cpu" else "torch", device)
    return backends.choose("torch", device, compile=cells == "compiled")  # the decoder on the host's GEMM rule


def config_of(args, order: int) -> SearchConfig:
    return SearchConfig(
        order=order,
        method=args.method,
        emsize=args.nhid,
        nhid=args.nhid,
        nodes=args.nodes,
        batch_size=args.batch_size,
        bptt=args.bptt,
        device=args.device,
    )


def refuse(message: str) -> None:
    """One `error:` line and exit 2, as the commands answer bad input."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def import_original(folder: str) -> ModuleType:
    """The port's train_search module, imported from its folder (its modules import each other by flat names)."""
    path = Path(folder)
    if not (path / "train_search.py").is_file():
        refuse(f"--original {folder}: no train_search.py there (give the folder of the ported original DARTS code)")
    clashes = [name for name in ORIGINAL_MODULES if name in sys.modules]
    if clashes:
        refuse(
            f"--original {folder}: modules named {', '.join(clashes)} are imported already; the port's would not load"
        )
    sys.path.insert(0, str(path.resolve()))
    return importlib.import_module("train_search")


def original_args(original: ModuleType, config: SearchConfig) -> object:
    """The original's flags for `config`: sizes, order and each hyperparameter of its step (ours)."""
    c = config
    flags = {
        "emsize": c.emsize,
        "nhid": c.nhid,
        "nhidlast": c.nhid,
        "batch_size": c.batch_size,
        "bptt": c.bptt,
        "lr": c.lr,
        "clip": c.clip,
        "wdecay": c.wdecay,
        "dropout": c.dropout,
        "dropouth": c.dropouth,
        "dropoutx": c.dropoutx,
        "dropouti": c.dropouti,
        "dropoute": c.dropoute,
        "alpha": c.ar,
        "beta": c.tar,
        "arch_lr": c.arch_lr,
        "arch_wdecay": c.arch_wdecay,
    }
    argv = [str(item) for name, value in flags.items() for item in (f"--{name}", value)]
    return original.parse_args(argv + (["--unrolled"] if c.order == 2 else []))


def copy_into_original(ours: nn.Module, model: nn.Module, primitives: list[str]) -> None:
    """Our search model's weights and α into the original's RNNModelSearch (α's columns in its op order)."""
    cell = model.rnns[0]
    pairs = [
        (model.encoder.weight, ours.encoder.weight),
        (model.decoder.bias, ours.decoder.bias),
        (cell._W0, ours.rnn.w0),
        *zip(cell._Ws, ours.rnn.ws),
        (model.weights, ours.rnn.alpha[:, [OPS.index(op) for op in primitives]]),
    ]
    assert len(pairs) - 1 == len(list(model.parameters())), "every weight of the original is copied"
    with torch.no_grad():
        for theirs, mine in pairs:
            theirs.copy_(mine)


def original_search(original: ModuleType, config: SearchConfig, corpus: Corpus, run_dir: Path):
    """(our Searcher, the original's Search) from the same weights, on the same batches."""
    searcher = make_searcher(config, corpus, run_dir, reference=False)
    search = original.Search(
        original_args(original, config), len(corpus.vocab), searcher.train_data, searcher.search_data, searcher.device
    )
    copy_into_original(searcher.model, search.model, importlib.import_module("genotypes").PRIMITIVES)
    return searcher, search


def build(
    impl: str, args, config: SearchConfig, corpus: Corpus, run_dir: Path, original: ModuleType | None
) -> tuple[Step, int]:
    """(one full step of `impl`, its untimed warm-up steps)."""
    if impl == "original":
        _, search = original_search(original, config, corpus, run_dir)
        next_position = positions(search.train_data.size(0), args.bptt)
        return lambda: search.step(next_position()), 1
    if impl == "reference":
        return step_fn(make_searcher(config, corpus, run_dir, reference=True), args.bptt, args.precision), 1
    variant = OURS[impl]
    searcher = make_searcher(variant.config(config), corpus, run_dir, reference=False)
    return variant.build(searcher, args.bptt, args.precision), variant.warmups


def first_alpha_gradient(optimizer: torch.optim.Optimizer, step: Step) -> torch.Tensor:
    """The gradient the α optimiser steps on in `step` (its first step there; one α tensor)."""
    seen = []
    step_alpha = optimizer.step

    def recording(*a, **k):
        seen.extend(p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"])
        return step_alpha(*a, **k)

    with mock.patch.object(optimizer, "step", recording):
        step()
    return seen[0]


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """Models built inside are in `dtype` (both sides draw their weights and masks in the default dtype)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def check(args, corpus: Corpus, tmp: Path, original: ModuleType, ours: list[str]) -> None:
    """Prints the relative difference of the original's first-order α gradient from each of ours (dropout off,
    same weights, same batch) in float32, as timed, and in float64, where only the maths can differ; and the
    original's first-step loss at each order."""
    record: dict = {
        "bench": "search_step_check",
        "device": args.device,
        "nhid": args.nhid,
        "batch": args.batch_size,
        "bptt": args.bptt,
    }
    no_dropout = replace(config_of(args, 1), dropout=0.0, dropouth=0.0, dropoutx=0.0, dropouti=0.0, dropoute=0.0)
    columns = [OPS.index(op) for op in importlib.import_module("genotypes").PRIMITIVES]
    for dtype, suffix in ((torch.float32, ""), (torch.float64, "_float64")):
        for impl in ours:
            with default_dtype(dtype):
                searcher, search = original_search(
                    original, OURS[impl].config(no_dropout), corpus, tmp / f"check-{impl}{suffix}"
                )
            mine = first_alpha_gradient(
                next(iter(searcher.method.architects.values())).optimizer, OURS[impl].build(searcher, args.bptt, "fp32")
            )[:, columns]
            theirs = first_alpha_gradient(search.architect.optimizer, lambda: search.step(0))
            assert mine.dtype == theirs.dtype == dtype
            record[f"order1_alpha_grad_rel_diff_{impl}{suffix}"] = float((theirs - mine).norm() / mine.norm())
            record[f"order1_alpha_grad_norm_{impl}{suffix}"] = float(mine.norm())
    for order in args.orders:
        _, search = original_search(original, config_of(args, order), corpus, tmp / f"check-original{order}")
        alpha_grad = first_alpha_gradient(search.architect.optimizer, lambda: search.step(0))
        record[f"order{order}_original_first_step_loss"] = float(search.total_loss)
        record[f"order{order}_original_first_step_finite"] = bool(
            torch.isfinite(search.total_loss)
            and torch.isfinite(alpha_grad).all()
            and all(torch.isfinite(p).all() for p in search.model.parameters())
        )
    report(record)


def memory_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process from /proc (Linux): unlike ru_maxrss, the peak
    starts afresh at exec, not at the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_memory(args, corpus: Corpus, tmp: Path, impl: str, original: ModuleType | None) -> None:
    """Prints this process's peak RSS over 3 steps of `impl` (MiB), and how far the steps raised it
    above the RSS before them: `--memory` runs it once per implementation in a fresh process."""
    order = args.orders[-1]
    step, _ = build(impl, args, config_of(args, order), corpus, tmp / impl, original)
    before = memory_mib("VmRSS")
    for _ in range(3):
        step()
    peak = memory_mib("VmHWM")
    print(
        json.dumps(
            {"impl": impl, "order": order, "peak_rss_mib": round(peak, 1), "step_rss_mib": round(peak - before, 1)}
        )
    )


def gc_seconds() -> float:
    """Seconds of one gc.collect() in this process, as the original's step runs one."""
    start = time.perf_counter()
    gc.collect()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=default_device())
    parser.add_argument("--precision", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument(
        "--method",
        choices=["darts", "idarts", "ess"],
        default="darts",
        help="ess: joint search (intra and inter-cell gates); it has no reference, so needs --no-reference",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per implementation and order")
    parser.add_argument("--ours", nargs="+", choices=sorted(OURS), default=["fast"], help="our variants to time [fast]")
    parser.add_argument(
        "--no-reference", action="store_true", help="leave out the reference structure of reference/darts.py"
    )
    parser.add_argument(
        "--original",
        metavar="PATH",
        help="also time the original DARTS code: the folder of its port to torch 2.x (train_search.py)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="with --original: compare first-order α gradients (dropout off) and report the original's "
        "first-step losses instead of timing",
    )
    parser.add_argument(
        "--autograd", action="store_true", help="also time our cell op by op through autograd (--ours ... autograd)"
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time our autograd cell with its time step through torch.compile (--ours ... compiled)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: torch's own choice]")
    parser.add_argument("--nhid", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also measure each implementation's peak memory (RSS) over 3 steps, each in a fresh process",
    )
    parser.add_argument("--memory-of", choices=[*OURS, *BASELINES], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.method == "ess" and not args.no_reference:
        refuse("--method ess: the original DARTS code has no ESS gates; add --no-reference")
    if args.check and not args.original:
        refuse("--check compares with the original DARTS code: give its port's folder with --original")
    original = None
    if args.original:
        if args.method != "darts":
            refuse(f"--original with --method {args.method}: the original DARTS code searches the DARTS cell only")
        if args.precision != "fp32":
            refuse(f"--original with --precision {args.precision}: the original DARTS code runs in fp32 only")
        original = import_original(args.original)
        steps = importlib.import_module("genotypes").STEPS
        if args.nodes != steps:
            refuse(f"--original with --nodes {args.nodes}: the original DARTS code has {steps} (genotypes.STEPS)")

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokens = args.batch_size * (8 * args.bptt + 2)
    vocab = [f"w{i}" for i in range(args.vocab)]
    corpus = Corpus(
        vocab,
        torch.randint(args.vocab, (tokens,)),
        torch.randint(args.vocab, (tokens,)),
        torch.randint(args.vocab, (tokens,)),
        {s: Path("synthetic") for s in ("train", "valid", "test")},
    )
    ours = list(
        dict.fromkeys(args.ours + (["autograd"] if args.autograd else []) + (["compiled"] if args.compile else []))
    )
    baselines = ([] if args.no_reference else ["reference"]) + (["original"] if original else [])
    impls = ours + baselines
    record: dict = {
        "bench": "search_step",
        "device": str(device),
        "precision": args.precision,
        "method": args.method,
        "nhid": args.nhid,
        "emsize": args.nhid,
        "nodes": args.nodes,
        "bptt": args.bptt,
        "batch": args.batch_size,
        "vocab": args.vocab,
        "repeats": args.repeats,
        "flops": "GEMM FLOPs executed per step (torch FlopCounterMode, fwd+bwd); elementwise not counted",
    }
    if args.memory_of:
        with tempfile.TemporaryDirectory() as tmp:
            return peak_memory(args, corpus, Path(tmp), args.memory_of, original)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            return check(args, corpus, Path(tmp), original, ours)
    peak_samples: list[dict[str, float]] = []
    gc_times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for order in args.orders:
            config = config_of(args, order)
            steps = {}
            for impl in impls:
                steps[impl], warmups = build(impl, args, config, corpus, Path(tmp) / f"{impl}{order}", original)
                for _ in range(warmups):
                    steps[impl]()
                record[f"order{order}_{impl}_gflop_per_token"] = (
                    count_flops(steps[impl]) / (args.batch_size * args.bptt) / 1e9
                )
            times = {impl: [] for impl in impls}
            for _ in range(args.repeats):  # interleaved, so load changes hit every implementation alike
                for impl in impls:
                    times[impl].append(timed(steps[impl], device))
                peak_samples.append(gemm_sample(device))
                if original:
                    gc_times.append(gc_seconds())
            del steps
            for impl in impls if args.memory else ():
                command = [sys.executable, __file__, *sys.argv[1:], "--memory-of", impl, "--orders", str(order)]
                rss = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
                record[f"order{order}_{impl}_peak_rss_mib"] = rss["peak_rss_mib"]
                record[f"order{order}_{impl}_step_rss_mib"] = rss["step_rss_mib"]
            for impl in impls:
                sec = median(times[impl])
                tok_s = args.batch_size * args.bptt / sec
                gflops = record[f"order{order}_{impl}_gflop_per_token"] * tok_s
                record[f"order{order}_{impl}_step_s"] = round(sec, 4)
                record[f"order{order}_{impl}_tokens_per_s"] = round(tok_s, 1)
                record[f"order{order}_{impl}_gflop_s"] = round(gflops, 2)
            for impl in ours:
                for baseline in baselines:
                    record[f"order{order}_{impl}_speedup_vs_{baseline}"] = round(
                        record[f"order{order}_{impl}_tokens_per_s"] / record[f"order{order}_{baseline}_tokens_per_s"], 3
                    )
    peak = max(gemm_peaks(peak_samples).values())  # the faster backend's
    record["fp32_gemm_peak_gflop_s"] = round(peak, 2)
    if gc_times:
        record["original_gc_collect_s"] = round(median(gc_times), 4)
    for key in [k for k in record if k.endswith("_gflop_s") and k != "fp32_gemm_peak_gflop_s"]:
        record[key.replace("_gflop_s", "_fraction_of_peak")] = round(record[key] / peak, 3)
    for key in [k for k in record if k.endswith("_gflop_per_token")]:
        record[key] = round(record[key], 4)
    report(record, peak_samples if device.type == "cpu" else None)  # else the CPU's, measured apart


if __name__ == "__main__":
    main()
